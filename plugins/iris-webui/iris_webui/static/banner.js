/* The banner above the messages: what went wrong, with one action. */

import { ui } from "./dom.js";

export function showBanner(text, actionLabel, action) {
  ui.bannerText.textContent = text;
  ui.banner.hidden = false;
  if (actionLabel) {
    ui.bannerAction.textContent = actionLabel;
    ui.bannerAction.hidden = false;
    ui.bannerAction.onclick = action;
  } else {
    ui.bannerAction.hidden = true;
    ui.bannerAction.onclick = null;
  }
}

export function hideBanner() {
  ui.banner.hidden = true;
}
