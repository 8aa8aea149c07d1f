// A model's rollout on the Models page (GET /models' `rollout`, the object GET
// /admin/models/{name}/rollout answers; docs/models.md): the phase as steps (shadow → canary →
// promoted or rolled back), what it is judged on against its bounds (frames compared in the
// window, agreement, errors per frame, latency), the canary cameras, why it last moved, and the
// agreement over time as a small SVG chart with the floor drawn as a line (no chart library).
// A candidate with other classes (`comparable` false) has no agreement: its mAP check (`map`) is shown.

import { h, idList, s, when } from "./dom.js";

const pct = (v) => (v === null || v === undefined ? "n/a" : `${(v * 100).toFixed(1)} %`);
const PHASE_TEXT = { shadow: "Shadow", canary: "Canary", promoted: "Promoted", rolled_back: "Rolled back" };
const ENDED = ["promoted", "rolled_back"];

/** Shadow → Canary → Promoted / Rolled back; reached steps are done, a step the rollout never
 * reached (rolled back from the shadow) is skipped. */
function steps(r) {
  const reached = new Set([...(r.history || []).map((p) => p.phase), r.phase]);
  const last = ENDED.includes(r.phase) ? r.phase : "end";
  const order = ["shadow", "canary", last];
  const at = order.indexOf(r.phase);
  return h("ol", { class: "steps", "aria-label": "Rollout phase" }, order.map((phase, i) => {
    const state = phase === r.phase ? "current" : i < at && reached.has(phase) ? "done" : i < at ? "skipped" : "pending";
    const text = phase === "end" ? "Promoted or rolled back" : PHASE_TEXT[phase];
    return h("li", { class: `step ${state} phase-${phase}`, "aria-current": state === "current" ? "step" : null },
      text, state === "skipped" ? h("span", { class: "sr-only" }, " (skipped)") : null);
  }));
}

const ms = (v) => (v === null || v === undefined ? "n/a" : `${Math.round(v)} ms`);
const count = (v) => (v === null || v === undefined ? "n/a" : String(v));

/** "candidate 41 ms · current 38 ms (×1.08, bound ×2)", marked when beyond the bound. */
function latency(l, bound) {
  const ratio = l.current_p50 > 0 && l.candidate_p50 > 0 ? l.candidate_p50 / l.current_p50 : null;
  const over = ratio !== null && bound ? ratio > bound : false;
  const why = [ratio !== null ? `×${ratio.toFixed(2)}` : null, bound ? `bound ×${bound}` : null].filter(Boolean).join(", ");
  return h("span", { class: over ? "refused" : "" }, `candidate ${ms(l.candidate_p50)} · current ${ms(l.current_p50)}`,
    why ? ` (${why})` : "");
}

/** "candidate 0 · current 1 (bound +0.01 per frame)": failed frames in the window; the bound is
 * absolute (the candidate's errors per frame minus the current's), so no ratio is shown. */
function errors(e, bound) {
  return h("span", {}, `candidate ${count(e.candidate)} · current ${count(e.current)}`,
    bound !== null && bound !== undefined ? ` (bound +${bound} per frame)` : "");
}

/** The mAP check of a candidate with other classes: "candidate 0.412 · current 0.415 (floor 0.405) on 79 shared classes, 16 images". */
function mapCheck(m) {
  const f = (v) => (Number.isFinite(v) ? v.toFixed(3) : "n/a");
  return `candidate ${f(m.candidate_map)} · current ${f(m.current_map)} (floor ${f(m.floor)}) on `
    + `${m.shared_classes} shared classes, ${m.images} images`;
}

function minutes(seconds) {
  if (!seconds && seconds !== 0) return "n/a";
  return seconds >= 120 ? `${Math.round(seconds / 60)} min` : `${seconds} s`;
}

