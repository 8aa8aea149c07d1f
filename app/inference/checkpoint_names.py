"""A checkpoint's class names without importing torch: its pickle read with stand-ins only.

Why: reading ``names`` the way Ultralytics does (``YOLO(path)``) imports torch and Ultralytics,
about 500 MiB of resident memory that a process serving OpenVINO or ONNX Runtime never needs
and never gives back: a runtime swap that only wanted the classes of the new file would leave
the replica that much larger (docs/models.md). It is also safer: no class named in the file
is imported and no callable in it runs (every global the pickle names is a stand-in), so a
hostile ``.pt`` can say nothing but data here.

A torch checkpoint is a zip whose ``<archive>/data.pkl`` holds the object tree; tensors are
"persistent ids" into the zip's ``data/`` entries, which are not read. Ultralytics keeps the
names as the ``names`` attribute of ``checkpoint["model"]`` (or of ``ema``).
"""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path
from typing import Any

MAX_PICKLE_BYTES = 64 << 20  # a detection model's object tree is well under 1 MiB; the tensors are elsewhere


class _StandIn:
    """Whatever the pickle names (a module class, a rebuild function): it takes any arguments
    and any state, and keeps the state so ``names`` can be found."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.__dict__["_args"] = args

    def __call__(self, *args: Any, **kwargs: Any) -> _StandIn:
        return _StandIn(*args)

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):  # (state, slotstate)
            state = {**(state[0] or {}), **state[1]}
        if isinstance(state, dict):
            self.__dict__.update({k: v for k, v in state.items() if isinstance(k, str)})

    def __setitem__(self, key: Any, value: Any) -> None:  # dict subclasses (OrderedDict of parameters)
        self.__dict__.setdefault("_items", {})[key] = value

    def append(self, value: Any) -> None:  # list subclasses
        self.__dict__.setdefault("_list", []).append(value)

    def extend(self, values: Any) -> None:
        self.__dict__.setdefault("_list", []).extend(values)


_SAFE = {("collections", "OrderedDict"): dict, ("builtins", "set"): set, ("builtins", "frozenset"): frozenset,
         ("builtins", "slice"): slice, ("builtins", "complex"): complex}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return _SAFE.get((module, name), _StandIn)

    def persistent_load(self, pid: Any) -> None:  # a tensor's storage: not read
        return None


def checkpoint_names(path: Path) -> Any:
    """The raw ``names`` of the Ultralytics checkpoint at ``path`` (a dict or list, unchecked),
    or None when the file holds none there. ValueError when it is not a torch zip checkpoint."""
    try:
        with zipfile.ZipFile(path) as archive:
            entry = next((i for i in archive.infolist() if i.filename.endswith("/data.pkl")
                          or i.filename == "data.pkl"), None)
            if entry is None:
                raise ValueError("not a torch checkpoint (no data.pkl in it)")
            if entry.file_size > MAX_PICKLE_BYTES:
                raise ValueError(f"its object tree is {entry.file_size} bytes: not a detection checkpoint")
            data = archive.read(entry)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ValueError(f"not a torch checkpoint ({type(exc).__name__})") from None
    try:
        tree = _Unpickler(io.BytesIO(data)).load()
    except Exception as exc:  # a truncated or garbled pickle, in any of pickle's many ways
        raise ValueError(f"its checkpoint does not read ({type(exc).__name__})") from None
    if not isinstance(tree, dict):
        return None
    for key in ("model", "ema"):
        holder = tree.get(key)
        names = getattr(holder, "__dict__", {}).get("names") if holder is not None else None
        if names is not None:
            return names
    return None
