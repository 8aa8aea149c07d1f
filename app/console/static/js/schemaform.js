// A rule's parameter form generated from the server's JSON Schema (GET /site/schema), so a
// new rule type or parameter appears in the editor without touching the page.

import { h, uid } from "./dom.js";

function deref(node, defs) {
  let n = node || {};
  const seen = new Set(); // a $ref cycle (a -> b -> a) ends here instead of looping for ever
  while (n.$ref && !seen.has(n.$ref)) {
    seen.add(n.$ref);
    n = defs[n.$ref.split("/").pop()] || {};
  }
  return n.$ref ? {} : n;
}

/** {schema without null, nullable} of a property (pydantic writes Optional as anyOf [X, null]). */
function unwrap(prop, defs) {
  const p = deref(prop, defs);
  const options = p.anyOf || p.oneOf;
  if (options) {
    const real = options.filter((o) => o.type !== "null");
    if (real.length === 1) return { schema: { ...p, ...deref(real[0], defs), anyOf: undefined }, nullable: real.length < options.length };
  }
  return { schema: p, nullable: false };
}

/** The rule variants of a Zone schema: {type name: rule schema}, in the server's order. */
export function ruleVariants(zoneSchema) {
  const defs = zoneSchema.$defs || {};
  const items = deref(zoneSchema.properties.rules, defs).items || {};
  const variants = {};
  for (const ref of items.oneOf || items.anyOf || []) {
    const rule = deref(ref, defs);
    const type = rule.properties && rule.properties.type && (rule.properties.type.const || (rule.properties.type.enum || [])[0]);
    if (type) variants[type] = rule;
  }
  return variants;
}

const COMMON = new Set(["classes", "min_confidence", "min_count", "min_duration_s", "cooldown_s", "active_hours",
  "line", "direction"]);
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
/** Docstrings are written for Sphinx/Markdown: ``classes`` reads as classes on a form. */
const plain = (text) => (text ? text.replace(/``?/g, "") : text);

// Labels in words, with their units: the schema's generated titles read "Min Duration S".
const LABELS = {
  name: "Rule name", min_confidence: "Minimum confidence (0 to 1)",
  min_area: "Minimum box size (fraction of the frame)", max_area: "Maximum box size (fraction of the frame)",
  min_ratio: "Minimum width / height of a box", max_ratio: "Maximum width / height of a box",
  min_frames: "Minimum frames in a row", min_count: "Minimum number of objects", timezone: "Time zone",
  snapshot: "Snapshot per event", exclude: "Areas to ignore (polygons, JSON)", line: "Line (points, JSON)",
};
const WORDS = { min: "minimum", max: "maximum" };
/** What the schema calls a rule type, in words (the value stays the type). */
export const RULE_TEXT = { intrusion: "Intrusion", crowd: "Crowd", fire_lane: "Fire lane (vehicle stays)",
  loitering: "Loitering", line_crossing: "Line crossing" };
const DAY_TEXT = { mon: "Mon", tue: "Tue", wed: "Wed", thu: "Thu", fri: "Fri", sat: "Sat", sun: "Sun" };

/** "min_duration_s" -> "Minimum duration (seconds)": a parameter's name in words, its unit named. */
export function words(name) {
  if (LABELS[name]) return LABELS[name];
  const seconds = name.endsWith("_s");
  const text = (seconds ? name.slice(0, -2) : name).split("_").map((w) => WORDS[w] || w).join(" ");
  return `${text.charAt(0).toUpperCase()}${text.slice(1)}${seconds ? " (seconds)" : ""}`;
}

/** pydantic's title for a field without one of its own: "min_duration_s" -> "Min Duration S". */
const generated = (name) => name.split("_").map((w) => w.charAt(0).toUpperCase() + w.slice(1)).join(" ");

/** Active hours (a list of {start, end, days} windows) as time inputs and day boxes, one row
 * per window; no window is a rule active at all hours. */
