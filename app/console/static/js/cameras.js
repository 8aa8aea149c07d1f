// Cameras: one tile per camera, for sites of hundreds of cameras. A refresh is a small, constant
// number of requests: GET /camera-summary in two pages (a small first one, so the first tiles
// show at once, then the rest), each sent with its ETag (an unchanged page is an empty 304), and
// GET /site only when the summary's site_version says the zones changed. Frames are fetched
// only for tiles on screen (IntersectionObserver), and only when the camera has a newer one.
// Tiles can be filtered by name, area and status (on the server) and grouped by area.

import { conditional } from "./api.js";
import { h, input, replace, select } from "./dom.js";
import { Tile } from "./camtile.js";
import { cameraOf, loadSite } from "./site.js";

const REFRESH_MS = 3000;
const FIRST_PAGE = 24; // the first screenful, answered and drawn before the rest is asked for
const PAGE = 500; // the rest in one request (the route's maximum)
const STATUS_OPTIONS = [["", "Any status"], ["online", "Online"], ["offline", "Offline"], ["never_seen", "Never seen"]];
const NO_RULES = "Rules are off on this server (no site file): there are no cameras to show. "
  + "Ask whoever runs it to start it with `make run`, which creates a site file with a first camera.";

export function mount(main, ctx) {
  const initial = new URLSearchParams(location.hash.split("?")[1] || "");
  const group = h("input", { type: "checkbox", name: "group", id: "group-by-area" });
  const form = h("form", { class: "filters", "aria-label": "Filter cameras", role: "search" },
    input("Name", "q", "search", { placeholder: "name or id", autocomplete: "off", maxlength: 100 }),
    select("Area", "area", [["", "All areas"]]),
    select("Status", "status", STATUS_OPTIONS),
    h("div", { class: "field check" }, h("label", { for: group.id }, group, " Group by area")));
  const summary = h("p", { class: "muted summary", "aria-live": "polite" }, "Refreshes every 3 s.");
  const grid = h("div", { class: "camera-groups" });
  main.append(h("h1", {}, "Cameras"), form, summary, grid);
  const wanted = initial.get("area"); // its option comes with the first answer's facets
  if (wanted) form.elements.area.append(h("option", { value: wanted }, wanted));
  for (const [k, v] of initial) if (form.elements[k]) form.elements[k].value = v;
  group.checked = initial.get("group") === "1";

  let held = new Map(); // summary pages by ETag (api.js conditional)
  let tiles = new Map(); // camera id -> Tile
  let groups = new Map(); // area (or "") -> tiles container
  let site = null;
  let siteLoading = null;
  let timer = null;
  let stopped = false;
  let generation = 0; // a filter change makes a refresh under way stale
  const byEl = new Map();
  const observer = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      const t = byEl.get(entry.target);
      if (!t) continue;
      t.visible = entry.isIntersecting;
      if (t.visible) t.loadFrame(() => stopped).catch((err) => ctx.alert(`Cameras: ${err.message}`));
    }
  }, { rootMargin: "200px" });

  function filters() {
    const data = Object.fromEntries(new FormData(form));
    delete data.group;
    data.q = (data.q || "").trim();
    return data;
  }

  function container(cam) {
    const key = group.checked ? (cam.area || "") : "*";
    let box = groups.get(key);
    if (!box) {
      box = h("div", { class: "tiles" });
      grid.append(group.checked
        ? h("section", { class: "area-group", dataset: { area: key } }, h("h2", {}, key || "No area"), box) : box);
      groups.set(key, box);
    }
    return box;
  }

  let firstRun = false; // no camera of the site sent a frame yet: tiles unfold their next step
  function place(cam, serverNow) {
    let t = tiles.get(cam.id);
    if (!t) {
      t = new Tile(ctx, cam);
      tiles.set(cam.id, t);
      byEl.set(t.frame, t);
      container(cam).append(t.el);
      observer.observe(t.frame);
      if (site) t.drawZones((cameraOf(site, cam.id) || {}).zones || []);
    }
    t.update(cam, serverNow, firstRun);
    return t;
  }

  /** GET /site (zones, through its ETag) only when the summary names another version than held. */
  function syncSite(version) {
    if ((site && site.version === version) || siteLoading) return;
    siteLoading = loadSite().then((doc) => {
      site = doc;
      for (const t of tiles.values()) t.drawZones((cameraOf(site, t.id) || {}).zones || []);
    }).catch((err) => ctx.alert(`Cameras: ${err.message}`)).finally(() => { siteLoading = null; });
  }

  function facets(f, total) {
    const areaSelect = form.elements.area;
    const chosen = areaSelect.value;
    const names = Object.keys(f.area).filter((a) => a).sort();
    if (areaSelect.options.length - 1 !== names.length || names.some((a, i) => areaSelect.options[i + 1].value !== a)) {
      replace(areaSelect, h("option", { value: "" }, "All areas"),
        names.map((a) => h("option", { value: a }, `${a} (${f.area[a]})`)));
      areaSelect.value = names.includes(chosen) ? chosen : "";
    }
    const all = Object.values(f.status).reduce((a, b) => a + b, 0);
    firstRun = all > 0 && !f.status.online && !f.status.offline;
    const parts = STATUS_OPTIONS.slice(1).filter(([k]) => f.status[k]).map(([k, text]) => `${f.status[k]} ${text.toLowerCase()}`);
    const shown = total === all ? "" : ` Showing ${total}.`;
    summary.textContent = `${all} camera${all === 1 ? "" : "s"}: ${parts.join(", ") || "none"}.${shown} Refreshes every 3 s.`;
  }

  async function refresh() {
    clearTimeout(timer);
    const gen = ++generation;
    try {
      if (document.hidden) return; // a background tab does not poll the server
      const seen = new Set();
      let cursor = null;
      let first = true;
      do {
        const params = { ...filters(), limit: first ? FIRST_PAGE : PAGE, cursor };
        const { body, date } = await conditional(held, "/camera-summary", params);
        if (stopped || gen !== generation) return;
        if (first) {
          syncSite(body.site_version);
          facets(body.facets, body.total);
        }
        for (const cam of body.items) {
          seen.add(cam.id);
          place(cam, date).loadFrame(() => stopped).catch((err) => ctx.alert(`Cameras: ${err.message}`));
        }
        cursor = body.next_cursor;
        first = false;
      } while (cursor);
      for (const [id, t] of tiles) if (!seen.has(id)) drop(id, t); // filtered out, or left the site file
      for (const [key, box] of groups) {
        if (!box.children.length) { (box.closest(".area-group") || box).remove(); groups.delete(key); }
      }
      grid.querySelector(".no-cameras")?.remove();
      if (!tiles.size) grid.append(h("p", { class: "no-cameras" }, filtered() ? "No camera matches the filter."
        : "No cameras are configured (site file)."));
      ctx.alert("");
    } catch (err) {
      if (gen !== generation) return;
      if (err.status === 404) { // rules_disabled, or a server without the camera routes
        for (const [id, t] of tiles) drop(id, t);
        groups = new Map();
        replace(grid, h("p", {}, NO_RULES));
        return;
      }
      ctx.alert(`Cameras: ${err.message}`);
    } finally {
      if (!stopped && gen === generation) timer = setTimeout(refresh, REFRESH_MS);
    }
  }

  const filtered = () => Object.values(filters()).some((v) => v);

  function drop(id, t) {
    observer.unobserve(t.frame);
    byEl.delete(t.frame);
    t.dispose();
    tiles.delete(id);
  }

  function restart() {
    for (const [id, t] of tiles) drop(id, t);
    tiles = new Map();
    groups = new Map();
    held = new Map();
    grid.replaceChildren();
    refresh();
  }

  let typing = null;
  form.elements.q.addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(restart, 300); });
  form.elements.area.addEventListener("change", restart);
  form.elements.status.addEventListener("change", restart);
  group.addEventListener("change", restart);
  form.addEventListener("submit", (e) => { e.preventDefault(); restart(); });

  refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
    clearTimeout(typing);
    observer.disconnect();
    for (const t of tiles.values()) t.dispose();
  };
}
