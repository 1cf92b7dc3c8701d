/* The page's elements, and small builders of nodes (text only, never HTML). */

export var $ = function (id) { return document.getElementById(id); };
export var ui = {
  app: $("app"), sidebar: $("sidebar"), scrim: $("scrim"), menu: $("menu-button"),
  sessions: $("sessions"), sessionsEmpty: $("sessions-empty"), newChat: $("new-chat"),
  title: $("chat-title"), connection: $("connection"), connectionText: $("connection-text"),
  agent: $("agent-select"), agentModel: $("agent-model"), agentModelLabel: $("agent-model-label"),
  banner: $("banner"), bannerText: $("banner-text"),
  bannerAction: $("banner-action"), scroll: $("messages-scroll"), list: $("messages"),
  empty: $("empty"), emptyTitle: $("empty-title"), emptyText: $("empty-text"),
  status: $("run-status"), statusText: $("run-status-text"), composer: $("composer"),
  input: $("composer-input"), attach: $("attach"), fileInput: $("file-input"),
  pending: $("pending-files"), send: $("send"), stop: $("stop"),
  composerNotice: $("composer-notice")
};

export function el(tag, className, text) {
  var node = document.createElement(tag);
  if (className) node.className = className;
  if (text != null) node.textContent = text;
  return node;
}

export function icon(name) {
  var span = el("span", "icon icon--" + name);
  span.setAttribute("aria-hidden", "true");
  return span;
}
