// Bulk decisions in the inbox (issue 14): remember which rows are checked across live re-renders,
// keep "select all matching" and the per-row boxes exclusive, and say what the buttons will act on.
(function () {
  "use strict";
  var picked = new Set();
  var allMatching = false;

  function boxes() { return Array.prototype.slice.call(document.querySelectorAll('#inbox-results input[name="task_ids"]')); }
  function allBox() { return document.querySelector("#inbox-results [data-bulk-all]"); }

  function render() {
    var all = allBox();
    if (all) all.checked = allMatching;
    if (!all) allMatching = false;
    boxes().forEach(function (b) { b.checked = !allMatching && picked.has(b.value); b.disabled = allMatching; });
    var count = allMatching && all ? Number(all.dataset.count) : picked.size;
    var label = document.getElementById("bulk-selected");
    if (label) {
      label.textContent = count === 0 ? "No task selected"
        : (allMatching ? "All " + count + " matching tasks selected" : count + " task" + (count === 1 ? "" : "s") + " selected");
    }
    document.querySelectorAll("[data-bulk-submit]").forEach(function (b) { b.disabled = count === 0; });
  }

  document.addEventListener("change", function (e) {
    var t = e.target;
    if (!t || !t.matches) return;
    if (t.matches('#inbox-results input[name="task_ids"]')) {
      if (t.checked) picked.add(t.value); else picked.delete(t.value);
    } else if (t.matches("[data-bulk-all]")) {
      allMatching = t.checked;
    } else if (t.matches("[data-bulk-page]")) {
      boxes().forEach(function (b) { if (t.checked) picked.add(b.value); else picked.delete(b.value); });
    } else {
      return;
    }
    render();
  });
  // A checked row that a live update removed (decided by someone else) is no longer offered.
  function pruneAndRender() {
    var present = new Set(boxes().map(function (b) { return b.value; }));
    picked.forEach(function (id) { if (!present.has(id)) picked.delete(id); });
    render();
  }
  document.addEventListener("htmx:wsAfterMessage", pruneAndRender);
  document.addEventListener("htmx:afterSwap", function (e) { if (e.target && e.target.id === "inbox-results") pruneAndRender(); });
  // A refusal names its field (bulk_form_error.html): focus goes to it, as for a single decision. Asked to sign
  // again, the reviewer was left on <body> and had to find the password field.
  document.addEventListener("htmx:afterSwap", function (e) {
    if (!e.target || e.target.id !== "bulk-error") return;
    var named = e.target.querySelector("[data-field]");
    var input = named && named.getAttribute("data-field") ? document.getElementById("bulk-" + named.getAttribute("data-field")) : null;
    if (!input) return;
    input.setAttribute("aria-invalid", "true");
    input.setAttribute("aria-describedby", "bulk-error");
    input.focus();
  });
  document.addEventListener("DOMContentLoaded", render);

  // One click decided every selected task at once (an approval can disburse many loans, and its reason
  // is optional): the buttons ask first, naming how many tasks and whose they are.
  function confirmation(outcome) {
    var all = allBox();
    var count = allMatching && all ? Number(all.dataset.count) : picked.size;
    var chosen = boxes().filter(function (b) { return allMatching || picked.has(b.value); });
    var others = {};
    var otherCount = 0;
    chosen.forEach(function (b) {
      var who = b.dataset.assignee;
      if (who) { others[who] = (others[who] || 0) + 1; otherCount += 1; }
    });
    var verb = outcome === "reject" ? "Reject" : "Approve";
    var text = verb + " " + count + " task" + (count === 1 ? "" : "s") + " at once?";
    if (outcome !== "reject") text += " Each approval lets its agent carry out what it asked for (a payment, say).";
    if (otherCount) {
      var names = Object.keys(others).map(function (n) { return n + " (" + others[n] + ")"; }).join(", ");
      text += "\n\n" + otherCount + " of " + (allMatching ? "the ones shown" : "them") + " " + (otherCount === 1 ? "is" : "are") +
        " assigned to someone else: " + names + ".";
    }
    return text;
  }
  // "Reject 2 tasks at once?" was asked before a required reason was checked, and the yes ended in a 422:
  // a missing reason is said first, beside its field (the server still refuses one; bulk_form_error.html).
  function reasonMissing(outcome) {
    var reason = document.getElementById("bulk-reason");
    if (!reason) return false;
    var all = allBox();
    var chosen = allMatching && all ? [all] : boxes().filter(function (b) { return picked.has(b.value); });
    var needs = chosen.some(function (b) { return (b.dataset.reasons || "").split(" ").indexOf(outcome) >= 0; });
    var missing = needs && !reason.value.trim();
    var error = document.getElementById("bulk-error");
    if (missing) {
      reason.setAttribute("aria-invalid", "true");
      reason.setAttribute("aria-describedby", "bulk-error");
      if (error) {
        error.innerHTML = "";
        var p = document.createElement("p");
        p.className = "notice notice-error";
        p.setAttribute("role", "alert");
        p.setAttribute("data-field", "reason");
        var strong = document.createElement("strong");
        strong.textContent = "reason";
        p.appendChild(strong);
        p.appendChild(document.createTextNode(": a reason is required to " + outcome + " the selected tasks"));
        error.appendChild(p);
      }
      reason.focus();
    } else if (reason.getAttribute("aria-invalid")) {
      reason.removeAttribute("aria-invalid");
      if (error) error.innerHTML = "";
    }
    return missing;
  }
  document.addEventListener("htmx:confirm", function (e) {
    if (!e.target || e.target.id !== "bulk-form") return;
    var submitter = e.detail.triggeringEvent && e.detail.triggeringEvent.submitter;
    var outcome = submitter ? submitter.value : "approve";
    e.preventDefault();
    if (reasonMissing(outcome)) return;
    if (window.confirm(confirmation(outcome))) e.detail.issueRequest(true);
  });
})();
