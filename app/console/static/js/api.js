// The JSON routes, called with the key the user typed (X-API-Key); the server decides.

const KEY = "campusguard.apiKey";
// The page lives at <root>/ui/; the API is at <root>/ (works behind a path prefix too).
const ROOT = new URL("..", document.baseURI);

export class ApiError extends Error {
  constructor(status, body) {
    const message = (body && (body.message || body.error)) || `HTTP ${status}`;
    super(message);
    this.status = status;
    this.code = body && body.error;
    this.detail = (body && Array.isArray(body.detail)) ? body.detail : [];
  }
}

export const getKey = () => sessionStorage.getItem(KEY) || "";
export const setKey = (key) => sessionStorage.setItem(KEY, key);
export const clearKey = () => sessionStorage.removeItem(KEY);

export function url(path, params) {
  const u = new URL(path.replace(/^\//, ""), ROOT);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") u.searchParams.set(k, v);
  }
  return u;
}

/** Whether a URL is this server's (same origin, under ROOT): the only place the key may go.
 * Paths in event data (snapshot, clip) come from the server, and an absolute URL among them
 * must never receive the X-API-Key. */
export function ours(u) {
  return u.origin === ROOT.origin && u.pathname.startsWith(ROOT.pathname);
}

const listeners = new Set();
/** Called with an ApiError on every 401 (no key) and 403 `forbidden` (a key removed on the server
 * meanwhile): the app asks for a key instead of polling on with a dead one (the server blocks an
 * address after repeated wrong keys). */
export function onUnauthorized(fn) { listeners.add(fn); }

async function request(path, { method = "GET", params, body, headers = {} } = {}) {
  const target = url(path, params);
  if (!ours(target)) {
    throw new ApiError(0, { error: "not_this_server", message: `refused: ${target.origin} is not this server` });
  }
  const h = new Headers(headers);
  const key = getKey();
  if (key) h.set("X-API-Key", key);
  let payload;
  if (body !== undefined) {
    h.set("Content-Type", "application/json");
    payload = JSON.stringify(body);
  }
  const r = await fetch(target, { method, headers: h, body: payload, cache: "no-store", credentials: "same-origin",
    referrerPolicy: "no-referrer" });
  if (!r.ok && r.status !== 304) {
    let data = null;
    try { data = await r.json(); } catch { /* not JSON (a proxy's page) */ }
    const err = new ApiError(r.status, data);
    if (r.status === 401 || (r.status === 403 && err.code === "forbidden")) listeners.forEach((fn) => fn(err));
    throw err;
  }
  return r;
}

/** fetch a route; JSON back (or the Response with raw); ApiError on any non-2xx. */
export async function api(path, { method = "GET", params, body, headers = {}, raw = false } = {}) {
  const r = await request(path, { method, params, body, headers });
  if (r.status === 304) throw new ApiError(304, { error: "not_modified", message: "not modified" });
  if (raw) return r;
  return r.status === 204 ? null : r.json();
}

/** A polled JSON document held by its ETag: the server answers 304 (no body) while it is
 * unchanged and the held copy is returned. `held` is the caller's Map (url -> {etag, body}; the
 * documents are the same for every role that may read them). Returns {body, date, fresh}:
 * `date` is the server's clock (the Date header) and `fresh` false on a 304. */
export async function conditional(held, path, params) {
  const key = url(path, params).href;
  const had = held.get(key);
  const r = await request(path, { params, headers: had ? { "If-None-Match": had.etag } : {} });
  const date = Date.parse(r.headers.get("Date") || "") || Date.now();
  if (r.status === 304 && had) return { body: had.body, date, fresh: false };
  const body = await r.json();
  const etag = r.headers.get("ETag");
  if (etag) held.set(key, { etag, body }); else held.delete(key);
  return { body, date, fresh: true };
}

/** An image or video fetched with the key, as an object URL (the caller revokes it). */
export async function blobUrl(path) {
  const r = await api(path, { raw: true });
  return { href: URL.createObjectURL(await r.blob()), headers: r.headers };
}