function hoursControl(common, current, windowSchema, defs, title) {
  const daysSchema = unwrap((windowSchema.properties || {}).days, defs).schema;
  const days = deref(daysSchema.items, defs).enum || Object.keys(DAY_TEXT);
  const hm = (v) => (typeof v === "string" && /^\d\d:\d\d:00$/.test(v) ? v.slice(0, 5) : v || "");
  const rows = h("div", { class: "windows" });
  const none = h("p", { class: "hint" }, "Active at all hours (no time window).");
  const windows = [];
  function add(w) {
    const from = h("input", { type: "time", id: uid("from"), value: hm(w.start), required: true });
    const to = h("input", { type: "time", id: uid("to"), value: hm(w.end), required: true });
    const boxes = days.map((d) => h("label", { class: "check" },
      h("input", { type: "checkbox", value: d, checked: (w.days || []).includes(d) }), ` ${DAY_TEXT[d] || d}`));
    const entry = { from, to, boxes };
    const row = h("div", { class: "window" },
      h("div", { class: "field" }, h("label", { for: from.id }, "From"), from),
      h("div", { class: "field" }, h("label", { for: to.id }, "To"), to),
      h("fieldset", { class: "checks days" }, h("legend", {}, "On (none ticked: every day)"), boxes),
      h("button", { type: "button", class: "small", onclick: () => {
        windows.splice(windows.indexOf(entry), 1);
        row.remove();
        none.hidden = windows.length > 0;
      } }, "Remove window"));
    windows.push(entry);
    rows.append(row);
    none.hidden = true;
  }
  for (const w of Array.isArray(current) ? current : current ? [current] : []) add(w); // one window may be written alone
  none.hidden = windows.length > 0;
  const control = h("fieldset", { ...common, class: "hours" }, h("legend", { class: "sr-only" }, title), none, rows,
    h("button", { type: "button", class: "small", onclick: () => add({}) }, "Add time window"),
    h("p", { class: "hint" }, "A window whose end is before its start runs past midnight (22:00 to 06:00: the "
      + "night). The days are those on which a window starts."));
  const read = () => (windows.length ? windows.map(({ from, to, boxes }) => {
    const picked = boxes.map((b) => b.firstChild).filter((c) => c.checked).map((c) => c.value);
    return { start: from.value, end: to.value, ...(picked.length ? { days: picked } : {}) };
  }) : undefined);
  return { control, read };
}

