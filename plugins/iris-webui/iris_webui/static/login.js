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
    signed_out: "You are signed out."
  };
  // Already signed in (a second tab, the back button): straight to the chat. Password sign-in
  // off: the form would only ever fail, so it is hidden.
  fetch("/login/options", { credentials: "same-origin" })
    .then(function (response) { return response.ok ? response.json() : null; })
    .then(function (options) {
      if (!options) return;
      if (options.logged_in) {
        window.location.replace("/");
        return;
      }
      document.getElementById("password-form").hidden = !options.password;
    })
    .catch(function () { /* keep the form: the server answers a POST with a clear error */ });

  var params = new URLSearchParams(window.location.search);
  var code = params.get("error");
  if (params.has("key") && !code) code = "invalid_key"; // still here after following a link
  if (!code) return;
  var box = document.getElementById("login-error");
  // textContent only: the code comes from the URL, anyone can craft it.
  box.textContent = MESSAGES.hasOwnProperty(code) ? MESSAGES[code] : "Sign-in failed.";
  box.hidden = false;
})();
