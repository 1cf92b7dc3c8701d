/* The conversation pane around the messages: the run status line, scrolling, the empty state,
 * and notices between messages. Everything that draws in the pane uses these, so they depend on
 * nothing but the page's elements and state. */

import { el, icon, ui } from "./dom.js";
import { state } from "./state.js";

export function setStatus(text) {
  ui.status.dataset.active = text ? "true" : "false";
  ui.statusText.textContent = text || "";
}

export function setRunning(running) {
  state.running = running;
  ui.stop.disabled = !running || !state.ready;
  if (!running) setStatus("");
}

export function scrollToEnd(force) {
  var box = ui.scroll;
  var nearEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 160;
  if (force || nearEnd) box.scrollTop = box.scrollHeight;
}

export function showEmptyState() {
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

export function addNotice(text, isError) {
  var item = el("li", "notice" + (isError ? " notice--error" : ""));
  item.setAttribute("role", isError ? "alert" : "note");
  item.appendChild(icon(isError ? "alert" : "other"));
  item.appendChild(el("span", null, text));
  ui.list.appendChild(item);
  showEmptyState();
  scrollToEnd(true);
  return item;
}
