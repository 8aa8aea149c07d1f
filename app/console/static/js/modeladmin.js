// The Models page's admin part (admin keys only; the server checks the role again): load a
// model, swap the weights behind a name, unload one (POST /admin/models, PUT and DELETE
// /admin/models/{name}), and a rollout's buttons: start, promote, abort
// (/admin/models/{name}/rollout...). A refusal's message (the ServiceError body) is shown next
// to the form that was refused; nothing is changed by a refused request. "Rollout started …"
// says what the rollout's first phase does, so it goes once the rollout has left that phase (the
// rollout panel then shows where it is); the outcome of any other action stays until the next.

import { api } from "./api.js";
import { h, input, replace } from "./dom.js";

const ACTIVE = ["shadow", "canary"];
const path = (name, tail = "") => `/admin/models/${encodeURIComponent(name)}${tail}`;

/** A result line no longer tied to a rollout's phase (`startedIn`). */
function forget(result) {
  delete result.dataset.phase;
  delete result.dataset.rollout;
}

/** Whether `r` (GET /models' rollout) has moved on from what `result` said of it: the same rollout
 * (its `started_at`) in another phase, or a later one. A refresh that was under way while the
 * rollout started answers with the one before it (or none): that says nothing of this one. */
function movedOn(result, r) {
  const { phase, rollout } = result.dataset;
  if (!phase || !r) return false;
  return r.started_at === rollout ? r.phase !== phase : Date.parse(r.started_at) > Date.parse(rollout);
}

/** The outcome under a form: what was done, or the server's refusal with its code. */
function show(result, ok, ...text) {
  forget(result); // whatever it said of a rollout's phase is replaced
  result.classList.remove("ok", "error", "pending");
  result.classList.add(ok ? "ok" : "error");
  replace(result, ...text);
}

function refusal(result, err) {
  const code = err.code && err.code !== "not_found" ? err.code : null;
  show(result, false, h("strong", {}, "Refused: "), err.message,
    h("span", { class: "code" }, ` (${err.status || "no answer"}${code ? ` ${code}` : ""})`));
}

/** Run one change: the button disabled meanwhile, `pending` shown, then `done(reply)` or the refusal. */
async function run(button, result, pending, work, done) {
  button.disabled = true;
  result.classList.remove("ok", "error");
  result.classList.add("pending");
  result.textContent = pending;
  try {
    show(result, true, done(await work()));
    return true;
  } catch (err) {
    refusal(result, err);
    return false;
  } finally {
    button.disabled = false;
  }
}

/** A button that asks once more ("Really unload campus?", with Cancel) before `action`. */
function confirmed(button, question, action) {
  const label = button.textContent;
  const cancel = h("button", { type: "button", class: "small", hidden: true }, "Cancel");
  let armed = false;
  let timer = null;
  const disarm = () => {
    armed = false;
    button.textContent = label;
    cancel.hidden = true;
    clearTimeout(timer);
  };
  cancel.addEventListener("click", () => { disarm(); button.focus(); });
  button.addEventListener("click", () => {
    if (!armed) {
      armed = true;
      button.textContent = question;
      cancel.hidden = false;
      timer = setTimeout(disarm, 15000); // a forgotten confirmation does not stay armed
      return;
    }
    disarm();
    action();
  });
  return cancel;
}

function field(label, name, type, extra) {
  return input(label, name, type, { autocomplete: "off", spellcheck: "false", ...extra });
}

/** "Load a model": a new name served from a weights file in the models folder. */
export function loadForm(changed) {
  const result = h("div", { class: "result", role: "status", "aria-live": "polite" });
  const button = h("button", { type: "submit", class: "primary" }, "Load model");
  const form = h("form", { class: "inline-form", "aria-label": "Load a model", id: "model-load" },
    field("Name", "name", "text", { required: true, maxlength: 64, placeholder: "campus" }),
    field("Weights file (in the models folder)", "weights", "text", { required: true, maxlength: 512, placeholder: "campus-v3.pt" }),
    h("div", { class: "field actions" }, button));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { name: form.elements.name.value.trim(), weights: form.elements.weights.value.trim() };
    const work = api("/admin/models", { method: "POST", body });
    changed(); // the list shows it loading meanwhile
    const ok = await run(button, result, `Loading ${body.name} from ${body.weights}: built, checked and warmed before it serves…`,
      () => work, (r) => `Loaded: ${r.model.name} serves ${r.model.weights} (${(r.model.classes || []).length} classes).`);
    if (ok) form.reset();
    changed();
  });
  const el = h("section", { class: "card model-admin" }, h("h2", {}, "Load a model"), form,
    h("p", { class: "hint" }, "Weights are read from the models folder only (CAMPUSGUARD_MODELS_DIR). Changes made here "
      + "last until a restart: then the models file is served again (docs/models.md)."), result);
  return el;
}

