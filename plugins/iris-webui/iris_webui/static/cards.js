/* Tool cards: one per tool call, updated in place as its frames come. */

import { el, icon } from "./dom.js";
import { state } from "./state.js";
import { reveal } from "./turns.js";

export var KINDS = {
  read: "Read", edit: "Edit", "delete": "Delete", move: "Move", search: "Search",
  execute: "Run", think: "Think", fetch: "Fetch", other: "Tool"
};

export function pretty(value) {
  if (value == null || value === "") return "";
  if (typeof value === "string") return value;
  try { return JSON.stringify(value, null, 2); } catch (e) { return String(value); }
}

var cardSerial = 0;

export function buildCard(data) {
  var card = el("li", "tool");
  var head = el("button", "tool__head");
  head.type = "button";
  head.setAttribute("aria-expanded", "false");
  var bodyId = "tool-body-" + (++cardSerial);
  head.setAttribute("aria-controls", bodyId);
  var iconBox = el("span", "tool__icon");
  var kindIcon = icon("other");
  iconBox.appendChild(kindIcon);
  var text = el("span", "tool__text");
  var titleRow = el("span", "tool__title");
  var label = el("span", "tool__label");
  var name = el("span", "tool__name");
  titleRow.appendChild(label);
  titleRow.appendChild(name);
  var subtitle = el("span", "tool__subtitle");
  text.appendChild(titleRow);
  text.appendChild(subtitle);
  var stateBox = el("span", "tool__state");
  var chevron = icon("chevron");
  chevron.classList.add("tool__chevron");
  head.appendChild(iconBox);
  head.appendChild(text);
  head.appendChild(stateBox);
  head.appendChild(chevron);
  var body = el("div", "tool__body");
  body.id = bodyId;
  body.hidden = true;
  var inputTitle = el("h4", "tool__section-title", "Input");
  var inputPre = el("pre", "tool__input");
  var resultTitle = el("h4", "tool__section-title", "Result");
  var resultPre = el("pre", "tool__result");
  body.appendChild(inputTitle);
  body.appendChild(inputPre);
  body.appendChild(resultTitle);
  body.appendChild(resultPre);
  head.addEventListener("click", function () {
    var open = head.getAttribute("aria-expanded") !== "true";
    head.setAttribute("aria-expanded", open ? "true" : "false");
    body.hidden = !open;
  });
  card.appendChild(head);
  card.appendChild(body);
  card._parts = {
    kindIcon: kindIcon, label: label, name: name, subtitle: subtitle, stateBox: stateBox,
    inputTitle: inputTitle, inputPre: inputPre, resultTitle: resultTitle, resultPre: resultPre
  };
  return card;
}

export function fillCard(card, data) {
  var parts = card._parts;
  var kind = KINDS.hasOwnProperty(data.kind) ? data.kind : (card.dataset.kind || "other");
  card.dataset.kind = kind;
  if (data.id != null) card.dataset.callId = String(data.id);
  parts.kindIcon.className = "icon icon--" + kind;
  parts.label.textContent = KINDS[kind];
  var title = data.title || data.name || card._title || "Tool";
  card._title = title;
  parts.name.textContent = title;
  var subtitle = data.subtitle || card._subtitle || "";
  card._subtitle = subtitle;
  parts.subtitle.textContent = subtitle && subtitle !== title ? subtitle : "";
  parts.subtitle.hidden = !parts.subtitle.textContent;
  if (data.input !== undefined && data.input !== null) parts.inputPre.textContent = pretty(data.input);
  parts.inputTitle.hidden = parts.inputPre.hidden = !parts.inputPre.textContent;

  var finished = data.phase === "end" ||
    (data.phase === undefined && (data.result !== undefined && data.result !== null));
  var cardState = finished ? (data.is_error ? "error" : "done") : (card.dataset.state || "running");
  if (finished) {
    parts.resultPre.textContent = pretty(data.result) || (data.is_error ? "(failed)" : "(no output)");
  }
  parts.resultTitle.hidden = parts.resultPre.hidden = !parts.resultPre.textContent;
  card.dataset.state = cardState;
  parts.stateBox.replaceChildren();
  if (cardState === "running") {
    var spinner = el("span", "spinner");
    spinner.setAttribute("aria-hidden", "true");
    parts.stateBox.appendChild(spinner);
    parts.stateBox.appendChild(el("span", null, "Running"));
  } else if (cardState === "error") {
    parts.stateBox.appendChild(icon("alert"));
    parts.stateBox.appendChild(el("span", null, "Failed"));
  } else {
    parts.stateBox.appendChild(icon("check"));
    parts.stateBox.appendChild(el("span", null, "Done"));
  }
}

export function upsertCard(turn, data) {
  var key = data.id != null ? String(data.id) : null;
  var card = key && state.cards[key];
  if (!card) {
    card = buildCard(data);
    turn.tools.appendChild(card);
    turn.tools.hidden = false;
    reveal(turn);
    if (key) state.cards[key] = card;
  }
  fillCard(card, data);
  return card;
}
