// One camera tile of the Cameras page: its newest frame (fetched only while the tile is on
// screen), its zones, status, age of the last frame, open events, view problem and stream state.

import { blobUrl } from "./api.js";
import { age, h, replace, when } from "./dom.js";
import { nextStep } from "./firstrun.js";
import { zoneOverlay } from "./site.js";
import { acceptAction, problemText } from "./view.js";

const STATUS_TEXT = { online: "Online", offline: "Offline", never_seen: "Never seen" };
// A camera stream's state (docs/cameras.md "States") in a guard's words.
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

/** The stream line: shown only when this server or a gateway pulls the camera's stream. */
function updateStream(el, stream) {
  el.hidden = !stream;
  if (!stream) return;
  const state = String(stream.state);
  const facts = [];
  if (state === "streaming") facts.push(`${Number(stream.input_fps || 0).toFixed(1)} fps`);
  if (stream.reconnects) facts.push(`${stream.reconnects} reconnect${stream.reconnects === 1 ? "" : "s"}`);
  replace(el,
    h("span", { class: `stream-state stream-${state.replace(/[^\w-]/g, "")}` }, STREAM_TEXT[state] || `Stream: ${state}`),
    facts.length ? ` ${facts.join(" · ")}` : "",
    stream.last_error && state !== "streaming" ? h("span", { class: "stream-error muted" }, stream.last_error) : "");
  el.title = `${stream.source}${stream.reported_by ? ` (gateway ${stream.reported_by})` : ""}`;
}

export class Tile {
  constructor(ctx, cam) {
    this.id = cam.id;
    this.cam = cam;
    this.visible = false; // set by the page's IntersectionObserver
    this.frameAt = null; // capture time of the frame shown (or being fetched)
    this.href = null;
    this.zonesKey = null;
    this.overlay = null;
    this.zoneList = null; // the zones drawn, kept to draw them again over a frame of another shape
    this.aspect = null; // the frame's width / height, once one was shown
    this.img = h("img", { alt: `Latest frame of ${cam.name || cam.id}`, hidden: true });
    this.empty = h("p", { class: "no-frame" }, "No frame yet");
    this.frame = h("div", { class: "frame" }, this.img, this.empty);
    this.accept = acceptAction(ctx, cam.id);
    this.status = h("span", { class: "badge" });
    this.view = h("span", { class: "badge view-problem", hidden: true });
    this.viewBox = h("div", { class: "view-accept", hidden: true }, this.accept.button, this.accept.result);
    this.age = h("span", { class: "age" });
    this.open = h("span", { class: "open-events" });
    this.zones = h("p", { class: "zones muted" });
    this.stream = h("p", { class: "stream", hidden: true });
    this.me = ctx.me;
    this.firstStep = null; // what to do while the camera never sent a frame (firstrun.js)
    this.hintBox = h("div", { class: "first-step" });
    this.el = h("article", { class: "tile", dataset: { camera: cam.id }, "aria-label": cam.name || cam.id },
      this.frame,
      h("div", { class: "tile-body" },
        h("h2", {}, cam.name || cam.id),
        h("p", { class: "cam-id muted" }, cam.id, cam.area ? ` · ${cam.area}` : ""),
        h("p", { class: "facts" }, this.status, " ", this.view, " ", this.age, " ", this.open),
        this.viewBox,
        this.stream,
        this.hintBox,
        this.zones,
        h("p", {}, h("a", { href: `#/events?camera_id=${encodeURIComponent(cam.id)}` }, "Events of this camera"))));
  }

