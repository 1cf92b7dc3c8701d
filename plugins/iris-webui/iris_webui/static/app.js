/* Iris Web UI: sessions, one WebSocket per open conversation, streaming replies and tool cards.
 *
 * Everything from the server (model text, file names, tool input and results) is put in the page
 * with textContent or through IrisMarkdown.render, which builds nodes and never parses HTML.
 * The session cookie is HttpOnly. The cookie alone is not enough (browsers send it to every port
 * of 127.0.0.1): the page key, handed over once in the URL fragment after a sign-in and kept in
 * this origin's localStorage, goes with every API call and opens every WebSocket.
 */
(function () {
  "use strict";

  var KINDS = {
    read: "Read", edit: "Edit", "delete": "Delete", move: "Move", search: "Search",
    execute: "Run", think: "Think", fetch: "Fetch", other: "Tool"
  };
  var MAX_BACKOFF_MS = 15000;
  var PAGE_KEY = "iris.pageKey";
  // Refused before `ready` this many times in a row: say why instead of only retrying.
  var REFUSALS_BEFORE_NOTICE = 3;
  // Errors about one request (a message frame), not about a run: shown by the composer.
  var REQUEST_ERRORS = {
    queue_full: "Too many messages are waiting: try again when the current run ends.",
    message_too_long: "This message is too long (over 32 KiB). Attach it as a file instead.",
    unknown_attachment: "An attached file is no longer available: attach it again.",
    invalid_frame: "The message could not be sent (the server did not understand it).",
    frame_too_large: "This message is too large to send. Attach it as a file instead.",
    shutting_down: "Iris is shutting down: the message was not accepted."
  };

  /* Move a fresh page key out of the URL (#k=...) into storage, so it is in no history entry,
   * bookmark or screenshot of the address bar. */
  (function takePageKey() {
    var params = new URLSearchParams(window.location.hash.replace(/^#/, ""));
    var key = params.get("k");
    if (!key) return;
    try { window.localStorage.setItem(PAGE_KEY, key); } catch (e) { /* storage off: see pageKey() */ }
    window.__irisPageKey = key;
    params.delete("k");
    var rest = params.toString();
    history.replaceState(null, "", window.location.pathname + window.location.search +
      (rest ? "#" + rest : ""));
  })();

  function pageKey() {
    try { return window.localStorage.getItem(PAGE_KEY) || window.__irisPageKey || ""; } catch (e) {
      return window.__irisPageKey || "";
    }
  }

  /** The cookie is missing or this page has no (valid) key: sign in again. */
  function toLogin(code) {
    if (code === "page_key_required") {
      try { window.localStorage.removeItem(PAGE_KEY); } catch (e) { /* nothing stored */ }
    }
    // With ?error= the server shows the page even to a signed-in cookie (no redirect loop).
    window.location.assign("/login" + (code === "page_key_required" ? "?error=page_key_required" : ""));
  }

  var $ = function (id) { return document.getElementById(id); };
  var ui = {
    app: $("app"), sidebar: $("sidebar"), scrim: $("scrim"), menu: $("menu-button"),
    sessions: $("sessions"), sessionsEmpty: $("sessions-empty"), newChat: $("new-chat"),
    title: $("chat-title"), connection: $("connection"), connectionText: $("connection-text"),
    agent: $("agent-select"), banner: $("banner"), bannerText: $("banner-text"),
    bannerAction: $("banner-action"), scroll: $("messages-scroll"), list: $("messages"),
    empty: $("empty"), emptyTitle: $("empty-title"), emptyText: $("empty-text"),
    status: $("run-status"), statusText: $("run-status-text"), composer: $("composer"),
    input: $("composer-input"), attach: $("attach"), fileInput: $("file-input"),
    pending: $("pending-files"), send: $("send"), stop: $("stop"),
    composerNotice: $("composer-notice")
  };

  var state = {
    session: null,          // the open conversation's id
    agent: "",              // "" = Iris itself, else a registered sub-agent's name
    agents: [],
    socket: null,
    socketSerial: 0,        // a socket's frames are ignored once a newer one replaced it
    ready: false,
    everReady: false,       // set by the first ready frame
    refused: null,          // an error code that makes this socket refuse messages
    backoff: 0,
    retryTimer: null,
    running: false,
    turn: null,             // the turn of frames without a run id (an older server)
    turns: {},              // run id -> its assistant turn
    activeRun: null,        // the run id in progress, if known
    doneRuns: {},           // run id -> true once its final reply came
    queuedItems: [],        // user bubbles waiting for a run, oldest first
    historyRunning: null,   // a history turn still running, until its run id is known
    refusals: 0,            // sockets closed before `ready`, in a row
    cards: {},              // tool call id -> card element (updated in place)
    uploads: [],            // [{file, path, url, name, chip, state}]
    sessionsLoaded: []
  };

  // ---- small helpers ------------------------------------------------------------------------

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text != null) node.textContent = text;
    return node;
  }

  function icon(name) {
    var span = el("span", "icon icon--" + name);
    span.setAttribute("aria-hidden", "true");
    return span;
  }

  function api(method, path, body) {
    var options = { method: method, credentials: "same-origin", headers: {} };
    var key = pageKey();
    if (key) options.headers["X-Iris-Page-Key"] = key;
    if (body instanceof FormData) {
      options.body = body;
    } else if (body !== undefined) {
      options.body = JSON.stringify(body);
      options.headers["Content-Type"] = "application/json";
    }
    return fetch(path, options).then(function (response) {
      return response.text().then(function (text) {
        var data = null;
        try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
        if (response.status === 401) {
          toLogin(data && data.code);
          throw new Error("signed out");
        }
        if (!response.ok) {
          var error = new Error((data && data.error) || ("HTTP " + response.status));
          error.status = response.status;
          error.code = data && data.code;
          throw error;
        }
        return data;
      });
    });
  }

  function relativeTime(value) {
    if (!value) return "";
    var when = typeof value === "number" ? new Date(value < 1e12 ? value * 1000 : value) : new Date(value);
    if (isNaN(when.getTime())) return "";
    var seconds = (Date.now() - when.getTime()) / 1000;
    if (seconds < 60) return "just now";
    if (seconds < 3600) return Math.floor(seconds / 60) + " min ago";
    if (seconds < 86400) return Math.floor(seconds / 3600) + " h ago";
    if (seconds < 7 * 86400) return Math.floor(seconds / 86400) + " d ago";
    return when.toLocaleDateString();
  }

  function baseName(path) {
    var parts = String(path).split("/");
    return parts[parts.length - 1] || String(path);
  }

  function fileUrl(path) {
    return "/api/sessions/" + encodeURIComponent(state.session) + "/files/" +
      String(path).split("/").map(encodeURIComponent).join("/");
  }

  /** A file reference from a frame or the history: {name, url} or a bare path. */
  function fileRef(file) {
    if (typeof file === "string") return { name: baseName(file), url: fileUrl(file) };
    var name = file.name || baseName(file.path || file.url || "file");
    var url = file.url || (file.path ? fileUrl(file.path) : null);
    return { name: name, url: url };
  }

  /** Only our own same-origin paths become download links. */
  function sameOriginUrl(url) {
    if (!url) return null;
    try {
      var parsed = new URL(url, window.location.href);
      return parsed.origin === window.location.origin ? parsed.href : null;
    } catch (e) {
      return null;
    }
  }

  /* Downloads are API calls too, so they need the page key header, which a plain link cannot
   * send: fetch the file, then save it from a short-lived blob URL. */
  function download(href, name) {
    fetch(href, { credentials: "same-origin", headers: { "X-Iris-Page-Key": pageKey() } })
      .then(function (response) {
        if (response.status === 401) {
          return response.json().catch(function () { return null; }).then(function (data) {
            toLogin(data && data.code);
          });
        }
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.blob().then(function (blob) {
          var url = URL.createObjectURL(blob);
          var link = el("a");
          link.href = url;
          link.download = name;
          document.body.appendChild(link);
          link.click();
          link.remove();
          setTimeout(function () { URL.revokeObjectURL(url); }, 60000);
        });
      })
      .catch(function (error) {
        showComposerNotice("Could not download " + name + ": " + error.message);
      });
  }

  function fileChip(file) {
    var ref = fileRef(file);
    var href = sameOriginUrl(ref.url);
    var chip = el(href ? "a" : "span", "chip");
    if (href) {
      chip.href = href;
      chip.setAttribute("download", ref.name);
      chip.title = "Download " + ref.name;
      chip.addEventListener("click", function (event) {
        event.preventDefault();
        download(href, ref.name);
      });
    }
    chip.appendChild(icon(href ? "download" : "file"));
    chip.appendChild(el("span", "chip__name", ref.name));
    var item = el("li");
    item.appendChild(chip);
    return item;
  }

  // ---- the URL hash: #s=<session>&agent=<name> ----------------------------------------------

  function readHash() {
    var params = new URLSearchParams(window.location.hash.replace(/^#/, ""));
    return { session: params.get("s"), agent: params.get("agent") || "" }; // never k=
  }

  function writeHash() {
    var params = new URLSearchParams();
    if (state.session) params.set("s", state.session);
    if (state.agent) params.set("agent", state.agent);
    var hash = "#" + params.toString();
    if (window.location.hash !== hash) history.replaceState(null, "", hash);
  }

  // ---- banner, connection indicator, status line ---------------------------------------------

  function showBanner(text, actionLabel, action) {
    ui.bannerText.textContent = text;
    ui.banner.hidden = false;
    if (actionLabel) {
      ui.bannerAction.textContent = actionLabel;
      ui.bannerAction.hidden = false;
      ui.bannerAction.onclick = action;
    } else {
      ui.bannerAction.hidden = true;
      ui.bannerAction.onclick = null;
    }
  }

  function hideBanner() {
    ui.banner.hidden = true;
  }

  function setConnection(kind, text) {
    ui.connection.dataset.state = kind;
    ui.connectionText.textContent = text;
  }

  function setStatus(text) {
    ui.status.dataset.active = text ? "true" : "false";
    ui.statusText.textContent = text || "";
  }

  function setRunning(running) {
    state.running = running;
    ui.stop.disabled = !running || !state.ready;
    if (!running) setStatus("");
  }

  function updateComposer() {
    var blocked = !state.ready || !!state.refused;
    var uploading = state.uploads.some(function (u) { return u.state === "uploading"; });
    ui.send.disabled = blocked || uploading;
    ui.stop.disabled = !state.running || !state.ready;
    ui.input.placeholder = state.refused === "unknown_agent"
      ? "Choose another agent to continue"
      : state.refused === "unknown_session" ? "Start a new conversation to continue"
        : "Message " + (state.agent || "Iris") + "…";
  }

  /** A notice about one request (a refused message), by the composer; the run goes on. */
  function showComposerNotice(text) {
    ui.composerNotice.textContent = text;
    ui.composerNotice.hidden = false;
  }

  function hideComposerNotice() {
    ui.composerNotice.hidden = true;
    ui.composerNotice.textContent = "";
  }

  // ---- messages ------------------------------------------------------------------------------

  function scrollToEnd(force) {
    var box = ui.scroll;
    var nearEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 160;
    if (force || nearEnd) box.scrollTop = box.scrollHeight;
  }

  function showEmptyState() {
    var empty = ui.list.children.length === 0;
    ui.empty.hidden = !empty;
    if (state.agent) {
      ui.emptyTitle.textContent = "Talk to " + state.agent;
      ui.emptyText.textContent = "Messages here go straight to the " + state.agent +
        " sub-agent. Its progress shows live while it works.";
    } else {
      ui.emptyTitle.textContent = "How can I help?";
      ui.emptyText.textContent =
        "Ask a question, attach a file, or pick a sub-agent above to talk to it directly.";
    }
  }

  function addUserMessage(text, files) {
    var item = el("li", "message message--user");
    item.appendChild(el("span", "visually-hidden", "You said:"));
    if (text) item.appendChild(el("div", "bubble", text)); // plain text, exactly as typed
    if (files && files.length) {
      var list = el("ul", "files");
      files.forEach(function (f) { list.appendChild(fileChip(f)); });
      item.appendChild(list);
    }
    ui.list.appendChild(item);
    showEmptyState();
    scrollToEnd(true);
    return item;
  }

  function whoLine(agentName) {
    var who = el("div", "message__who");
    if (agentName) {
      var avatar = el("span", "message__avatar message__avatar--agent");
      avatar.appendChild(icon("agent"));
      who.appendChild(avatar);
      who.appendChild(el("span", null, agentName));
    } else {
      var logo = el("img", "message__avatar");
      logo.src = "/static/iris.svg";
      logo.alt = "";
      who.appendChild(logo);
      who.appendChild(el("span", null, "Iris"));
    }
    return who;
  }

  /** An assistant turn: who, tool cards, the reply bubble, files, a closing note. */
  function newTurn(agentName) {
    var item = el("li", "message message--assistant");
    item.appendChild(whoLine(agentName));
    var tools = el("ul", "tools");
    tools.hidden = true;
    var bubble = el("div", "bubble");
    bubble.hidden = true;
    var files = el("ul", "files");
    files.hidden = true;
    item.appendChild(tools);
    item.appendChild(bubble);
    item.appendChild(files);
    item.hidden = true; // until something of it shows: a silent run leaves no trace
    ui.list.appendChild(item);
    return { item: item, tools: tools, bubble: bubble, files: files, text: null, error: null };
  }

  function reveal(turn) {
    if (!turn.item.hidden) return;
    turn.item.hidden = false;
    showEmptyState();
  }

  function runOf(frame) {
    return frame.run != null ? String(frame.run) : null;
  }

  /** The turn a run's frame belongs to, by its run id: never "whichever turn is last", so a
   * late frame of an earlier run still lands in that run's reply. */
  function turnFor(frame) {
    var run = runOf(frame);
    if (run == null) { // a frame without a run id (an older server): one turn at a time
      if (!state.turn) state.turn = newTurn(state.agent);
      return state.turn;
    }
    var turn = state.turns[run];
    if (!turn) {
      // A run the history showed as still going (loaded without run ids) carries on there.
      turn = state.historyRunning || newTurn(state.agent);
      state.historyRunning = null;
      state.turns[run] = turn;
    }
    return turn;
  }

  /** Is this frame about the run in progress (rather than a late frame of an ended one)? */
  function isCurrent(frame) {
    var run = runOf(frame);
    if (run == null) return true;
    if (state.doneRuns[run]) return false;
    if (state.activeRun == null) state.activeRun = run;
    return state.activeRun === run;
  }

  /** A run ended: the page is idle again unless another run (or a queued message) goes on. */
  function endRun(frame) {
    var run = runOf(frame);
    if (run == null) {
      state.turn = null;
    } else {
      state.doneRuns[run] = true;
      if (state.activeRun != null && state.activeRun !== run) return; // run B is going on
      state.activeRun = null;
    }
    if (state.queuedItems.length) {
      setStatus("Queued: starts when the current run ends");
    } else {
      setRunning(false);
    }
    updateComposer();
  }

  function setReplyText(turn, text, streaming) {
    if (text === turn.text && !streaming === !turn.bubble.classList.contains("bubble--streaming")) {
      return;
    }
    turn.text = text;
    turn.bubble.replaceChildren(IrisMarkdown.render(text || ""));
    turn.bubble.hidden = !text;
    turn.bubble.classList.toggle("bubble--streaming", !!streaming);
    if (text) reveal(turn);
  }

  function addNote(turn, text, kind) {
    var note = el("p", "message__note message__note--" + kind, text);
    turn.item.appendChild(note);
    reveal(turn);
  }

  function addNotice(text, isError) {
    var item = el("li", "notice" + (isError ? " notice--error" : ""));
    item.setAttribute("role", isError ? "alert" : "note");
    item.appendChild(icon(isError ? "alert" : "other"));
    item.appendChild(el("span", null, text));
    ui.list.appendChild(item);
    showEmptyState();
    scrollToEnd(true);
    return item;
  }

  // ---- tool cards ----------------------------------------------------------------------------

  function pretty(value) {
    if (value == null || value === "") return "";
    if (typeof value === "string") return value;
    try { return JSON.stringify(value, null, 2); } catch (e) { return String(value); }
  }

  var cardSerial = 0;

  function buildCard(data) {
    var card = el("li", "tool");
    var head = el("button", "tool__head");
    head.type = "button";
    head.setAttribute("aria-expanded", "false");
    var bodyId = "tool-body-" + (++cardSerial);
    head.setAttribute("aria-controls", bodyId);
    var iconBox = el("span", "tool__icon");
    var kindIcon = icon("other");
    iconBox.appendChild(kindIcon);
    var text = el("span", "tool__text");
    var titleRow = el("span", "tool__title");
    var label = el("span", "tool__label");
    var name = el("span", "tool__name");
    titleRow.appendChild(label);
    titleRow.appendChild(name);
    var subtitle = el("span", "tool__subtitle");
    text.appendChild(titleRow);
    text.appendChild(subtitle);
    var stateBox = el("span", "tool__state");
    var chevron = icon("chevron");
    chevron.classList.add("tool__chevron");
    head.appendChild(iconBox);
    head.appendChild(text);
    head.appendChild(stateBox);
    head.appendChild(chevron);
    var body = el("div", "tool__body");
    body.id = bodyId;
    body.hidden = true;
    var inputTitle = el("h4", "tool__section-title", "Input");
    var inputPre = el("pre", "tool__input");
    var resultTitle = el("h4", "tool__section-title", "Result");
    var resultPre = el("pre", "tool__result");
    body.appendChild(inputTitle);
    body.appendChild(inputPre);
    body.appendChild(resultTitle);
    body.appendChild(resultPre);
    head.addEventListener("click", function () {
      var open = head.getAttribute("aria-expanded") !== "true";
      head.setAttribute("aria-expanded", open ? "true" : "false");
      body.hidden = !open;
    });
    card.appendChild(head);
    card.appendChild(body);
    card._parts = {
      kindIcon: kindIcon, label: label, name: name, subtitle: subtitle, stateBox: stateBox,
      inputTitle: inputTitle, inputPre: inputPre, resultTitle: resultTitle, resultPre: resultPre
    };
    return card;
  }

  function fillCard(card, data) {
    var parts = card._parts;
    var kind = KINDS.hasOwnProperty(data.kind) ? data.kind : (card.dataset.kind || "other");
    card.dataset.kind = kind;
    if (data.id != null) card.dataset.callId = String(data.id);
    parts.kindIcon.className = "icon icon--" + kind;
    parts.label.textContent = KINDS[kind];
    var title = data.title || data.name || card._title || "Tool";
    card._title = title;
    parts.name.textContent = title;
    var subtitle = data.subtitle || card._subtitle || "";
    card._subtitle = subtitle;
    parts.subtitle.textContent = subtitle && subtitle !== title ? subtitle : "";
    parts.subtitle.hidden = !parts.subtitle.textContent;
    if (data.input !== undefined && data.input !== null) parts.inputPre.textContent = pretty(data.input);
    parts.inputTitle.hidden = parts.inputPre.hidden = !parts.inputPre.textContent;

    var finished = data.phase === "end" ||
      (data.phase === undefined && (data.result !== undefined && data.result !== null));
    var cardState = finished ? (data.is_error ? "error" : "done") : (card.dataset.state || "running");
    if (finished) {
      parts.resultPre.textContent = pretty(data.result) || (data.is_error ? "(failed)" : "(no output)");
    }
    parts.resultTitle.hidden = parts.resultPre.hidden = !parts.resultPre.textContent;
    card.dataset.state = cardState;
    parts.stateBox.replaceChildren();
    if (cardState === "running") {
      var spinner = el("span", "spinner");
      spinner.setAttribute("aria-hidden", "true");
      parts.stateBox.appendChild(spinner);
      parts.stateBox.appendChild(el("span", null, "Running"));
    } else if (cardState === "error") {
      parts.stateBox.appendChild(icon("alert"));
      parts.stateBox.appendChild(el("span", null, "Failed"));
    } else {
      parts.stateBox.appendChild(icon("check"));
      parts.stateBox.appendChild(el("span", null, "Done"));
    }
  }

  function upsertCard(turn, data) {
    var key = data.id != null ? String(data.id) : null;
    var card = key && state.cards[key];
    if (!card) {
      card = buildCard(data);
      turn.tools.appendChild(card);
      turn.tools.hidden = false;
      reveal(turn);
      if (key) state.cards[key] = card;
    }
    fillCard(card, data);
    return card;
  }

  // ---- history -------------------------------------------------------------------------------

  function renderHistory(messages) {
    resetTurns();
    (messages || []).forEach(function (message) {
      if (message.role === "user") {
        var item = addUserMessage(message.text || "", message.files || []);
        if (message.event) markEvent(item);
        return;
      }
      var turn = newTurn(message.agent || null);
      if (message.id) {
        turn.item.dataset.postId = String(message.id);
        turn.item._turn = turn;
      }
      (message.tools || []).forEach(function (tool) { upsertCard(turn, tool); });
      setReplyText(turn, message.text || "", false);
      (message.files || []).forEach(function (f) { turn.files.appendChild(fileChip(f)); });
      turn.files.hidden = !turn.files.children.length;
      if (turn.files.children.length) reveal(turn);
      if (message.status === "stopped") addNote(turn, "Stopped", "stopped");
      else if (message.status === "error") addNote(turn, "The run ended with an error", "error");
      if (message.status === "running") reveal(turn); // "working" even with nothing yet
      // A run still going: its live frames carry on in this same turn.
      var run = message.run != null ? String(message.run) : null;
      if (run != null) {
        if (message.status === "running") {
          state.turns[run] = turn;
          state.activeRun = run;
        } else {
          state.doneRuns[run] = true;
          state.turns[run] = turn;
        }
      } else {
        state.turn = message.status === "running" ? turn : null;
        state.historyRunning = message.status === "running" ? turn : null;
      }
    });
    showEmptyState();
    scrollToEnd(true);
  }

  /* The history is read once the socket is ready, so nothing said in between is missed; frames
   * arriving while it loads wait in `held` and are applied on top of it (a user echo the
   * history already holds is not shown twice). */
  function resetTurns() {
    ui.list.replaceChildren();
    state.cards = {};
    state.turn = null;
    state.turns = {};
    state.doneRuns = {};
    state.activeRun = null;
    state.queuedItems = [];
    state.historyRunning = null;
  }

  /** Held frames of a run the history already shows finished (it ended while the history
   * loaded): applying them again would show its reply twice. Histories with run ids say so
   * directly (doneRuns); without them, a run whose final reply equals the last finished reply
   * of the history is that reply. */
  function alreadyShown(held, messages) {
    var skip = {};
    var last = null;
    (messages || []).forEach(function (m) { if (m.role === "assistant") last = m; });
    held.forEach(function (frame) {
      var run = runOf(frame);
      if (run == null || frame.type !== "reply" || !frame.final) return;
      if (state.doneRuns[run]) skip[run] = true;
      else if (last && last.run == null && last.status !== "running" &&
               (last.text || "") === (frame.text || "")) skip[run] = true;
    });
    return skip;
  }

  function loadHistory() {
    var session = state.session;
    state.held = [];
    var finish = function (messages) {
      var held = state.held || [];
      state.held = null;
      if (messages) renderHistory(messages);
      // A run is going on but the history shows none of it yet (its reply is logged when it
      // ends): its frames land in a turn placed here, before anything said after the reload.
      if (messages && state.readyRunning && state.activeRun == null && !state.historyRunning) {
        state.historyRunning = newTurn(state.agent);
      }
      var skip = alreadyShown(held, messages);
      var recent = (messages || []).slice(-3).filter(function (m) { return m.role === "user"; })
        .map(function (m) { return m.text; });
      held.forEach(function (frame) {
        if (frame.type === "user" && recent.indexOf(frame.text || "") >= 0) {
          recent.splice(recent.indexOf(frame.text || ""), 1);
          if (!state.running) setRunning(true);
          return;
        }
        var run = runOf(frame);
        if (run != null && skip[run]) return;
        handleFrame(frame);
      });
    };
    return api("GET", "/api/sessions/" + encodeURIComponent(session) + "/history")
      .then(function (data) {
        if (session !== state.session) return;
        finish((data && data.messages) || []);
      })
      .catch(function (error) {
        if (session !== state.session) return;
        if (error.status === 404) {
          finish([]);
          return;
        }
        finish(null);
        showBanner("Could not load this conversation: " + error.message, "Retry", loadHistory);
      });
  }

  // ---- sessions ------------------------------------------------------------------------------

  function renderSessions(list) {
    state.sessionsLoaded = list || [];
    ui.sessions.replaceChildren();
    state.sessionsLoaded.forEach(function (session) {
      // Conversations never written in are noise in the list (except the open one).
      if (!session.title && session.id !== state.session) return;
      var item = el("li");
      var link = el("a", "session");
      link.href = "#s=" + encodeURIComponent(session.id) +
        (state.agent ? "&agent=" + encodeURIComponent(state.agent) : "");
      link.dataset.session = session.id;
      if (session.id === state.session) link.setAttribute("aria-current", "page");
      link.appendChild(el("span", "session__title", session.title || "New conversation"));
      var time = relativeTime(session.updated);
      if (time) link.appendChild(el("span", "session__time", time));
      link.addEventListener("click", function (event) {
        event.preventDefault();
        openSession(session.id);
        closeSidebar();
      });
      item.appendChild(link);
      ui.sessions.appendChild(item);
    });
    ui.sessionsEmpty.hidden = ui.sessions.children.length > 0;
    updateTitle();
  }

  function updateTitle() {
    var current = state.sessionsLoaded.filter(function (s) { return s.id === state.session; })[0];
    var title = (current && current.title) || "New conversation";
    ui.title.textContent = title;
    document.title = title + " · Iris";
  }

  function loadSessions() {
    return api("GET", "/api/sessions").then(renderSessions).catch(function () {
      /* the list is a convenience; the open conversation keeps working */
    });
  }

  function newSession() {
    return api("POST", "/api/sessions", {}).then(function (data) {
      return openSession(data.id).then(loadSessions);
    }).catch(function (error) {
      showBanner("Could not start a new conversation: " + error.message);
    });
  }

  function openSession(id) {
    if (id === state.session && state.socket) return Promise.resolve();
    state.session = id;
    writeHash();
    hideBanner();
    clearUploads();
    Array.prototype.forEach.call(ui.sessions.querySelectorAll(".session"), function (link) {
      if (link.dataset.session === id) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    });
    updateTitle();
    resetTurns();
    showEmptyState();
    hideComposerNotice();
    state.refusals = 0;
    setRunning(false);
    connect(); // the history is loaded when its socket is ready
    return Promise.resolve();
  }

  // ---- agents --------------------------------------------------------------------------------

  function renderAgents() {
    var select = ui.agent;
    select.replaceChildren();
    var iris = el("option", null, "Iris");
    iris.value = "";
    select.appendChild(iris);
    var names = state.agents.map(function (a) { return a.name; });
    if (state.agent && names.indexOf(state.agent) < 0) names.push(state.agent); // from the URL
    if (names.length) {
      var group = el("optgroup");
      group.label = "Sub-agents";
      names.forEach(function (name) {
        var option = el("option", null, name);
        option.value = name;
        group.appendChild(option);
      });
      select.appendChild(group);
    }
    select.value = state.agent;
    select.parentNode.dataset.agent = state.agent ? "sub" : "iris";
  }

  function loadAgents() {
    return api("GET", "/api/agents").then(function (agents) {
      state.agents = Array.isArray(agents) ? agents : [];
      renderAgents();
    }).catch(function () {
      renderAgents();
    });
  }

  function chooseAgent(name) {
    if (name === state.agent) return;
    state.agent = name;
    renderAgents();
    writeHash();
    renderSessions(state.sessionsLoaded);
    showEmptyState();
    connect();
  }

  // ---- the WebSocket -------------------------------------------------------------------------

  function socketUrl() {
    var scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    var url = scheme + "//" + window.location.host + "/ws?session=" + encodeURIComponent(state.session);
    if (state.agent) url += "&agent=" + encodeURIComponent(state.agent);
    return url;
  }

  function disconnect() {
    if (state.retryTimer) clearTimeout(state.retryTimer);
    state.retryTimer = null;
    if (state.socket) {
      var old = state.socket;
      state.socket = null;
      old.onopen = old.onmessage = old.onclose = old.onerror = null;
      try { old.close(1000, "switching"); } catch (e) { /* already closed */ }
    }
    state.ready = false;
    updateComposer();
  }

  function connect() {
    disconnect();
    if (!state.session) return;
    var serial = ++state.socketSerial;
    state.refused = null;
    state.ready = false;
    setConnection("connecting", state.backoff ? "Reconnecting…" : "Connecting…");
    var socket;
    try {
      socket = new WebSocket(socketUrl());
    } catch (e) {
      scheduleReconnect();
      return;
    }
    state.socket = socket;
    // Nothing is accepted before this first frame, and `ready` comes only after it.
    socket.onopen = function () {
      if (serial !== state.socketSerial) return;
      socket.send(JSON.stringify({ type: "hello", page_key: pageKey() }));
    };
    socket.onmessage = function (event) {
      if (serial !== state.socketSerial) return;
      var frame;
      try { frame = JSON.parse(event.data); } catch (e) { return; }
      if (!frame || typeof frame.type !== "string") return;
      if (state.held && frame.type !== "ready") state.held.push(frame);
      else handleFrame(frame);
    };
    socket.onclose = function () {
      if (serial !== state.socketSerial) return;
      var wasReady = state.ready;
      state.socket = null;
      state.ready = false;
      updateComposer();
      if (wasReady) {
        state.refusals = 0;
        scheduleReconnect();
      } else {
        state.refusals += 1;
        whyRefused();
      }
    };
  }

  /* A socket closed before `ready` (refused before the upgrade, or the server is down): ask the
   * API why instead of retrying blindly. A conversation that is gone stays gone; a signed-out
   * page goes to the login (in api()); anything else is retried with backoff, and after a few
   * attempts in a row the reason is shown. */
  function whyRefused() {
    var session = state.session;
    api("GET", "/api/sessions/" + encodeURIComponent(session) + "/history")
      .then(function () {
        if (session !== state.session) return;
        // The conversation is there and the sign-in is good: the socket itself is refused
        // (most likely too many open sockets).
        scheduleReconnect(state.refusals >= REFUSALS_BEFORE_NOTICE
          ? "Iris refuses more connections right now (too many open tabs?). Close some and " +
            "this one reconnects by itself."
          : null);
      })
      .catch(function (error) {
        if (session !== state.session || error.message === "signed out") return;
        if (error.status === 404 && error.code === "unknown_session") {
          conversationGone();
          return;
        }
        scheduleReconnect(state.refusals >= REFUSALS_BEFORE_NOTICE && error.status
          ? "Iris refused the connection: " + error.message
          : null);
      });
  }

  function conversationGone() {
    disconnect();
    state.refused = "unknown_session";
    setRunning(false);
    setConnection("closed", "Conversation not found");
    showBanner("This conversation no longer exists.", "Start a new conversation", function () {
      hideBanner();
      newSession();
    });
    updateComposer();
  }

  function scheduleReconnect(reason) {
    setRunning(false);
    state.backoff = state.backoff ? Math.min(state.backoff * 2, MAX_BACKOFF_MS) : 500;
    var delay = Math.round(state.backoff * (0.8 + Math.random() * 0.4));
    var seconds = Math.max(1, Math.round(delay / 1000));
    setConnection("closed", "Connection lost, reconnecting in " + seconds + " s…");
    showBanner(reason || "Connection to Iris lost. Reconnecting automatically…", "Retry now",
      function () {
        state.backoff = 0;
        connect();
      });
    if (state.retryTimer) clearTimeout(state.retryTimer);
    state.retryTimer = setTimeout(connect, delay);
  }

  function handleFrame(frame) {
    switch (frame.type) {
      case "ready": return onReady(frame);
      case "run": return onRun(frame);
      case "user": return onUser(frame);
      case "status": return onStatus(frame);
      case "reply": return onReply(frame);
      case "tool": return onTool(frame);
      case "file": return onFile(frame);
      case "queued": return onQueued(frame);
      case "post": return onPost(frame);
      case "pong": return undefined;
      case "error": return onError(frame);
      default: return undefined;
    }
  }

  function onReady(frame) {
    state.ready = true;
    state.everReady = true;
    state.backoff = 0;
    state.refusals = 0;
    state.readyRunning = !!frame.running;
    hideBanner();
    if (state.agent) setConnection("agent", "Connected · talking to " + state.agent);
    else setConnection("open", "Connected");
    updateComposer();
    // Frames sent while we were away are in the durable log: resync from it.
    loadHistory();
    // A run already going (a reload mid-run, a second tab): Stop works on it.
    if (frame.running) {
      setRunning(true);
      setStatus("Working…");
    } else {
      setRunning(false);
    }
    updateComposer();
    return frame;
  }

  function onUser(frame) {
    var item = addUserMessage(frame.text || "", frame.files || []);
    if (frame.event) markEvent(item);
    // The first message names the conversation: refresh the list.
    loadSessions();
    if (frame.queued) {
      // Waits for the run going on: shown as queued, that run's turn is left alone.
      item.classList.add("message--queued");
      item.appendChild(el("span", "message__queued", "Queued"));
      state.queuedItems.push(item);
      return;
    }
    // A run that started before its echo arrived still shows after the message.
    var turn = state.activeRun != null && state.turns[state.activeRun];
    if (turn && turn.item.hidden) ui.list.appendChild(turn.item);
    state.turn = null;
    setRunning(true);
    setStatus("Working…");
    updateComposer();
  }

  /** A run starts: its turn takes its place now, after the messages it answers. */
  function onRun(frame) {
    var run = runOf(frame);
    if (run == null || frame.state !== "started") return;
    var queued = state.queuedItems.shift();
    if (queued) {
      queued.classList.remove("message--queued");
      var label = queued.querySelector(".message__queued");
      if (label) label.remove();
    }
    delete state.doneRuns[run];
    // A new run always gets a new turn (a placeholder from the history is for the run before).
    if (!state.turns[run]) state.turns[run] = newTurn(state.agent);
    state.activeRun = run;
    setRunning(true);
    setStatus("Working…");
    updateComposer();
  }

  function onStatus(frame) {
    if (!isCurrent(frame)) return;
    setRunning(true);
    setStatus(frame.text || "Working…");
  }

  function onReply(frame) {
    var turn = turnFor(frame);
    if (!frame.final) {
      if (isCurrent(frame)) setRunning(true);
      setReplyText(turn, frame.text || "", true);
      scrollToEnd(false);
      return;
    }
    setReplyText(turn, frame.text || "", false);
    if (!frame.text && !turn.error && !turn.tools.children.length &&
        !turn.files.children.length && frame.status !== "stopped") {
      turn.item.remove(); // a silent run: nothing to show
      endRun(frame);
      showEmptyState();
      return;
    }
    if (turn.error && (frame.text || "").indexOf(turn.error) >= 0) {
      turn.bubble.hidden = true; // it only repeats the error shown below it
    }
    if (frame.status === "stopped") addNote(turn, "Stopped", "stopped");
    else if (frame.status === "error" && !turn.error) {
      addNote(turn, "The run ended with an error", "error");
    }
    endRun(frame);
    scrollToEnd(false);
  }

  function onTool(frame) {
    var turn = turnFor(frame);
    upsertCard(turn, frame);
    if (isCurrent(frame)) {
      setRunning(true);
      if (frame.phase !== "end") setStatus((KINDS[frame.kind] || "Tool") + ": " + (frame.title || frame.name || ""));
    }
    scrollToEnd(false);
  }

  function onFile(frame) {
    var turn = turnFor(frame);
    turn.files.appendChild(fileChip(frame));
    turn.files.hidden = false;
    reveal(turn);
    scrollToEnd(false);
  }

  /** A message posted from outside a run (an escalation, a note); the same id updates it. */
  function onPost(frame) {
    var id = String(frame.id || "");
    var existing = id && ui.list.querySelector('[data-post-id="' + CSS.escape(id) + '"]');
    var turn = existing ? existing._turn : null;
    if (!turn) {
      turn = newTurn(null);
      reveal(turn);
      turn.item.dataset.postId = id;
      turn.item._turn = turn;
    }
    setReplyText(turn, frame.text || "", false);
    scrollToEnd(false);
  }

  /** A user message that came from an API or scheduled event, not from this page. */
  function markEvent(item) {
    item.classList.add("message--event");
    var label = el("span", "message__who", "Event");
    item.insertBefore(label, item.firstChild);
  }

  function onQueued(frame) {
    setRunning(true);
    if (state.activeRun == null && !state.turn) {
      setStatus("Queued behind the current run (position " + (frame.position || 1) + ")");
    }
    updateComposer();
  }

  function onError(frame) {
    var code = frame.code || "error";
    var message = frame.message || "Something went wrong.";
    if (code === "page_key_required") {
      toLogin(code);
      return;
    }
    if (code === "unknown_agent") {
      state.refused = code;
      showBanner("No sub-agent named “" + state.agent + "” is registered. Choose another agent.",
        "Talk to Iris", function () { chooseAgent(""); });
      setConnection("closed", "Unknown agent");
      setRunning(false);
      updateComposer();
      return;
    }
    if (frame.run == null && code !== "agent_unreachable") {
      // About one request (a refused message): said by the composer; a run going on goes on.
      showComposerNotice(REQUEST_ERRORS.hasOwnProperty(code) ? REQUEST_ERRORS[code] : message);
      return;
    }
    // An error of a run (a dead sub-agent): said inside that run's reply.
    var turn = frame.run != null ? turnFor(frame)
      : (state.activeRun != null && state.turns[state.activeRun]) || state.turn;
    if (!turn) {
      addNotice(message, true);
    } else {
      var notice = el("div", "notice notice--error");
      notice.setAttribute("role", "alert");
      notice.appendChild(icon("alert"));
      notice.appendChild(el("span", null, message));
      turn.item.appendChild(notice);
      turn.error = message;
      reveal(turn);
      // The run's final reply (if one follows) still lands in the same turn; until then its
      // text no longer looks like it is streaming.
      turn.bubble.classList.remove("bubble--streaming");
      scrollToEnd(true);
    }
    if (isCurrent(frame)) {
      setRunning(false);
      updateComposer();
    }
  }

  // ---- uploads -------------------------------------------------------------------------------

  function renderUpload(upload) {
    var chip = upload.chip;
    chip.replaceChildren();
    chip.className = "chip" + (upload.state === "error" ? " chip--error" :
      upload.state === "uploading" ? " chip--uploading" : "");
    if (upload.state === "uploading") {
      var spinner = el("span", "spinner");
      spinner.setAttribute("aria-hidden", "true");
      chip.appendChild(spinner);
    } else {
      chip.appendChild(icon(upload.state === "error" ? "alert" : "file"));
    }
    var label = upload.state === "error" ? upload.file.name + ": " + upload.error : upload.file.name;
    chip.appendChild(el("span", "chip__name", label));
    chip.title = label;
    var remove = el("button", "chip__remove");
    remove.type = "button";
    remove.setAttribute("aria-label", "Remove " + upload.file.name);
    remove.appendChild(icon("close"));
    remove.addEventListener("click", function () {
      state.uploads = state.uploads.filter(function (u) { return u !== upload; });
      upload.item.remove();
      updateComposer();
      ui.input.focus();
    });
    chip.appendChild(remove);
  }

  function startUpload(file) {
    var upload = { file: file, state: "uploading", path: null, error: null };
    upload.item = el("li");
    upload.chip = el("span", "chip");
    upload.item.appendChild(upload.chip);
    ui.pending.appendChild(upload.item);
    state.uploads.push(upload);
    renderUpload(upload);
    updateComposer();
    var form = new FormData();
    form.append("file", file, file.name);
    var session = state.session;
    api("POST", "/api/sessions/" + encodeURIComponent(session) + "/uploads", form)
      .then(function (data) {
        upload.state = "done";
        upload.path = data.path;
        upload.url = data.url;
      })
      .catch(function (error) {
        upload.state = "error";
        upload.error = error.status === 413 ? "too large" : error.message;
        addNotice("Upload refused: " + file.name + " (" + error.message + ")", true);
      })
      .then(function () {
        if (session !== state.session) return;
        renderUpload(upload);
        updateComposer();
      });
  }

  function clearUploads() {
    state.uploads = [];
    ui.pending.replaceChildren();
  }

  // ---- composing -----------------------------------------------------------------------------

  function autoGrow() {
    ui.input.style.height = "auto";
    ui.input.style.height = Math.min(ui.input.scrollHeight, 240) + "px";
  }

  function sendMessage() {
    var text = ui.input.value.trim();
    var files = state.uploads.filter(function (u) { return u.state === "done"; })
      .map(function (u) { return u.path; });
    if (!text && !files.length) return;
    if (!state.ready || !state.socket || state.refused) return;
    if (state.uploads.some(function (u) { return u.state === "uploading"; })) return;
    if (new Blob([text]).size > 32 * 1024) {
      showComposerNotice(REQUEST_ERRORS.message_too_long);
      return;
    }
    hideComposerNotice();
    state.socket.send(JSON.stringify({ type: "message", text: text, files: files }));
    ui.input.value = "";
    autoGrow();
    clearUploads();
    updateComposer();
  }

  function stopRun() {
    if (state.socket && state.ready && state.running) {
      state.socket.send(JSON.stringify({ type: "stop" }));
      setStatus("Stopping…");
    }
  }

  // ---- the sidebar drawer (narrow screens) ---------------------------------------------------

  function openSidebar() {
    ui.app.dataset.sidebar = "open";
    ui.menu.setAttribute("aria-expanded", "true");
    ui.scrim.hidden = false;
    var first = ui.sidebar.querySelector("button, a");
    if (first) first.focus();
  }

  function closeSidebar() {
    if (ui.app.dataset.sidebar !== "open") return;
    ui.app.dataset.sidebar = "closed";
    ui.menu.setAttribute("aria-expanded", "false");
    ui.scrim.hidden = true;
  }

  // ---- wiring --------------------------------------------------------------------------------

  ui.composer.addEventListener("submit", function (event) {
    event.preventDefault();
    sendMessage();
  });
  ui.input.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      sendMessage();
    }
  });
  ui.input.addEventListener("input", autoGrow);
  // The skip link must not touch the URL hash: the hash names the open conversation.
  document.querySelector(".skip-link").addEventListener("click", function (event) {
    event.preventDefault();
    ui.input.focus();
  });
  ui.stop.addEventListener("click", stopRun);
  ui.attach.addEventListener("click", function () { ui.fileInput.click(); });
  ui.fileInput.addEventListener("change", function () {
    Array.prototype.forEach.call(ui.fileInput.files, startUpload);
    ui.fileInput.value = "";
    ui.input.focus();
  });
  ui.agent.addEventListener("change", function () { chooseAgent(ui.agent.value); });
  ui.newChat.addEventListener("click", function () {
    closeSidebar();
    newSession().then(function () { ui.input.focus(); });
  });
  ui.menu.addEventListener("click", function () {
    if (ui.app.dataset.sidebar === "open") closeSidebar();
    else openSidebar();
  });
  ui.scrim.addEventListener("click", closeSidebar);
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && ui.app.dataset.sidebar === "open") {
      closeSidebar();
      ui.menu.focus();
    }
  });
  window.addEventListener("hashchange", function () {
    var wanted = readHash();
    if (wanted.agent !== state.agent) {
      state.agent = wanted.agent;
      renderAgents();
      if (wanted.session === state.session) connect();
    }
    if (wanted.session && wanted.session !== state.session) openSession(wanted.session);
  });
  // Keep the relative times in the list fresh.
  setInterval(function () { renderSessions(state.sessionsLoaded); }, 60000);

  function start() {
    var wanted = readHash();
    state.agent = wanted.agent;
    renderAgents();
    showEmptyState();
    updateComposer();
    loadAgents();
    api("GET", "/api/sessions").then(function (list) {
      renderSessions(list);
      if (wanted.session) return openSession(wanted.session);
      if (list && list.length) return openSession(list[0].id);
      return newSession();
    }).catch(function (error) {
      if (error.message !== "signed out") showBanner("Could not reach Iris: " + error.message, "Retry", start);
    });
  }

  start();
})();
