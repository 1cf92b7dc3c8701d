/* The agent picker: Iris itself or a registered sub-agent. */

import { api } from "./api.js";
import { el, ui } from "./dom.js";
import { renderSessions, writeHash } from "./sessions.js";
import { connect } from "./socket.js";
import { state } from "./state.js";
import { showEmptyState } from "./turns.js";

export function renderAgents() {
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

export function loadAgents() {
  return api("GET", "/api/agents").then(function (agents) {
    state.agents = Array.isArray(agents) ? agents : [];
    renderAgents();
  }).catch(function () {
    renderAgents();
  });
}

export function chooseAgent(name) {
  if (name === state.agent) return;
  state.agent = name;
  renderAgents();
  writeHash();
  renderSessions(state.sessionsLoaded);
  showEmptyState();
  connect();
}
