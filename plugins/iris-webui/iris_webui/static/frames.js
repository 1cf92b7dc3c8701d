/* The server's frames on the socket, each applied to the page. */

import { chooseAgent } from "./agents.js";
import { toLogin } from "./api.js";
import { hideBanner, showBanner } from "./banner.js";
import { KINDS, upsertCard } from "./cards.js";
import { REQUEST_ERRORS, showComposerNotice, updateComposer } from "./composer.js";
import { el, icon, ui } from "./dom.js";
import { fileChip } from "./files.js";
import { loadHistory } from "./history.js";
import { addNotice, scrollToEnd, setRunning, setStatus, showEmptyState } from "./pane.js";
import { loadSessions } from "./sessions.js";
import { setConnection } from "./socket.js";
import { state } from "./state.js";
import { onSubagent } from "./subagents.js";
import { addNote, addUserMessage, endRun, isCurrent, markEvent, newTurn, reveal, runOf, setReplyText, turnFor } from "./turns.js";

export function handleFrame(frame) {
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
    case "subagent": return onSubagent(frame);
    case "pong": return undefined;
    case "error": return onError(frame);
    default: return undefined;
  }
}

export function onReady(frame) {
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
  loadHistory(handleFrame);
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

export function onUser(frame) {
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
export function onRun(frame) {
  var run = runOf(frame);
  if (run == null || frame.state !== "started") return;
  var queued = state.queuedItems.shift();
  if (queued) {
    queued.classList.remove("message--queued");
    var label = queued.querySelector(".message__queued");
    if (label) label.remove();
  }
  delete state.doneRuns[run];
  // The run logged its message: a first message has named the conversation by now, where the
  // user frame may have come too early for the list to show it.
  loadSessions();
  // A new run always gets a new turn (a placeholder from the history is for the run before).
  if (!state.turns[run]) state.turns[run] = newTurn(state.agent);
  state.activeRun = run;
  setRunning(true);
  setStatus("Working…");
  updateComposer();
}

export function onStatus(frame) {
  if (!isCurrent(frame)) return;
  setRunning(true);
  setStatus(frame.text || "Working…");
}

export function onReply(frame) {
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

export function onTool(frame) {
  var turn = turnFor(frame);
  upsertCard(turn, frame);
  if (isCurrent(frame)) {
    setRunning(true);
    if (frame.phase !== "end") setStatus((KINDS[frame.kind] || "Tool") + ": " + (frame.title || frame.name || ""));
  }
  scrollToEnd(false);
}

export function onFile(frame) {
  var turn = turnFor(frame);
  turn.files.appendChild(fileChip(frame));
  turn.files.hidden = false;
  reveal(turn);
  scrollToEnd(false);
}

/** A message posted from outside a run (an escalation, a note, a sub-agent's announce: those
 * name the agent); the same id updates it. */
export function onPost(frame) {
  var id = String(frame.id || "");
  var existing = id && ui.list.querySelector('[data-post-id="' + CSS.escape(id) + '"]');
  var turn = existing ? existing._turn : null;
  if (!turn) {
    turn = newTurn(typeof frame.agent === "string" && frame.agent ? frame.agent : null);
    reveal(turn);
    turn.item.dataset.postId = id;
    turn.item._turn = turn;
  }
  setReplyText(turn, frame.text || "", false);
  scrollToEnd(false);
}

export function onQueued(frame) {
  setRunning(true);
  if (state.activeRun == null && !state.turn) {
    setStatus("Queued behind the current run (position " + (frame.position || 1) + ")");
  }
  updateComposer();
}

export function onError(frame) {
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
