/* File references from frames and the history: chips, and downloads with the page key. */

import { pageKey, toLogin } from "./api.js";
import { showComposerNotice } from "./composer.js";
import { el, icon } from "./dom.js";
import { state } from "./state.js";

export function baseName(path) {
  var parts = String(path).split("/");
  return parts[parts.length - 1] || String(path);
}

export function fileUrl(path) {
  return "/api/sessions/" + encodeURIComponent(state.session) + "/files/" +
    String(path).split("/").map(encodeURIComponent).join("/");
}

/** A file reference from a frame or the history: {name, url} or a bare path. */
export function fileRef(file) {
  if (typeof file === "string") return { name: baseName(file), url: fileUrl(file) };
  var name = file.name || baseName(file.path || file.url || "file");
  var url = file.url || (file.path ? fileUrl(file.path) : null);
  return { name: name, url: url };
}

/** Only our own same-origin paths become download links. */
export function sameOriginUrl(url) {
  if (!url) return null;
  try {
    var parsed = new URL(url, window.location.href);
    return parsed.origin === window.location.origin ? parsed.href : null;
  } catch (e) {
    return null;
  }
}

/* Downloads are API calls too, so they need the page key header, which a plain link cannot
 * send: fetch the file, then save it from a short-lived blob URL. */
export function download(href, name) {
  fetch(href, { credentials: "same-origin", headers: { "X-Iris-Page-Key": pageKey() } })
    .then(function (response) {
      if (response.status === 401) {
        return response.json().catch(function () { return null; }).then(function (data) {
          toLogin(data && data.code);
        });
      }
      if (!response.ok) throw new Error("HTTP " + response.status);
      return response.blob().then(function (blob) {
        var url = URL.createObjectURL(blob);
        var link = el("a");
        link.href = url;
        link.download = name;
        document.body.appendChild(link);
        link.click();
        link.remove();
        setTimeout(function () { URL.revokeObjectURL(url); }, 60000);
      });
    })
    .catch(function (error) {
      showComposerNotice("Could not download " + name + ": " + error.message);
    });
}

export function fileChip(file) {
  var ref = fileRef(file);
  var href = sameOriginUrl(ref.url);
  var chip = el(href ? "a" : "span", "chip");
  if (href) {
    chip.href = href;
    chip.setAttribute("download", ref.name);
    chip.title = "Download " + ref.name;
    chip.addEventListener("click", function (event) {
      event.preventDefault();
      download(href, ref.name);
    });
  }
  chip.appendChild(icon(href ? "download" : "file"));
  chip.appendChild(el("span", "chip__name", ref.name));
  var item = el("li");
  item.appendChild(chip);
  return item;
}
