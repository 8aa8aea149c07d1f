// Zone editor: draw a polygon over a camera's newest frame, name it, pick rules from the
// schema form, save through PUT /admin/site/... (the server validates and writes the file).

import { api, blobUrl } from "./api.js";
import { h, replace, uid } from "./dom.js";
import { ruleForm, ruleVariants } from "./schemaform.js";
import { cameraOf, loadSite } from "./site.js";

const HIT_PX = 12; // how close a click must be to grab a point
// A zone's kind is a free label (events carry it; restricted zones are drawn red): the usual
// ones in words, and "Other" for a label of the site's own.
const KINDS = [["restricted", "Restricted (no entry)"], ["assembly", "Assembly area"], ["fire_lane", "Fire lane"],
  ["entrance", "Entrance"], ["parking", "Parking"], ["counting", "Counting"], ["generic", "Generic"]];
const OTHER = "__other";

export function mount(main, ctx) {
  const camId = uid("cam");
  const zoneId = uid("zone");
  const cameraSelect = h("select", { id: camId });
  const zoneSelect = h("select", { id: zoneId });
  const canvas = h("canvas", { class: "editor-canvas", tabindex: "0",
    "aria-label": "Zone polygon editor: click to add a point, drag a point to move it, right-click a point to delete it; " +
      "keys: [ and ] select a point, arrows move it (Shift: faster), Delete removes it" });
  const polygonText = h("textarea", { id: uid("polygon"), rows: 3, class: "json", spellcheck: "false",
    "aria-describedby": "polygon-err", dataset: { field: "polygon" } });
  const pointInfo = h("p", { class: "muted", "aria-live": "polite" });
  const deletePoint = h("button", { type: "button", disabled: true }, "Delete selected point");
  const clearPoints = h("button", { type: "button" }, "Clear points");
  const nameInput = h("input", { id: uid("zname"), type: "text", required: true, "aria-describedby": "name-err",
    dataset: { field: "name" }, autocomplete: "off" });
  const kindSelect = h("select", { id: uid("zkind"), "aria-describedby": "kind-err", dataset: { field: "kind" } },
    KINDS.map(([value, text]) => h("option", { value }, text)), h("option", { value: OTHER }, "Other…"));
  const kindOther = h("input", { id: uid("zkind-other"), type: "text", autocomplete: "off", hidden: true,
    "aria-describedby": "kind-err", maxlength: 64 });
  const kindOtherLabel = h("label", { for: kindOther.id, hidden: true }, "Other kind (letters, digits, _ . : -)");
  const showOther = () => { kindOther.hidden = kindOtherLabel.hidden = kindSelect.value !== OTHER; };
  kindSelect.addEventListener("change", showOther);
  const kindValue = () => (kindSelect.value === OTHER ? kindOther.value.trim() : kindSelect.value);
  function setKind(kind) {
    const known = KINDS.some(([k]) => k === kind);
    kindSelect.value = known ? kind : OTHER;
    kindOther.value = known ? "" : kind;
    showOther();
  }
  const rulesBox = h("div", { class: "rules" });
  const addRule = h("button", { type: "button" }, "Add rule");
  const canEdit = ctx.can("admin");
  const tip = canEdit ? undefined : ctx.denied("admin", "edit zones");
  const save = h("button", { type: "submit", class: "primary", disabled: !canEdit, title: tip }, "Save zone");
  const del = h("button", { type: "button", class: "danger", disabled: !canEdit, title: tip }, "Delete zone");
  const result = h("div", { class: "result", role: "status" });
  const general = h("ul", { class: "errors", "aria-live": "polite" });
  const fieldError = (id, path) => h("p", { class: "field-error", id, "aria-live": "polite", dataset: { errorFor: path } });
  const form = h("form", { class: "zone-form", novalidate: true, "aria-label": "Zone settings" },
    h("div", { class: "field", dataset: { for: "name" } }, h("label", { for: nameInput.id }, "Zone name"), nameInput,
      h("p", { class: "hint" }, "Letters, digits and _ . : - (appears in events)"), fieldError("name-err", "name")),
    h("div", { class: "field", dataset: { for: "kind" } }, h("label", { for: kindSelect.id }, "Kind of zone"), kindSelect,
      kindOtherLabel, kindOther, fieldError("kind-err", "kind")),
    h("h2", {}, "Rules"), rulesBox, addRule,
    general,
    h("div", { class: "buttons" }, save, del),
    result);
  const stage = h("div", { class: "stage" }, canvas);
  const fileState = h("p", { class: "notice file-state", role: "status", hidden: true });
  main.append(h("h1", {}, "Zone editor"), fileState,
    h("div", { class: "picker" },
      h("div", { class: "field" }, h("label", { for: camId }, "Camera"), cameraSelect),
      h("div", { class: "field" }, h("label", { for: zoneId }, "Zone"), zoneSelect)),
    h("div", { class: "editor" },
      h("div", { class: "draw" }, stage,
        h("div", { class: "buttons" }, deletePoint, clearPoints), pointInfo,
        h("div", { class: "field", dataset: { for: "polygon" } },
          h("label", { for: polygonText.id }, "Polygon (normalized [x, y] points, 0..1)"), polygonText,
          fieldError("polygon-err", "polygon"))),
      form));

  let site = null;
  let variants = {};
  let defs = {};
  let points = [];
  let selectedPoint = -1;
  let dragging = false;
  let original = null; // the zone's name on the server (null: a new zone)
  let rules = []; // rule objects being edited
  let forms = [];
  let image = null;
  let frameHref = null;
  let confirmDelete = false;
  let stopped = false;

  // --- drawing -------------------------------------------------------------------------
  function draw() {
    const w = canvas.clientWidth;
    const hgt = canvas.clientHeight;
    const dpr = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(hgt * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(hgt * dpr);
    }
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.fillStyle = "#30343b";
    g.fillRect(0, 0, w, hgt);
    if (image) g.drawImage(image, 0, 0, w, hgt);
    else {
      g.fillStyle = "#c9ced6";
      g.font = "16px system-ui, sans-serif";
      g.fillText("No frame yet", 16, 28);
    }
    const others = ((cameraOf(site, cameraSelect.value) || {}).zones || []).filter((z) => z.name !== original);
    g.lineWidth = 1.5;
    for (const z of others) {
      g.strokeStyle = "rgba(255,255,255,0.6)";
      g.setLineDash([6, 4]);
      g.beginPath();
      (z.polygon || []).forEach(([x, y], i) => (i ? g.lineTo(x * w, y * hgt) : g.moveTo(x * w, y * hgt)));
      g.closePath();
      g.stroke();
    }
    g.setLineDash([]);
    if (points.length) {
      g.beginPath();
      points.forEach(([x, y], i) => (i ? g.lineTo(x * w, y * hgt) : g.moveTo(x * w, y * hgt)));
      if (points.length > 2) g.closePath();
      g.fillStyle = "rgba(255, 196, 0, 0.25)";
      if (points.length > 2) g.fill();
      g.strokeStyle = "#ffc400";
      g.lineWidth = 2.5;
      g.stroke();
    }
    points.forEach(([x, y], i) => {
      g.beginPath();
      g.arc(x * w, y * hgt, i === selectedPoint ? 8 : 6, 0, Math.PI * 2);
      g.fillStyle = i === selectedPoint ? "#ff3b30" : "#ffffff";
      g.fill();
      g.strokeStyle = "#111";
      g.lineWidth = 1.5;
      g.stroke();
    });
  }

  function pointsChanged(fromText = false) {
    if (!fromText) polygonText.value = JSON.stringify(points);
    pointInfo.textContent = `${points.length} point${points.length === 1 ? "" : "s"}` +
      (selectedPoint >= 0 ? `, point ${selectedPoint + 1} selected` : "");
    deletePoint.disabled = selectedPoint < 0;
    draw();
  }

  const round = (v) => Math.round(Math.min(1, Math.max(0, v)) * 10000) / 10000;
  function at(ev) {
    const r = canvas.getBoundingClientRect();
    return [round((ev.clientX - r.left) / r.width), round((ev.clientY - r.top) / r.height)];
  }
  function hit(ev) {
    const r = canvas.getBoundingClientRect();
    let best = -1;
    let bestD = HIT_PX;
    points.forEach(([x, y], i) => {
      const d = Math.hypot(x * r.width - (ev.clientX - r.left), y * r.height - (ev.clientY - r.top));
      if (d <= bestD) { best = i; bestD = d; }
    });
    return best;
  }

  canvas.addEventListener("pointerdown", (ev) => {
    if (ev.button !== 0) return;
    const i = hit(ev);
    if (i >= 0) {
      selectedPoint = i;
      dragging = true;
      canvas.setPointerCapture(ev.pointerId);
    } else {
      points.push(at(ev));
      selectedPoint = points.length - 1;
    }
    pointsChanged();
  });
  canvas.addEventListener("pointermove", (ev) => {
    if (!dragging || selectedPoint < 0) return;
    points[selectedPoint] = at(ev);
    pointsChanged();
  });
  const endDrag = () => { dragging = false; };
  canvas.addEventListener("pointerup", endDrag);
  canvas.addEventListener("pointercancel", endDrag);
  canvas.addEventListener("contextmenu", (ev) => {
    const i = hit(ev);
    if (i < 0) return;
    ev.preventDefault();
    points.splice(i, 1);
    selectedPoint = -1;
    pointsChanged();
  });
  const STEP = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, -1], ArrowDown: [0, 1] };
  canvas.addEventListener("keydown", (ev) => { // the keyboard way: [ ] pick a point, arrows move it
    if ((ev.key === "Delete" || ev.key === "Backspace") && selectedPoint >= 0) {
      ev.preventDefault();
      removeSelected();
    } else if ((ev.key === "[" || ev.key === "]") && points.length) {
      ev.preventDefault();
      const n = points.length;
      selectedPoint = selectedPoint < 0 ? 0 : (selectedPoint + (ev.key === "]" ? 1 : n - 1)) % n;
      pointsChanged();
    } else if (STEP[ev.key] && selectedPoint >= 0) {
      ev.preventDefault();
      const d = ev.shiftKey ? 0.02 : 0.005;
      const [x, y] = points[selectedPoint];
      points[selectedPoint] = [round(x + STEP[ev.key][0] * d), round(y + STEP[ev.key][1] * d)];
      pointsChanged();
    }
  });
  function removeSelected() {
    points.splice(selectedPoint, 1);
    selectedPoint = -1;
    pointsChanged();
  }
  deletePoint.addEventListener("click", removeSelected);
  clearPoints.addEventListener("click", () => { points = []; selectedPoint = -1; pointsChanged(); });
  polygonText.addEventListener("input", () => {
    try {
      const parsed = JSON.parse(polygonText.value);
      if (Array.isArray(parsed) && parsed.every((p) => Array.isArray(p) && p.length === 2 && p.every(Number.isFinite))) {
        points = parsed;
        selectedPoint = -1;
        pointsChanged(true);
      }
    } catch { /* typing: wait for valid JSON */ }
  });
  const resize = new ResizeObserver(() => draw());
  resize.observe(canvas);

  // --- rules ---------------------------------------------------------------------------
  function renderRules() {
    forms = rules.map((rule, i) => ruleForm(variants, defs, rule, i,
      () => { syncRules(); rules.splice(i, 1); renderRules(); },
      (type) => { syncRules(); rules[i] = { ...rules[i], type }; renderRules(); }));
    replace(rulesBox, forms.length ? forms.map((f) => f.el) : h("p", { class: "muted" }, "No rules: the zone is only drawn."));
  }
  function syncRules() { rules = forms.map((f) => f.value()); }
  addRule.addEventListener("click", () => {
    syncRules();
    rules.push({ type: Object.keys(variants)[0] || "intrusion" });
    renderRules();
  });

  // --- loading -------------------------------------------------------------------------
  async function loadFrame() {
    image = null;
    if (frameHref) URL.revokeObjectURL(frameHref);
    frameHref = null;
    const cam = cameraSelect.value;
    if (!cam) return draw();
    try {
      const { href } = await blobUrl(`/cameras/${encodeURIComponent(cam)}/frame.jpg`);
      if (stopped || cam !== cameraSelect.value) { URL.revokeObjectURL(href); return; }
      frameHref = href;
      const img = new Image();
      img.onload = () => {
        image = img;
        canvas.style.aspectRatio = `${img.naturalWidth} / ${img.naturalHeight}`;
        // a portrait camera must still fit on the screen, undistorted
        canvas.style.maxWidth = `calc(75vh * ${img.naturalWidth / img.naturalHeight})`;
        draw();
      };
      img.src = href;
    } catch (err) {
      if (err.status !== 404) ctx.alert(`Frame: ${err.message}`);
    }
    draw();
  }

  function fillZones(keep) {
    const zones = (cameraOf(site, cameraSelect.value) || {}).zones || [];
    replace(zoneSelect, zones.map((z) => h("option", { value: z.name }, z.name)), h("option", { value: "" }, "New zone…"));
    zoneSelect.value = keep !== undefined && zones.some((z) => z.name === keep) ? keep : (zones[0] ? zones[0].name : "");
    editZone();
  }

  function editZone() {
    const zone = ((cameraOf(site, cameraSelect.value) || {}).zones || []).find((z) => z.name === zoneSelect.value);
    original = zone ? zone.name : null;
    points = zone ? zone.polygon.map((p) => [...p]) : [];
    selectedPoint = -1;
    nameInput.value = zone ? zone.name : "";
    setKind(zone ? zone.kind || "generic" : "restricted");
    rules = zone ? (zone.rules || []).map((r) => ({ ...r })) : [];
    del.hidden = !zone;
    confirmDelete = false;
    del.textContent = "Delete zone";
    clearErrors();
    result.textContent = "";
    renderRules();
    pointsChanged();
  }

  async function reloadSite(keepZone) {
    site = await loadSite();
    if (!site) {
      ctx.alert("Zones cannot be drawn here: this server runs without a site file, so there are no cameras "
        + "and no rules. Ask whoever runs it to start it with `make run` (it creates a site file with a first "
        + "camera) or to point CAMPUSGUARD_SITE_CONFIG at the campus' site file.");
      return;
    }
    if (!site.writable) result.textContent = "The site file is read-only on this server: changes cannot be saved.";
    // the file on disk is not what runs: a hand edit was refused, or another change is on its way in
    fileState.hidden = !site.file_version || site.file_version === site.version;
    fileState.textContent = site.reload_error
      ? `The site file on disk was changed but not loaded; the running zones stay in force. ${site.reload_error}`
      : "The site file on disk changed; this server loads it within seconds. Reload the page before editing.";
    const cams = site.config.cameras || [];
    if (!cameraSelect.options.length) {
      replace(cameraSelect, cams.map((c) => h("option", { value: c.id }, c.name ? `${c.name} (${c.id})` : c.id)));
      const wanted = new URLSearchParams(location.hash.split("?")[1] || "").get("camera");
      if (wanted && cams.some((c) => c.id === wanted)) cameraSelect.value = wanted;
      loadFrame();
    }
    fillZones(keepZone);
  }

  // --- saving --------------------------------------------------------------------------
  function clearErrors() {
    for (const p of main.querySelectorAll(".field-error")) p.textContent = "";
    for (const el of main.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
    replace(general);
  }

  /** Put each server error next to its field (detail[].field, relative to the zone). */
  function showErrors(detail, fallback) {
    clearErrors();
    const list = detail.length ? detail : [{ field: "", message: fallback }];
    for (const d of list) {
      const item = typeof d === "string" ? { field: "", message: d } : d;
      let path = item.field || "";
      let holder = null;
      while (path && !holder) {
        holder = main.querySelector(`[data-for="${CSS.escape(path)}"]`);
        if (!holder) path = path.includes(".") ? path.slice(0, path.lastIndexOf(".")) : "";
      }
      const fold = holder && holder.closest("details");
      if (fold) fold.open = true; // an error in a folded parameter must be seen
      const target = holder && holder.querySelector(":scope > .field-error");
      if (target) {
        target.textContent = target.textContent ? `${target.textContent}; ${item.message}` : item.message;
        const control = holder.querySelector("[data-field]");
        if (control) control.setAttribute("aria-invalid", "true");
      } else {
        general.append(h("li", {}, item.field ? `${item.field}: ${item.message}` : item.message));
      }
    }
  }

  function explain(err) {
    if (err.status === 403) return `Your role may not edit zones. ${err.message}`;
    if (err.status === 412) return "The site changed since you loaded it: reload the zone and apply your change again.";
    if (err.status === 409) return `The site file cannot be written here: ${err.message}`;
    return err.message;
  }

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    syncRules();
    const zone = { name: nameInput.value.trim(), kind: kindValue(), polygon: points, rules };
    const cam = cameraSelect.value;
    const path = `/admin/site/cameras/${encodeURIComponent(cam)}/zones/${encodeURIComponent(original || zone.name || "_")}`;
    result.textContent = "Saving…";
    result.className = "result";
    try {
      await api(path, { method: "PUT", body: zone, headers: site ? { "If-Match": site.version } : {} });
      clearErrors();
      await reloadSite(zone.name);
      result.textContent = `Saved: zone ${zone.name} is in force.`;
      result.className = "result ok";
      ctx.announce(`Zone ${zone.name} saved`);
    } catch (err) {
      result.textContent = err.status === 422 ? "Not saved: fix the fields marked below." : `Not saved. ${explain(err)}`;
      result.className = "result error";
      if (err.status === 422) showErrors(err.detail, err.message);
      else clearErrors();
    }
  });

  del.addEventListener("click", async () => {
    if (!confirmDelete) {
      confirmDelete = true;
      del.textContent = `Really delete ${original}?`;
      return;
    }
    try {
      await api(`/admin/site/cameras/${encodeURIComponent(cameraSelect.value)}/zones/${encodeURIComponent(original)}`,
        { method: "DELETE", headers: site ? { "If-Match": site.version } : {} });
      const gone = original;
      await reloadSite();
      result.textContent = `Deleted zone ${gone}.`;
      result.className = "result ok";
    } catch (err) {
      result.textContent = `Not deleted. ${explain(err)}`;
      result.className = "result error";
    }
  });

  cameraSelect.addEventListener("change", () => { fillZones(); loadFrame(); });
  zoneSelect.addEventListener("change", editZone);

  (async () => {
    try {
      const schema = await api("/site/schema");
      variants = ruleVariants(schema);
      defs = schema.$defs || {};
      await reloadSite();
      form.dataset.ready = "true"; // tests and scripts wait for this
    } catch (err) {
      ctx.alert(err.status === 404
        ? "This server has no zone editing routes (GET /site/schema); update it or turn rules on."
        : `Zone editor: ${err.message}`);
    }
  })();

  return () => {
    stopped = true;
    resize.disconnect();
    if (frameHref) URL.revokeObjectURL(frameHref);
  };
}
