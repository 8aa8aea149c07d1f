// The first run's next step, in the console as in the terminal (`make run` prints the same
// call): a camera that never sent a frame, and an event list that is still empty, say how to
// send a frame (POST /detect?camera_id=...) or to start `make demo`, instead of showing nothing.

import { url } from "./api.js";
import { h } from "./dom.js";

/** The curl call that posts a photo as camera ``cameraId`` to this server. */
export function postCall(cameraId, me) {
  const key = me && me.auth_enabled ? " -H 'X-API-Key: <a camera or admin key>'" : "";
  return `curl -F image=@bus.jpg${key} '${url("/detect", { camera_id: cameraId })}'`;
}

/** "To ...: <the call>. bus.jpg is ... Or run make demo ..." as a small block of the page. */
export function nextStep(cameraId, me, lead) {
  return h("div", { class: "next-step" },
    h("p", {}, lead),
    h("code", { class: "cmd" }, postCall(cameraId, me)),
    h("p", { class: "hint" }, "bus.jpg: any photo with people in it (`make run` printed the path of the one "
      + "that ships with Ultralytics). Or run `make demo` on the server: it adds demo-cam, a camera whose "
      + "stream the service reads itself."));
}
