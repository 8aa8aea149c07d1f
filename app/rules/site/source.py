"""A camera's ``source:`` block in the site file: where its frames come from and how they are sampled.

Part of the site file's schema (one source of truth with the camera's zones), so the site
loader validates it wherever the file is read: every replica, the gateway, the zone editor,
a dry run. A bad block is refused with the field named (``cameras[0].source.fps: ...``).

What is *not* done here: filling in ``${VAR}``. The URL is kept as written, and only the
process that pulls the stream (the embedded ingest, or ``campusguard gateway``) fills it in
(app/ingest/source.py, through app/core/secrets.py), so a detection replica with ingest off
never needs the camera passwords. ``$${`` stands for a literal ``${``. What *is* checked
here: a URL only in the ``scheme://`` form (ffmpeg also reads ``rtsp:/user:pw@host`` and
``rtsp:user:pw@host``, forms that hide user info from a careless reader), a ``${VAR}`` only
for camera credentials (never a service setting, app/core/secrets.py) and ``input_args``
only from the list of input options (app/rules/site/input_args.py).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

from app.core.redact import redact_url
from app.core.secrets import SecretError, check_var_name
from app.rules.site.input_args import check_input_args

SCHEMES = ("rtsp", "rtsps", "http", "https", "file")
VARIABLE = re.compile(r"(?<!\$)\$\{([^}]*)\}")  # ${NAME}, not $${ (a literal)
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def scheme_of(url: str) -> str | None:
    """The scheme as written (``file:relative`` has one too), lower-case; None if absent."""
    match = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", url)
    return match.group(1).lower() if match else None


def check_scheme(url: str) -> None:
    """ValueError (URL shown redacted) unless ``url`` has one of SCHEMES, written
    ``scheme://`` (or the documented ``file:relative/path``)."""
    scheme = scheme_of(url)
    if scheme not in SCHEMES:
        shown = f"'{scheme}'" if scheme else "no scheme"
        raise ValueError(f"unsupported scheme {shown} in {redact_url(url)!r}: use one of "
                         + ", ".join(f"{s}://" for s in SCHEMES))
    rest = url[len(scheme) + 1:]
    if rest.startswith("//"):
        return
    if scheme == "file" and not rest.startswith("/"):
        return  # file:relative/path (docs/cameras.md)
    raise ValueError(f"write the URL as {scheme}://... ({redact_url(url)!r} is in a form ffmpeg reads as "
                     f"{scheme}://, but that hides its user info; file:relative/path is the one exception)")


class SourceSpec(BaseModel):
    """Where a camera's frames come from and how they are sampled (``cameras[].source``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(min_length=1, max_length=2048,
                     description="rtsp://, rtsps://, http(s):// (MJPEG or any stream ffmpeg reads) or file:// "
                                 "(looped); ${VAR} is filled from CAMPUSGUARD_SECRETS_DIR/VAR or the environment "
                                 "by the process that pulls the stream")
    fps: float = Field(1.0, gt=0, le=30, description="frames per second sent to detection")
    transport: Literal["tcp", "udp"] = Field("tcp", description="RTSP transport")
    max_width: int = Field(1280, ge=64, le=7680, description="frames wider than this are scaled down in ffmpeg")
    hwaccel: Literal["none", "vaapi", "cuda", "auto"] = Field(
        "none", description="hardware decode (AMD/Intel VAAPI, NVIDIA); auto: NVDEC or VA-API when the replica "
                            "pulling the stream serves its model on a GPU and the node exposes one, else none "
                            "(a gateway: none)")
    input_args: tuple[str, ...] = Field((), max_length=32, description="extra ffmpeg input options, for odd cameras: "
                                        "options of docs/cameras.md's list, each with its value")
    stall_after_s: float = Field(20.0, ge=1, le=3600, description="restart when no frame came for this long")
    max_backoff_s: float = Field(30.0, ge=1, le=3600, description="longest wait between restarts")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        value = value.strip()
        if any(ch in value for ch in "\x00\r\n\t "):
            raise ValueError("the URL must not contain spaces or control characters (percent-encode them)")
        for name in VARIABLE.findall(value):
            if not NAME.fullmatch(name):
                raise ValueError(f"invalid variable ${{{name[:64]}}}: a name is letters, digits and _")
            try:
                check_var_name(name)
            except SecretError as exc:
                raise ValueError(exc.message) from None
        if "${" in VARIABLE.sub("", value).replace("$${", ""):
            raise ValueError("unclosed '${' (write variables as ${NAME})")
        if not VARIABLE.match(value):  # a URL that starts with a variable is checked once filled in
            check_scheme(value)
        return value

    @field_serializer("url", when_used="json")
    def _shown(self, value: str) -> str:
        """As JSON (GET /site, the console) the URL is shown redacted: a password or token
        written into the file by hand never leaves it (app/core/redact.py)."""
        return redact_url(value)

    @field_validator("input_args")
    @classmethod
    def _args(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arg in value:
            if not arg or len(arg) > 256 or any(ch in arg for ch in "\x00\r\n"):
                raise ValueError("each input argument is 1-256 characters on one line")
        check_input_args(value)
        return value

    @property
    def variables(self) -> list[str]:
        """The ``${VAR}`` names of the URL, in order."""
        return VARIABLE.findall(self.url)
