"""A fake clock and source state shared by the source tests."""

from __future__ import annotations


def state(camera_id: str = "gate-cam", name: str = "streaming", **extra) -> dict:
    return {"camera_id": camera_id, "source": "rtsp://***@10.0.0.5:554/ch/102", "state": name,
            "since": "2026-12-04T13:30:02.114+00:00", "reconnects": 1, "frames_read": 10, "frames_sent": 8,
            "dropped": {"superseded": 2}, "input_fps": 2.0, "fps": 2.0,
            "last_frame_at": "2026-12-04T13:32:15.004+00:00", "last_error": None, **extra}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
