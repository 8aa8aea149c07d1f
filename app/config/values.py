"""How some settings' values are read: devices, comma lists, ONNX providers, the MQTT URL and
the paths that default into ``data_dir``.

Plain functions beside the ``Settings`` model (app/config/settings.py), which calls them from
its validators: each turns what an operator wrote into the value the service uses, or raises
a ValueError that pydantic reports with the variable's name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from pydantic import AnyUrl, TypeAdapter, UrlConstraints

DEFAULT_DATA_DIR = Path(".cache/campusguard")
ONNX_PROVIDER_ALIASES = {"migraphx": "MIGraphXExecutionProvider", "rocm": "ROCMExecutionProvider",
    "cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider", "cpu": "CPUExecutionProvider"}
MQTT_URL = TypeAdapter(Annotated[AnyUrl, UrlConstraints(allowed_schemes=["mqtt", "mqtts"], host_required=True)])
_DEVICE_RE = re.compile(r"^(cpu|cuda(:\d+)?)$")


def normalize_device(value: str) -> str:
    """'cpu', 'cuda', '0', 'cuda:1' -> 'cpu' or 'cuda:N'; anything else is a ValueError."""
    value = value.strip().lower()
    if value.isdigit():
        value = f"cuda:{value}"
    if not _DEVICE_RE.match(value):
        raise ValueError(f"device must be 'cpu' or 'cuda:N', got {value!r}")
    return "cuda:0" if value == "cuda" else value


def data_dir_defaults(data: dict) -> dict:
    """Paths not given default to places in ``data_dir`` (one setting moves them all)."""
    base = Path(str(data.get("data_dir") or DEFAULT_DATA_DIR))
    if not data.get("events_db_url"):
        data["events_db_url"] = f"sqlite:///{base / 'events.db'}"
    for name, default in (("snapshot_dir", base / "snapshots"), ("onnx_cache_dir", base)):
        if data.get(name) in (None, ""):
            data[name] = default
    return data


def split_csv(value: object) -> object:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


def onnx_providers(value: object) -> object:
    """A comma list of provider names or aliases -> full ONNX Runtime provider names."""
    value = split_csv(value)
    if isinstance(value, list):
        out = []
        for item in value:
            name = ONNX_PROVIDER_ALIASES.get(str(item).lower(), str(item))
            if not name.endswith("ExecutionProvider"):
                raise ValueError(f"unknown onnx provider {item!r}; use {sorted(ONNX_PROVIDER_ALIASES)}")
            out.append(name)
        return out
    return value


def mqtt_url(value: object) -> str | None:
    """Empty means off. Otherwise an ``mqtt://`` or ``mqtts://`` URL with a host, a valid port
    and no path or query (topics come from mqtt_topic_prefix), checked at startup so a bad URL
    stops it with the variable named."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    url = MQTT_URL.validate_python(str(value).strip())
    if url.path not in (None, "", "/") or url.query:
        raise ValueError("mqtt_url takes no path or query (set topics with mqtt_topic_prefix)")
    return str(value).strip()
