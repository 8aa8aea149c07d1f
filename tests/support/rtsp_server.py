"""An RTSP server for the stream tests: Debian's GStreamer RTSP server serving an H.264
clip in an endless loop, optionally behind basic auth.

Run with the SYSTEM Python (``/usr/bin/python3``: python3-gi and gir1.2-gst-rtsp-server-1.0
are Debian packages, not wheels), as a subprocess of the tests (tests/support/streams.py):

    /usr/bin/python3 tests/support/rtsp_server.py --clip walk.mp4 --port 8554 [--path /cam]
        [--user U --password P]

Why it is built this way: the clip's access units are read once (qtdemux ! h264parse, with
SPS/PPS before every key frame, so any client can join and every loop restarts cleanly),
then each client's media pulls them from an ``appsrc`` that a GLib timer feeds at the clip's
frame rate, looping forever with running timestamps (``do-timestamp``). No re-encoding, so
a test stream costs almost no CPU, and each client starts at the clip's first key frame.
Prints ``READY <port>`` on stdout once it listens.
"""

from __future__ import annotations

import argparse
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def read_access_units(clip: str) -> tuple[list[tuple[bytes, bool]], int, str]:
    """The clip's H.264 access units (bytes, is_key), its frame rate and caps."""
    pipeline = Gst.parse_launch(
        f'filesrc location="{clip}" ! qtdemux ! h264parse config-interval=-1 ! '
        "video/x-h264,stream-format=byte-stream,alignment=au ! appsink name=sink sync=false")
    sink = pipeline.get_by_name("sink")
    pipeline.set_state(Gst.State.PLAYING)
    units: list[tuple[bytes, bool]] = []
    caps = None
    while True:
        sample = sink.emit("pull-sample")
        if sample is None:
            break
        caps = caps or sample.get_caps()
        buf = sample.get_buffer()
        ok, info = buf.map(Gst.MapFlags.READ)
        units.append((bytes(info.data), not buf.has_flags(Gst.BufferFlags.DELTA_UNIT)))
        buf.unmap(info)
    pipeline.set_state(Gst.State.NULL)
    if not units or caps is None:
        raise SystemExit(f"no H.264 access units in {clip}")
    structure = caps.get_structure(0)
    ok, num, den = structure.get_fraction("framerate")
    fps = round(num / den) if ok and den and num else 15
    caps_str = f"video/x-h264,stream-format=byte-stream,alignment=au,width={structure.get_value('width')}," \
               f"height={structure.get_value('height')},framerate={fps}/1"
    return units, fps, caps_str


class LoopingFactory(GstRtspServer.RTSPMediaFactory):
    """One media per client; an appsrc fed from memory at the clip's rate, looping."""

    def __init__(self, units: list[tuple[bytes, bool]], fps: int, caps: str) -> None:
        super().__init__()
        self.units, self.fps, self.caps = units, fps, caps
        self.set_shared(False)
        self.set_launch(f'( appsrc name=src is-live=true do-timestamp=true format=time caps="{caps}" '
                        "! h264parse ! rtph264pay name=pay0 pt=96 config-interval=-1 )")
        self.connect("media-configure", self._configure)

    def _configure(self, _factory, media) -> None:
        src = media.get_element().get_child_by_name("src")
        state = {"index": 0, "stopped": False, "started": False}
        duration = Gst.SECOND // self.fps

        def push() -> bool:
            if state["stopped"]:
                return False
            data, _key = self.units[state["index"] % len(self.units)]
            state["index"] += 1
            buf = Gst.Buffer.new_wrapped(data)
            buf.duration = duration
            return src.emit("push-buffer", buf) == Gst.FlowReturn.OK

        def unprepared(_media) -> None:
            state["stopped"] = True

        def new_state(_media, gst_state) -> None:
            # restart at the first key frame once the client plays: what was pushed while
            # preparing (the SDP needs a first buffer) never reached it
            if gst_state == Gst.State.PLAYING and not state["started"]:
                state["started"] = True
                state["index"] = 0

        media.connect("unprepared", unprepared)
        media.connect("new-state", new_state)
        GLib.timeout_add(max(1, 1000 // self.fps), push)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clip", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/cam")
    parser.add_argument("--user")
    parser.add_argument("--password")
    args = parser.parse_args()
    Gst.init(None)
    units, fps, caps = read_access_units(args.clip)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(str(args.port))
    factory = LoopingFactory(units, fps, caps)
    if args.user:
        auth = GstRtspServer.RTSPAuth()
        token = GstRtspServer.RTSPToken()
        token.set_string(GstRtspServer.RTSP_TOKEN_MEDIA_FACTORY_ROLE, "viewer")
        auth.add_basic(GstRtspServer.RTSPAuth.make_basic(args.user, args.password or ""), token)
        server.set_auth(auth)
        permissions = GstRtspServer.RTSPPermissions()
        permissions.add_permission_for_role("viewer", GstRtspServer.RTSP_PERM_MEDIA_FACTORY_ACCESS, True)
        permissions.add_permission_for_role("viewer", GstRtspServer.RTSP_PERM_MEDIA_FACTORY_CONSTRUCT, True)
        factory.set_permissions(permissions)
    server.get_mount_points().add_factory(args.path, factory)
    if server.attach(None) == 0:
        raise SystemExit(f"cannot listen on 127.0.0.1:{args.port}")
    print(f"READY {args.port}", flush=True)
    GLib.MainLoop().run()


if __name__ == "__main__":
    sys.exit(main())
