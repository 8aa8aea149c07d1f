// The shadow reference on the status page (docs/shadow.md): is the served model still finding
// what the reference finds on this site's frames? From /status's `shadow` block; admins can
// open the worst frames (GET /shadow/worst, both box sets drawn, fetched with the key).

import { api, blobUrl } from "./api.js";
import { h, replace } from "./dom.js";

const WORST_ROWS = 10;

const pct = (v) => (v === null || v === undefined ? "n/a" : `${(v * 100).toFixed(1)} %`);
const signed = (v) => (v === null || v === undefined ? "n/a" : `${v >= 0 ? "+" : ""}${v.toFixed(3)}`);

function reference(ref) {
  if (!ref) return "n/a";
  return [ref.backend, ref.precision, ref.device].filter(Boolean).join(", ") || "n/a";
}

function dropped(counts) {
  const entries = Object.entries(counts || {}).filter(([, n]) => n > 0);
  const total = entries.reduce((sum, [, n]) => sum + n, 0);
  return entries.length ? `${total} (${entries.map(([why, n]) => `${why} ${n}`).join(", ")})` : "0";
}

/** Cameras worst agreement first (a camera without a figure yet goes last). */
function cameraRows(cameras) {
  const rows = Object.entries(cameras || {});
  const key = (a) => (a.agreement === null ? Infinity : a.agreement);
  rows.sort(([ca, a], [cb, b]) => key(a) - key(b) || ca.localeCompare(cb));
  return rows;
}

/** The card for /status's `shadow` block. `openWorst` is set for admins only. */
export function shadowCard(sh, openWorst) {
  const title = h("h2", {}, "Shadow reference");
  if (!sh || !sh.enabled) {
    return h("section", { class: "card", id: "shadow" }, title,
      h("p", { class: "muted" }, "Off: no reference re-checks the served model (CAMPUSGUARD_SHADOW_BACKEND)."));
  }
  const all = sh.overall || {};
  const window = `${Math.round((sh.window_s || 0) / 60)} min`;
  const facts = [["State", "on"], ["Reference", reference(sh.reference)],
    ["Sample rate", `${(sh.sample * 100).toFixed(sh.sample < 0.01 ? 2 : 1)} % (at least one frame per camera every ${sh.min_interval_s} s)`],
    [`Agreement (${window})`, pct(all.agreement)], ["Recall", pct(all.recall)], ["Precision", pct(all.precision)],
    ["Confidence drift", signed(all.confidence_drift)], ["Frames compared", String(sh.compared ?? 0)],
    ["Frames dropped", dropped(sh.dropped)]];
  const floor = sh.alert_below ?? 0.95; // this replica's alert floor (by the served precision)
  facts.splice(4, 0, ["Alert below", pct(floor)]);
  const rows = cameraRows(sh.cameras);
  const table = rows.length
    ? h("div", { class: "scroll" }, h("table", { class: "plain", id: "shadow-cameras" },
      h("caption", {}, `Per camera, worst agreement first (last ${window})`),
      h("thead", {}, h("tr", {}, ["Camera", "Agreement", "Recall", "Precision", "Drift", "Frames"].map(
        (t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, rows.map(([cam, a]) => h("tr", {},
        h("td", {}, cam), h("td", { class: a.agreement !== null && a.agreement < floor ? "refused" : "" }, pct(a.agreement)),
        h("td", {}, pct(a.recall)), h("td", {}, pct(a.precision)), h("td", {}, signed(a.confidence_drift)),
        h("td", {}, String(a.frames)))))))
    : h("p", { class: "muted" }, "No camera compared yet.");
  return h("section", { class: "card", id: "shadow" }, title,
    h("dl", { class: "facts-list" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])), table,
    openWorst ? h("p", {}, h("button", { type: "button", id: "shadow-worst-open", onclick: openWorst },
      "Show the worst frames")) : null);
}

/** The worst frames below the status cards (kept across the page's refreshes); returns a
 * loader and a cleanup that revokes the images' object URLs. */
export function worstFrames(holder) {
  let hrefs = [];
  const revoke = () => { hrefs.forEach((u) => URL.revokeObjectURL(u)); hrefs = []; };
  async function load() {
    revoke();
    replace(holder, h("p", { class: "muted" }, "Loading the worst frames…"));
    const list = await api("/shadow/worst", { params: { limit: WORST_ROWS } });
    if (!list.frames.length) {
      replace(holder, h("section", { class: "card" }, h("h2", {}, "Worst frames"),
        h("p", { class: "muted" }, "No frame kept in the window.")));
      return;
    }
    const figures = list.frames.map((f) => {
      const img = h("img", { alt: `Frame of ${f.camera_id || "no camera"}: primary and reference boxes`, width: 320 });
      blobUrl(f.image_url).then(({ href }) => { hrefs.push(href); img.src = href; }).catch(() => { img.alt = "image gone"; });
      return h("figure", { class: "card shadow-frame", dataset: { id: f.id } }, img,
        h("figcaption", {}, `${f.camera_id || "no camera"} · agreement ${pct(f.agreement)} · recall ${pct(f.recall)}`
          + ` · precision ${pct(f.precision)} · ${f.primary.length} primary / ${f.reference.length} reference boxes · `
          + new Date(f.captured_at).toLocaleString()));
    });
    replace(holder, h("section", { class: "card", id: "shadow-worst" },
      h("h2", {}, `Worst frames (latest ${WORST_ROWS}, worst first)`),
      h("p", { class: "muted" }, "Green: found by both. Red: the reference found it, the primary missed it. Magenta: only the primary has it (docs/shadow.md)."),
      h("div", { class: "cards" }, figures)));
  }
  return { load, cleanup: revoke };
}
