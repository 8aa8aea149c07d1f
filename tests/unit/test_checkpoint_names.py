"""A checkpoint's class names read without torch (app/inference/checkpoint_names.py): the same
names as Ultralytics reads, no code in the file runs, and bad files are a clear ValueError."""

from __future__ import annotations

import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from app.inference.checkpoint_names import checkpoint_names
from tests.support.models import renamed_copy


def test_the_names_match_what_ultralytics_reads_and_torch_is_not_imported(weights: Path, tmp_path: Path):
    custom = renamed_copy(weights, tmp_path / "campus.pt", {0: "student", 2: "vehicle"})
    code = ("import sys; from pathlib import Path; from app.inference.checkpoint_names import checkpoint_names; "
            f"print(repr(checkpoint_names(Path({str(custom)!r})))); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    from ultralytics import YOLO

    assert eval(out[0]) == dict(YOLO(str(custom), task="detect").model.names)  # noqa: S307 - our own repr
    assert eval(out[0])[0] == "student" and out[1] == "False"  # noqa: S307


class _Boom:
    def __reduce__(self):
        return (Path.unlink, (Path(self.target),))

    def __init__(self, target: Path) -> None:
        self.target = str(target)


def checkpoint(path: Path, tree: object) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x/data.pkl", pickle.dumps(tree))
    return path


def test_nothing_the_file_names_runs(tmp_path: Path):
    marker = tmp_path / "marker"
    marker.write_text("still here")
    hostile = checkpoint(tmp_path / "hostile.pt", {"model": _Boom(marker), "names": {0: "x"}})
    assert checkpoint_names(hostile) is None  # the model is a stand-in: no names, and nothing ran
    assert marker.read_text() == "still here"


@pytest.mark.parametrize("content", [b"", b"garbage" * 100, b"PK\x03\x04truncated"])
def test_garbage_is_a_value_error(tmp_path: Path, content: bytes):
    path = tmp_path / "bad.pt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="not a torch checkpoint"):
        checkpoint_names(path)


def test_a_truncated_pickle_is_a_value_error(weights: Path, tmp_path: Path):
    with zipfile.ZipFile(weights) as source:
        data = next(source.read(i) for i in source.infolist() if i.filename.endswith("/data.pkl"))
    path = tmp_path / "cut.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x/data.pkl", data[: len(data) // 2])
    with pytest.raises(ValueError, match="does not read"):
        checkpoint_names(path)
