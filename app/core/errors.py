"""One error family for the whole service.

Every failure a client can cause or observe is a ``ServiceError`` subclass carrying its
HTTP status and a stable machine-readable ``code``. The HTTP layer maps them in one place
(``app.api.errors``); the library and CLI raise the same types, so a caller of the engine
never has to parse messages.
"""

from __future__ import annotations


class ServiceError(Exception):
    """Base class: ``status`` is the HTTP status, ``code`` a stable identifier."""

    status: int = 500
    code: str = "internal_error"
    retry_after: float | None = None

    def __init__(self, message: str | None = None, *, code: str | None = None) -> None:
        super().__init__(message or self.__class__.__doc__ or self.code)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0])

    @property
    def detail(self) -> list | None:
        """Structured details for the reply's ``detail`` (e.g. every error of a site file)."""
        return None


def shorten(value: object, limit: int = 64) -> str:
    """``repr`` of a client-supplied value, cut to ``limit`` characters: error bodies and
    logs echo what was wrong without echoing a 2 MB parameter back whole."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(str(value))} characters)"


class InvalidImage(ServiceError):
    """The image could not be decoded."""

    status, code = 400, "invalid_image"


class ImageTooLarge(ServiceError):
    """The image has more pixels than the configured limit (decompression bomb guard)."""

    status, code = 413, "image_too_large"


class PayloadTooLarge(ServiceError):
    """The request body is larger than the configured byte limit."""

    status, code = 413, "payload_too_large"


class UnsupportedMediaType(ServiceError):
    """The body is not an image format this service decodes."""

    status, code = 415, "unsupported_media_type"


class InvalidParameter(ServiceError):
    """A request parameter is missing or out of range."""

    status, code = 422, "invalid_parameter"


class InvalidTimestamp(InvalidParameter):
    """The capture time is outside the accepted window around the server clock."""

    code = "invalid_timestamp"

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason  # "future" or "past": the label of the refusal counter


class Unauthorized(ServiceError):
    """No API key was given."""

    status, code = 401, "unauthorized"


class Forbidden(ServiceError):
    """The API key is not valid."""

    status, code = 403, "forbidden"


class InsufficientRole(Forbidden):
    """The API key is valid but its role lacks the permission this route needs."""

    code = "insufficient_role"


class TooManyRequests(ServiceError):
    """Not now: retry after ``Retry-After`` (the family of every 429)."""

    status, code, retry_after = 429, "too_many_requests", 5.0


class TooManyAuthFailures(TooManyRequests):
    """Too many wrong API keys from this client address: refused for a while, whatever the key."""

    status, code = 429, "too_many_auth_failures"

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = max(1.0, retry_after)


class NotFound(ServiceError):
    """The resource does not exist."""

    status, code = 404, "not_found"


class ShadowDisabled(NotFound):
    """A shadow route while CAMPUSGUARD_SHADOW_BACKEND is empty."""

    code = "shadow_disabled"


class NotReady(ServiceError):
    """The model is not loaded and warmed up yet, or the inference worker is down."""

    status, code, retry_after = 503, "not_ready", 1.0


class QueueFull(ServiceError):
    """The inference queue is full; retry later."""

    status, code, retry_after = 503, "queue_full", 1.0


class ShuttingDown(ServiceError):
    """The server is draining for shutdown."""

    status, code, retry_after = 503, "shutting_down", 1.0


class SiteChanged(ServiceError):
    """The site file changed since the version named in If-Match (someone else saved first)."""

    status, code = 412, "site_changed"


class SiteReadOnly(ServiceError):
    """The site file or its directory is not writable (e.g. a Kubernetes ConfigMap mount)."""

    status, code = 409, "site_read_only"


class ViewCheckConflict(ServiceError):
    """A camera's view checks cannot do that now: no frame of it was checked yet
    (``view_not_checked``), or its view checks are off (``view_checks_disabled``)."""

    status, code = 409, "view_not_checked"


class ReportConflict(ServiceError):
    """Another gateway's report of this camera is still fresh: one camera, one gateway."""

    status, code = 409, "reported_by_another_gateway"


class CameraNotAllowed(Forbidden):
    """The key's ``cameras:`` (keys file) do not include this camera."""

    code = "camera_not_allowed"


class DeadlineExceeded(ServiceError):
    """The request waited longer than its deadline before inference started."""

    status, code = 504, "deadline_exceeded"


class InferenceFailed(ServiceError):
    """The inference backend failed on this batch."""

    status, code = 500, "inference_failed"


class OutOfMemory(ServiceError):
    """The device ran out of memory for this batch, even after a retry at a smaller size."""

    status, code, retry_after = 503, "out_of_memory", 1.0


class InferenceTimeout(ServiceError):
    """The inference did not finish within the watchdog limit (hung device)."""

    status, code, retry_after = 503, "inference_timeout", 5.0


class ConfigError(ServiceError):
    """The configuration is invalid (raised at startup, never to a client)."""

    status, code = 500, "config_error"


class DeviceError(ConfigError):
    """The requested device does not exist or is not usable."""

    code = "device_error"
