"""Filling in a camera source's ``${VAR}``: done only by the process that pulls the stream.

The ``source:`` block itself (``SourceSpec``) is part of the site file's schema
(app/rules/site/source.py) and is validated wherever the file is read. Its ``${VAR}`` are
expanded here, by the embedded ingest or ``campusguard gateway``, never by a detection
replica with ingest off (which therefore never needs the camera passwords). There is one way
to resolve a secret in this project, ``app.core.secrets.resolve_vars``: the file
``<secrets dir>/VAR`` (Docker/Kubernetes secrets) when it exists, else the environment
variable ``VAR`` when its name starts with ``CAMPUSGUARD_CAMERA_``. A value placed in the
URL's user info is percent-encoded, so a password may hold ``@ : / ?`` as it is.

The filled-in URL is for ffmpeg only. What is shown (logs, GET /cameras, the gateway's
reports) is built from the template, ``redact_url(spec.url)``, so a token filled into the
path or host shows as ``${NAME}``; and every value filled in is a secret that ffmpeg's
error lines are scrubbed of (``Resolved.secrets``).

Every message names the field (``cameras[0].source.url``) and the variable, never a secret.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from app.core.redact import redact_url, url_secrets
from app.core.secrets import SecretError, resolve_vars
from app.rules.site.loader import Issue, SiteConfigError
from app.rules.site.schema import SiteConfig
from app.rules.site.source import SCHEMES, SourceSpec, check_scheme

__all__ = ["SCHEMES", "Resolved", "SourceError", "SourceSpec", "file_path", "resolve", "resolve_all",
           "resolve_site", "resolve_source", "sources_of"]


class SourceError(ValueError):
    """A source that cannot be used: ``field`` is the dotted field (``source.url``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


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


@dataclass(frozen=True)
class Resolved:
    """A source filled in: ``url`` for ffmpeg only; ``shown`` (from the template) for everything
    else; ``secrets``: what must never be shown (each value filled in, the user info's
    password, query values), for scrubbing ffmpeg's error lines."""

    url: str
    shown: str
    secrets: tuple[str, ...]


def resolve_source(spec: SourceSpec, environ: Mapping[str, str], secrets_dir: Path | None = None,
                   field: str = "source.url") -> Resolved:
    """The source with every ``${VAR}`` filled in (``resolve_vars``: the secrets directory, then
    ``CAMPUSGUARD_CAMERA_*`` environment variables). Raises ``SourceError`` naming ``field``
    and the variable when one is not defined, or when the filled-in URL has no usable scheme."""
    lo, hi = _userinfo_span(spec.url)
    filled: list[str] = []

    def encode(position: int, value: str) -> str:
        # in the user info the value is a user or password as the operator knows it: encode it
        inserted = quote(value, safe="") if lo <= position < hi else value
        filled.extend((value, inserted))
        return inserted

    try:
        url = resolve_vars(spec.url, environ, secrets_dir, encode)
    except SecretError as exc:
        raise SourceError(field, exc.message) from None
    try:
        check_scheme(url)
    except ValueError as exc:  # the message shows the template, never a value filled in
        raise SourceError(field, str(exc).replace(redact_url(url), redact_url(spec.url))) from None
    secrets = sorted({*filled, *url_secrets(url)}, key=len, reverse=True)
    return Resolved(url, redact_url(spec.url), tuple(secrets))


def resolve(spec: SourceSpec, environ: Mapping[str, str], secrets_dir: Path | None = None,
            field: str = "source.url") -> str:
    """The URL with every ``${VAR}`` filled in (``resolve_source``), for ffmpeg."""
    return resolve_source(spec, environ, secrets_dir, field).url


def resolve_all(sources: Mapping[str, SourceSpec], environ: Mapping[str, str],
                secrets_dir: Path | None = None) -> dict[str, Resolved]:
    """Every camera's source filled in, or one ``SourceError`` listing every camera that cannot
    be (``cameras[gate-cam].source.url: ...``), so nothing changes on a partial failure."""
    urls: dict[str, Resolved] = {}
    errors: list[SourceError] = []
    for camera_id, spec in sources.items():
        try:
            urls[camera_id] = resolve_source(spec, environ, secrets_dir, field=f"cameras[{camera_id}].source.url")
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


def sources_of(config: SiteConfig) -> dict[str, SourceSpec]:
    """Camera id -> source, for the cameras of the site file that have one."""
    return {camera.id: camera.source for camera in config.cameras if camera.source is not None}


def resolve_site(config: SiteConfig, environ: Mapping[str, str], secrets_dir: Path | None,
                 path: Path | str = "<site config>", only: set[str] | None = None) -> dict[str, str]:
    """Every source URL of the site file (of the cameras in ``only``: a gateway's shard) filled
    in, or a ``SiteConfigError`` listing each one that cannot be (``cameras[0].source.url:
    ${GATE_PW} is not defined ...``): what a reload answers with 422 and startup exits 2 with,
    where this process pulls the streams."""
    urls: dict[str, str] = {}
    issues: list[Issue] = []
    for index, camera in enumerate(config.cameras):
        if camera.source is None or (only is not None and camera.id not in only):
            continue
        try:
            urls[camera.id] = resolve(camera.source, environ, secrets_dir)
        except SourceError as exc:
            issues.append(Issue(("cameras", index, "source", "url"), exc.message))
    if issues:
        raise SiteConfigError(path, issues)
    return urls
