/* Background sub-agents of this conversation: one live card per run id, updated in place.
 *
 * A `subagent` frame (and a history item) carries the card's fields: runId, phase, status,
 * index, label, agentId, sessionKey, sessionId, createdAt, startedAt, endedAt (epoch seconds),
 * runtimeSeconds, and on frames the server's clock (serverTime). A field a frame leaves out keeps
 * its value; unknown fields are ignored, unknown statuses are shown as they are.
 */

import { sendText, showComposerNotice } from "./composer.js";
import { el, icon, ui } from "./dom.js";
import { scrollToEnd, showEmptyState } from "./pane.js";
import { state } from "./state.js";

export var STATUSES = {
  queued: "Queued", running: "Running", success: "Succeeded", error: "Failed",
  timeout: "Timed out", unknown: "Unknown"
};
var FIELDS = ["phase", "status", "index", "label", "agentId", "sessionKey", "sessionId",
  "createdAt", "startedAt", "endedAt", "runtimeSeconds"];
var TICK_MS = 1000;
var ticker = null;

function isNumber(value) {
  return typeof value === "number" && isFinite(value);
}

/** 5m12s, 42s, 1h03m: the spec's runtime words. */
export function formatRuntime(seconds) {
  var total = Math.max(0, Math.floor(seconds));
  var h = Math.floor(total / 3600), m = Math.floor((total % 3600) / 60), s = total % 60;
  if (h) return h + "h" + (m < 10 ? "0" : "") + m + "m";
  if (m) return m + "m" + (s < 10 ? "0" : "") + s + "s";
  return s + "s";
}

/** Now, on the server's clock (the frames' serverTime tells how far ours is off). */
function serverNow() {
  return Date.now() / 1000 + (state.serverSkew || 0);
}

function isRunning(data) {
  return data.status === "running" && data.phase !== "archived" && !isNumber(data.endedAt) &&
    !isNumber(data.runtimeSeconds);
}

function runtimeOf(data) {
  if (isNumber(data.runtimeSeconds)) return data.runtimeSeconds;
  if (isNumber(data.startedAt) && isNumber(data.endedAt)) return data.endedAt - data.startedAt;
  if (isRunning(data) && isNumber(data.startedAt)) return serverNow() - data.startedAt;
  return null;
}

function buildCard() {
  var card = el("li", "subagent");
  var head = el("div", "subagent__head");
  var iconBox = el("span", "subagent__icon");
  iconBox.appendChild(icon("agent"));
  var text = el("div", "subagent__text");
  var title = el("span", "subagent__title");
  var meta = el("span", "subagent__meta");
  var agent = el("span", "subagent__agent");
  var runtime = el("span", "subagent__runtime");
  var archived = el("span", "subagent__archived", "Archived");
  archived.hidden = true;
  meta.appendChild(agent);
  meta.appendChild(runtime);
  meta.appendChild(archived);
  text.appendChild(title);
  text.appendChild(meta);
  var badge = el("span", "subagent__status");
  var log = el("button", "button button--small subagent__log", "Log");
  log.type = "button";
  log.addEventListener("click", function () { readLog(card); });
  head.appendChild(iconBox);
  head.appendChild(text);
  head.appendChild(badge);
  head.appendChild(log);
  card.appendChild(head);
  card._data = {};
  card._parts = { title: title, agent: agent, runtime: runtime, archived: archived,
    badge: badge, log: log };
  return card;
}

function nameOf(data) {
  if (data.label) return data.label;
  return "sub-agent" + (isNumber(data.index) ? " #" + data.index : "");
}

