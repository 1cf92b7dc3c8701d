/* Iris Web UI: sessions, one WebSocket per open conversation, streaming replies and tool cards.
 *
 * Everything from the server (model text, file names, tool input and results) is put in the page
 * with textContent or through IrisMarkdown.render, which builds nodes and never parses HTML.
 * The session cookie is HttpOnly. The cookie alone is not enough (browsers send it to every port
 * of 127.0.0.1): the page key, handed over once in the URL fragment after a sign-in and kept in
 * this origin's localStorage, goes with every API call and opens every WebSocket.
 */

import { chooseAgent, chooseModel, loadAgents, renderAgents } from "./agents.js";
import { api } from "./api.js";
import { showBanner } from "./banner.js";
import { autoGrow, sendMessage, startUpload, stopRun, updateComposer } from "./composer.js";
import { ui } from "./dom.js";
import { showEmptyState } from "./pane.js";
import { handleFrame } from "./frames.js";
import { closeSidebar, newSession, openSession, openSidebar, readHash, renderSessions } from "./sessions.js";
import { connect, wireSocket } from "./socket.js";
import { state } from "./state.js";

// ---- wiring --------------------------------------------------------------------------------

wireSocket(handleFrame, newSession);
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
ui.agentModel.addEventListener("change", function () { chooseModel(ui.agentModel.value); });
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
