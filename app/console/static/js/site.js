// The site file as the server runs it (GET /site), and zones drawn over a frame.

import { conditional } from "./api.js";
import { s } from "./dom.js";

const held = new Map(); // GET /site by its ETag: asked again with If-None-Match, 304 while unchanged

/** GET /site, or null when this server has no such route or no site (rules off). A copy: callers
 * may change what they get without touching the held document. */
export async function loadSite() {
  try {
    const { body } = await conditional(held, "/site");
    return structuredClone(body);
  } catch (err) {
    if (err.status === 404) return null;
    throw err;
  }
}

export function cameraOf(site, cameraId) {
  return ((site && site.config && site.config.cameras) || []).find((c) => c.id === cameraId) || null;
}

/** An SVG (viewBox 0..1, stretched over the frame) with one polygon per zone. */
export function zoneOverlay(zones) {
  const svg = s("svg", { class: "overlay", viewBox: "0 0 1 1", preserveAspectRatio: "none", "aria-hidden": "true" });
  for (const zone of zones || []) {
    const points = (zone.polygon || []).map(([x, y]) => `${x},${y}`).join(" ");
    svg.append(s("polygon", { points, class: `zone kind-${String(zone.kind || "generic").replace(/[^\w-]/g, "")}`,
      "vector-effect": "non-scaling-stroke" }, s("title", { text: zone.name })));
  }
  return svg;
}
