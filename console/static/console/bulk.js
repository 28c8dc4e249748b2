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
  document.addEventListener("htmx:confirm", function (e) {
    if (!e.target || e.target.id !== "bulk-form") return;
    var submitter = e.detail.triggeringEvent && e.detail.triggeringEvent.submitter;
    e.preventDefault();
    if (window.confirm(confirmation(submitter ? submitter.value : "approve"))) e.detail.issueRequest(true);
  });
})();
