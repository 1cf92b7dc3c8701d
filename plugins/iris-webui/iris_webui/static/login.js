/* The login page: explains a failed sign-in (the server redirects here with ?error=<code>) and
 * shows the password form only when the server has a password. */
(function () {
  "use strict";
  var MESSAGES = {
    invalid_key: "This sign-in link is not valid. It works once and only for 10 minutes: " +
      "restart iris serve (or ask for a new link) and open the new one.",
    expired_key: "This sign-in link has expired. Open the new link iris serve prints.",
    used_key: "This sign-in link was already used. Open a new one.",
    invalid_password: "Wrong password.",
    bad_password: "Wrong password.",
    rate_limited: "Too many attempts. Wait a minute and try again.",
    password_disabled: "Password sign-in is off on this server: use the one-time link.",
    signed_out: "You are signed out.",
    network: "Iris could not be reached. Is iris serve running?",
    page_key_required: "This tab is not signed in (the sign-in of a tab is kept in that " +
      "browser only). Open a new sign-in link, or sign in with the password."
  };
  var PAGE_KEY = "iris.pageKey";

  function storedKey() {
    try { return window.localStorage.getItem(PAGE_KEY); } catch (e) { return null; }
  }

  var params = new URLSearchParams(window.location.search);
  var code = params.get("error");
  if (params.has("key") && !code) code = "invalid_key"; // still here after following a link

  function showError(errorCode) {
    var box = document.getElementById("login-error");
    // textContent only: the code comes from the URL, anyone can craft it.
    box.textContent = MESSAGES.hasOwnProperty(errorCode) ? MESSAGES[errorCode] : "Sign-in failed.";
    box.hidden = false;
  }
  // Already signed in (a second tab, the back button): straight to the chat. Password sign-in
  // off: the form would only ever fail, so it is hidden.
  fetch("/login/options", { credentials: "same-origin" })
    .then(function (response) { return response.ok ? response.json() : null; })
    .then(function (options) {
      if (!options) return;
      // The cookie alone is not a sign-in: the chat also needs this browser's page key.
      if (options.logged_in && storedKey() && !code) {
        window.location.replace("/");
        return;
      }
      document.getElementById("password-form").hidden = !options.password;
    })
    .catch(function () { /* keep the form: the server answers a POST with a clear error */ });

  /* The password form answers JSON with the page key, kept in this origin's storage (a plain
   * form post would work too: the server then redirects to /#k=<key>). */
  var form = document.getElementById("password-form");
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var button = form.querySelector("button[type=submit]");
    button.disabled = true;
    fetch("/login", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ password: document.getElementById("password").value })
    }).then(function (response) {
      return response.json().catch(function () { return null; }).then(function (data) {
        if (response.ok && data && data.ok) {
          if (data.page_key) {
            try { window.localStorage.setItem(PAGE_KEY, data.page_key); } catch (e) { /* off */ }
            window.location.replace("/#k=" + encodeURIComponent(data.page_key));
          } else {
            window.location.replace("/");
          }
          return;
        }
        showError((data && data.code) || "invalid_password");
      });
    }).catch(function () {
      showError("network");
    }).then(function () {
      button.disabled = false;
    });
  });

  if (code) showError(code);
})();
