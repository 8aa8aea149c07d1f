"""The gateway's sink: POST each frame to the service's /detect, and the shard function.

``POST {service}/detect?camera_id=<id>&timestamp=<ISO 8601 capture time>`` with the JPEG
as the raw body (``Content-Type: image/jpeg``, no multipart overhead) and the gateway's
``camera``-role key in ``X-API-Key``. The answer decides what the sender does next:

| answer | result |
| --- | --- |
| 2xx | sent |
| 503 / 429 (+ ``Retry-After``) | busy: drop frames until Retry-After has passed (``service_busy``) |
| 401 / 403 | busy for 10 s (``key_refused``): a wrong key is not retried at the frame rate |
| other 4xx | this frame dropped (``http_<status>``, e.g. ``http_422`` for a refused timestamp) |
| other 5xx | busy for 2 s (``service_error``) |
| connect error / timeout | busy for 2 s (``service_unreachable``) |

The key is never logged (it is a header value only; httpx logs no headers). Sharding is
``sha256(camera_id) mod n``: the same on every host and Python version, unlike ``hash()``.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import logging
import threading

import httpx

from app.ingest.frames import Frame
from app.ingest.mailbox import SinkResult

log = logging.getLogger(__name__)

DEFAULT_RETRY_AFTER_S = 1.0
KEY_REFUSED_PAUSE_S = 10.0
ERROR_PAUSE_S = 2.0


def retry_after_s(value: str | None, default: float = DEFAULT_RETRY_AFTER_S) -> float:
    """``Retry-After`` as seconds: a number of seconds or an HTTP date; ``default`` if absent or odd."""
    if not value:
        return default
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return default
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return max(0.0, (when - dt.datetime.now(dt.timezone.utc)).total_seconds())


def iso_timestamp(at: dt.datetime) -> str:
    """Capture time as the service expects it: ISO 8601 with an explicit UTC offset, in ms."""
    return at.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds")


class HttpSink:
    """One camera's frames to ``{service}/detect``; one keep-alive connection per camera."""

    def __init__(self, service_url: str, camera_id: str, api_key: str | None, *, timeout_s: float = 10.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.camera_id = camera_id
        headers = {"X-API-Key": api_key} if api_key else {}
        self._client = httpx.Client(base_url=service_url.rstrip("/"), headers=headers, timeout=timeout_s,
                                    transport=transport, limits=httpx.Limits(max_connections=1))
        self._last_problem: str | None = None
        self._lock = threading.Lock()

    def __call__(self, frame: Frame) -> SinkResult:
        params = {"camera_id": self.camera_id, "timestamp": iso_timestamp(frame.captured_at)}
        try:
            response = self._client.post("/detect", params=params, content=frame.as_jpeg(),
                                         headers={"Content-Type": "image/jpeg"})
        except httpx.TimeoutException:
            return self._problem("service_unreachable", "the service did not answer in time", ERROR_PAUSE_S)
        except httpx.TransportError as exc:
            return self._problem("service_unreachable", f"cannot reach the service ({type(exc).__name__})",
                                 ERROR_PAUSE_S)
        status = response.status_code
        if status < 300:
            self._last_problem = None
            return SinkResult.sent()
        code = _error_code(response)
        if status in (429, 503):
            return self._problem("service_busy", f"{status} {code}",
                                 retry_after_s(response.headers.get("Retry-After")), quiet=True)
        if status in (401, 403):
            return self._problem("key_refused", f"{status} {code}: check the gateway's camera key",
                                 KEY_REFUSED_PAUSE_S)
        if status >= 500:
            return self._problem("service_error", f"{status} {code}", ERROR_PAUSE_S)
        self._note(f"http_{status}", f"{status} {code}")
        return SinkResult.dropped(f"http_{status}")

    def _problem(self, reason: str, message: str, pause_s: float, quiet: bool = False) -> SinkResult:
        self._note(reason, message, quiet)
        return SinkResult.busy(pause_s, reason)

    def _note(self, reason: str, message: str, quiet: bool = False) -> None:
        """Log a problem once when it starts (not once per frame)."""
        with self._lock:
            if reason == self._last_problem:
                return
            self._last_problem = reason
        log.log(logging.INFO if quiet else logging.WARNING, "camera %s: frames not accepted: %s",
                self.camera_id, message)

    def close(self) -> None:
        self._client.close()


def _error_code(response: httpx.Response) -> str:
    """The service's error code (``queue_full``), never the body as a whole."""
    try:
        body = response.json()
    except ValueError:
        return response.reason_phrase
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            return error["code"][:64]
        if isinstance(error, str):
            return error[:64]
    return response.reason_phrase


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` (0 <= i < n, zero-based like a StatefulSet ordinal) -> (i, n)."""
    index, sep, total = text.partition("/")
    try:
        i, n = int(index), int(total)
    except ValueError:
        raise ValueError(f"--shard is i/n (for example 0/2), not {text!r}") from None
    if not sep or n < 1 or not 0 <= i < n:
        raise ValueError(f"--shard {text!r}: need 0 <= i < n")
    return i, n

