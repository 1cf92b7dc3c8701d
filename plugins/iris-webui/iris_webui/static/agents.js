/* The agent picker: Iris itself or a registered sub-agent. */

import { api } from "./api.js";
import { showBanner } from "./banner.js";
import { el, ui } from "./dom.js";
import { showEmptyState } from "./pane.js";
import { renderSessions, writeHash } from "./sessions.js";
import { connect } from "./socket.js";
import { state } from "./state.js";

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
  renderModel();
}

// The model picker: shown for an agent that offers models (an ACP agent's `models`). Its
// choice is the conversation's, set as `@kind /model ID` would set it, from the next message.
var modelSerial = 0;

export function renderModel() {
  var picker = ui.agentModel;
  var agent = state.agents.find(function (a) { return a.name === state.agent; });
  var models = agent && Array.isArray(agent.models) ? agent.models : [];
  var serial = ++modelSerial;
  if (!models.length || !state.session) {
    picker.hidden = ui.agentModelLabel.hidden = true;
    return;
  }
  picker.replaceChildren();
  var byDefault = el("option", null, "Default");
  byDefault.value = "default";
  picker.appendChild(byDefault);
  models.forEach(function (m) {
    var option = el("option", null, m.label || m.id);
    option.value = m.id;
    picker.appendChild(option);
  });
  picker.hidden = ui.agentModelLabel.hidden = false;
  picker.disabled = true;
  api("GET", modelPath(agent.name)).then(function (chosen) {
    if (serial !== modelSerial) return;
    picker.value = (chosen && chosen.model) || "default";
    picker.disabled = false;
  }).catch(function () {
    if (serial === modelSerial) picker.hidden = ui.agentModelLabel.hidden = true;
  });
}

function modelPath(kind) {
  return "/api/sessions/" + encodeURIComponent(state.session) + "/agents/" +
    encodeURIComponent(kind) + "/model";
}

export function chooseModel(value) {
  if (!state.agent || !state.session) return;
  var picker = ui.agentModel;
  picker.disabled = true;
  api("POST", modelPath(state.agent), { model: value }).then(function (chosen) {
    picker.value = (chosen && chosen.model) || "default";
    picker.title = (chosen && chosen.text) || "";
  }).catch(function (error) {
    showBanner("Could not change the model: " + error.message);
    renderModel();
  }).then(function () { picker.disabled = false; });
}

document.addEventListener("iris:session", function () { renderModel(); });

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
