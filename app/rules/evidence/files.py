"""Where an event's evidence lives: ``<snapshot_dir>/<event id>.jpg`` and ``.mp4``, and the
URLs that serve them. The one place those paths are computed (snapshots, clips, retention
and the API all ask here), so a hostile event id can never name another file.
"""

from __future__ import annotations

from pathlib import Path

from app.core.text import is_event_id

SNAPSHOT, CLIP = ".jpg", ".mp4"
SUFFIX_COLUMN = {SNAPSHOT: "snapshot", CLIP: "clip"}  # evidence file -> the event column pointing at it


def snapshot_url(event_id: str) -> str:
    return f"/events/{event_id}/snapshot"


def clip_url(event_id: str) -> str:
    return f"/events/{event_id}/clip.mp4"


def valid_id(event_id: str) -> bool:
    """An id that can only name a file of its own (letters and digits, not too long)."""
    return is_event_id(event_id)


class EvidenceFiles:
    """The evidence folder of this replica (each replica has its own)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def path(self, event_id: str, suffix: str) -> Path | None:
        """Where the event's file of this kind goes (None for an id that is not ours)."""
        return self.folder / f"{event_id}{suffix}" if valid_id(event_id) else None

    def existing(self, event_id: str, suffix: str) -> Path | None:
        """The event's file if it exists now."""
        path = self.path(event_id, suffix)
        return path if path is not None and path.is_file() else None

    def all_of(self, event_id: str) -> list[Path]:
        """Every evidence path of an event (for deletion)."""
        return [p for suffix in SUFFIX_COLUMN if (p := self.path(event_id, suffix)) is not None]

    def listing(self) -> list[tuple[float, int, Path]]:
        """(mtime, size, path) of every snapshot and clip, oldest first."""
        if not self.folder.is_dir():
            return []
        out = []
        for path in (p for suffix in SUFFIX_COLUMN for p in self.folder.glob(f"*{suffix}")):
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            out.append((st.st_mtime, st.st_size, path))
        return sorted(out)
