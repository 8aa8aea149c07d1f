// Cameras: one tile per camera with its newest frame, zones, status, open events and view problems.

import { api, blobUrl } from "./api.js";
import { age, h, replace, when } from "./dom.js";
import { cameraOf, loadSite, zoneOverlay } from "./site.js";
import { acceptAction, problemText } from "./view.js";

const REFRESH_MS = 3000;
const STATUS_TEXT = { online: "Online", offline: "Offline", never_seen: "Never seen" };
// A camera stream's state (GET /cameras `source`, docs/cameras.md "States") in a guard's words.
const STREAM_TEXT = {
  connecting: "Stream: connecting",
  streaming: "Stream: live",
  stalled: "Stream froze: restarting",
  auth_failed: "Stream: camera refused the password",
  unreachable: "Stream: camera unreachable",
  bad_stream: "Stream: picture cannot be read",
  backoff: "Stream lost: retrying",
  unknown: "Stream: no news from the gateway",
};
const NO_RULES = "Rules are off on this server (no site file): there are no cameras to show. "
  + "Ask whoever runs it to start it with `make run`, which creates a site file with a first camera.";

export function mount(main, ctx) {
  const grid = h("div", { class: "tiles", "aria-live": "off" });
  const note = h("p", { class: "muted" }, "Refreshes every 3 s.");
  main.append(h("h1", {}, "Cameras"), note, grid);
  const tiles = new Map(); // camera id -> {el, parts, frameAt, href}
  let timer = null;
  let stopped = false;

  function tile(cam) {
    const img = h("img", { alt: `Latest frame of ${cam.name || cam.id}`, hidden: true });
    const empty = h("p", { class: "no-frame" }, "No frame yet");
    const frame = h("div", { class: "frame" }, img, empty);
    const accept = acceptAction(ctx, cam.id);
    const parts = {
      img, empty, frame, accept,
      status: h("span", { class: "badge" }),
      view: h("span", { class: "badge view-problem", hidden: true }),
      viewBox: h("div", { class: "view-accept", hidden: true }, accept.button, accept.result),
      age: h("span", { class: "age" }),
      open: h("span", { class: "open-events" }),
      zones: h("p", { class: "zones muted" }),
      stream: h("p", { class: "stream", hidden: true }),
      overlay: null,
    };
    const el = h("article", { class: "tile", dataset: { camera: cam.id }, "aria-label": cam.name || cam.id },
      frame,
      h("div", { class: "tile-body" },
        h("h2", {}, cam.name || cam.id),
        h("p", { class: "cam-id muted" }, cam.id),
        h("p", { class: "facts" }, parts.status, " ", parts.view, " ", parts.age, " ", parts.open),
        parts.viewBox,
        parts.stream,
        parts.zones,
        h("p", {}, h("a", { href: `#/events?camera_id=${encodeURIComponent(cam.id)}` }, "Events of this camera"))));
    return { el, parts, frameAt: null, href: null };
  }

  async function refreshFrame(cam, t) {
    if (!cam.last_frame_at || cam.last_frame_at === t.frameAt) return;
    t.frameAt = cam.last_frame_at;
    try {
      const { href, headers } = await blobUrl(`/cameras/${encodeURIComponent(cam.id)}/frame.jpg`);
      if (stopped) { URL.revokeObjectURL(href); return; }
      const old = t.href;
      t.href = href;
      t.parts.img.onload = () => { if (old) URL.revokeObjectURL(old); };
      t.parts.img.src = href;
      t.parts.img.hidden = false;
      t.parts.empty.hidden = true;
      t.parts.img.title = `Captured ${when(headers.get("X-Frame-Time"))}`;
    } catch (err) {
      if (err.status !== 404) throw err; // no frame kept (another replica got it)
      t.frameAt = null;
    }
  }

  /** The stream line: shown only when this server or a gateway pulls the camera's stream. */
  function updateStream(el, source) {
    el.hidden = !source;
    if (!source) return;
    const state = String(source.state);
    const facts = [];
    if (state === "streaming") facts.push(`${Number(source.input_fps || 0).toFixed(1)} fps`);
    if (source.reconnects) facts.push(`${source.reconnects} reconnect${source.reconnects === 1 ? "" : "s"}`);
    replace(el,
      h("span", { class: `stream-state stream-${state.replace(/[^\w-]/g, "")}` }, STREAM_TEXT[state] || `Stream: ${state}`),
      facts.length ? ` ${facts.join(" · ")}` : "",
      source.last_error && state !== "streaming" ? h("span", { class: "stream-error muted" }, source.last_error) : "");
    el.title = `${source.source}${source.reported_by ? ` (gateway ${source.reported_by})` : ""}`;
  }

  function update(cam, site, t) {
    const { parts } = t;
    updateStream(parts.stream, cam.source);
    parts.status.textContent = STATUS_TEXT[cam.status] || cam.status;
    parts.status.className = `badge status-${cam.status}`;
    parts.age.textContent = cam.last_frame_at ? `last frame ${age(cam.seconds_since_last_frame)}` : "";
    // the rules' open events and the camera's open view problems (camera_view events) alike
    const n = (cam.open_events || []).length + Object.keys((cam.view || {}).open_events || {}).length;
    parts.open.textContent = `${n} open event${n === 1 ? "" : "s"}`;
    parts.open.className = n ? "open-events alert-count" : "open-events";
    const problem = problemText(cam.view); // covered, moved, ...: the camera still sends frames, but sees nothing useful
    parts.view.textContent = problem;
    parts.view.hidden = !problem;
    parts.viewBox.hidden = !problem && !parts.accept.result.textContent;
    const zones = (cameraOf(site, cam.id) || {}).zones || [];
    const key = JSON.stringify(zones.map((z) => [z.name, z.kind, z.polygon]));
    if (key !== parts.zonesKey) {
      parts.zonesKey = key;
      if (parts.overlay) parts.overlay.remove();
      parts.overlay = zoneOverlay(zones);
      parts.frame.append(parts.overlay);
      parts.zones.textContent = zones.length ? `Zones: ${zones.map((z) => z.name).join(", ")}` : "No zones";
    }
  }

  async function refresh() {
    try {
      if (document.hidden) return; // a background tab does not poll the server
      const [listed, site] = await Promise.all([api("/cameras"), loadSite()]);
      // Frame times live on the replica that gets the camera's frames; behind the shipped nginx
      // GET /cameras/{id} is routed there (GET /cameras is whichever replica answers).
      const cams = await Promise.all(listed.map((cam) =>
        api(`/cameras/${encodeURIComponent(cam.id)}`).catch(() => cam)));
      if (stopped) return;
      if (!cams.length) replace(grid, h("p", {}, "No cameras are configured (site file)."));
      for (const cam of cams) {
        let t = tiles.get(cam.id);
        if (!t) {
          t = tile(cam);
          tiles.set(cam.id, t);
          grid.append(t.el);
        }
        update(cam, site, t);
        await refreshFrame(cam, t);
      }
      ctx.alert("");
    } catch (err) {
      if (err.status === 404) { // rules_disabled, or a server without the events routes
        replace(grid, h("p", {}, NO_RULES));
        return;
      }
      ctx.alert(`Cameras: ${err.message}`);
    } finally {
      if (!stopped) timer = setTimeout(refresh, REFRESH_MS);
    }
  }

  refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
    for (const t of tiles.values()) if (t.href) URL.revokeObjectURL(t.href);
  };
}
