// Models: every model this server serves (GET /models, docs/models.md), what it detects, what
// runs it and how busy it is, its rollout (rollout.js) and, for an admin key, load / swap /
// unload and the rollout's buttons (modeladmin.js). Refreshes every 3 s like the status page.
// A card per model is built once and its facts replaced on each refresh, so a form being
// typed into (or an unload being confirmed) survives the refresh.

import { api } from "./api.js";
import { bytes, h, idList, replace } from "./dom.js";
import { loadForm, modelActions } from "./modeladmin.js";
import { rolloutPanel } from "./rollout.js";

const REFRESH_MS = 3000;
const FEW_CLASSES = 12; // more than this: the list is folded behind its count

const STATE_TEXT = { loading: "Loading", ready: "Ready", unavailable: "Unavailable" };
const CHANGE_TEXT = { loading: "new weights loading", draining: "old weights draining" };

function fact(label, ...value) {
  return h("div", { class: "fact" }, h("dt", {}, label), h("dd", {}, ...value));
}

function runtime(m) {
  if (!m.backend) return `requested ${m.requested_backend} / ${m.requested_precision} (not loaded yet)`;
  return [m.backend, m.provider, m.precision, m.device].filter(Boolean).join(" · ");
}

function rate(m) {
  if (m.images_per_s === null || m.images_per_s === undefined) return "no batch yet";
  return `${m.images_per_s.toFixed(1)} images/s`;
}

function memory(m) {
  const mem = m.memory;
  if (!mem) return "n/a";
  return mem.total_bytes ? `${bytes(mem.used_bytes)} of ${bytes(mem.total_bytes)}` : bytes(mem.used_bytes);
}

/** The classes: the list itself when short, else folded behind "80 classes: person, bicycle, …". */
function classes(m, card) {
  if (!m.classes) return h("p", { class: "classes muted" }, "Classes: not known until the model has loaded.");
  const all = m.classes.join(", ");
  if (m.classes.length <= FEW_CLASSES) return h("p", { class: "classes" }, h("span", { class: "muted" }, "Classes: "), all);
  const details = h("details", { class: "classes", open: card.classesOpen },
    h("summary", {}, `${m.classes.length} classes: ${m.classes.slice(0, 6).join(", ")}, …`), h("p", {}, all));
  details.addEventListener("toggle", () => { card.classesOpen = details.open; });
  return details;
}

function facts(m, card) {
  const state = h("span", { class: `badge model-${m.state}` }, STATE_TEXT[m.state] || m.state);
  const shown = m.change && !(m.change === "loading" && m.state === "loading"); // a first load: its state says it
  const change = shown ? h("span", { class: "badge model-change" }, CHANGE_TEXT[m.change] || m.change) : null;
  return [
    h("dl", { class: "model-facts" },
      fact("State", state, change ? " " : null, change),
      fact("Weights", h("span", { class: "mono" }, m.weights),
        m.weights_sha256 ? [" · sha256 ", h("span", { class: "mono sha" }, m.weights_sha256)] : null,
        m.weights_bytes ? ` · ${bytes(m.weights_bytes)}` : null),
      fact("Runs on", runtime(m)),
      fact("Input shapes", (m.shapes || []).join(", ") || "n/a"),
      fact("Cameras", m.cameras.length ? idList(m.cameras) : "none (requests naming it only)"),
      fact("Queue", `${m.queue_depth ?? 0} waiting`),
      fact("Rate", rate(m), m.images ? ` · ${m.images} image${m.images === 1 ? "" : "s"} in total` : null),
      fact("Device memory", memory(m))),
    classes(m, card),
  ];
}

/** One model's card: the head and facts are replaced on each refresh, the admin part is kept. */
function modelCard(ctx, name, refresh, notify) {
  const card = { classesOpen: false };
  card.head = h("div", { class: "model-head" });
  card.body = h("div", { class: "model-body" });
  card.actions = ctx.can("admin") ? modelActions(name, refresh, notify) : null;
  card.el = h("article", { class: "card model", dataset: { model: name }, "aria-label": `Model ${name}` },
    card.head, card.body, card.actions ? card.actions.el : null);
  card.update = (m) => {
    replace(card.head, h("h2", {}, m.name), m.default ? h("span", { class: "badge model-default" }, "default") : null,
      m.rollout ? h("span", { class: `badge phase-${m.rollout.phase}` }, `rollout: ${m.rollout.phase.replace("_", " ")}`) : null);
    replace(card.body, h("div", { class: "model-facts-box" }, facts(m, card)), m.rollout ? rolloutPanel(m.rollout) : null);
    card.el.classList.toggle("in-rollout", Boolean(m.rollout));
    if (card.actions) card.actions.update(m);
  };
  return card;
}

export function mount(main, ctx) {
  const summary = h("p", { class: "muted summary", "aria-live": "polite" }, "Refreshes every 3 s.");
  const notice = h("p", { class: "result ok", id: "models-notice", role: "status", hidden: true });
  const list = h("div", { class: "models" }, h("p", { class: "muted" }, "Loading…"));
  const admin = ctx.can("admin") ? loadForm(() => refresh()) : null;
  main.append(h("h1", {}, "Models"), summary, notice, list,
    admin || h("p", { class: "muted", id: "models-admin-note" },
      "Loading, swapping and unloading models and their rollouts need an admin key."));
  const cards = new Map(); // name -> card
  const notify = (text) => { notice.textContent = text; notice.hidden = !text; }; // outlives the card it is about
  let timer = null;
  let stopped = false;
  let busy = false;
  let again = false;

  function show(doc) {
    const names = doc.models.map((m) => m.name);
    for (const [name, card] of cards) if (!names.includes(name)) { card.el.remove(); cards.delete(name); }
    if (!cards.size) list.replaceChildren();
    doc.models.forEach((m, i) => {
      let card = cards.get(m.name);
      if (!card) { card = modelCard(ctx, m.name, () => refresh(), notify); cards.set(m.name, card); }
      card.update(m);
      if (list.children[i] !== card.el) list.insertBefore(card.el, list.children[i] || null); // moves only when out of place
    });
    const loading = doc.models.filter((m) => m.state !== "ready").length;
    const rollouts = doc.models.filter((m) => m.rollout && ["shadow", "canary"].includes(m.rollout.phase)).length;
    summary.textContent = `${names.length} model${names.length === 1 ? "" : "s"} served, default ${doc.default}`
      + `${loading ? `, ${loading} not ready` : ""}${rollouts ? `, ${rollouts} in a rollout` : ""}. Refreshes every 3 s.`;
  }

  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      if (document.hidden) return; // a background tab does not poll the server
      const doc = await api("/models");
      if (!stopped) show(doc);
      ctx.alert("");
    } catch (err) {
      if (!stopped) {
        ctx.alert(err.status === 404 ? "This server does not list its models (GET /models): update it."
          : `Models: ${err.message}`);
      }
    } finally {
      busy = false;
      clearTimeout(timer);
      if (again && !stopped) { again = false; refresh(); } else if (!stopped) timer = setTimeout(refresh, REFRESH_MS);
    }
  }
  refresh();
  return () => { stopped = true; clearTimeout(timer); };
}