/** A model's admin row: swap its weights, unload it, and its rollout's buttons. */
export function modelActions(name, changed, notify) {
  const result = h("div", { class: "result action-result", role: "status", "aria-live": "polite" });
  const swapButton = h("button", { type: "submit" }, "Swap weights");
  const swap = h("form", { class: "inline-form swap", "aria-label": `Swap the weights of ${name}` },
    field("New weights file", "weights", "text", { required: true, maxlength: 512, placeholder: "file in the models folder" }),
    h("div", { class: "field actions" }, swapButton));
  swap.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const weights = swap.elements.weights.value.trim();
    const work = api(path(name), { method: "PUT", body: { weights } });
    changed();
    const ok = await run(swapButton, result, `Loading ${weights} beside the serving weights of ${name}…`, () => work,
      (r) => `Swapped: ${name} serves ${r.model.weights} (was ${r.previous_weights}); the old weights drain, then are freed.`);
    if (ok) swap.reset();
    changed();
  });

  const unload = h("button", { type: "button", class: "danger unload" }, "Unload");
  const unloadCancel = confirmed(unload, `Really unload ${name}?`, async () => {
    const ok = await run(unload, result, `Unloading ${name}…`, () => api(path(name), { method: "DELETE" }),
      () => `Unloaded ${name}: its requests in flight finish, then it is freed.`);
    if (ok) notify(`Unloaded ${name}: its requests in flight finish, then it is freed.`);
    changed();
  });

  const promote = h("button", { type: "button", class: "primary promote" }, "Promote");
  promote.addEventListener("click", () => run(promote, result, `Promoting the candidate of ${name}…`,
    () => api(path(name, "/rollout/promote"), { method: "POST" }),
    (r) => (r && r.candidate_weights ? `Promoted: ${name} serves ${r.candidate_weights}.` : `Promoted the candidate of ${name}.`))
    .then(changed));
  const abort = h("button", { type: "button", class: "danger abort" }, "Abort rollout");
  const abortCancel = confirmed(abort, "Really roll back?", () => run(abort, result, `Rolling back the rollout of ${name}…`,
    () => api(path(name, "/rollout"), { method: "DELETE" }),
    (r) => (r && r.current_weights ? `Rolled back: ${name} serves ${r.current_weights}.` : `Rolled back the rollout of ${name}.`))
    .then(changed));

  const start = rolloutForm(name, changed, result);
  const rolloutButtons = h("div", { class: "buttons rollout-buttons" }, promote, abort, abortCancel);
  const el = h("div", { class: "model-actions" },
    h("div", { class: "action-row" }, swap, h("div", { class: "buttons" }, unload, unloadCancel)),
    rolloutButtons, result, start);
  return {
    el,
    update(m) {
      unload.hidden = m.default; // the default is swapped, never unloaded (the server says so too)
      unloadCancel.hidden = m.default || unloadCancel.hidden;
      const knows = "rollout" in m; // a server without rollouts has no such field
      const active = Boolean(m.rollout) && ACTIVE.includes(m.rollout.phase);
      rolloutButtons.hidden = !active;
      promote.hidden = !active || m.rollout.phase !== "canary";
      start.hidden = !knows || active;
      if (movedOn(result, m.rollout)) { // "Rollout started …" is out of date: the panel says where it is
        forget(result);
        result.classList.remove("ok", "error", "pending");
        replace(result);
      }
    },
  };
}

/** `result` speaks of rollout `r` in its first phase (`movedOn` tells when that is out of date). */
function startedIn(result, r) {
  result.dataset.phase = r.phase;
  result.dataset.rollout = r.started_at;
}

/** What a started rollout (the reply of POST .../rollout) does first: shadow, or, with other classes, canary. */
function started(r) {
  if (r.phase === "canary") {
    return `Rollout started: ${r.candidate_weights} serves ${r.cameras.join(", ")} as a canary (other classes: `
      + "its mAP held; judged on errors and latency).";
  }
  return `Rollout started: ${r.candidate_weights} runs as the shadow of ${r.current_weights}.`;
}

/** "Start a rollout": the candidate weights, the canary cameras and the bounds (unset: the server's). */
function rolloutForm(name, changed, cardResult) {
  const result = h("div", { class: "result", role: "status", "aria-live": "polite" });
  const button = h("button", { type: "submit", class: "primary" }, "Start rollout");
  const form = h("form", { class: "inline-form rollout-start", "aria-label": `Start a rollout of ${name}` },
    field("Candidate weights file", "weights", "text", { required: true, maxlength: 512 }),
    field("Canary cameras (comma separated)", "cameras", "text", { placeholder: "default: the server's choice" }),
    field("Window (s)", "window_s", "number", { min: 1, step: "any" }),
    field("Minimum frames", "min_frames", "number", { min: 1, step: 1 }),
    field("Agreement floor (0 to 1)", "agreement_floor", "number", { min: 0, max: 1, step: "any" }),
    field("Latency bound (× the current's p50)", "max_latency_ratio", "number", { min: 0.01, step: "any" }),
    h("div", { class: "field actions" }, button));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const data = Object.fromEntries(new FormData(form));
    const body = { weights: data.weights.trim() };
    const cameras = data.cameras.split(",").map((c) => c.trim()).filter(Boolean);
    if (cameras.length) body.cameras = cameras;
    for (const key of ["window_s", "min_frames", "agreement_floor", "max_latency_ratio"]) if (data[key] !== "") body[key] = Number(data[key]);
    let rollout = null;
    const ok = await run(button, result, `Starting a rollout of ${body.weights} for ${name}…`,
      () => api(path(name, "/rollout"), { method: "POST", body }),
      (r) => { rollout = r; return started(r); });
    if (ok) { // the form folds away (and goes while the rollout runs): the outcome moves to the card's line
      show(cardResult, true, result.textContent);
      if (rollout) startedIn(cardResult, rollout); // until the rollout leaves the phase it started in
      replace(result);
      form.reset();
      details.open = false;
    }
    changed();
  });
  const details = h("details", { class: "more rollout-start-box" }, h("summary", {}, "Start a rollout…"), form,
    h("p", { class: "hint" }, "The candidate first shadows the serving weights on live frames, then serves the canary "
      + "cameras; it is promoted when its agreement, errors and latency hold over the window, rolled back when not."),
    result);
  return details;
}
