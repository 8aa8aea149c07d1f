// Status: model, device and memory, throughput and latency of the last minutes, queue,
// webhooks, event store and MQTT, the shadow reference, from GET /status (the app's own data).

import { api } from "./api.js";
import { age, bytes, h, replace, s } from "./dom.js";
import { shadowCard, worstFrames } from "./shadow.js";

const REFRESH_MS = 3000;

/** A small line chart (SVG) of one or more series over the buckets; no library needed. */
function chart(title, buckets, series, unit) {
  const W = 600;
  const H = 160;
  const pad = { l: 44, r: 8, t: 10, b: 22 };
  const values = series.flatMap((sr) => buckets.map(sr.value)).filter((v) => Number.isFinite(v));
  const peak = Math.max(0, ...values);
  // An idle window has nothing but zeros: scale to 1 so the axis reads 0, 0.5, 1 (not 0.0 three
  // times) and say so on the chart, so a guard does not read a flat line as a fault.
  const max = (peak > 0 ? peak : 1) * 1.1;
  const digits = (v) => (v === 0 || v >= 10 ? 0 : v >= 1 ? 1 : 2);
  const x = (i) => pad.l + (buckets.length < 2 ? 0 : (i * (W - pad.l - pad.r)) / (buckets.length - 1));
  const y = (v) => H - pad.b - (v / max) * (H - pad.t - pad.b);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": title });
  svg.append(s("title", { text: title }));
  for (const f of [0, 0.5, 1]) {
    const v = (max / 1.1) * f;
    svg.append(s("line", { x1: pad.l, x2: W - pad.r, y1: y(v), y2: y(v), class: "grid" }),
      s("text", { x: pad.l - 6, y: y(v) + 4, class: "tick", "text-anchor": "end" }, `${v.toFixed(digits(v))}`));
  }
  if (!(peak > 0)) {
    svg.append(s("text", { x: (pad.l + W - pad.r) / 2, y: (pad.t + H - pad.b) / 2, class: "tick idle", "text-anchor": "middle" },
      values.length ? "Nothing in this window" : "No data yet"));
  }
  if (buckets.length) {
    svg.append(s("text", { x: pad.l, y: H - 4, class: "tick" }, new Date(buckets[0].t).toLocaleTimeString()),
      s("text", { x: W - pad.r, y: H - 4, class: "tick", "text-anchor": "end" },
        new Date(buckets[buckets.length - 1].t).toLocaleTimeString()));
  }
  for (const sr of series) {
    const pts = buckets.map((b, i) => [x(i), sr.value(b)]).filter(([, v]) => Number.isFinite(v));
    if (pts.length > 1) svg.append(s("polyline", { points: pts.map(([px, v]) => `${px},${y(v)}`).join(" "), class: `line ${sr.cls}` }));
    else if (pts.length) svg.append(s("circle", { cx: pts[0][0], cy: y(pts[0][1]), r: 3, class: `dot ${sr.cls}` })); // one bucket: a line of one point is invisible
  }
  const legend = h("p", { class: "legend" }, series.map((sr) => h("span", { class: `key ${sr.cls}` }, sr.label)), ` (${unit})`);
  return h("figure", { class: "card chart-card" }, h("figcaption", {}, title), svg, legend);
}

function facts(title, rows) {
  return h("section", { class: "card" }, h("h2", {}, title),
    h("dl", { class: "facts-list" }, rows.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v ?? "n/a")])));
}

const AUDIT_ROWS = 10;
const HIDE_REFUSALS = "campusguard.audit.hideRefusals"; // the choice, for this browser tab

