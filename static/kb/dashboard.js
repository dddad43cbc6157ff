// Evaluation dashboard: choosing another collection shows it at once.
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  var select = document.querySelector("form.kb-collection-choice select[name=collection]");
  if (select) {
    select.addEventListener("change", function () { select.form.submit(); });
  }
  // Setting the floor and discarding a shadow cannot be undone: ask first.
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.dataset.confirm)) { event.preventDefault(); }
    });
  });
});
