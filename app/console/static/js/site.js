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

/** An SVG with one polygon per zone (normalized 0..1 points). Without ``aspect`` it is stretched
 * over the frame; with the frame's width/height it is fitted like the picture under it
 * (``object-fit: contain``), so a portrait camera's zones stay on its letterboxed picture. */
export function zoneOverlay(zones, aspect = null) {
  const fitted = Number.isFinite(aspect) && aspect > 0;
  const svg = s("svg", { class: "overlay", viewBox: fitted ? `0 0 ${aspect} 1` : "0 0 1 1",
    preserveAspectRatio: fitted ? "xMidYMid meet" : "none", "aria-hidden": "true" });
  const g = s("g", { transform: fitted ? `scale(${aspect} 1)` : undefined });
  for (const zone of zones || []) {
    const points = (zone.polygon || []).map(([x, y]) => `${x},${y}`).join(" ");
    g.append(s("polygon", { points, class: `zone kind-${String(zone.kind || "generic").replace(/[^\w-]/g, "")}`,
      "vector-effect": "non-scaling-stroke" }, s("title", { text: zone.name })));
  }
  svg.append(g);
  return svg;
}