function facts(r) {
  const st = r.settings || {};
  const comparable = r.comparable !== false;
  const below = r.agreement !== null && r.agreement !== undefined && r.agreement < st.agreement_floor;
  const filled = st.min_frames ? Math.min(r.compared || 0, st.min_frames) : 0;
  const rows = [
    ["Weights", [h("span", { class: "mono" }, r.candidate_weights), " replacing ", h("span", { class: "mono" }, r.current_weights)]],
    ["Frames compared", [`${r.compared ?? 0} of ${st.min_frames ?? "?"} needed `,
      st.min_frames ? h("progress", { max: st.min_frames, value: filled, "aria-label": "Compared frames of the minimum" }) : null]],
    comparable ? ["Agreement", h("span", { class: below ? "refused" : "" }, `${pct(r.agreement)} (floor ${pct(st.agreement_floor)})`)]
      : ["Agreement", "not compared: other classes (judged by mAP, then errors and latency)"],
    r.map ? ["mAP check", mapCheck(r.map)] : null,
    ["Errors", errors(r.errors || {}, st.max_error_ratio)],
    ["Latency p50", latency(r.latency_ms || {}, st.max_latency_ratio)],
    ["Canary cameras", (r.cameras || []).length ? idList(r.cameras) : "none chosen"],
    ["Window", `${minutes(st.window_s)}, this phase since ${when(r.phase_started_at)}`],
    ["Started", when(r.started_at)],
    r.ended_at ? ["Ended", when(r.ended_at)] : null,
  ];
  return h("dl", { class: "facts-list" }, rows.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

/** Agreement per history point over time; the floor as a dashed line; a phase change as a rule. */
function chart(r) {
  const W = 600;
  const H = 150;
  const pad = { l: 48, r: 10, t: 18, b: 22 };
  const floor = (r.settings || {}).agreement_floor;
  const pts = (r.history || []).map((p) => ({ ...p, t: Date.parse(p.at) }))
    .filter((p) => Number.isFinite(p.t) && Number.isFinite(p.agreement));
  const title = `Agreement over time: ${pts.length ? `latest ${pct(pts[pts.length - 1].agreement)}` : "no figure yet"}, floor ${pct(floor)}`;
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart rollout-chart", role: "img", "aria-label": title });
  svg.append(s("title", { text: title }));
  const t0 = Math.min(...[Date.parse(r.started_at), ...pts.map((p) => p.t)].filter(Number.isFinite));
  const t1 = Math.max(...[Date.parse(r.ended_at), ...pts.map((p) => p.t)].filter(Number.isFinite));
  const lowest = Math.min(Number.isFinite(floor) ? floor : 1, ...pts.map((p) => p.agreement));
  const lo = Math.max(0, Math.floor((lowest - 0.05) * 20) / 20);
  const x = (t) => pad.l + (t1 > t0 ? ((t - t0) * (W - pad.l - pad.r)) / (t1 - t0) : 0);
  const y = (v) => H - pad.b - ((v - lo) / (1 - lo)) * (H - pad.t - pad.b);
  for (const v of [lo, (lo + 1) / 2, 1]) {
    svg.append(s("line", { x1: pad.l, x2: W - pad.r, y1: y(v), y2: y(v), class: "grid" }),
      s("text", { x: pad.l - 6, y: y(v) + 4, class: "tick", "text-anchor": "end" }, `${+(v * 100).toFixed(1)} %`));
  }
  if (Number.isFinite(t0) && Number.isFinite(t1)) {
    svg.append(s("text", { x: pad.l, y: H - 4, class: "tick" }, new Date(t0).toLocaleTimeString()),
      s("text", { x: W - pad.r, y: H - 4, class: "tick", "text-anchor": "end" }, new Date(t1).toLocaleTimeString()));
  }
  pts.forEach((p, i) => { // where the phase changed: a rule with the new phase's name
    if (i === 0 || p.phase === pts[i - 1].phase) return;
    const right = x(p.t) > W - 120; // near the right edge the label goes left of its rule
    svg.append(s("line", { x1: x(p.t), x2: x(p.t), y1: pad.t, y2: H - pad.b, class: "phase-rule" }),
      s("text", { x: x(p.t) + (right ? -4 : 4), y: pad.t - 5, class: "tick", "text-anchor": right ? "end" : "start" },
        (PHASE_TEXT[p.phase] || p.phase).toLowerCase()));
  });
  if (Number.isFinite(floor)) {
    svg.append(s("line", { x1: pad.l, x2: W - pad.r, y1: y(floor), y2: y(floor), class: "floor" }),
      s("text", { x: pad.l + 4, y: y(floor) + 14, class: "tick floor-label" }, `floor ${pct(floor)}`));
  }
  if (pts.length > 1) svg.append(s("polyline", { points: pts.map((p) => `${x(p.t)},${y(p.agreement)}`).join(" "), class: "line a" }));
  for (const p of pts) {
    svg.append(s("circle", { cx: x(p.t), cy: y(p.agreement), r: 3.5, class: `dot phase-${p.phase}${p.agreement < floor ? " below" : ""}` }));
  }
  if (!pts.length) {
    svg.append(s("text", { x: (pad.l + W - pad.r) / 2, y: (pad.t + H - pad.b) / 2, class: "tick", "text-anchor": "middle" },
      r.comparable === false ? "Other classes: no agreement to draw" : "No frames compared yet"));
  }
  return h("figure", { class: "rollout-figure" }, h("figcaption", {}, "Agreement over time"), svg);
}

/** The rollout panel of a model card. */
export function rolloutPanel(r) {
  const ended = ENDED.includes(r.phase);
  return h("section", { class: `rollout phase-${r.phase}`, "aria-label": `Rollout of ${r.model}` },
    h("h3", {}, ended ? `Rollout ${PHASE_TEXT[r.phase].toLowerCase()}` : `Rollout: ${PHASE_TEXT[r.phase] || r.phase}`),
    steps(r),
    r.reason ? h("p", { class: `reason ${r.phase === "rolled_back" ? "refused" : ""}` }, `Why: ${r.reason}`) : null,
    facts(r), chart(r));
}
