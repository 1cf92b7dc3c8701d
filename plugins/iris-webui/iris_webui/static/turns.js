/* The message list: user messages and assistant turns, keyed by run id. */

import { updateComposer } from "./composer.js";
import { el, icon, ui } from "./dom.js";
import { fileChip } from "./files.js";
import { scrollToEnd, setRunning, setStatus, showEmptyState } from "./pane.js";
import { state } from "./state.js";
import { resetSubagents } from "./subagents.js";

export function addUserMessage(text, files) {
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

export function whoLine(agentName) {
  var who = el("div", "message__who");
  if (agentName) {
    var avatar = el("span", "message__avatar message__avatar--agent");
    avatar.appendChild(icon("agent"));
    who.appendChild(avatar);
    // A sub-agent's announce is logged as "subagent:<agent id>".
    var sub = /^subagent:(.+)$/.exec(agentName);
    who.appendChild(el("span", null, sub ? "Sub-agent " + sub[1] : agentName));
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
export function newTurn(agentName) {
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

export function reveal(turn) {
  if (!turn.item.hidden) return;
  turn.item.hidden = false;
  showEmptyState();
}

export function runOf(frame) {
  return frame.run != null ? String(frame.run) : null;
}

/** The turn a run's frame belongs to, by its run id: never "whichever turn is last", so a
 * late frame of an earlier run still lands in that run's reply. */
export function turnFor(frame) {
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
export function isCurrent(frame) {
  var run = runOf(frame);
  if (run == null) return true;
  if (state.doneRuns[run]) return false;
  if (state.activeRun == null) state.activeRun = run;
  return state.activeRun === run;
}

/** A run ended: the page is idle again unless another run (or a queued message) goes on. */
export function endRun(frame) {
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

export function setReplyText(turn, text, streaming) {
  if (text === turn.text && !streaming === !turn.bubble.classList.contains("bubble--streaming")) {
    return;
  }
  turn.text = text;
  turn.bubble.replaceChildren(IrisMarkdown.render(text || ""));
  turn.bubble.hidden = !text;
  turn.bubble.classList.toggle("bubble--streaming", !!streaming);
  if (text) reveal(turn);
}

export function addNote(turn, text, kind) {
  var note = el("p", "message__note message__note--" + kind, text);
  turn.item.appendChild(note);
  reveal(turn);
}

export function resetTurns() {
  ui.list.replaceChildren();
  resetSubagents();
  state.cards = {};
  state.turn = null;
  state.turns = {};
  state.doneRuns = {};
  state.activeRun = null;
  state.queuedItems = [];
  state.historyRunning = null;
}

/** A user message that came from an API or scheduled event, not from this page. */
export function markEvent(item) {
  item.classList.add("message--event");
  var label = el("span", "message__who", "Event");
  item.insertBefore(label, item.firstChild);
}
