// Evaluation dashboard: choosing another collection shows it at once.
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  var select = document.querySelector("form.kb-collection-choice select[name=collection]");
  if (select) {
    select.addEventListener("change", function () { select.form.submit(); });
  }
});
