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
      var option = el("option", null, optionText(name));
      option.value = name;
      group.appendChild(option);
    });
    select.appendChild(group);
  }
  select.value = state.agent;
  select.parentNode.dataset.agent = state.agent ? "sub" : "iris";
}

// A custom agent shows its label, and says so when it needs signing in before it can answer;
// nothing marks whether it is a bridge, relay or ACP agent behind the name.
function optionText(name) {
  var agent = state.agents.find(function (a) { return a.name === name; });
  var text = agent && agent.label ? agent.label : name;
  return agent && agent.status === "needs_sign_in" ? text + " (needs sign-in)" : text;
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
