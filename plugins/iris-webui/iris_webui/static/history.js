/* A conversation's history, loaded once its socket is ready, and frames held meanwhile. */

import { api } from "./api.js";
import { showBanner } from "./banner.js";
import { upsertCard } from "./cards.js";
import { fileChip } from "./files.js";
import { scrollToEnd, setRunning, showEmptyState } from "./pane.js";
import { state } from "./state.js";
import { upsertSubagent } from "./subagents.js";
import { addNote, addUserMessage, markEvent, newTurn, resetTurns, reveal, runOf, setReplyText } from "./turns.js";

export function renderHistory(messages) {
  resetTurns();
  (messages || []).forEach(function (message) {
    if (message.role === "user") {
      var item = addUserMessage(message.text || "", message.files || []);
      if (message.event) markEvent(item);
      return;
    }
    if (message.role === "subagent") {
      upsertSubagent(message.card, true);
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

/** Held frames of a run the history already shows finished (it ended while the history
 * loaded): applying them again would show its reply twice. Histories with run ids say so
 * directly (doneRuns); without them, a run whose final reply equals the last finished reply
 * of the history is that reply. */
export function alreadyShown(held, messages) {
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

/** Load the open conversation's history; held frames then go to `handleFrame` (frames.js,
 * which calls this when its socket is ready). */
export function loadHistory(handleFrame) {
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
      showBanner("Could not load this conversation: " + error.message, "Retry", function () {
        loadHistory(handleFrame);
      });
    });
}