  /** New facts from GET /camera-summary; `serverNow` is the server's clock (ms) for the ages;
   * `firstRun`: no camera of the site sent a frame yet (the next step is shown unfolded). */
  update(cam, serverNow, firstRun = false) {
    this.cam = cam;
    updateStream(this.stream, cam.stream);
    this.status.textContent = STATUS_TEXT[cam.status] || cam.status;
    this.status.className = `badge status-${cam.status}`;
    this.tick(serverNow);
    const n = cam.open_events || 0; // the rules' open events and its open view problems alike
    this.open.textContent = `${n} open event${n === 1 ? "" : "s"}`;
    this.open.className = n ? "open-events alert-count" : "open-events";
    const problem = problemText({ problems: cam.view_problems });
    this.view.textContent = problem;
    this.view.hidden = !problem;
    this.viewBox.hidden = !problem && !this.accept.result.textContent;
    this.updateFirstStep(cam, firstRun);
  }

  /** A camera that never sent a frame says how to send one: its stream (if this server or a
   * gateway pulls it) is awaited, else the POST a camera makes, with `make demo` as the other way;
   * unfolded on a first run (no camera sent anything yet), one click away on a running site. */
  updateFirstStep(cam, firstRun) {
    const want = cam.last_frame_at || cam.last_seen_at ? "" : cam.stream ? "stream" : "post";
    if (want === this.firstStep) return;
    this.firstStep = want;
    if (want === "stream") {
      replace(this.hintBox, h("p", { class: "hint" }, "No frame yet: the first one comes from its stream."));
    } else if (want === "post") {
      replace(this.hintBox, h("details", { class: "how", open: firstRun || undefined },
        h("summary", {}, "No frame yet: how to send one"),
        nextStep(cam.id, this.me, "This camera sends its own frames. Post one as it would (a person in one of "
          + "its zones raises an event):")));
    } else replace(this.hintBox);
  }

  /** "last frame 4 s ago", from the arrival time and the server's clock (no clock skew of the viewer). */
  tick(serverNow) {
    const seen = Date.parse(this.cam.last_seen_at || "");
    this.age.textContent = Number.isNaN(seen) ? "" : `last frame ${age((serverNow - seen) / 1000)}`;
  }

  /** The camera's zones from GET /site (drawn again only when they or the frame's shape changed). */
  drawZones(zones) {
    this.zoneList = zones;
    const key = JSON.stringify([this.aspect, zones.map((z) => [z.name, z.kind, z.polygon])]);
    if (key === this.zonesKey) return;
    this.zonesKey = key;
    if (this.overlay) this.overlay.remove();
    this.overlay = zoneOverlay(zones, this.aspect);
    this.frame.append(this.overlay);
    this.zones.textContent = zones.length ? `Zones: ${zones.map((z) => z.name).join(", ")}` : "No zones";
  }

  /** Fetch the newest frame if the tile is on screen and the camera has a newer one than shown. */
  async loadFrame(isStopped) {
    const at = this.cam.last_frame_at;
    if (!this.visible || !at || at === this.frameAt) return;
    this.frameAt = at;
    try {
      const { href, headers } = await blobUrl(`/cameras/${encodeURIComponent(this.id)}/frame.jpg`);
      if (isStopped()) { URL.revokeObjectURL(href); return; }
      const old = this.href;
      this.href = href;
      this.img.onload = () => {
        if (old) URL.revokeObjectURL(old);
        // the picture keeps its own shape (a portrait camera is not stretched to 16:9): the
        // zones follow it
        const aspect = this.img.naturalWidth / this.img.naturalHeight;
        if (aspect !== this.aspect) {
          this.aspect = aspect;
          this.frame.dataset.aspect = aspect.toFixed(3);
          if (this.zoneList) this.drawZones(this.zoneList);
        }
      };
      this.img.src = href;
      this.img.hidden = false;
      this.empty.hidden = true;
      this.img.title = `Captured ${when(headers.get("X-Frame-Time"))}`;
    } catch (err) {
      this.frameAt = null; // asked again on the next refresh
      if (err.status !== 404) throw err; // 404: no frame kept (another replica got it)
    }
  }

  dispose() {
    if (this.href) URL.revokeObjectURL(this.href);
    this.el.remove();
  }
}
