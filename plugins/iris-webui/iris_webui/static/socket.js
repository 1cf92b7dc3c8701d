/* The WebSocket of the open conversation: hello, connection indicator, reconnect/backoff. */

import { api, pageKey } from "./api.js";
import { hideBanner, showBanner } from "./banner.js";
import { updateComposer } from "./composer.js";
import { ui } from "./dom.js";
import { setRunning } from "./pane.js";
import { state } from "./state.js";

export var MAX_BACKOFF_MS = 15000;

// What a frame does (frames.js) and how a new conversation starts (sessions.js) live in modules
// that connect through this one: app.js hands them over before the first connection.
var handleFrame = function () {};
var newSession = function () {};

export function wireSocket(onFrame, onNewConversation) {
  handleFrame = onFrame;
  newSession = onNewConversation;
}

// Refused before `ready` this many times in a row: say why instead of only retrying.
export var REFUSALS_BEFORE_NOTICE = 3;

export function setConnection(kind, text) {
  ui.connection.dataset.state = kind;
  ui.connectionText.textContent = text;
}

export function socketUrl() {
  var scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
  var url = scheme + "//" + window.location.host + "/ws?session=" + encodeURIComponent(state.session);
  if (state.agent) url += "&agent=" + encodeURIComponent(state.agent);
  return url;
}

export function disconnect() {
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

export function connect() {
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
export function whyRefused() {
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

export function conversationGone() {
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

export function scheduleReconnect(reason) {
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
