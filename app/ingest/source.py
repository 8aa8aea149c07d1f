"""A camera's ``source:`` block (the site file) and how its URL is filled in.

The model is checked wherever the site file is read, but ``${VAR}`` is expanded only by
the process that pulls the stream (``resolve``): a detection replica with ingest off never
needs the camera passwords. A variable comes from the environment, else from a file of
that name in the secrets directory (Docker/Kubernetes secrets). A value placed in the
URL's user info is percent-encoded, so a password may hold ``@ : / ?`` as it is.

Every message names the field (``source.url``, ``source.fps``) and never a secret.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal
from urllib.parse import quote, unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.core.redact import redact_url

SCHEMES = ("rtsp", "rtsps", "http", "https", "file")
_VAR = re.compile(r"\$\{([^}]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


class SourceError(ValueError):
    """A source that cannot be used: ``field`` is the dotted field (``source.url``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _scheme(url: str) -> str | None:
    """The scheme as written (``file:relative`` has one too), lower-case; None if absent."""
    match = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", url)
    return match.group(1).lower() if match else None


def _check_scheme(url: str) -> None:
    scheme = _scheme(url)
    if scheme not in SCHEMES:
        shown = f"'{scheme}'" if scheme else "no scheme"
        raise ValueError(f"unsupported scheme {shown} in {redact_url(url)!r}: use one of "
                         + ", ".join(f"{s}://" for s in SCHEMES))


class SourceSpec(BaseModel):
    """Where a camera's frames come from and how they are sampled (``cameras[].source``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(min_length=1, max_length=2048,
                     description="rtsp://, rtsps://, http(s):// (MJPEG or any stream ffmpeg reads) or file:// "
                                 "(looped); ${VAR} is filled from the environment or the secrets directory")
    fps: float = Field(1.0, gt=0, le=30, description="frames per second sent to detection")
    transport: Literal["tcp", "udp"] = Field("tcp", description="RTSP transport")
    max_width: int = Field(1280, ge=64, le=7680, description="frames wider than this are scaled down in ffmpeg")
    hwaccel: Literal["none", "vaapi", "cuda"] = Field("none", description="hardware decode (AMD/Intel VAAPI, NVIDIA)")
    input_args: tuple[str, ...] = Field((), max_length=32, description="extra ffmpeg input options, for odd cameras")
    stall_after_s: float = Field(20.0, ge=1, le=3600, description="restart when no frame came for this long")
    max_backoff_s: float = Field(30.0, ge=1, le=3600, description="longest wait between restarts")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        value = value.strip()
        if any(ch in value for ch in "\x00\r\n\t "):
            raise ValueError("the URL must not contain spaces or control characters (percent-encode them)")
        for name in _VAR.findall(value):
            if not _NAME.fullmatch(name):
                raise ValueError(f"invalid variable ${{{name}}}: a name is letters, digits and _")
        if "${" in _VAR.sub("", value):
            raise ValueError("unclosed '${' (write variables as ${NAME})")
        if not value.startswith("${"):  # a whole-URL variable is checked once filled in
            _check_scheme(value)
        return value

    @field_validator("input_args")
    @classmethod
    def _args(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arg in value:
            if not arg or len(arg) > 256 or any(ch in arg for ch in "\x00\r\n"):
                raise ValueError("each input argument is 1-256 characters on one line")
        return value

    @property
    def variables(self) -> list[str]:
        """The ``${VAR}`` names of the URL, in order."""
        return _VAR.findall(self.url)


def _lookup(name: str, environ: Mapping[str, str], secrets_dir: Path | None) -> str | None:
    if name in environ:
        return environ[name]
    if secrets_dir is not None:
        path = Path(secrets_dir) / name
        if path.is_file():
            return path.read_text(encoding="utf-8").rstrip("\r\n")
    return None


def _userinfo_span(template: str) -> tuple[int, int]:
    """Where the user info sits in the unexpanded URL (start, end), or (0, 0) if none."""
    head = template.find("://")
    if head < 0:
        return 0, 0
    start = head + 3
    authority_end = len(template)
    for stop in "/?#":
        pos = template.find(stop, start)
        if pos >= 0:
            authority_end = min(authority_end, pos)
    at = template.rfind("@", start, authority_end)
    return (start, at) if at >= 0 else (0, 0)


def resolve(spec: SourceSpec, environ: Mapping[str, str], secrets_dir: Path | None = None,
            field: str = "source.url") -> str:
    """The URL with every ``${VAR}`` filled in (environment first, then a file named VAR in
    ``secrets_dir``). Raises ``SourceError`` naming ``field`` and the variable when one is
    unset, or when the filled-in URL has no usable scheme."""
    lo, hi = _userinfo_span(spec.url)
    missing: list[str] = []

    def fill(match: re.Match[str]) -> str:
        value = _lookup(match.group(1), environ, secrets_dir)
        if value is None:
            missing.append(match.group(1))
            return ""
        # in the user info the value is a password as the operator knows it: encode it
        return quote(value, safe="") if lo <= match.start() < hi else value

    url = _VAR.sub(fill, spec.url)
    if missing:
        where = f"the environment or {secrets_dir}" if secrets_dir else "the environment"
        names = ", ".join(f"${{{n}}}" for n in missing)
        raise SourceError(field, f"{names} {'is' if len(missing) == 1 else 'are'} not set (looked in {where})")
    try:
        _check_scheme(url)
    except ValueError as exc:
        raise SourceError(field, str(exc)) from None
    return url


def resolve_all(sources: Mapping[str, SourceSpec], environ: Mapping[str, str],
                secrets_dir: Path | None = None) -> dict[str, str]:
    """Every camera's URL, or one ``SourceError`` listing every camera that cannot be filled
    in (``cameras[gate-cam].source.url: ...``), so nothing changes on a partial failure."""
    urls: dict[str, str] = {}
    errors: list[SourceError] = []
    for camera_id, spec in sources.items():
        try:
            urls[camera_id] = resolve(spec, environ, secrets_dir, field=f"cameras[{camera_id}].source.url")
        except SourceError as exc:
            errors.append(exc)
    if errors:
        if len(errors) == 1:
            raise errors[0]
        raise SourceError(errors[0].field, "; ".join(str(e) for e in errors))
    return urls


def file_path(url: str) -> Path:
    """The local path of a ``file:`` URL: ``file:///abs/path`` or ``file:relative/path``."""
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise SourceError("source.url", "a file URL is file:///absolute/path or file:relative/path")
    return Path(unquote(parts.path))
