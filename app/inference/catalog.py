"""Named models (issue 41): the models file, read and checked, every problem at once.

The service serves one set of weights chosen at startup; a campus wants several (a custom
model for one gate, the COCO model elsewhere). The models file names them:

```yaml
models:
  - name: coco                 # what cameras, ``?model=`` and /v1/vision/custom/{name} use
    weights: yolov8n.pt        # a file inside the models folder (CAMPUSGUARD_MODELS_DIR)
  - name: campus
    weights: campus-v3.onnx
    backend: onnx              # where it differs from CAMPUSGUARD_BACKEND
    precision: fp32
```

Weights are read only from the models folder: a path that resolves outside it (``..``, an
absolute path elsewhere, a symbolic link out of it) is refused, so whoever edits the file
cannot make the service read an arbitrary file. A model's class names come from the model
itself (an Ultralytics checkpoint's ``names``, an ONNX export's ``names`` metadata), never
from the file, so rules and filters are checked against what the model really detects.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app.core.errors import ConfigError

NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
MAX_FILE_BYTES = 256 * 1024
MAX_MODELS = 32
WEIGHT_SUFFIXES = (".pt", ".onnx")


class ModelSpec(BaseModel):
    """One named model; unset runtime fields follow the service's own settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_RE, description="1-64 characters: a letter or digit, then letters, digits, _ . -")
    weights: str = Field(min_length=1, max_length=512, description="a .pt or .onnx file inside the models folder")
    backend: Literal["torch", "onnx", "openvino"] | None = None
    precision: Literal["fp32", "fp16", "bf16", "int8"] | None = None
    shapes: str | None = Field(default=None, max_length=200, description="as CAMPUSGUARD_SHAPES")

    @field_validator("weights")
    @classmethod
    def _suffix(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("must not contain a NUL character")
        if not value.lower().endswith(WEIGHT_SUFFIXES):
            raise ValueError(f"must be a {' or '.join(WEIGHT_SUFFIXES)} file, got {value[:80]!r}")
        return value


class ModelsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    models: list[ModelSpec] = Field(min_length=1, max_length=MAX_MODELS)


class ModelsConfigError(ConfigError):
    """The models file is invalid: ``errors`` lists every problem, each naming its field."""

    code = "invalid_models_config"

    def __init__(self, source: Path | str, errors: Sequence[str]) -> None:
        self.source, self.errors = str(source), list(errors)
        super().__init__(f"models file {source} is invalid:\n" + "\n".join(f"  - {e}" for e in self.errors))


@dataclass(frozen=True, slots=True)
class NamedModel:
    """A model of the catalog: its spec, where its weights are, and the classes it detects."""

    spec: ModelSpec
    path: Path
    names: dict[int, str]

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True, slots=True)
class Catalog:
    """The named models in file order; the first is the default of a camera that names none."""

    models: tuple[NamedModel, ...]

    @property
    def default(self) -> NamedModel:
        return self.models[0]

    def get(self, name: str) -> NamedModel | None:
        return next((m for m in self.models if m.name == name), None)

    def names(self) -> list[str]:
        return [m.name for m in self.models]


ClassReader = Callable[[Path], dict[int, str]]


def confine(folder: Path, weights: str) -> Path:
    """``weights`` resolved inside ``folder`` (links followed), or ValueError naming why not."""
    root = folder.resolve()
    candidate = Path(weights)
    path = (candidate if candidate.is_absolute() else root / candidate).resolve()
    if path != root and root not in path.parents:
        raise ValueError(f"must be inside the models folder {root} (CAMPUSGUARD_MODELS_DIR), got {weights[:200]!r}")
    if not path.is_file():
        raise ValueError(f"no such file in the models folder: {weights[:200]!r}")
    return path


