// The console's router: one page, one view at a time, chosen by the address
// fragment (#/, #/endpoints/ID, #/events/ID, #/dead-letters), so a view can
// be bookmarked or shared without a token ever entering the URL.
import { SignedOut, signOut, showError } from "./api.js";
import * as overview from "./overview.js";
import * as endpoint from "./endpoint.js";
import * as events from "./events.js";
import * as deadLetters from "./deadletters.js";
import * as deliveries from "./deliveries.js";
import * as delivery from "./delivery.js";
import * as editor from "./editor.js";
import * as apps from "./apps.js";

const ROUTES = [
  [/^#\/endpoints\/new(?:\?.*)?$/, editor, "#/endpoints/new"],
  [/^#\/endpoints\/(\d+)\/edit$/, editor, "#/"],
  [/^#\/endpoints\/(\d+)$/, endpoint, "#/"],
  [/^#\/deliveries(?:\?(.*))?$/, deliveries, "#/deliveries"],
  [/^#\/delivery\/(\d+)$/, delivery, "#/deliveries"],
  [/^#\/applications$/, apps, "#/applications"],
  [/^#\/events(?:\/(.+))?$/, events, "#/events"],
  [/^#\/dead-letters(?:\?endpoint=(\d+))?$/, deadLetters, "#/dead-letters"],
  [/^(?:#\/?)?$/, overview, "#/"],
];

const root = document.getElementById("view");
const err = document.getElementById("err");
const updated = document.getElementById("updated");
let generation = 0;

function route() {
  const hash = location.hash;
  for (const [pattern, view, nav] of ROUTES) {
    const m = pattern.exec(hash);
    if (m) return { view, args: m.slice(1), nav };
  }
  return { view: overview, args: [], nav: "#/" };
}

// Each view polls at its own pace; a newer navigation ends the older loop
// (the generation check), so two views never draw into the same page.
async function show() {
  const mine = ++generation;
  const { view, args, nav } = route();
  for (const a of document.querySelectorAll("header nav a")) {
    a.setAttribute("aria-current", a.getAttribute("href") === nav ? "page" : "false");
  }
  err.textContent = "";
  window.scrollTo(0, 0);
  const { refresh, every } = view.render(root, ...args);
  while (mine === generation) {
    try {
      await refresh();
      updated.textContent = `updated ${new Date().toLocaleTimeString()}`;
      err.textContent = "";
    } catch (e) {
      if (e instanceof SignedOut) return;
      showError(e);
    }
    const wait = typeof every === "function" ? every() : every;
    await new Promise(resolve => setTimeout(resolve, wait));
  }
}

document.getElementById("signout").addEventListener("submit", ev => {
  ev.preventDefault();
  signOut();
});
window.addEventListener("hashchange", show);
show();
