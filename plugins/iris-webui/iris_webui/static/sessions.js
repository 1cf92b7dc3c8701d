/* The sidebar: the conversation list, new and switch, the URL hash, the drawer. */

import { api } from "./api.js";
import { hideBanner, showBanner } from "./banner.js";
import { clearUploads, hideComposerNotice } from "./composer.js";
import { el, ui } from "./dom.js";
import { setRunning, showEmptyState } from "./pane.js";
import { connect } from "./socket.js";
import { state } from "./state.js";
import { resetTurns } from "./turns.js";

export function relativeTime(value) {
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

// ---- the URL hash: #s=<session>&agent=<name> ----------------------------------------------

export function readHash() {
  var params = new URLSearchParams(window.location.hash.replace(/^#/, ""));
  return { session: params.get("s"), agent: params.get("agent") || "" }; // never k=
}

export function writeHash() {
  var params = new URLSearchParams();
  if (state.session) params.set("s", state.session);
  if (state.agent) params.set("agent", state.agent);
  var hash = "#" + params.toString();
  if (window.location.hash !== hash) history.replaceState(null, "", hash);
}

export function renderSessions(list) {
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

export function updateTitle() {
  var current = state.sessionsLoaded.filter(function (s) { return s.id === state.session; })[0];
  var title = (current && current.title) || "New conversation";
  ui.title.textContent = title;
  document.title = title + " · Iris";
}

export function loadSessions() {
  return api("GET", "/api/sessions").then(renderSessions).catch(function () {
    /* the list is a convenience; the open conversation keeps working */
  });
}

export function newSession() {
  return api("POST", "/api/sessions", {}).then(function (data) {
    return openSession(data.id).then(loadSessions);
  }).catch(function (error) {
    showBanner("Could not start a new conversation: " + error.message);
  });
}

export function openSession(id) {
  if (id === state.session && state.socket) return Promise.resolve();
  state.session = id;
  writeHash();
  document.dispatchEvent(new CustomEvent("iris:session")); // the model picker follows
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

// ---- the sidebar drawer (narrow screens) ---------------------------------------------------

export function openSidebar() {
  ui.app.dataset.sidebar = "open";
  ui.menu.setAttribute("aria-expanded", "true");
  ui.scrim.hidden = false;
  var first = ui.sidebar.querySelector("button, a");
  if (first) first.focus();
}

export function closeSidebar() {
  if (ui.app.dataset.sidebar !== "open") return;
  ui.app.dataset.sidebar = "closed";
  ui.menu.setAttribute("aria-expanded", "false");
  ui.scrim.hidden = true;
}
