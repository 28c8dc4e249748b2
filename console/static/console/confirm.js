// Plain (non-htmx) form posts that cannot be undone ask first, as hx-confirm does for htmx forms:
// a form with data-confirm="question" is sent only if the user accepts. With
// data-confirm-unless-checked="name", a checked box of that name in the form makes the post harmless,
// so it is sent without asking (a rotation that keeps the previous secret).
(function () {
  "use strict";
  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (!form || !form.hasAttribute || !form.hasAttribute("data-confirm")) return;
    var unless = form.getAttribute("data-confirm-unless-checked");
    if (unless) {
      var box = form.querySelector('input[type="checkbox"][name="' + unless + '"]');
      if (box && box.checked) return;
    }
    if (!window.confirm(form.getAttribute("data-confirm"))) {
      e.preventDefault();
      e.stopImmediatePropagation();
    }
  }, true);
})();
