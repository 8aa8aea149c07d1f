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

/** One input for one property; read() gives the value to send, or undefined to leave it out. */
function field(name, prop, value, path, defs, required) {
  const { schema, nullable } = unwrap(prop, defs);
  const id = uid(`f-${name}`);
  const errId = `${id}-err`;
  const title = schema.title || prop.title || name;
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
  } else { // nested lists and objects (polygons, time windows): JSON, checked by the server
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
    Object.keys(variants).map((t) => h("option", { value: t }, t)));
  typeSelect.value = type;
  typeSelect.addEventListener("change", () => onType(typeSelect.value));
  const required = new Set(schema.required || []);
  const fields = Object.entries(schema.properties || {}).filter(([name]) => name !== "type")
    .map(([name, prop]) => [name, field(name, prop, rule[name], `${path}.${name}`, defs, required.has(name))]);
  // what most rules need first; filters left at their defaults wait behind "More parameters"
  const shown = ([name, f]) => COMMON.has(name) || required.has(name) || f.value() !== undefined;
  const more = fields.filter((nf) => !shown(nf));
  const el = h("fieldset", { class: "rule", dataset: { for: path } },
    h("legend", {}, `Rule ${index + 1}: ${type}`),
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
