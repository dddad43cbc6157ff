// Golden case admin: choose a source of the case's collection, select text in it,
// get a span with exact offsets, on the add page as on the change page.
// The texts arrive as JSON and are set as the <pre>'s text (never parsed as HTML,
// which drops a leading newline), so offsets in it are offsets in the source.
// They are UTF-16 positions; Python counts code points, so astral characters
// (emoji) are corrected for.
(function () {
  "use strict";

  function codePoints(text) {
    return Array.from(text).length;
  }

  function selectionOffsets(pre) {
    const selection = window.getSelection();
    if (!selection.rangeCount) return null;
    const range = selection.getRangeAt(0);
    if (!pre.contains(range.startContainer) || !pre.contains(range.endContainer)) return null;
    const before = document.createRange();
    before.selectNodeContents(pre);
    before.setEnd(range.startContainer, range.startOffset);
    const prefix = before.toString();
    const picked = range.toString();
    if (!picked) return null;
    const start = codePoints(prefix);
    return { start: start, end: start + codePoints(picked), text: picked };
  }

  document.addEventListener("DOMContentLoaded", function () {
    const picker = document.getElementById("kb-span-picker");
    const collection = document.getElementById("id_collection");
    const select = document.getElementById("kb-span-file");
    const button = document.getElementById("kb-span-add");
    const status = document.getElementById("kb-span-status");
    const pre = picker && picker.querySelector(".kb-span-source");
    const field = document.getElementById("id_required_spans");
    if (!picker || !collection || !field) return;
    let texts = {};

    function loadSources() {
      texts = {};
      select.length = 1;
      pre.hidden = true;
      if (!collection.value) {
        status.textContent = "Choose the case's collection first.";
        return;
      }
      status.textContent = "Loading the collection's sources…";
      const url = picker.dataset.sourcesUrl + "?collection=" + encodeURIComponent(collection.value);
      fetch(url, { credentials: "same-origin" })
        .then(function (response) {
          if (!response.ok) throw new Error(response.status + " " + response.statusText);
          return response.json();
        })
        .then(function (data) {
          data.sources.forEach(function (source) {
            texts[source.file] = source.text;
            select.add(new Option(source.file, source.file));
          });
          status.textContent = data.sources.length
            ? "Choose a source, select the evidence in it, then add it."
            : "This collection has no sources yet.";
        })
        .catch(function (error) {
          status.textContent = "Could not load the sources (" + error.message + ").";
        });
    }

    collection.addEventListener("change", loadSources);
    loadSources();

    select.addEventListener("change", function () {
      const known = Object.prototype.hasOwnProperty.call(texts, select.value);
      pre.textContent = known ? texts[select.value] : "";
      pre.hidden = !known;
    });

    button.addEventListener("click", function () {
      const span = !pre.hidden && selectionOffsets(pre);
      if (!span) {
        status.textContent = "Choose a source and select text in it first.";
        return;
      }
      let spans = [];
      try { spans = JSON.parse(field.value || "[]"); } catch (e) {
        status.textContent = "The spans field is not valid JSON; fix it first.";
        return;
      }
      spans.push({ file: select.value, start: span.start, end: span.end, text: span.text });
      field.value = JSON.stringify(spans, null, 1);
      status.textContent = "Added " + select.value + " [" + span.start + ":" + span.end + "]. Save to check it.";
    });
  });
})();
