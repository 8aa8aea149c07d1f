// The console shell: sign-in, role, hash routes (#/cameras, #/events, #/zones, #/models, #/status).

import { api, ApiError, clearKey, onUnauthorized, setKey } from "./api.js";
import * as cameras from "./cameras.js";
import * as events from "./events.js";
import * as models from "./models.js";
import * as status from "./status.js";
import * as zones from "./zones.js";

const PAGES = { cameras, events, zones, models, status };
const main = document.getElementById("main");
const announcer = document.getElementById("announce");
const alertBox = document.getElementById("alert");
let me = null;
let current = null; // the mounted page's cleanup

const ROLE_NEEDS = { review: "operator", admin: "admin", read: "viewer", detect: "camera" };

const ctx = {
  get me() { return me; },
  can: (perm) => Boolean(me && me.permissions.includes(perm)),
  /** Why a button is disabled: "Your role (viewer) may not edit zones (needs admin)". */
  denied: (perm, what) => `Your role (${me ? me.role : "none"}) may not ${what} (needs ${ROLE_NEEDS[perm] || perm})`,
  announce(text) {
    announcer.textContent = "";
    setTimeout(() => { announcer.textContent = text; }, 50); // a change, so screen readers speak it again
  },
  alert(text) {
    alertBox.textContent = text || "";
    alertBox.hidden = !text;
  },
};

function askKey(why) {
  const dialog = document.getElementById("key-dialog");
  const input = document.getElementById("key-input");
  document.getElementById("key-why").textContent = why;
  input.value = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      const key = input.value.trim();
      if (key) setKey(key);
      resolve();
    }, { once: true });
    if (!dialog.open) dialog.showModal();
    input.focus();
  });
}

async function signIn() {
  for (;;) {
    try {
      me = await api("/auth/me");
      break;
    } catch (err) {
      if (!(err instanceof ApiError) || (err.status !== 401 && err.status !== 403)) throw err;
      clearKey();
      if (err.status === 429) throw err; // too many wrong keys from this address: asking again would not help
      await askKey(err.status === 401 ? "This server needs an API key." : "That key was not accepted. Try another.");
    }
  }
  document.getElementById("role").textContent = me.auth_enabled
    ? `${me.name ? `${me.name} · ` : ""}Role: ${me.role}` : "Role: admin (open access)";
  document.getElementById("open-notice").hidden = me.auth_enabled || me.auth === "off";
  document.getElementById("auth-off").hidden = me.auth !== "off"; // CAMPUSGUARD_AUTH=off: a banner on every page
  document.getElementById("signout").hidden = !me.auth_enabled;
}

function route() {
  const name = (location.hash.match(/^#\/(\w+)/) || [])[1];
  const page = PAGES[name] ? name : "cameras";
  if (current) current();
  current = null;
  ctx.alert("");
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.page === page) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  main.replaceChildren();
  document.title = `${document.querySelector(`nav a[data-page="${page}"]`).textContent} · CampusGuard`;
  current = PAGES[page].mount(main, ctx) || null;
}

async function start() {
  document.getElementById("signout").addEventListener("click", () => {
    clearKey();
    location.reload();
  });
  let asking = false;
  onUnauthorized(async () => { // the key was removed on the server meanwhile
    if (asking) return;
    asking = true;
    await signIn();
    asking = false;
    route();
  });
  try {
    await signIn();
  } catch (err) {
    ctx.alert(`The server did not answer: ${err.message}`);
    return;
  }
  window.addEventListener("hashchange", route);
  route();
  document.body.dataset.ready = "true"; // tests and scripts wait for this
}

start();
