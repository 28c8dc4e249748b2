// Gatehouse console behaviour: live-connection indicator, new-row highlight, keyboard shortcuts.
// External file only (no inline scripts), so a strict Content-Security-Policy can be added.
(function () {
  "use strict";

  // --- live connection indicator -------------------------------------------------
  function indicator(state, text) {
    var el = document.getElementById("live-indicator");
    if (!el) return;
    el.hidden = false;
    el.textContent = text;
    el.classList.toggle("is-live", state === "live");
    el.classList.toggle("is-down", state === "down");
  }
  document.addEventListener("htmx:wsOpen", function (e) {
    indicator("live", "live");
    // A page whose socket sends nothing on connect (the dashboard: its render is costly, and the page
    // load has just rendered it) asks for one after a reconnect, to catch up on what it missed.
    var el = e.target;
    if (el && el.__wsWasClosed && el.hasAttribute("data-live-catch-up") && e.detail && e.detail.socketWrapper) {
      e.detail.socketWrapper.send("refresh");
    }
  });
  // The server closes a page's socket with 4401 once its session is gone (signed out in another tab,
  // expired, a new password) and with 4403 once its reader may no longer watch it (the page was told
  // why); htmx does not reconnect either, so "reconnecting…" would be a promise nobody keeps. A signed-out
  // page says so in the session notice (as a write refused for the same reason does) and tries its socket
  // again when the tab is next focused: signed in again in another tab, it goes live and catches up.
  // 4409: the browser is signed in as another user than the page was drawn for (signed out and in as
  // someone else in another tab): the page would show that user's view under this one's name. Said the
  // same way, and tried again on focus (signed in again as this page's user, it goes live).
  var signedOutSockets = [];
  function signedOut(wrapper, otherUser) {
    var notice = document.getElementById("session-notice");
    if (wrapper && signedOutSockets.indexOf(wrapper) < 0) signedOutSockets.push(wrapper);
    if (!notice || notice.querySelector("#signed-out-live")) return;
    var note = document.createElement("p");
    note.id = "signed-out-live";
    note.className = "notice notice-warn";
    var strong = document.createElement("strong");
    strong.textContent = otherUser ? "This browser is now signed in as another user" : "You were signed out";
    note.appendChild(strong);
    note.appendChild(document.createTextNode(otherUser
      ? " (in another tab): this page no longer updates, and nothing sent from it is recorded. Reload it to " +
        "continue as that user, or "
      : " (in another tab, or your session expired): this page no longer updates, and nothing sent from it is " +
        "recorded until you sign in again. "));
    var link = document.createElement("a");
    link.href = "/accounts/login/?next=" + encodeURIComponent(location.pathname + location.search);
    link.target = "_blank";
    link.rel = "noopener";
    link.textContent = otherUser ? "sign in again as yourself in a new tab" : "Sign in again in a new tab";
    note.appendChild(link);
    note.appendChild(document.createTextNode(", then come back to this tab."));
    notice.replaceChildren(note);
  }
  window.addEventListener("focus", function () {
    signedOutSockets.splice(0).forEach(function (wrapper) { wrapper.reconnect(); });
  });
  // An htmx read (a filter, a page of results) whose session ended is answered with a reload at the sign-in
  // form (console_login_required). When the page holds text typed into a form not sent yet (a bulk decision's
  // reason, a comment, a decision's reason), that reload threw it away: the page stays instead and says it
  // was signed out, as for a write refused for that reason. With nothing typed, the page goes to sign in.
  var TYPED = ["text", "search", "email", "url", "number", "tel"];
  function unsentText() {
    var fields = document.querySelectorAll('form[method="post"] input, form[method="post"] textarea');
    return Array.prototype.some.call(fields, function (field) {
      var typed = field.tagName === "TEXTAREA" || TYPED.indexOf(field.type) >= 0;
      return typed && field.value.trim() !== "" && field.value !== field.defaultValue;
    });
  }
  document.addEventListener("htmx:beforeOnLoad", function (e) {
    var xhr = e.detail && e.detail.xhr;
    var to = xhr ? xhr.getResponseHeader("HX-Redirect") : null;
    if (!to || to.indexOf("/accounts/login/") !== 0 || !unsentText()) return;
    e.preventDefault();
    xhr.gatehouseSignedOut = true;  // its notice stays after the request (htmx:afterRequest, below)
    signedOut(null, false);
  });
  // 4503: the server lost its event bus (Redis): this socket would hear nothing more, so the page says its live
  // updates are paused and reconnects, after a second or so (jittered: every open page was told at once).
  // While Redis is still away the server refuses the new socket, and htmx's own reconnect loop tries again
  // with its backoff; once it opens, the server's render on connect (or the dashboard's "refresh") catches up.
  function livePaused(wrapper, target) {
    var notice = document.getElementById("session-notice");
    if (notice && !document.getElementById("live-paused")) {
      var note = document.createElement("p");
      note.id = "live-paused";
      note.className = "notice notice-warn";
      var strong = document.createElement("strong");
      strong.textContent = "Live updates paused";
      note.appendChild(strong);
      note.appendChild(document.createTextNode(
        " — the server lost its event bus; this page may be out of date. It reconnects by itself and catches up."));
      notice.appendChild(note);
    }
    setTimeout(function () {
      if (wrapper && target && document.body.contains(target)) wrapper.reconnect();
    }, 500 + Math.random() * 1000);
  }
  document.addEventListener("htmx:wsOpen", function () {
    // Signed in again as this page's user: every note that said otherwise goes (a refused write's too).
    ["signed-out-live", "signed-out", "signed-in-as-other", "live-paused"].forEach(function (id) {
      var note = document.getElementById(id);
      if (note) note.remove();
    });
  });
  document.addEventListener("htmx:wsClose", function (e) {
    if (e.target) e.target.__wsWasClosed = true;
    var code = e.detail && e.detail.event ? e.detail.event.code : 0;
    if (code === 4401) {
      indicator("down", "signed out");
      signedOut(e.detail.socketWrapper, false);
    } else if (code === 4409) {
      indicator("down", "another user");
      signedOut(e.detail.socketWrapper, true);
    } else if (code === 4403) {
      indicator("down", "no access");
      viewGone();
    } else if (code === 4503) {
      indicator("down", "paused");
      livePaused(e.detail.socketWrapper, e.target);
    } else {
      // A reconnect refused while the event bus is still away keeps saying paused, as its notice does.
      indicator("down", document.getElementById("live-paused") ? "paused" : "reconnecting…");
    }
  });
  document.addEventListener("htmx:wsError", function () { indicator("down", "offline"); });

  // --- the view is gone: the socket said so (#live-gone) and closed 4403 ---
  // Access withdrawn while the page was open: its forms stayed usable, and a submit answered 404. Every write
  // control of the page is turned off (the header's Sign out is not the view's); the fields are not, so what
  // was typed can still be selected and copied. A write already under way is answered in the session notice
  // (common.error_page), the form left as it was.
  var gone = false;
  function viewGone() {
    gone = true;
    var main = document.getElementById("main");
    if (!main) return;
    main.querySelectorAll('form[method="post"] [type="submit"], [hx-post], [hx-put], [hx-delete], [hx-patch]')
      .forEach(function (el) {
        if (el.tagName === "FORM") el = el.querySelector('[type="submit"]') || el;
        if (el.tagName === "BUTTON" || el.tagName === "INPUT") el.disabled = true;
      });
    var panel = document.getElementById("decision-panel");
    var actions = panel && panel.querySelector(".actions");
    if (actions && !document.getElementById("decision-gone")) {
      var note = document.createElement("p");
      note.id = "decision-gone";
      note.className = "notice notice-warn small";
      note.textContent = "You no longer have access to this task: a decision can no longer be sent from this " +
        "page. Your text is kept above so you can copy it.";
      actions.parentNode.insertBefore(note, actions);
    }
  }
  document.addEventListener("htmx:wsAfterMessage", function () {
    var said = document.getElementById("live-gone");
    if (said && said.textContent.trim()) viewGone();
  });
  // Nothing is sent from a page whose view is gone (a shortcut, a control the sweep above did not reach).
  document.addEventListener("htmx:confirm", function (e) {
    var verb = e.detail && e.detail.verb ? e.detail.verb.toLowerCase() : "get";
    if (gone && verb !== "get") e.preventDefault();
  });

  // --- an answer whose target a live push replaced swaps into the replacement ----------------
  // htmx resolves hx-target when a request is sent. A live push can replace that element (same id)
  // before the answer arrives — a claim's own event often beats its response on a loaded server —
  // and htmx would then swap into the detached element: nothing shows, and its hx-preserve handling
  // deletes the inputs the push had just rendered (the delegate form lost its fields). The swap's
  // events fire on the detached target itself, so the listener goes on the element, not the document
  // (and whatever else must happen before an answer's swap is done from it: handoffEmpty below).
  function retarget(e) {
    var target = e.detail.target;
    if (!target || target.isConnected || !target.id) return;
    var current = document.getElementById(target.id);
    if (current) e.detail.target = current;
  }
  function beforeSwap(e) {
    retarget(e);
    handoffEmpty(e);
  }
  document.addEventListener("htmx:beforeRequest", function (e) {
    var target = e.detail.target;
    if (target && target.id && !target.__retargets) {
      target.__retargets = true;
      target.addEventListener("htmx:beforeSwap", beforeSwap);
    }
  });

  // --- highlight rows that appeared through a live update --------------------------
  var seen = null;
  function rowIds() {
    var ids = new Set();
    document.querySelectorAll("#inbox-results tr[data-task-id]").forEach(function (tr) { ids.add(tr.dataset.taskId); });
    return ids;
  }
  // A row stays highlighted for the whole flash even when another live render (the same
  // change's next event) replaces it a moment later with fresh HTML.
  var FLASH_MS = 2500;
  var appearedAt = new Map();
  // A task's row is pushed at once and the list re-rendered after it; a list render already under way can
  // show the task and arrive before the row, which then lands on top of the list's own copy. One row per task:
  // the first (the top one) stays.
  function rowsDeduplicated() {
    var kept = new Set();
    document.querySelectorAll("#inbox-results tr[data-task-id]").forEach(function (tr) {
      if (kept.has(tr.dataset.taskId)) tr.remove();
      else kept.add(tr.dataset.taskId);
    });
  }
  function markNew() {
    rowsDeduplicated();
    var now = rowIds();
    var t = Date.now();
    if (seen) now.forEach(function (id) { if (!seen.has(id)) appearedAt.set(id, t); });
    document.querySelectorAll("#inbox-results tr[data-task-id]").forEach(function (tr) {
      var at = appearedAt.get(tr.dataset.taskId);
      if (at !== undefined && t - at < FLASH_MS) tr.classList.add("is-new");
    });
    appearedAt.forEach(function (at, id) { if (t - at >= FLASH_MS) appearedAt.delete(id); });
    seen = now;
    restoreSelection();
  }
  document.addEventListener("DOMContentLoaded", function () { seen = rowIds(); });
  document.addEventListener("htmx:wsAfterMessage", markNew);
  document.addEventListener("htmx:afterSwap", function (e) {
    if (e.target && e.target.id === "inbox-results") { seen = rowIds(); restoreSelection(); }
  });

  // --- keyboard shortcuts ------------------------------------------------------------
  var selectedId = null;
  function rows() { return Array.prototype.slice.call(document.querySelectorAll("#inbox-results tr[data-task-id]")); }
  function select(tr) {
    rows().forEach(function (r) { r.classList.remove("is-selected"); });
    if (!tr) return;
    tr.classList.add("is-selected");
    selectedId = tr.dataset.taskId;
    var link = tr.querySelector("a");
    if (link) link.focus({ preventScroll: false });
  }
  function restoreSelection() {
    if (!selectedId) return;
    var tr = document.querySelector('#inbox-results tr[data-task-id="' + selectedId + '"]');
    if (tr) tr.classList.add("is-selected");
  }
  function typing(e) {
    var t = e.target;
    return t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName));
  }
  var pendingG = false;
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "Escape" && helpOpen()) { showHelp(false); e.preventDefault(); return; }
    if (e.key === "Escape" && typing(e)) {
      // A search box would clear itself and fire "search": the inbox then reloaded unfiltered under a
      // keyboard user who only meant to leave the box (and who then opened a task they had not searched for).
      if (e.target.type === "search") e.preventDefault();
      e.target.blur();
      return;
    }
    if (typing(e)) return;
    var list = rows();
    var current = list.findIndex(function (r) { return r.classList.contains("is-selected"); });
    if (pendingG) {
      pendingG = false;
      if (e.key === "i") { window.location.href = "/"; e.preventDefault(); }
      return;
    }
    switch (e.key) {
      case "/": {
        var search = document.querySelector('[data-shortcut="/"]');
        if (search) { search.focus(); e.preventDefault(); }
        break;
      }
      case "j": if (list.length) { select(list[Math.min(current + 1, list.length - 1)]); e.preventDefault(); } break;
      case "k": if (list.length) { select(list[Math.max(current - 1, 0)]); e.preventDefault(); } break;
      case "Enter": case "o":
        if (current >= 0) { window.location.href = list[current].dataset.href; e.preventDefault(); }
        break;
      case "c": {
        var btn = document.querySelector('[data-shortcut="c"]');
        if (btn) { btn.click(); e.preventDefault(); }
        break;
      }
      case "r": {
        var reason = document.querySelector('[data-shortcut="r"]');
        if (reason) { reason.focus(); e.preventDefault(); }
        break;
      }
      case "g": pendingG = true; break;
      case "?": toggleHelp(); e.preventDefault(); break;
    }
  });
  function helpOpen() {
    var help = document.getElementById("kbd-help");
    return !!help && !help.hidden;
  }
  function showHelp(open) {
    var help = document.getElementById("kbd-help");
    if (!help) return;
    help.hidden = !open;
    document.querySelectorAll(".kbd-help-toggle").forEach(function (b) { b.setAttribute("aria-expanded", String(open)); });
  }
  function toggleHelp() { showHelp(!helpOpen()); }
  document.addEventListener("click", function (e) {
    if (!e.target.closest) return;
    if (e.target.closest(".kbd-help-toggle")) toggleHelp();
    else if (e.target.closest(".kbd-help-close")) showHelp(false);
  });

  // --- deadlines: due badges count down from their ISO time, so an open page turns overdue on time ---
  // Same text as runtime/deadlines.py duration_human and approvals.deadlines.due_state.
  function durationHuman(s) {
    s = Math.floor(Math.abs(s));
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min";
    if (s < 86400) {
      var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
      return m && h < 10 ? h + " h " + m + " min" : h + " h";
    }
    var d = Math.floor(s / 86400), dh = Math.floor((s % 86400) / 3600);
    return dh && d < 10 ? d + " d " + dh + " h" : d + " d";
  }
  var SOON_SECONDS = 3600;
  function tickDue() {
    var now = Date.now();
    document.querySelectorAll("[data-due-badge]").forEach(function (el) {
      var due = Date.parse(el.getAttribute("datetime"));
      if (isNaN(due)) return;
      var delta = (due - now) / 1000;
      var overdue = delta <= 0;
      var text = overdue ? "overdue " + durationHuman(Math.floor(-delta)) : "due in " + durationHuman(Math.ceil(delta));
      if (el.textContent !== text) el.textContent = text;
      el.classList.toggle("badge-danger", overdue);
      el.classList.toggle("is-overdue", overdue);
      if (overdue) el.classList.remove("badge-warn");
      else if (delta <= SOON_SECONDS) el.classList.add("badge-warn");
      var tr = el.closest("tr");
      if (tr) tr.classList.toggle("is-overdue", overdue);
    });
  }
  // --- hand-offs: a form that went through is emptied, so a second click does not repeat it ---
  // (its fields are hx-preserve'd across live pushes, which kept the text after a success too)
  // Emptied before its answer is swapped in (called from beforeSwap above, on the answer's target): a live
  // push may replace the panel at any moment after, and the preserved fields move into whatever comes next
  // as they are. The hand-off's own push often lands before its answer: the panel the request targeted and
  // the form that sent it are detached by then (a listener on the document would not even hear the swap),
  // and the typed fields moved into the pushed panel's form — the one on the page, found by its id.
  function handoffEmpty(e) {
    var form = e.detail.requestConfig && e.detail.requestConfig.elt;
    if (!form || !form.matches || !form.matches("#reassign-form, #delegate-form")) return;
    if (!e.detail.xhr || e.detail.xhr.status !== 200) return;  // a refusal keeps what was typed
    var current = form.isConnected ? form : document.getElementById(form.id);
    if (!current) return;
    current.querySelectorAll("input:not([type=hidden]), textarea, select").forEach(function (el) { el.value = ""; });
  }

  // --- the decision form waits while someone else holds the claim (the Now panel's claim box says whose) ---
  // It was fully enabled and refused the filled-in form with a 409. The Now panel is pushed live; the form is
  // not, so what was typed stays while its fieldset is disabled and comes back with it.
  // A claim that lapses refuses no one, and no event says so: at its end (data-held-until, checked every second
  // with the due badges) the form opens and the box says the claim lapsed. The form stayed locked until a reload.
  function claimHeld() {
    var box = document.getElementById("claim-box");
    var fields = document.getElementById("decision-fields");
    var note = document.getElementById("claim-held-note");
    if (!box || !fields || !note) return;
    var held = box.getAttribute("data-held-note") || "";
    var until = Date.parse(box.getAttribute("data-held-until") || "");
    if (held && !isNaN(until) && Date.now() >= until) {
      held = "";
      var shown = box.querySelector("[data-claim-until]");
      if (shown && !box.classList.contains("claim-lapsed")) {
        box.classList.add("claim-lapsed");
        shown.textContent = shown.textContent.replace(/^until /, "lapsed at ") + ": you may decide";
      }
    }
    if (fields.disabled !== !!held) fields.disabled = !!held;
    note.hidden = !held;
    if (held && note.textContent !== held) note.textContent = held;
  }
  document.addEventListener("htmx:wsAfterMessage", claimHeld);
  document.addEventListener("htmx:afterSwap", claimHeld);

  // --- Approve withdrawn live: another approval made this reader's the quorum's last, which a rule keeps from
  // them. The Now panel said so; the form still offered Approve, and its submit was a 422. ---
  function approveWithheld() {
    var marker = document.getElementById("approve-refused-live");
    var radio = document.querySelector('#decision-fields input[name="decision"][value="approve"]');
    if (!marker || !radio || radio.disabled) return;
    radio.checked = false;
    radio.disabled = true;
    var label = radio.closest("label");
    if (label) label.classList.add("is-withheld");
    if (!document.getElementById("approve-withheld")) {
      var note = document.createElement("p");
      note.className = "muted small";
      note.id = "approve-withheld";
      note.setAttribute("role", "status");
      note.textContent = "Approve is no longer offered: " + (marker.getAttribute("data-message") || "") +
        ". You can reject, or leave the task to an approver.";
      var group = radio.closest("fieldset");
      if (group) group.appendChild(note);
    }
  }
  document.addEventListener("htmx:wsAfterMessage", approveWithheld);
  document.addEventListener("htmx:afterSwap", approveWithheld);

  // --- a refused form: focus goes to its first invalid field, as a browser's own validation does ---
  // After a 422 the error showed (aria-invalid, role=alert) but focus was left on <body>: a keyboard or
  // screen-reader user had to hunt for it. An input in a closed <details> is opened to be focusable.
  document.addEventListener("htmx:afterSwap", function (e) {
    var xhr = e.detail.xhr;
    // The event fires on what was swapped in (an outerHTML swap's detail.target is the element it replaced).
    var root = e.target;
    if (!xhr || xhr.status < 400 || !root || !root.isConnected || !root.querySelector) return;
    var field = root.querySelector('[aria-invalid="true"]:not([disabled])');
    if (!field) return;
    for (var d = field.closest("details"); d; d = d.parentElement && d.parentElement.closest("details")) d.open = true;
    field.focus();
  });

  // --- focus survives a swap that removed the focused control ---
  // Claim then Release with the keyboard, or "Save roles" on a user's page, left document.activeElement on
  // <body>: the swap replaced the focused button, and htmx only refocuses an element of the same id (the
  // Claim button's successor is Release). What has focus is followed; once new content is wired (an answer's
  // settle, a live push's end: a push often replaces an answer before its settle), if it is gone and nothing
  // took focus since, focus goes to the element of the same id, else, in the nearest enclosing element that
  // came back (by id), to its [data-focus-after-swap] target, else to the control that reads the same (same
  // tag, type, name and text: the re-rendered "Save roles").
  var lastFocus = null;
  function focusLost() {
    var now = document.activeElement;
    return !now || now === document.body || now === document.documentElement || !now.isConnected;
  }
  function focusNoted(el) {
    if (!el || el === document.body || el === document.documentElement || !el.isConnected) return null;
    var ids = [];
    for (var a = el.parentElement; a; a = a.parentElement) if (a.id) ids.push(a.id);
    return { el: el, id: el.id, tag: el.tagName, type: el.getAttribute("type") || "", name: el.getAttribute("name") || "",
             text: (el.textContent || "").trim(), ids: ids };
  }
  document.addEventListener("focusin", function (e) { lastFocus = focusNoted(e.target); });
  document.addEventListener("focusout", function (e) {
    var el = e.target;
    setTimeout(function () {  // left on purpose (Escape, a click elsewhere): nothing to give back
      if (lastFocus && lastFocus.el === el && el.isConnected && !el.disabled && focusLost()) lastFocus = null;
    }, 0);
  });
  document.addEventListener("pointerdown", function () { lastFocus = null; }, true);  // a pointer places focus itself
  function focusable(el) {
    return !!el && el.isConnected && !el.disabled && el.getClientRects().length > 0 &&
      !el.closest("[hidden], fieldset[disabled], .htmx-swapping, .htmx-settling");
  }
  function sameControl(box, noted) {
    var found = null;
    box.querySelectorAll(noted.tag).forEach(function (el) {
      if (found || (el.getAttribute("type") || "") !== noted.type || (el.getAttribute("name") || "") !== noted.name) return;
      if ((el.textContent || "").trim() === noted.text && focusable(el)) found = el;
    });
    return found;
  }
  function focusRestore() {
    var noted = lastFocus;
    if (!noted || noted.el.isConnected || !focusLost()) return;
    var target = noted.id ? document.getElementById(noted.id) : null;
    for (var i = 0; !focusable(target) && i < noted.ids.length; i++) {
      var box = document.getElementById(noted.ids[i]);
      if (!box) continue;
      target = box.querySelector("[data-focus-after-swap]");
      if (!focusable(target)) target = sameControl(box, noted);
    }
    if (focusable(target)) target.focus();
  }
  document.addEventListener("htmx:afterSettle", focusRestore);
  document.addEventListener("htmx:wsAfterMessage", focusRestore);

  // --- relative times ("42 s ago") keep counting, like the due badges beside them ---
  // Same words as console/rows_html.py ago(), and as the due badges beside them (durationHuman).
  function agoText(s) {
    return s < 0 ? "in " + durationHuman(-s) : durationHuman(s) + " ago";
  }
  function tickAgo() {
    var now = Date.now();
    document.querySelectorAll("time[data-ago]").forEach(function (el) {
      var at = Date.parse(el.getAttribute("datetime"));
      if (isNaN(at)) return;
      var text = agoText((now - at) / 1000);
      if (el.textContent !== text) el.textContent = text;
    });
  }
  // --- CSRF and reader for plain form posts re-rendered live: a websocket render has no request, so no token ---
  // (htmx requests carry the page's token and reader in hx-headers; a plain <form method=post> carries its own,
  // from {% form_guard %}). The reader is whom the page was drawn for: the server refuses a form sent after a
  // sign-in as someone else (409), which the fresh token alone would let through.
  function hiddenEnsure(form, name, value) {
    if (!value || form.querySelector('input[name="' + name + '"]')) return;
    var input = document.createElement("input");
    input.type = "hidden"; input.name = name; input.value = value;
    form.appendChild(input);
  }
  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (!form || (form.getAttribute("method") || "").toLowerCase() !== "post" || form.hasAttribute("hx-post")) return;
    var headers = document.body.getAttribute("hx-headers");
    var page = headers ? JSON.parse(headers) : {};
    hiddenEnsure(form, "gatehouse_reader", page["X-Gatehouse-Reader"]);  // console.views.common.READER_FIELD
    var current = csrfCookie();
    var own = form.querySelector("input[name=csrfmiddlewaretoken]");
    if (own) { if (current) own.value = current; return; }  // a sign-in since the page loaded changed it
    hiddenEnsure(form, "csrfmiddlewaretoken", current || page["X-CSRFToken"]);
  }, true);

  // --- a write after the session ended (console_login_required answers 401 into #session-notice) ---
  // The page stays as it was, with what was typed; the notice's link signs in in a new tab. Signing in
  // there gives the browser a new CSRF token (Django rotates it at sign-in), which this page's copy no
  // longer matches: every request sends the one in force, read from the cookie, so the same submit
  // goes through once signed in again, rather than a 403 that would swap away the form.
  function csrfCookie() {
    var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }
  document.addEventListener("htmx:configRequest", function (e) {
    var token = csrfCookie();
    if (!token) return;
    e.detail.headers["X-CSRFToken"] = token;
    var params = e.detail.parameters;  // a form's own token field wins over the header: kept in step
    if (params && typeof params.has === "function" && params.has("csrfmiddlewaretoken")) params.set("csrfmiddlewaretoken", token);
  });
  document.addEventListener("htmx:afterSwap", function (e) {
    if (!e.target || e.target.id !== "session-notice") return;
    var link = e.target.querySelector("a[href]");
    if (link) link.focus();  // announced (role=alert) and one key from signing in
  });
  document.addEventListener("htmx:afterRequest", function (e) {
    var xhr = e.detail.xhr;
    var notice = document.getElementById("session-notice");
    // An answer put in the notice stays (a 401, a 409 for another user, a refused write's 403/404); any
    // other answer clears it: the notice was about an earlier submit.
    var kept = xhr && (xhr.gatehouseSignedOut || (xhr.getResponseHeader && xhr.getResponseHeader("HX-Retarget") === "#session-notice"));
    if (notice && xhr && xhr.status && !kept && notice.firstChild) notice.replaceChildren();
  });

  // A time series too wide for a phone scrolls: open it at its latest data, not at its oldest.
  // A live push (the dashboard's) brings new charts: each opens at its latest data too (once: the
  // mark keeps a chart the push did not replace where the reader scrolled it).
  function scrollToEnd() {
    document.querySelectorAll("[data-scroll-end]:not([data-scrolled])").forEach(function (el) {
      el.scrollLeft = el.scrollWidth;
      el.setAttribute("data-scrolled", "");
    });
  }
  document.addEventListener("DOMContentLoaded", scrollToEnd);
  document.addEventListener("htmx:wsAfterMessage", scrollToEnd);

  // A page rendered by a form post (a one-time link) names a page to show instead on reload: the
  // browser's address becomes that page, so a refresh reads it rather than posting the form again.
  document.addEventListener("DOMContentLoaded", function () {
    var el = document.querySelector("[data-replace-url]");
    if (el && window.history && history.replaceState) history.replaceState(null, "", el.getAttribute("data-replace-url"));
  });

  // --- time travel: its buttons wait while a run is in progress, as the live status box says ---
  // (the box is pushed with the thread; the forms only when the checkpoint shown moves, keeping what was typed)
  function timeTravelBusy() {
    var status = document.getElementById("time-travel-status");
    if (!status) return;
    var busy = status.getAttribute("data-busy") === "1";
    document.querySelectorAll("#time-travel [data-busy-disables]").forEach(function (b) { b.disabled = busy; });
  }
  document.addEventListener("htmx:wsAfterMessage", timeTravelBusy);
  // A fork that runs does again what the line did after its checkpoint, as replay does (which asks
  // through hx-confirm): it asks too, with the server's words, but only when "Run the branch now" is ticked.
  document.addEventListener("htmx:confirm", function (e) {
    var form = e.target;
    if (!form || !form.matches || !form.matches("form[data-confirm-run]")) return;
    var run = form.querySelector('input[name="run"]');
    if (!run || !run.checked) return;
    e.preventDefault();
    if (window.confirm(form.getAttribute("data-confirm-run"))) e.detail.issueRequest(true);
  });

  // --- the inbox's header row stays at the window's top while the page scrolls ---------------
  // Below 1280 px the list scrolls sideways in its own box (console.css), and a sticky header sticks to its
  // nearest scrolling box, that box, which never scrolls down: not to the window. So the header is moved
  // down by as much of the list as has scrolled above the window (a transform: no layout, no reflow of rows),
  // never past the list's last row. Wider, the box is not a scroller and plain CSS sticky does it.
  var headQueued = false;
  function inboxHeadFollow() {
    headQueued = false;
    var table = document.querySelector("table.grid.inbox");
    if (!table || !table.tHead) return;
    var boxed = window.getComputedStyle(table).overflowX !== "visible";
    var room = table.clientHeight - table.tHead.offsetHeight;
    var shift = boxed ? Math.max(0, Math.min(-table.getBoundingClientRect().top, room)) : 0;
    table.style.setProperty("--head-shift", shift + "px");
  }
  function inboxHeadQueue() {
    if (headQueued) return;
    headQueued = true;
    window.requestAnimationFrame(inboxHeadFollow);
  }
  window.addEventListener("scroll", inboxHeadQueue, { passive: true });
  window.addEventListener("resize", inboxHeadQueue);
  document.addEventListener("DOMContentLoaded", inboxHeadQueue);
  document.addEventListener("htmx:afterSettle", inboxHeadQueue);  // a filtered or live re-rendered list
  document.addEventListener("htmx:wsAfterMessage", inboxHeadQueue);

  function tick() { tickDue(); tickAgo(); claimHeld(); }
  document.addEventListener("DOMContentLoaded", tick);
  document.addEventListener("htmx:wsAfterMessage", tick);
  document.addEventListener("htmx:afterSwap", tick);
  setInterval(tick, 1000);
})();
