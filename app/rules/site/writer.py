"""The site file on disk: its version, and zone edits written safely (the console's zone editor).

An edit is applied to the YAML document with ruamel.yaml's round-trip mode, so the
operator's comments, key order and quoting elsewhere in the file survive. The text that
would be written is validated exactly as the next load reads it (PyYAML + the site
validator); only then is it written:

* atomically: a temp file in the same directory, fsync, ``os.replace`` (a crash leaves the
  old file or the new one, never half of one);
* with the previous version kept beside it as ``<file>.bak``;
* serialized by a lock, and optionally only if the file is still the version the editor
  started from (``If-Match``), so two operators cannot silently overwrite each other.

A file on a read-only mount (a Kubernetes ConfigMap) is refused with ``site_read_only``.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import stat
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from app.core.errors import NotFound, SiteChanged, SiteReadOnly, shorten
from app.rules.site.comments import put_tail_comment, replace_head_comment, take_tail_comment
from app.rules.site.emit import MAX_DEPTH, coerced, round_trip_yaml, same_data, to_node, too_deep
from app.rules.site.loader import (
    Issue,
    Loc,
    SiteConfigError,
    parse_site_bytes,
    parse_site_file,
    read_site_bytes,
    value_issues,
)
from app.rules.site.schema import SiteConfig

READ_ONLY_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)


def version_of(data: bytes) -> str:
    """The site file's version: the first 16 hex digits of the SHA-256 of its bytes."""
    return hashlib.sha256(data).hexdigest()[:16]


class InvalidZone(SiteConfigError):
    """A zone edit that would make the site file invalid; ``detail`` is ``[{field, message}]``
    with ``field`` a dotted path relative to the zone (``""``: not inside the zone)."""

    def __init__(self, path: Path | str, issues: Sequence[Issue], zone_loc: tuple | None) -> None:
        super().__init__(path, issues)
        self.fields = [{"field": relative(i.loc, zone_loc), "message": i.message} for i in self.issues]

    @property
    def detail(self) -> list:
        return self.fields


def relative(loc: tuple | None, zone_loc: tuple | None) -> str:
    """``("cameras", 0, "zones", 2, "rules", 0, "min_count")`` -> ``"rules.0.min_count"`` for zone 2 of
    camera 0; ``""`` for a location outside the zone."""
    if loc is None or zone_loc is None or loc[:len(zone_loc)] != zone_loc:
        return ""
    return ".".join(map(str, loc[len(zone_loc):]))


