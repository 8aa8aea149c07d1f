// Events: newest first, filters, snapshot, clip, acknowledge / false positive; polls for new ones.

import { api, blobUrl } from "./api.js";
import { h, input, replace, select, uid, when } from "./dom.js";
import { nextStep } from "./firstrun.js";
import { loadSite } from "./site.js";
import { KIND_TEXT, acceptAction } from "./view.js";

const POLL_MS = 2500;
const PAGE = 20;

const REASON_TEXT = {
  healthy: "the view is back", accepted: "an operator accepted the view", relearning: "the camera re-learns its view",
  disabled: "the check was switched off", removed: "the camera left the site file",
};

function viewProblem(e) { // the one object of a camera_view event: {kind, since, mode, reason}
  return e.rule === "camera_view" && e.objects && e.objects[0] ? e.objects[0] : null;
}

function describe(e) {
  const view = viewProblem(e);
  if (view) return `view ${(KIND_TEXT[view.kind] || view.kind).toLowerCase()} on ${e.camera_id}`;
  return `${e.rule} in ${e.zone} on ${e.camera_id}`;
}

function reviewText(e) {
  const parts = [];
  if (e.acknowledged) parts.push("Acknowledged");
  if (e.false_positive) parts.push("False positive");
  return parts.join(", ") || "Not reviewed";
}