def parse_models(data: bytes, source: Path | str, folder: Path, read_classes: ClassReader) -> Catalog:
    """Bytes of a models file -> a ``Catalog``; ModelsConfigError lists every problem."""
    if len(data) > MAX_FILE_BYTES:
        raise ModelsConfigError(source, [f"the file is {len(data)} bytes; at most {MAX_FILE_BYTES}"])
    try:
        raw = yaml.safe_load(data.decode("utf-8")) if data.strip() else None
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ModelsConfigError(source, [f"not valid UTF-8 YAML: {str(exc).splitlines()[0][:200]}"]) from None
    if not isinstance(raw, dict):
        raise ModelsConfigError(source, ["the file must be a mapping with a `models:` list"])
    try:
        parsed = ModelsFile.model_validate(raw)
    except ValidationError as exc:
        raise ModelsConfigError(source, [f"{_loc(e['loc'])}: {e['msg']}" for e in exc.errors()]) from None
    errors: list[str] = []
    seen: dict[str, int] = {}
    models: list[NamedModel] = []
    for index, spec in enumerate(parsed.models):
        where = f"models[{index}]"
        if spec.name in seen:
            errors.append(f"{where}.name: {spec.name!r} is already the name of models[{seen[spec.name]}]")
            continue
        seen[spec.name] = index
        try:
            path = confine(folder, spec.weights)
        except ValueError as exc:
            errors.append(f"{where}.weights: {exc}")
            continue
        try:
            names = read_classes(path)
        except (ConfigError, ValueError, OSError) as exc:
            message = exc.message if isinstance(exc, ConfigError) else str(exc)
            errors.append(f"{where}.weights: cannot read the model's classes: {message[:300]}")
            continue
        models.append(NamedModel(spec=spec, path=path, names=names))
    if errors:
        raise ModelsConfigError(source, errors)
    return Catalog(tuple(models))


def load_models(path: Path, folder: Path, read_classes: ClassReader | None = None) -> Catalog:
    """Read the models file at ``path`` (a regular file, size checked before reading)."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise ModelsConfigError(path, [f"cannot read it: {exc.strerror or exc}"]) from None
    if not path.is_file():
        raise ModelsConfigError(path, ["not a regular file"])
    if stat.st_size > MAX_FILE_BYTES:
        raise ModelsConfigError(path, [f"the file is {stat.st_size} bytes; at most {MAX_FILE_BYTES}"])
    return parse_models(path.read_bytes(), path, folder, read_classes or class_names)


def _loc(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(file)"


# --- class names from the model itself ----------------------------------------------------
def class_names(path: Path) -> dict[int, str]:
    """The classes a model detects, read from the model file."""
    if path.suffix.lower() == ".onnx":
        return onnx_class_names(path)
    return checkpoint_class_names(path)


def onnx_class_names(path: Path) -> dict[int, str]:
    """An Ultralytics ONNX export keeps ``names`` in its metadata (a Python dict literal)."""
    import onnx

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, its own errors, OSError: the file is not a model
        raise ValueError(f"not an ONNX model ({type(exc).__name__})") from None
    meta = {p.key: p.value for p in proto.metadata_props}
    if "names" not in meta:
        raise ValueError("the ONNX model has no `names` metadata (export it with `campusguard export`)")
    return parse_names(meta["names"])


def checkpoint_class_names(path: Path) -> dict[int, str]:
    """An Ultralytics checkpoint's ``names``: read from its pickle with stand-ins, without torch
    (app/inference/checkpoint_names.py); a file that does not read that way (a legacy torch
    format, names kept elsewhere, a corrupt file: its error) is loaded as Ultralytics loads it."""
    from app.inference.checkpoint_names import checkpoint_names

    try:
        names = checkpoint_names(path)
    except ValueError:
        names = None
    if names is not None:
        return parse_names(names)
    from app.inference.backends.models import load_detection_model

    return parse_names(load_detection_model(path).names)


def parse_names(value: object) -> dict[int, str]:
    """``{0: 'person', ...}`` as a dict or its text; ids from 0, names 1-64 printable characters."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise ValueError("the model's `names` is not a dict literal") from None
    if isinstance(value, (list, tuple)):
        value = dict(enumerate(value))
    if not isinstance(value, dict) or not value:
        raise ValueError("the model declares no class names")
    names: dict[int, str] = {}
    for key, name in value.items():
        if not isinstance(key, int) or key < 0 or not isinstance(name, str):
            raise ValueError(f"class {key!r}: ids must be integers from 0 and names text")
        if not re.fullmatch(r"[^\x00-\x1f\x7f]{1,64}", name):
            raise ValueError(f"class {key}: its name must be 1-64 printable characters")
        names[key] = name
    if sorted(names) != list(range(len(names))):
        raise ValueError("class ids must run 0..N-1 without gaps")
    return names