function fillCard(card) {
  var data = card._data;
  var parts = card._parts;
  var status = typeof data.status === "string" && data.status ? data.status : "unknown";
  card.dataset.status = STATUSES.hasOwnProperty(status) ? status : "other";
  card.dataset.phase = data.phase || "";
  card.setAttribute("aria-label", "Sub-agent " + nameOf(data) + ": " +
    (STATUSES.hasOwnProperty(status) ? STATUSES[status] : status));
  parts.title.textContent = nameOf(data);
  parts.agent.textContent = data.agentId ? "agent " + data.agentId : "";
  parts.agent.hidden = !data.agentId;
  parts.badge.replaceChildren();
  if (status === "running") {
    var spinner = el("span", "spinner");
    spinner.setAttribute("aria-hidden", "true");
    parts.badge.appendChild(spinner);
  }
  parts.badge.appendChild(el("span", null,
    STATUSES.hasOwnProperty(status) ? STATUSES[status] : status));
  var archived = data.phase === "archived";
  card.dataset.archived = archived ? "true" : "false";
  parts.archived.hidden = !archived;
  parts.log.disabled = !isNumber(data.index);
  parts.log.setAttribute("aria-label", "Read the log of " + nameOf(data));
  parts.log.title = isNumber(data.index) ? "/subagents log " + data.index : "";
  showRuntime(card);
}

function showRuntime(card) {
  var seconds = runtimeOf(card._data);
  var text = seconds == null
    ? (card._data.status === "queued" ? "waiting to start" : "")
    : formatRuntime(seconds);
  if (card._parts.runtime.textContent !== text) card._parts.runtime.textContent = text;
  card._parts.runtime.hidden = !text;
  card.dataset.ticking = isRunning(card._data) && isNumber(card._data.startedAt) ? "true" : "false";
}

/** Keep the runtime of running cards going, once a second, while there are any. */
function tick() {
  var any = false;
  Object.keys(state.subagents).forEach(function (runId) {
    var card = state.subagents[runId];
    if (!card.isConnected) return;
    showRuntime(card);
    if (card.dataset.ticking === "true") any = true;
  });
  if (!any && ticker) {
    clearInterval(ticker);
    ticker = null;
  }
}

function startTicking() {
  if (!ticker) ticker = setInterval(tick, TICK_MS);
}

/** Where a new card goes: after the turn of the run going on (the one that spawned it) and
 * the cards already placed after it; else at the end of the conversation. */
function placeCard(card) {
  var turn = (state.activeRun != null && state.turns[state.activeRun]) ||
    state.historyRunning || state.turn;
  if (!turn || !turn.item.parentNode) {
    ui.list.appendChild(card);
    return;
  }
  var after = turn.item;
  while (after.nextSibling && after.nextSibling.classList &&
         after.nextSibling.classList.contains("subagent")) {
    after = after.nextSibling;
  }
  ui.list.insertBefore(card, after.nextSibling);
}

/** Draw or update the card of `data.runId`; `append`: at the end (a history item, in order). */
export function upsertSubagent(data, append) {
  if (!data || typeof data.runId !== "string" || !data.runId) return null;
  var card = state.subagents[data.runId];
  if (!card) {
    card = buildCard();
    card.dataset.runId = data.runId;
    state.subagents[data.runId] = card;
    if (append) ui.list.appendChild(card);
    else placeCard(card);
    showEmptyState();
  }
  FIELDS.forEach(function (key) {
    if (data.hasOwnProperty(key)) card._data[key] = data[key];
  });
  fillCard(card);
  if (card.dataset.ticking === "true") startTicking();
  return card;
}

/** A `subagent` frame: a card appears or changes. */
export function onSubagent(frame) {
  if (isNumber(frame.serverTime)) state.serverSkew = frame.serverTime - Date.now() / 1000;
  if (upsertSubagent(frame, false)) scrollToEnd(false);
}

/** The card's log button: `/subagents log <#>`, sent like a typed message (the server answers
 * it without a model turn). */
function readLog(card) {
  var index = card._data.index;
  if (!isNumber(index)) return;
  if (state.agent) {
    showComposerNotice("Sub-agent logs are read through Iris: choose Iris in the agent " +
      "picker, then press Log again.");
    return;
  }
  if (!sendText("/subagents log " + index, [])) {
    showComposerNotice("Not connected: the log can be read once the connection is back.");
  }
}

/** Forget every card (a conversation is drawn again from its history). */
export function resetSubagents() {
  state.subagents = {};
  if (ticker) {
    clearInterval(ticker);
    ticker = null;
  }
}
