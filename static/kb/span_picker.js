// Golden case admin: select text in a source, get a span with exact offsets.
// Offsets are UTF-16 positions in the <pre>'s text, which is the source text;
// Python counts code points, so astral characters (emoji) are corrected for.
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
    const select = document.getElementById("kb-span-file");
    const button = document.getElementById("kb-span-add");
    const status = document.getElementById("kb-span-status");
    const field = document.getElementById("id_required_spans");
    if (!select || !button || !field) return;

    select.addEventListener("change", function () {
      document.querySelectorAll(".kb-span-source").forEach(function (pre) {
        pre.hidden = pre.dataset.file !== select.value;
      });
    });

    button.addEventListener("click", function () {
      const pre = document.querySelector('.kb-span-source[data-file="' + CSS.escape(select.value) + '"]');
      const span = pre && selectionOffsets(pre);
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
