// Reloads the page every few seconds while indexing runs, but never throws away
// input: it waits while a field has focus or text is selected, and stops once a
// value was changed. The interval comes from the script tag's data-refresh-ms.
(function () {
  "use strict";
  var interval = Number(document.currentScript.dataset.refreshMs) || 3000;
  var changed = false;
  document.addEventListener("input", function () { changed = true; }, true);
  document.addEventListener("change", function () { changed = true; }, true);
  function busy() {
    var active = document.activeElement;
    var editing = active && active.matches && active.matches("input, textarea, select, [contenteditable]");
    var selected = window.getSelection && String(window.getSelection());
    return editing || selected;
  }
  function tick() {
    var note = document.getElementById("kb-refresh-note");
    if (changed) {
      if (note) { note.textContent = "Automatic refresh stopped: you changed a field. Reload the page to see progress."; }
      return;
    }
    if (busy()) {
      if (note) { note.textContent = "Automatic refresh paused while you edit or select."; }
      window.setTimeout(tick, interval);
      return;
    }
    window.location.reload();
  }
  window.setTimeout(tick, interval);
})();