/** The latest records of the audit trail (admins only: GET /audit needs the admin role). */
function auditRows(audit, hideRefusals) {
  if (audit === null) return h("p", { class: "muted" }, "Audit trail off: it is kept in the event store (rules need a site file).");
  if (!audit.items.length) {
    return h("p", { class: "muted" }, hideRefusals ? "No changes recorded yet (refusals hidden)." : "No changes recorded yet.");
  }
  return h("div", { class: "scroll" }, h("table", { class: "plain", id: "audit-latest" },
    h("thead", {}, h("tr", {}, ["When", "Who", "From", "Action", "Target", "Outcome"].map(
      (t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, audit.items.map((a) => h("tr", {},
      h("td", {}, new Date(a.at).toLocaleString()), h("td", {}, a.actor), h("td", {}, a.client || "-"),
      h("td", {}, a.action), h("td", {}, refusalCount(a) ? `${a.target} (×${refusalCount(a)} more)` : a.target),
      h("td", { class: a.outcome === "ok" ? "" : "refused" }, a.outcome))))));
}

/** How many repeated refusals a folded record stands for (0: an ordinary record). */
function refusalCount(a) {
  if (a.action !== "auth.refused" || !(a.after || "").startsWith("{")) return 0;
  try { return Number(JSON.parse(a.after).count) || 0; } catch { return 0; }
}

/** The audit card: built once (so its "Hide refusals" box keeps focus across refreshes), its
 * table replaced on each refresh; hidden for a key without the admin role. */
function auditCard(onToggle) {
  const hide = h("input", { type: "checkbox", id: "audit-hide-refusals", checked: sessionStorage.getItem(HIDE_REFUSALS) === "1",
    onchange: () => { sessionStorage.setItem(HIDE_REFUSALS, hide.checked ? "1" : "0"); onToggle(); } });
  const rows = h("div", {});
  const card = h("section", { class: "card", id: "audit-card", hidden: true },
    h("h2", {}, `Audit trail (latest ${AUDIT_ROWS})`),
    h("div", { class: "field check" }, h("label", { for: hide.id }, hide, " Hide refusals")), rows);
  return {
    card,
    get hideRefusals() { return hide.checked; },
    show(audit) {
      card.hidden = audit === undefined; // not an admin: the trail is not shown
      if (audit !== undefined) replace(rows, auditRows(audit, hide.checked));
    },
  };
}

async function latestAudit(ctx, hideRefusals) {
  if (!ctx.can("admin")) return undefined;
  try {
    return await api("/audit", { params: { limit: AUDIT_ROWS, ...(hideRefusals ? { exclude_action: "auth.refused" } : {}) } });
  } catch (err) {
    if (err.status === 404) return null; // audit_disabled
    throw err;
  }
}

/** "12 images (10 pulled from camera streams, 2 posted)": frames this server pulls itself
 * (embedded ingest) count as images, and the page says which came which way. */
function traffic(b) {
  const pulled = b.pulled || 0;
  const posted = b.images - pulled;
  const ways = pulled ? ` (${pulled} pulled from camera streams${posted ? `, ${posted} posted` : ""})`
    : b.images ? " (posted)" : "";
  return `${b.images} image${b.images === 1 ? "" : "s"}${ways}`;
}

function render(st, openWorst) {
  const hl = st.health || {};
  const buckets = st.recent || [];
  const span = buckets.length ? 10 : 1; // 10 s buckets
  const last = buckets[buckets.length - 1] || {};
  const vram = hl.vram_total_bytes ? `${bytes(hl.vram_used_bytes)} of ${bytes(hl.vram_total_bytes)}` : "n/a (CPU)";
  const mqtt = st.mqtt;
  const choice = hl.backend_choice; // CAMPUSGUARD_BACKEND / PRECISION as set (auto by default) and why
  const chosen = choice && (choice.backend === "auto" || choice.precision === "auto") ? `auto: ${choice.reason}` : null;
  return [
    h("div", { class: "cards" },
      facts("Model", [["Status", hl.ready ? "ready" : `${hl.status || "starting"} (not ready)`], ["Model", hl.model],
        ["Backend", hl.backend], ["Provider", hl.provider], ["Precision", hl.precision],
        ...(chosen ? [["Chosen by", chosen]] : []), ["Version", hl.version]]),
      facts("Device", [["Device", hl.device], ["Name", hl.device_name], ["Memory", vram],
        ["Decode", hl.decode ? `${hl.decode.decoder} on ${hl.decode.device} (${hl.decode.reason})` : null],
        ["Up for", hl.uptime_s !== undefined ? age(hl.uptime_s).replace(" ago", "") : null]]),
      facts("Work", [["Queue depth", String(st.queue_depth ?? hl.queue_depth ?? 0)],
        ["Images (total)", String(hl.images ?? 0)], ["Inferences (total)", String(hl.inferences ?? 0)],
        ["Last 10 s", last.t ? `${traffic(last)}, ${last.errors} errors` : "no traffic"]]),
      facts("Event store", [["State", st.event_store ?? hl.event_store ?? "rules off"]]),
      facts("MQTT", mqtt ? [["Broker", mqtt.target], ["Connected", mqtt.connected ? "yes" : "no"],
        ["Pending", mqtt.pending === null ? "unknown (store down)" : String(mqtt.pending)],
        ["Delivered", String(mqtt.delivered)], ["Failed", String(mqtt.failed)],
        ["Last error", mqtt.last_error || "none"]] : [["State", "off"]])),
    h("div", { class: "charts" },
      chart("Throughput, last 15 minutes", buckets, [
        { label: "images/s", cls: "a", value: (b) => b.images / span },
        { label: "errors/s", cls: "b", value: (b) => b.errors / span }], "per second, 10 s buckets"),
      chart("Latency, last 15 minutes", buckets, [
        { label: "p50", cls: "a", value: (b) => (b.p50_ms === null ? NaN : b.p50_ms) },
        { label: "p95", cls: "b", value: (b) => (b.p95_ms === null ? NaN : b.p95_ms) }], "ms")),
    h("section", { class: "card" }, h("h2", {}, "Webhooks"),
      (st.webhooks || []).length
        ? h("div", { class: "scroll" }, h("table", { class: "plain" },
          h("thead", {}, h("tr", {}, ["Target", "Pending", "Delivered", "Failed", "Last success", "Last error"].map(
            (t) => h("th", { scope: "col" }, t)))),
          h("tbody", {}, st.webhooks.map((w) => h("tr", {},
            h("td", {}, w.target), h("td", {}, w.pending === null ? "unknown" : String(w.pending)), h("td", {}, String(w.delivered)),
            h("td", {}, String(w.failed)), h("td", {}, w.last_success_at ? new Date(w.last_success_at).toLocaleString() : "never"),
            h("td", {}, w.last_error || "none"))))))
        : h("p", { class: "muted" }, "No webhooks configured.")),
    shadowCard(st.shadow, openWorst),
  ].filter(Boolean);
}

export function mount(main, ctx) {
  const body = h("div", { class: "status" }, h("p", { class: "muted" }, "Loading…"));
  const worstHolder = h("div", { class: "status" });
  const audit = auditCard(() => { clearTimeout(timer); refresh(); });
  main.append(h("h1", {}, "Status"), h("p", { class: "muted" }, "Refreshes every 3 s."), body,
    h("div", { class: "status" }, audit.card), worstHolder);
  const worst = worstFrames(worstHolder);
  const openWorst = ctx.can("admin")
    ? () => worst.load().catch((err) => ctx.alert(`Worst frames: ${err.message}`)) : null;
  let timer = null;
  let stopped = false;
  let busy = false; // one refresh at a time; a toggle meanwhile asks for another right after
  let again = false;
  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      if (document.hidden) return; // a background tab does not poll the server
      const [st, trail] = await Promise.all([api("/status"), latestAudit(ctx, audit.hideRefusals)]);
      if (!stopped) {
        replace(body, render(st, openWorst));
        audit.show(trail);
      }
      ctx.alert("");
    } catch (err) {
      if (err.status === 404) { // an older server: its health document at least
        const hl = await api("/health").catch(() => null);
        if (!stopped && hl) replace(body, render({ health: hl, recent: [], webhooks: [] }));
      } else ctx.alert(`Status: ${err.message}`);
    } finally {
      busy = false;
      clearTimeout(timer);
      if (again && !stopped) { again = false; refresh(); } else if (!stopped) timer = setTimeout(refresh, REFRESH_MS);
    }
  }
  refresh();
  return () => { stopped = true; clearTimeout(timer); worst.cleanup(); };
}
