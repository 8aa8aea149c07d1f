// Camera view checks in the console: what a view problem is called, and the operator's
// "Accept this view as the new reference" (POST /cameras/{id}/view/accept) with the reminder
// that the camera's zones were drawn on the old view.

import { api } from "./api.js";
import { h, replace } from "./dom.js";

export const KIND_TEXT = {
  covered: "Covered", blinded: "Blinded", moved: "Moved", defocused: "Out of focus", frozen: "Frozen",
};

/** "View: covered, frozen" for a camera's open view problems ("" when there are none). */
export function problemText(view) {
  const kinds = (view && view.problems) || [];
  return kinds.length ? `View: ${kinds.map((k) => (KIND_TEXT[k] || k).toLowerCase()).join(", ")}` : "";
}

/** The accept action for one camera: a button (disabled, with the reason, for roles that may not
 * use it) and a status line that tells what was done and reminds to check the zones. */
export function acceptAction(ctx, cameraId, onDone) {
  const allowed = ctx.can("review");
  const result = h("p", { class: "result accept-result", role: "status" });
  const button = h("button", {
    type: "button", class: "accept-view", disabled: !allowed,
    title: allowed ? "Use the camera's current view as the reference of its view checks (e.g. it was moved on purpose)"
      : ctx.denied("review", "accept a camera view"),
  }, "Accept this view as the new reference");
  button.addEventListener("click", async () => {
    const sure = window.confirm(`Accept the current view of ${cameraId} as its new reference? `
      + "Its open view problems end, and its zones may need redrawing.");
    if (!sure) return;
    button.disabled = true;
    try {
      const done = await api(`/cameras/${encodeURIComponent(cameraId)}/view/accept`, { method: "POST" });
      replace(result, `${done.message} ${done.reminder} `,
        h("a", { href: `#/zones?camera=${encodeURIComponent(cameraId)}` }, "Open the zone editor"));
      result.className = "result accept-result ok";
      if (onDone) onDone(done);
    } catch (err) {
      result.textContent = err.status === 403 ? `Refused: ${err.message}` : `Failed: ${err.message}`;
      result.className = "result accept-result error";
    } finally {
      button.disabled = !allowed;
    }
  });
  return { button, result };
}