/** One input for one property; read() gives the value to send, or undefined to leave it out. */
function field(name, prop, value, path, defs, required) {
  const { schema, nullable } = unwrap(prop, defs);
  const id = uid(`f-${name}`);
  const errId = `${id}-err`;
  const given = schema.title || prop.title;
  const title = given && given !== generated(name) ? given : words(name);
  const description = plain(prop.description || schema.description);
  const def = prop.default !== undefined ? prop.default : schema.default;
  const current = value !== undefined ? value : def;
  const common = { id, name, "aria-describedby": errId, dataset: { field: path } };
  let control;
  let read;
  const type = schema.type;
  const items = deref(schema.items, defs);
  if (type === "number" || type === "integer") {
    const min = schema.minimum !== undefined ? schema.minimum : schema.exclusiveMinimum;
    const max = schema.maximum !== undefined ? schema.maximum : schema.exclusiveMaximum;
    control = h("input", { ...common, type: "number", step: type === "integer" ? 1 : "any", min, max,
      required: required || undefined, value: current === null || current === undefined ? "" : String(current),
      placeholder: nullable ? "none" : undefined });
    read = () => {
      if (control.value === "") return undefined; // a required one left empty: the server names it
      return Number(control.value);
    };
  } else if (type === "boolean") {
    if (nullable) {
      control = h("select", common, h("option", { value: "" }, "default"), h("option", { value: "true" }, "yes"),
        h("option", { value: "false" }, "no"));
      control.value = current === null || current === undefined ? "" : String(current);
      read = () => (control.value === "" ? undefined : control.value === "true");
    } else {
      control = h("input", { ...common, type: "checkbox", checked: Boolean(current) });
      read = () => control.checked;
    }
  } else if (type === "string" && schema.enum) {
    control = h("select", common, schema.enum.map((v) => h("option", { value: v }, v)));
    control.value = current || schema.enum[0];
    read = () => control.value;
  } else if (type === "string") {
    control = h("input", { ...common, type: "text", required: required || undefined, value: current || "",
      placeholder: nullable ? "none" : undefined });
    read = () => (control.value.trim() === "" ? undefined : control.value.trim());
  } else if (type === "array" && items.type === "string" && items.enum) {
    const boxes = items.enum.map((v) => h("label", { class: "check" },
      h("input", { type: "checkbox", value: v, checked: (current || []).includes(v) }), ` ${v}`));
    control = h("fieldset", { ...common, class: "checks" }, h("legend", { class: "sr-only" }, title), boxes);
    read = () => {
      const picked = boxes.map((b) => b.firstChild).filter((c) => c.checked).map((c) => c.value);
      return picked.length ? picked : undefined;
    };
  } else if (type === "array" && items.type === "string") {
    control = h("input", { ...common, type: "text", value: (current || []).join(", "),
      placeholder: "comma separated" });
    read = () => control.value.split(",").map((v) => v.trim()).filter(Boolean);
  } else if (type === "array" && items.properties && items.properties.start && items.properties.end) {
    ({ control, read } = hoursControl(common, current, items, defs, title));
  } else { // nested lists and objects (polygons, masks): JSON, checked by the server
    control = h("textarea", { ...common, rows: 2, class: "json", spellcheck: "false",
      placeholder: "JSON; empty = none" }, current === null || current === undefined || same(current, []) ? "" : JSON.stringify(current));
    read = () => {
      const text = control.value.trim();
      if (!text) return undefined;
      try { return JSON.parse(text); } catch { return text; } // the server says what is wrong with it
    };
  }
  const label = h("label", { for: id }, title, required ? h("span", { class: "req", "aria-hidden": "true" }, " *") : null);
  const wrap = h("div", { class: "field", dataset: { for: path } }, label, control,
    description ? h("p", { class: "hint" }, description) : null,
    h("p", { class: "field-error", id: errId, "aria-live": "polite" }));
  return {
    el: wrap,
    value: () => {
      const v = read();
      if (v === undefined) return undefined;
      if (!required && def !== undefined && same(v, def)) return undefined; // keep the site file short
      return v;
    },
  };
}

/** A fieldset for one rule of type ``type``; value() builds the rule object to send. */
export function ruleForm(variants, defs, rule, index, onRemove, onType) {
  const type = rule.type;
  const schema = variants[type];
  const path = `rules.${index}`;
  const typeId = uid("rule-type");
  const typeSelect = h("select", { id: typeId, dataset: { field: `${path}.type` } },
    Object.keys(variants).map((t) => h("option", { value: t }, RULE_TEXT[t] || words(t))));
  typeSelect.value = type;
  typeSelect.addEventListener("change", () => onType(typeSelect.value));
  const required = new Set(schema.required || []);
  const fields = Object.entries(schema.properties || {}).filter(([name]) => name !== "type")
    .map(([name, prop]) => [name, field(name, prop, rule[name], `${path}.${name}`, defs, required.has(name))]);
  // what most rules need first; filters left at their defaults wait behind "More parameters"
  const shown = ([name, f]) => COMMON.has(name) || required.has(name) || f.value() !== undefined;
  const more = fields.filter((nf) => !shown(nf));
  const el = h("fieldset", { class: "rule", dataset: { for: path } },
    h("legend", {}, `Rule ${index + 1}: ${RULE_TEXT[type] || words(type)}`),
    schema.description ? h("p", { class: "hint" }, plain(schema.description)) : null,
    h("div", { class: "field" }, h("label", { for: typeId }, "Rule type"), typeSelect),
    h("p", { class: "field-error", "aria-live": "polite" }),
    h("div", { class: "rule-fields" }, fields.filter(shown).map(([, f]) => f.el)),
    more.length ? h("details", { class: "more" }, h("summary", {}, `More parameters (${more.length})`),
      h("div", { class: "rule-fields" }, more.map(([, f]) => f.el))) : null,
    h("button", { type: "button", class: "danger small", onclick: onRemove }, "Remove rule"));
  return {
    el,
    value() {
      const out = { type };
      for (const [name, f] of fields) {
        const v = f.value();
        if (v !== undefined) out[name] = v;
      }
      return out;
    },
  };
}