export function mount(main, ctx) {
  const initial = new URLSearchParams(location.hash.split("?")[1] || "");
  const form = h("form", { class: "filters", "aria-label": "Filter events" },
    select("Camera", "camera_id", [["", "All cameras"]]),
    input("Zone", "zone", "text", { placeholder: "any", list: "zone-names", autocomplete: "off" }),
    input("Rule", "rule", "text", { placeholder: "any", list: "rule-names", autocomplete: "off" }),
    h("datalist", { id: "zone-names" }), h("datalist", { id: "rule-names" }),
    input("From", "since", "datetime-local"),
    input("Until", "until", "datetime-local"),
    select("Acknowledged", "acknowledged", [["", "Any"], ["false", "No"], ["true", "Yes"]]),
    select("False positive", "false_positive", [["", "Any"], ["false", "No"], ["true", "Yes"]]),
    h("div", { class: "field actions" }, h("button", { type: "submit" }, "Apply"),
      h("button", { type: "reset" }, "Clear")));
  const summary = h("p", { class: "summary", "aria-live": "polite" });
  const tbody = h("tbody");
  const table = h("table", { class: "events" },
    h("caption", { class: "sr-only" }, "Events, newest first"),
    h("thead", {}, h("tr", {}, ["Snapshot", "Started", "Camera", "Zone", "Rule", "State", "Review", ""].map(
      (t) => h("th", { scope: "col" }, t)))),
    tbody);
  const prev = h("button", { type: "button", disabled: true }, "Previous");
  const next = h("button", { type: "button", disabled: true }, "Next");
  const detail = h("section", { class: "detail", "aria-label": "Selected event", hidden: true });
  main.append(h("h1", {}, "Events"), form, summary,
    h("div", { class: "events-layout" }, h("div", { class: "list" }, table, h("div", { class: "pager" }, prev, next)),
      detail));

  const thumbs = new Map(); // event id -> object URL, for the rows shown and the event open (forget())
  // keyset paging: cursors[i] is the cursor of page i (null: the first), so page 900 costs what page 1 does
  let cursors = [null];
  let pageIndex = 0;
  let timer = null;
  let stopped = false;
  let seen = null; // ids already shown (null before the first load: nothing is "new" then)
  let lastKey = "";
  let selected = null;
  let clipHref = null;
  const acceptedNotes = new Map(); // event id -> what "accept this view" said (kept across redraws)

  for (const [k, v] of initial) if (form.elements[k]) form.elements[k].value = v;

  function filters() {
    const data = Object.fromEntries(new FormData(form));
    for (const k of ["since", "until"]) if (data[k]) data[k] = new Date(data[k]).toISOString();
    return data;
  }

  async function thumb(e, img) {
    if (!e.snapshot) return;
    let href = thumbs.get(e.id);
    if (!href) {
      try {
        href = (await blobUrl(e.snapshot)).href;
      } catch (err) {
        if (err.status === 404) return;
        throw err;
      }
      if (stopped) { URL.revokeObjectURL(href); return; }
      thumbs.set(e.id, href);
    }
    img.src = href;
    img.hidden = false;
  }

  function row(e) {
    const img = h("img", { class: "thumb", alt: `Snapshot: ${describe(e)}`, hidden: true });
    thumb(e, img).catch((err) => ctx.alert(`Snapshot: ${err.message}`));
    const cell = (label, ...content) => h("td", { dataset: { label } }, ...content);
    return h("tr", { dataset: { event: e.id }, class: e.id === (selected && selected.id) ? "selected" : "" },
      cell("Snapshot", img),
      cell("Started", h("time", { datetime: e.started_at }, when(e.started_at))),
      cell("Camera", e.camera_id), cell("Zone", e.zone), cell("Rule", e.rule),
      cell("State", h("span", { class: `badge state-${e.state}` }, e.state === "started" ? "Open" : "Ended")),
      cell("Review", reviewText(e)),
      cell("", h("button", { type: "button", class: "open", onclick: () => show(e) }, "Open")));
  }

  /** Revoke the object URLs of thumbnails no longer shown: a tab open for a whole shift keeps
   * only those of the current page and the open event, not one per event it ever listed. */
  function forget(shown) {
    for (const [id, href] of thumbs) {
      if (!shown.has(id) && !(selected && selected.id === id)) {
        URL.revokeObjectURL(href);
        thumbs.delete(id);
      }
    }
  }

  /** "No events match", or on a node that has none at all yet, how to raise the first one. */
  function empty() {
    const cams = [...form.elements.camera_id.options].map((o) => o.value).filter(Boolean);
    const filtered = Object.values(Object.fromEntries(new FormData(form))).some((v) => v);
    if (filtered || pageIndex || !cams.length) return "No events match.";
    return h("div", { class: "no-events" }, h("p", {}, "No events yet. An event starts when a frame of a camera "
      + "meets a rule of one of its zones (the Zone editor shows them)."),
    nextStep(cams[0], ctx.me, `To raise one now, post a photo with people in it as ${cams[0]}:`));
  }

  async function load() {
    const cursor = cursors[pageIndex];
    const page = await api("/events", { params: { ...filters(), limit: PAGE, ...(cursor ? { cursor } : {}) } });
    if (stopped) return;
    const key = JSON.stringify(page);
    if (key !== lastKey) {
      lastKey = key;
      if (seen) {
        const fresh = page.items.filter((e) => !seen.has(e.id));
        if (fresh.length) ctx.announce(`New event: ${describe(fresh[0])}${fresh.length > 1 ? ` and ${fresh.length - 1} more` : ""}`);
      }
      seen = seen || new Set();
      page.items.forEach((e) => seen.add(e.id));
      forget(new Set(page.items.map((e) => e.id)));
      if (page.items.length) replace(tbody, page.items.map(row));
      else replace(tbody, h("tr", {}, h("td", { colspan: 8 }, empty())));
      const first = pageIndex * PAGE;
      cursors[pageIndex + 1] = page.next_cursor;
      const total = page.total_exact ? `${page.total}` : `more than ${page.total.toLocaleString("en")}`;
      summary.textContent = page.items.length ? `${first + 1}–${first + page.items.length} of ${total} events` : "0 events";
      prev.disabled = pageIndex === 0;
      next.disabled = !page.next_cursor;
    }
    if (selected && !detail.hidden) {
      const fresh = page.items.find((e) => e.id === selected.id);
      const typing = detail.contains(document.activeElement) && document.activeElement.matches("input, textarea");
      // the event changed (ended, reviewed elsewhere): redraw it, but not under the user's fingers
      if (fresh && !typing && JSON.stringify(fresh) !== JSON.stringify(selected)) show(fresh, false);
    }
  }

  async function poll() {
    try {
      if (!document.hidden) await load(); // a background tab does not poll the server
      ctx.alert("");
    } catch (err) {
      ctx.alert(`Events: ${err.message}`);
    } finally {
      if (!stopped) timer = setTimeout(poll, POLL_MS);
    }
  }

  function restart() {
    clearTimeout(timer);
    lastKey = "";
    poll();
  }

  async function loadClip(e, holder) {
    if (clipHref) URL.revokeObjectURL(clipHref);
    clipHref = null;
    if (!e.clip) { replace(holder, h("p", { class: "muted" }, "No clip")); return; }
    try {
      const { href } = await blobUrl(e.clip);
      clipHref = href;
      replace(holder, h("video", { src: href, controls: true, playsinline: true, "aria-label": `Clip: ${describe(e)}` }));
    } catch (err) {
      if (err.status !== 404) throw err;
      replace(holder, h("p", { class: "muted" }, "No clip (not written yet, or none was kept) "),
        h("button", { type: "button", onclick: () => loadClip(e, holder) }, "Try again"));
    }
  }

  function show(e, focus = true) {
    selected = e;
    for (const tr of tbody.querySelectorAll("tr")) tr.classList.toggle("selected", tr.dataset.event === e.id);
    const snap = h("img", { class: "snapshot", alt: `Snapshot: ${describe(e)}`, hidden: true });
    thumb(e, snap).catch((err) => ctx.alert(`Snapshot: ${err.message}`));
    const clip = h("div", { class: "clip" }, h("p", { class: "muted" }, "Loading clip…"));
    if (!viewProblem(e)) loadClip(e, clip).catch((err) => replace(clip, h("p", { class: "error" }, `Clip: ${err.message}`)));
    const noteId = uid("note");
    const opId = uid("operator");
    const typing = detail.querySelector("textarea");
    const kept = !detail.hidden && detail.dataset.event === e.id && typing ? typing.value : null;
    detail.dataset.event = e.id;
    const note = h("textarea", { id: noteId, rows: 2, maxlength: 2000 }, kept ?? (e.note || ""));
    const operator = h("input", { id: opId, type: "text", autocomplete: "name",
      value: sessionStorage.getItem("campusguard.operator") || "" });
    const result = h("p", { class: "result", role: "status" });
    const allowed = ctx.can("review");
    const tip = allowed ? undefined : ctx.denied("review", "review events");
    const review = async (change, done) => {
      sessionStorage.setItem("campusguard.operator", operator.value.trim());
      const body = { ...change, note: note.value.trim() || undefined, operator: operator.value.trim() || undefined };
      try {
        const updated = await api(`/events/${encodeURIComponent(e.id)}`, { method: "PATCH", body });
        show(updated, false);
        const shown = detail.querySelector(".result");
        shown.textContent = done;
        shown.className = "result ok";
        restart();
      } catch (err) {
        result.textContent = err.status === 403 ? `Refused: ${err.message}` : `Failed: ${err.message}`;
        result.className = "result error";
      }
    };
    const heading = h("h2", { tabindex: "-1" }, describe(e));
    const view = viewProblem(e);
    // a view problem's snapshot is the before/after pair; an open one may be accepted as the new view
    const accept = view && e.state === "started" ? acceptAction(ctx, e.camera_id, (done) => {
      acceptedNotes.set(e.id, done);
      restart();
    }) : null;
    const accepted = acceptedNotes.get(e.id);
    replace(detail,
      heading,
      h("dl", { class: "facts-list" },
        h("dt", {}, "Started"), h("dd", {}, when(e.started_at)),
        h("dt", {}, "Ended"), h("dd", {}, e.ended_at ? when(e.ended_at) : "still open"),
        view ? [h("dt", {}, "Problem"), h("dd", { class: "view-kind" }, KIND_TEXT[view.kind] || view.kind),
          h("dt", {}, "Seen since"), h("dd", {}, when(view.since)),
          view.reason ? [h("dt", {}, "Ended because"), h("dd", {}, REASON_TEXT[view.reason] || view.reason)] : null]
          : [h("dt", {}, "Objects"), h("dd", {}, String(e.max_count))],
        h("dt", {}, "Review"), h("dd", { class: "review-state" }, reviewText(e)),
        e.reviewed_by ? [h("dt", {}, "Reviewed by"), h("dd", {}, `${e.reviewed_by}, ${when(e.reviewed_at)}`)] : null),
      snap,
      view ? h("p", { class: "view-pair" }, "Left: the camera's reference view (before). Right: the view that raised the problem (now).") : null,
      accept ? h("div", { class: "view-accept" }, accept.button, accept.result) : null,
      accepted && !accept ? h("p", { class: "result accept-result ok", role: "status" }, `${accepted.message} ${accepted.reminder} `,
        h("a", { href: `#/zones?camera=${encodeURIComponent(e.camera_id)}` }, "Open the zone editor")) : null,
      view ? null : clip,
      h("div", { class: "field" }, h("label", { for: noteId }, "Note"), note),
      h("div", { class: "field" }, h("label", { for: opId }, "Your name (optional)"), operator),
      h("div", { class: "buttons" },
        h("button", { type: "button", class: "primary", disabled: !allowed || e.acknowledged, title: tip,
          onclick: () => review({ acknowledged: true }, "Acknowledged") }, "Acknowledge"),
        h("button", { type: "button", disabled: !allowed || e.false_positive, title: tip,
          onclick: () => review({ false_positive: true }, "Marked as false positive") }, "False positive"),
        h("button", { type: "button", onclick: () => { detail.hidden = true; selected = null; } }, "Close")),
      result);
    detail.hidden = false;
    if (focus) heading.focus();
  }

  const firstPage = () => { cursors = [null]; pageIndex = 0; restart(); };
  form.addEventListener("submit", (ev) => { ev.preventDefault(); firstPage(); });
  form.addEventListener("change", firstPage);
  form.addEventListener("reset", () => setTimeout(firstPage));
  prev.addEventListener("click", () => { pageIndex = Math.max(0, pageIndex - 1); restart(); });
  next.addEventListener("click", () => { if (cursors[pageIndex + 1]) { pageIndex += 1; restart(); } });

  api("/cameras").then((cams) => {
    const sel = form.elements.camera_id;
    const want = initial.get("camera_id") || "";
    for (const c of cams) sel.append(h("option", { value: c.id }, c.name ? `${c.name} (${c.id})` : c.id));
    sel.value = want;
    lastKey = ""; // an empty list drawn before the cameras were known is drawn again with its next step
  }).catch(() => { /* the list still works without the camera names */ });
  loadSite().then((site) => { // suggestions for the zone and rule filters
    const cams = (site && site.config.cameras) || [];
    const zones = new Set(cams.flatMap((c) => (c.zones || []).map((z) => z.name)));
    const rules = new Set(cams.flatMap((c) => (c.zones || []).flatMap((z) => (z.rules || []).map((r) => r.name || r.type))));
    replace(form.querySelector("#zone-names"), [...zones].sort().map((v) => h("option", { value: v })));
    replace(form.querySelector("#rule-names"), [...rules].sort().map((v) => h("option", { value: v })));
  }).catch(() => { /* free text still filters */ });
  poll();

  return () => {
    stopped = true;
    clearTimeout(timer);
    thumbs.forEach((href) => URL.revokeObjectURL(href));
    if (clipHref) URL.revokeObjectURL(clipHref);
  };
}
