/* Calls to the server's API with the page key; a signed-out answer goes to the login. */

export var PAGE_KEY = "iris.pageKey";

/* Move a fresh page key out of the URL (#k=...) into storage, so it is in no history entry,
 * bookmark or screenshot of the address bar. */
(function takePageKey() {
  var params = new URLSearchParams(window.location.hash.replace(/^#/, ""));
  var key = params.get("k");
  if (!key) return;
  try { window.localStorage.setItem(PAGE_KEY, key); } catch (e) { /* storage off: see pageKey() */ }
  window.__irisPageKey = key;
  params.delete("k");
  var rest = params.toString();
  history.replaceState(null, "", window.location.pathname + window.location.search +
    (rest ? "#" + rest : ""));
})();

export function pageKey() {
  try { return window.localStorage.getItem(PAGE_KEY) || window.__irisPageKey || ""; } catch (e) {
    return window.__irisPageKey || "";
  }
}

/** The cookie is missing or this page has no (valid) key: sign in again. */
export function toLogin(code) {
  if (code === "page_key_required") {
    try { window.localStorage.removeItem(PAGE_KEY); } catch (e) { /* nothing stored */ }
  }
  // With ?error= the server shows the page even to a signed-in cookie (no redirect loop).
  window.location.assign("/login" + (code === "page_key_required" ? "?error=page_key_required" : ""));
}

export function api(method, path, body) {
  var options = { method: method, credentials: "same-origin", headers: {} };
  var key = pageKey();
  if (key) options.headers["X-Iris-Page-Key"] = key;
  if (body instanceof FormData) {
    options.body = body;
  } else if (body !== undefined) {
    options.body = JSON.stringify(body);
    options.headers["Content-Type"] = "application/json";
  }
  return fetch(path, options).then(function (response) {
    return response.text().then(function (text) {
      var data = null;
      try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
      if (response.status === 401) {
        toLogin(data && data.code);
        throw new Error("signed out");
      }
      if (!response.ok) {
        var error = new Error((data && data.error) || ("HTTP " + response.status));
        error.status = response.status;
        error.code = data && data.code;
        throw error;
      }
      return data;
    });
  });
}