class SiteFile:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.backup_path = self.path.with_name(self.path.name + ".bak")
        self._lock = threading.Lock()

    def load(self) -> tuple[SiteConfig, str]:
        """The validated config and the version of the bytes it came from (one read)."""
        data = read_site_bytes(self.path)
        return parse_site_bytes(data, self.path), version_of(data)

    def writable(self) -> bool:
        """Whether an edit can be written: the file and its directory (temp file, rename)."""
        target = self.path.resolve()
        return os.access(target, os.W_OK) and os.access(target.parent, os.W_OK)

    def put_zone(self, camera_id: str, zone_name: str, zone: dict[str, Any] | None,
                 if_match: str | None = None, check: Callable[[SiteConfig], None] | None = None) -> str:
        """Create, replace (``zone["name"]`` may rename it) or, with ``zone=None``, delete one
        zone of one camera; the rest of the file is untouched. Returns the new version.

        Raises NotFound (``unknown_camera`` / ``unknown_zone``), SiteChanged (412),
        SiteReadOnly (409) or InvalidZone (422); on any of them nothing is written. ``check``
        sees the config as it would read back (the site's followers: a rule's class its camera's
        model lacks) and refuses it with a SiteConfigError, before anything is written."""
        if zone is not None and too_deep(zone):
            raise InvalidZone(self.path, [Issue(None, f"the zone nests deeper than {MAX_DEPTH} levels")], None)
        if zone is not None and (issues := value_issues(zone)):  # NUL, lone surrogates, Infinity: never written
            raise InvalidZone(self.path, issues, ())
        with self._lock:
            data = self.path.read_bytes()
            if if_match is not None and if_match.strip().removeprefix("W/").strip('"') != version_of(data):
                raise SiteChanged(f"the site file changed since version {shorten(if_match)} (now {version_of(data)}); "
                                  "reload it and apply the edit again")
            if not self.writable():
                raise SiteReadOnly(f"the site file {self.path} is read-only here (a ConfigMap mount?): "
                                   "mount it from a writable volume to edit zones (docs/console.md)")
            y = round_trip_yaml()
            try:
                doc = y.load(data.decode("utf-8"))
            except Exception as exc:  # edited by hand since the last load: a zone edit cannot fix it
                problem = Issue(None, f"the site file on disk cannot be read: {exc}")
                raise InvalidZone(self.path, [problem], None) from exc
            ci, cam = self._camera(doc, camera_id)
            zones = cam.get("zones")
            cam_tail = None
            if not isinstance(zones, list):  # the comment after the camera stays after it
                cam_tail = take_tail_comment(cam)
                zones = cam["zones"] = CommentedSeq()
            zi = next((i for i, z in enumerate(zones) if isinstance(z, dict) and z.get("name") == zone_name), None)
            if zone is None:
                if zi is None:
                    raise NotFound(f"camera {camera_id!r} has no zone {shorten(zone_name)}", code="unknown_zone")
                tail = take_tail_comment(zones[zi])
                del zones[zi]
                if zi > 0:  # the lines above the deleted zone were its own (comments belong to what follows)
                    take_tail_comment(zones[zi - 1])
                    put_tail_comment(zones[zi - 1], tail)
                elif not zones:  # the last zone: drop the key (ruamel cannot put a comment after "zones: []")
                    del cam["zones"]
                    put_tail_comment(cam, tail)
                else:  # the first of several: its header goes with it, the second's moves up
                    replace_head_comment(cam, "zones", tail)
            else:
                zi = self._place(zones, zi, zone)
            put_tail_comment(cam, cam_tail)
            out = io.StringIO()
            y.dump(doc, out)
            new = out.getvalue().encode("utf-8")
            self._validate(new, ci, zones, zi, zone)
            if check is not None:
                try:
                    check(parse_site_file(new, self.path)[1])
                except SiteConfigError as exc:  # the zone edit's shape (422, detail: field and message)
                    raise InvalidZone(self.path, exc.issues, None) from None
            self._write(data, new)
            return version_of(new)

    @staticmethod
    def _camera(doc: Any, camera_id: str) -> tuple[int, CommentedMap]:
        cams = doc.get("cameras") if isinstance(doc, dict) else None
        for ci, cam in enumerate(cams if isinstance(cams, list) else ()):
            # the round-trip loader reads every mapping as a CommentedMap
            if isinstance(cam, CommentedMap) and cam.get("id") == camera_id:
                return ci, cam
        raise NotFound(f"camera {shorten(camera_id)} is not in the site file", code="unknown_camera")

    @staticmethod
    def _place(zones: CommentedSeq, zi: int | None, zone: dict[str, Any]) -> int:
        """Put the zone in place of the old one (in place, so comments on kept keys stay) or at the end."""
        if zi is None:  # the comment after the last zone (the next camera's header) moves below the new one
            tail = take_tail_comment(zones[-1]) if len(zones) else None
            zones.append(to_node(zone))
            put_tail_comment(zones[-1], tail)
            return len(zones) - 1
        old = zones[zi]
        tail = take_tail_comment(old)
        for key in [k for k in old if k not in zone]:
            del old[key]
        for key, value in zone.items():
            old[to_node(str(key))] = to_node(value)
        put_tail_comment(old, tail)
        return zi

    def _validate(self, new: bytes, ci: int, zones: CommentedSeq, zi: int | None, zone: dict[str, Any] | None) -> None:
        """The site validator on the exact bytes to be written, its errors placed relative to the zone.

        A name already taken is reported on the edited zone's ``name`` (the validator would
        name whichever of the two comes later in the file)."""
        # an edited zone (not a deletion) has been placed, so it has an index
        zone_loc: Loc | None = ("cameras", ci, "zones", zi) if zone is not None and zi is not None else None
        issues: list[Issue] = []
        name = zone.get("name") if zone is not None else None
        taken = isinstance(name, str) and any(isinstance(z, dict) and z.get("name") == name
                                              for i, z in enumerate(zones) if i != zi)
        if taken and zone_loc is not None:
            issues.append(Issue((*zone_loc, "name"), f"the camera already has a zone named {name!r}"))
        try:
            raw, config = parse_site_file(new, self.path)
        except SiteConfigError as exc:
            issues += [i for i in exc.issues if not (taken and i.loc is not None and len(i.loc) == 5
                                                     and i.loc[:3] == ("cameras", ci, "zones") and i.loc[4] == "name")]
        else:
            if zone is not None and zi is not None and zone_loc is not None:  # the edit must read back as it was sent
                kept = config.cameras[ci].zones[zi].model_dump(mode="json")
                issues += [Issue((*zone_loc, *where), message) for where, message in coerced(zone, kept)]
                if not issues and not same_data(raw["cameras"][ci]["zones"][zi], zone):  # a safety net: to_node
                    issues.append(Issue(zone_loc, "the zone cannot be written so that the site file reads back "
                                                  "the same; nothing was written"))
        if issues:
            raise InvalidZone(self.path, issues, zone_loc)

    def _write(self, old: bytes, new: bytes) -> None:
        """Backup, then temp file + fsync + rename (the directory entry is fsynced too). Both
        files get the site file's permissions and, where this process may, its owner: an edit
        must not turn a 0644 file that other tools read into a 0600 one."""
        directory = self.path.resolve().parent
        try:
            like = os.stat(self.path.resolve())
            self._atomic(directory, self.backup_path.name, old, like)
            self._atomic(directory, self.path.resolve().name, new, like)
        except OSError as exc:
            if exc.errno in READ_ONLY_ERRNOS:
                raise SiteReadOnly(f"the site file {self.path} cannot be written here ({exc.strerror}): "
                                   "mount it from a writable volume to edit zones (docs/console.md)") from exc
            raise

    @staticmethod
    def _atomic(directory: Path, name: str, data: bytes, like: os.stat_result) -> None:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                keep_mode_and_owner(fh.fileno(), like)
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, directory / name)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def keep_mode_and_owner(fd: int, like: os.stat_result) -> None:
    """Give a new file the owner and group of ``like`` where allowed (root may; another user may
    at most keep the group, if it is one of theirs), then its permission bits."""
    mine = os.fstat(fd)
    if (mine.st_uid, mine.st_gid) != (like.st_uid, like.st_gid):
        for uid, gid in ((like.st_uid, like.st_gid), (-1, like.st_gid)):
            try:
                os.fchown(fd, uid, gid)
                break
            except PermissionError:
                continue
    os.fchmod(fd, stat.S_IMODE(like.st_mode))
