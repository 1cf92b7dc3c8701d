/* The login page: explains a failed sign-in. The server redirects here with ?error=<code>. */
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
  var params = new URLSearchParams(window.location.search);
  var code = params.get("error");
  if (params.has("key") && !code) code = "invalid_key"; // still here after following a link
  if (!code) return;
  var box = document.getElementById("login-error");
  // textContent only: the code comes from the URL, anyone can craft it.
  box.textContent = MESSAGES.hasOwnProperty(code) ? MESSAGES[code] : "Sign-in failed.";
  box.hidden = false;
})();
