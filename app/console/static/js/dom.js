// Building DOM from data: every server string becomes a text node, never parsed as markup.

const SVG_NS = "http://www.w3.org/2000/svg";

function apply(el, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") el.textContent = String(value);
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "value" || key === "checked" || key === "disabled" || key === "selected") el[key] = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** An HTML element: h("button", {type: "button", onclick: f}, "Save"). */
export function h(tag, attrs, ...children) {
  return append(apply(document.createElement(tag), attrs), children);
}

/** An SVG element (viewBox, polygon, path ...). */
export function s(tag, attrs, ...children) {
  return append(apply(document.createElementNS(SVG_NS, tag), attrs), children);
}

/** Replace all children of el. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

let ids = 0;
/** A document-unique id for label/aria links. */
export function uid(prefix) {
  ids += 1;
  return `${prefix}-${ids}`;
}

/** A labelled <select> for a filter form: options are [value, text] pairs. */
export function select(label, name, options) {
  const id = uid(name);
  return h("div", { class: "field" }, h("label", { for: id }, label),
    h("select", { id, name }, options.map(([value, text]) => h("option", { value }, text))));
}

/** A labelled <input> for a filter form. */
export function input(label, name, type, extra) {
  const id = uid(name);
  return h("div", { class: "field" }, h("label", { for: id }, label), h("input", { id, name, type, ...extra }));
}

/** "12 s", "3 min", "2 h" — how long ago, for a guard reading at a glance. */
export function age(seconds) {
  if (seconds === null || seconds === undefined) return "never";
  if (seconds < 90) return `${Math.max(0, Math.round(seconds))} s ago`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 172800) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86400)} d ago`;
}

/** Local date and time of an ISO string. */
export function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toLocaleString();
}

/** "1.2 GiB" */
export function bytes(n) {
  if (n === null || n === undefined) return "n/a";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

/** Ids as a comma list that wraps between ids, never inside one ("plaza-cam" stays whole). */
export function idList(list) {
  return list.flatMap((id, i) => [i ? ", " : null, h("span", { class: "id" }, id)]);
}
