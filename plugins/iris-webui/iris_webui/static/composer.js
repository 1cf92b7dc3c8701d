/* The composer: textarea, uploads and their chips, send/stop, notices about one request. */

import { api } from "./api.js";
import { el, icon, ui } from "./dom.js";
import { addNotice, setStatus } from "./pane.js";
import { state } from "./state.js";

// Errors about one request (a message frame), not about a run: shown by the composer.
export var REQUEST_ERRORS = {
  queue_full: "Too many messages are waiting: try again when the current run ends.",
  message_too_long: "This message is too long (over 32 KiB). Attach it as a file instead.",
  unknown_attachment: "An attached file is no longer available: attach it again.",
  invalid_frame: "The message could not be sent (the server did not understand it).",
  frame_too_large: "This message is too large to send. Attach it as a file instead.",
  shutting_down: "Iris is shutting down: the message was not accepted."
};

export function updateComposer() {
  var blocked = !state.ready || !!state.refused;
  var uploading = state.uploads.some(function (u) { return u.state === "uploading"; });
  ui.send.disabled = blocked || uploading;
  ui.stop.disabled = !state.running || !state.ready;
  ui.input.placeholder = state.refused === "unknown_agent"
    ? "Choose another agent to continue"
    : state.refused === "unknown_session" ? "Start a new conversation to continue"
      : "Message " + (state.agent || "Iris") + "…";
}

/** A notice about one request (a refused message), by the composer; the run goes on. */
export function showComposerNotice(text) {
  ui.composerNotice.textContent = text;
  ui.composerNotice.hidden = false;
}

export function hideComposerNotice() {
  ui.composerNotice.hidden = true;
  ui.composerNotice.textContent = "";
}

// ---- uploads -------------------------------------------------------------------------------

export function renderUpload(upload) {
  var chip = upload.chip;
  chip.replaceChildren();
  chip.className = "chip" + (upload.state === "error" ? " chip--error" :
    upload.state === "uploading" ? " chip--uploading" : "");
  if (upload.state === "uploading") {
    var spinner = el("span", "spinner");
    spinner.setAttribute("aria-hidden", "true");
    chip.appendChild(spinner);
  } else {
    chip.appendChild(icon(upload.state === "error" ? "alert" : "file"));
  }
  var label = upload.state === "error" ? upload.file.name + ": " + upload.error : upload.file.name;
  chip.appendChild(el("span", "chip__name", label));
  chip.title = label;
  var remove = el("button", "chip__remove");
  remove.type = "button";
  remove.setAttribute("aria-label", "Remove " + upload.file.name);
  remove.appendChild(icon("close"));
  remove.addEventListener("click", function () {
    state.uploads = state.uploads.filter(function (u) { return u !== upload; });
    upload.item.remove();
    updateComposer();
    ui.input.focus();
  });
  chip.appendChild(remove);
}

export function startUpload(file) {
  var upload = { file: file, state: "uploading", path: null, error: null };
  upload.item = el("li");
  upload.chip = el("span", "chip");
  upload.item.appendChild(upload.chip);
  ui.pending.appendChild(upload.item);
  state.uploads.push(upload);
  renderUpload(upload);
  updateComposer();
  var form = new FormData();
  form.append("file", file, file.name);
  var session = state.session;
  api("POST", "/api/sessions/" + encodeURIComponent(session) + "/uploads", form)
    .then(function (data) {
      upload.state = "done";
      upload.path = data.path;
      upload.url = data.url;
    })
    .catch(function (error) {
      upload.state = "error";
      upload.error = error.status === 413 ? "too large" : error.message;
      addNotice("Upload refused: " + file.name + " (" + error.message + ")", true);
    })
    .then(function () {
      if (session !== state.session) return;
      renderUpload(upload);
      updateComposer();
    });
}

export function clearUploads() {
  state.uploads = [];
  ui.pending.replaceChildren();
}

// ---- composing -----------------------------------------------------------------------------

export function autoGrow() {
  ui.input.style.height = "auto";
  ui.input.style.height = Math.min(ui.input.scrollHeight, 240) + "px";
}

export function sendMessage() {
  var text = ui.input.value.trim();
  var files = state.uploads.filter(function (u) { return u.state === "done"; })
    .map(function (u) { return u.path; });
  if (!text && !files.length) return;
  if (!state.ready || !state.socket || state.refused) return;
  if (state.uploads.some(function (u) { return u.state === "uploading"; })) return;
  if (new Blob([text]).size > 32 * 1024) {
    showComposerNotice(REQUEST_ERRORS.message_too_long);
    return;
  }
  hideComposerNotice();
  sendText(text, files);
  ui.input.value = "";
  autoGrow();
  clearUploads();
  updateComposer();
}

/** Send a message on the conversation's socket, as the composer does (the composer's text, or
 * a command such as a sub-agent card's `/subagents log`); false when not connected. */
export function sendText(text, files) {
  if (!state.ready || !state.socket || state.refused) return false;
  state.socket.send(JSON.stringify({ type: "message", text: text, files: files || [] }));
  return true;
}

export function stopRun() {
  if (state.socket && state.ready && state.running) {
    state.socket.send(JSON.stringify({ type: "stop" }));
    setStatus("Stopping…");
  }
}
