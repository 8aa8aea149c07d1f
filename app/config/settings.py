"""Service settings, read once from the environment (prefix ``CAMPUSGUARD_``) or ``.env``.

Validators fail fast at startup: a typo in a device string or a threshold out of range stops the process
with a message that names the variable, instead of a 500 on the first frame. Tests build ``Settings(...)``
directly and hand it to ``create_app``. Values stay as written: ``auto`` (backend, precision) is
resolved by the composition root (app/wiring/runtime.py), which decides what runs on this machine.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.config.values import (
    DEFAULT_DATA_DIR,
    ONNX_PROVIDER_ALIASES,
    data_dir_defaults,
    mqtt_url,
    normalize_device,
    onnx_providers,
    split_csv,
)
from app.core.imgsz import ImgSize, format_imgsz, input_hw, parse_imgsz
from app.core.secrets import resolve_file_settings

__all__ = [
    "DEFAULT_DATA_DIR", "DEFAULT_WEIGHTS", "FILE_SETTINGS", "ONNX_PROVIDER_ALIASES", "Settings", "normalize_device"]

ENV_PREFIX = "CAMPUSGUARD_"
ENV_FILE = Path(".env")
DEFAULT_WEIGHTS = Path("../shared/models/yolov8n.pt")
# each has a <name>_file twin (app/core/secrets.py; tests/unit/test_secret_settings.py checks none is missing)
FILE_SETTINGS = ("events_db_url", "webhook_secret", "mqtt_url", "mqtt_password")
MIN_SHARED_SECRET = 16  # like an API key: a webhook secret is typed by nobody, so no reason for a short one


class Settings(BaseSettings):
    """Every knob of the service. The README's settings table mirrors this class."""

    model_config = SettingsConfigDict(
        env_prefix="CAMPUSGUARD_", env_file=".env", extra="ignore", validate_default=True
    )

    # --- model and backend -------------------------------------------------------------
    backend: Literal["auto", "torch", "onnx", "openvino"] = Field(
        "auto", description="auto: openvino on a CPU (onnx without its extra), torch on a GPU")
    weights: Path = Field(DEFAULT_WEIGHTS, description=".pt, .onnx or an architecture .yaml")
    model_name: str | None = Field(None, description="Name reported in replies; default: weights stem")
    device: str = Field("cpu", description="cpu or cuda:N (cuda:N is the AMD GPU on ROCm torch)")
    imgsz: Annotated[ImgSize, NoDecode] = Field(
        640, description="Fixed letterbox size: N (square) or HxW, multiples of 32")
    shapes: Annotated[str, NoDecode] = Field(
        "", description="More fixed input shapes, one per aspect class (comma list of HxW, e.g. 384x640,480x640,"
        "640x384), or auto (the site file's camera resolutions); each frame goes to its aspect's shape")
    precision: Literal["auto", "fp32", "fp16", "bf16", "int8"] = Field("auto", description="What the model computes "
        "in: fp32, fp16 (GPU), bf16 (openvino on a CPU with avx512_bf16 or amx_bf16) or int8 (onnx or openvino on CPU, "
        "built from the weights); auto: bf16 where openvino runs it, else fp32")
    decode_reduce: bool = Field(True, description="Decode a JPEG at 1/2, 1/4 or 1/8 size when the letterbox shrinks it "
                                "that much anyway (libjpeg-turbo DCT scaling); boxes stay in original pixels")
    decode: Literal["auto", "cpu", "device"] = Field("auto", description="Where POSTed JPEGs are decoded and "
        "letterboxed: cpu (OpenCV), device (torchvision decode_jpeg on the model's device, batched: nvJPEG on NVIDIA; "
        "on a CPU model for tests and parity only), auto: device when the model runs on a GPU and torchvision decodes "
        "there, else cpu. Chosen once at startup, shown in /health")
    evidence_min_width: int = Field(960, ge=0, le=8192, description="Frames kept for rules evidence (snapshots, clips, "
                                    "the console's latest frame) are decoded at least this wide")
    calibration_dir: Path | None = Field(Path("../shared/datasets/coco-val128"), description=(
        "Frames (a folder of images, or a YOLO dataset) the int8 model is calibrated on, and gated on without labels"))
    calibration_images: int = Field(
        64, ge=1, le=10_000, description="Frames used to calibrate int8 and for the F1 gate")
    gate_dataset: Path | None = Field(None, description=(
        "Labelled YOLO folder: a reduced precision passes when its mAP50-95 is within GATE_MAX_MAP_DROP of fp32"))
    gate_max_map_drop: float = Field(0.01, ge=0, le=1, description="Largest mAP50-95 loss against fp32 (labelled gate)")
    gate_min_f1: float | None = Field(None, ge=0, le=1, description=(
        "Least F1 agreement with fp32 without labels; default per precision (fp16 0.97, bf16 0.97, int8 0.90)"))
    gate_conf: float = Field(0.4, gt=0, lt=1, description="Confidence the unlabelled gate compares detections at")
    threads: int = Field(0, ge=0, description="CPU threads for the backend; 0 = all cores")
    requests_in_flight: int = Field(0, ge=0, le=64, description=(
        "openvino, onnx on CPU: requests run side by side, one engine lane each; 0 = auto (OpenVINO's "
        "choice; ORT: one per thread of THREADS), 1 = one at a time"))
    onnx_providers: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["migraphx", "cuda", "cpu"],
        description="Ordered execution-provider preference; the first available is used ('rocm' names the ROCm "
        "provider of onnxruntime-rocm <= 1.22, removed in ONNX Runtime 1.23: use migraphx)",
    )
    data_dir: Path = Field(DEFAULT_DATA_DIR, description="The service's data folder: the defaults of the ONNX cache, "
        "the SQLite event store, snapshots, `serve --starter-site`'s site file and the demo clip live here")
    onnx_cache_dir: Path = Field(DEFAULT_DATA_DIR, description="The service's data folder for built models: ONNX "
        "exports, int8 models, OpenVINO IR, MIGraphX programs (default: data_dir)")
    onnx_cpu_fallback: bool = Field(
        False, description="Accept ONNX Runtime falling back to CPU when the GPU provider fails (default: refuse)")
    models_file: Path | None = Field(None, description="YAML file naming several models, each camera choosing one "
        "(docs/models.md); unset = one model, WEIGHTS, named MODEL_NAME or after the weights' file")
    models_dir: Path | None = Field(None, description="The only folder the models file's weights are read from "
        "(a path outside it is refused); default: the folder of WEIGHTS")

    # --- shadow reference (docs/shadow.md) ----------------------------------------------------
    shadow_backend: Literal["", "torch", "onnx", "openvino"] = Field("", description="Reference runtime; empty = off")
    shadow_weights: Path | None = Field(
        None, description="The reference's model (.pt, or .onnx for onnx); default: WEIGHTS")
    shadow_device: str = Field("cpu", description="Where the reference runs: cpu or cuda:N (always fp32)")
    shadow_sample: float = Field(0.01, ge=0, le=1, description="Fraction of answered frames also run on the reference")
    shadow_min_interval_s: float = Field(60.0, ge=0, description="At least one frame per camera this often; 0 = off")
    shadow_window_s: float = Field(900.0, gt=0, le=86_400, description="Rolling window of the agreement figures")
    shadow_alert_below: float | None = Field(None, gt=0, le=1, description=(
        "Agreement the alert fires below; unset = 0.95, or 0.85 when the served model is int8"))
    rollout_max_fps: float = Field(10.0, gt=0, le=1000, description=(
        "Frames a second a rollout takes from the request path to run on the other model (docs/models.md)"))

    # --- detection defaults ------------------------------------------------------------
    conf: float = Field(0.25, ge=0.0, le=1.0)
    iou: float = Field(0.7, ge=0.0, le=1.0)
    max_det: int = Field(300, ge=1, le=10000)

    # --- engine --------------------------------------------------------------------------
    max_batch_size: int = Field(8, ge=1, le=256)
    max_queue_delay_ms: float = Field(5.0, ge=0.0, le=10_000, description=(
        "Longest a batch waits to fill up; with more than one request in flight a free lane takes what is queued"))
    queue_size: int = Field(64, ge=1)
    request_timeout_s: float = Field(10.0, gt=0, description="Deadline from arrival to start of inference")
    inference_timeout_s: float = Field(60.0, gt=0, description="Watchdog: longest one batch may run")
    cache_clear_every: int = Field(500, ge=0, description="Release the allocator cache every N inferences; 0 = never")
    warmup_iters: int = Field(2, ge=0)
    preprocess_workers: int = Field(0, ge=0, description="Decode/letterbox threads; 0 = cores")
    drain_timeout_s: float = Field(30.0, ge=0)
    watchdog_exit: bool = Field(True, description="Exit non-zero when the watchdog trips (orchestrator restarts)")

    # --- input limits ----------------------------------------------------------------
    max_body_bytes: int = Field(20 * 1024 * 1024, ge=1024)
    max_pixels: int = Field(40_000_000, ge=1)
    max_batch_images: int = Field(16, ge=1)

    # --- security / exposure (docs/security.md) -----------------------------------------
    auth: Literal["on", "off"] = Field("on", description="off: serve every route without a key on any address "
                                       "(warned at every start); on: keys required beyond loopback")
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list, description="Comma list of [role:]key (viewer, operator, camera, admin; bare = admin)")
    api_keys_file: Path | None = Field(
        None, description="YAML keys file: [{name, role, key | sha256}], re-read on change")
    api_keys_watch_s: float = Field(2.0, ge=0, description="Seconds between checks of the keys file; 0 = SIGHUP only")
    bind_frames_to_key_cameras: bool = Field(False, description="Frames only for the cameras of the key's cameras:")
    auth_fail_limit: int = Field(10, ge=1, description="Wrong keys from one address within auth_fail_window_s "
                                 "before it is blocked")
    auth_fail_window_s: float = Field(60.0, gt=0, description="Window in which wrong keys are counted per address")
    auth_block_s: float = Field(300.0, ge=0, description="How long a blocked address is refused (429); 0 = never block")
    forwarded_allow_ips: str = Field("127.0.0.1", description="Proxies whose X-Forwarded-For names the client (comma "
                                     "list of addresses or CIDRs, * = any); only a valid IP address is taken")
    secrets_dir: Path | None = Field(None, description="Folder of secret files for ${VAR} in the site file "
                                     "(file name = variable)")
    events_db_url_file: Path | None = Field(None, description="File holding CAMPUSGUARD_EVENTS_DB_URL")
    webhook_secret_file: Path | None = Field(None, description="File holding CAMPUSGUARD_WEBHOOK_SECRET")
    mqtt_url_file: Path | None = Field(None, description="File holding CAMPUSGUARD_MQTT_URL")
    mqtt_password_file: Path | None = Field(None, description="File holding CAMPUSGUARD_MQTT_PASSWORD")
    public_routes: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["/health/live", "/health/ready"],
        description="Routes answering without a key when keys are set (comma list of route paths)")
    body_read_timeout_s: float = Field(30.0, gt=0, description="Longest a client may take to send its request body")
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    console: bool = Field(
        True, description="Serve the operator console (static page) at /ui; its data routes need keys as usual")

    # --- observability -----------------------------------------------------------------
    log_format: Literal["text", "json"] = "text"
    log_level: str = "INFO"
    metrics_max_cameras: int = Field(500, ge=0, description=(
        "Distinct camera_id label values in /metrics; more are summed as _other (README: the series this costs)"))

    # --- server ------------------------------------------------------------------------
    host: str = Field("127.0.0.1", description="Listen address; beyond loopback a key is required (or auth=off)")
    port: int = Field(8000, ge=0, le=65535)

    # --- rules (issue: campus-security rules) -------------------------------------------
    site_config: Path | None = Field(None, description="Site YAML (cameras, zones, rules); none = rules off")
    dry_run_cpu_s: float = Field(60.0, gt=0, le=3600, description="CPU seconds one dry run may use (422 past it)")
    dry_run_timeout_s: float = Field(55.0, gt=0, le=3600, description="Wall seconds one dry run may take (503 past it)")
    site_watch_s: float = Field(5.0, ge=0, description="Seconds between checks of the site file; a changed file "
                                "is reloaded (a zone edit on another replica, a ConfigMap update); 0 = off")
    events_db_url: str = Field(f"sqlite:///{DEFAULT_DATA_DIR / 'events.db'}",
                               description="SQLAlchemy URL of the event store (default: SQLite in data_dir)")
    snapshot_dir: Path = Field(DEFAULT_DATA_DIR / "snapshots", description="Annotated JPEG per event (default: "
                               "data_dir/snapshots)")
    ingest: Literal["embedded", "off"] = Field("embedded", description="embedded: pull the site file's camera sources "
                                               "in this process; off: gateways pull them (docs/cameras.md)")
    ingest_max_pixels: int = Field(
        16_777_216, ge=4096, le=268_435_456, description="Largest camera picture; else bad_stream")
    ingest_max_readers: int = Field(64, ge=1, le=4096, description="Camera streams one process pulls at most")
    webhook_urls: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Event webhooks (comma list)")
    webhook_secret: SecretStr = Field(SecretStr(""), description="HMAC-SHA256 key for X-CampusGuard-Signature")
    webhook_timeout_s: float = Field(5.0, gt=0)
    webhook_max_backoff_s: float = Field(60.0, gt=0)
    max_clock_skew_s: float = Field(300.0, ge=0, le=86_400,
                                    description="Refuse capture times further ahead of the server clock (422)")
    max_capture_age_s: float = Field(86_400.0, gt=0, le=3_650 * 86_400, description="Refuse older capture times (422)")
    events_buffer_size: int = Field(10_000, ge=1, description="Event writes kept in memory while the store is down")
    events_retain_days: float = Field(30.0, gt=0, description="Delete events that ended longer ago (reviewed ones too)")
    replica_id: str = Field("", pattern=r"^[A-Za-z0-9._:-]{0,64}$", description=(
        "This replica's name in GET /status and the shared fleet state; empty = the host name (unique per "
        "pod or container: set it when several replicas share one host)"))
    fleet_interval_s: float = Field(1.0, ge=0, le=5, description=(
        "Seconds between the batched writes of this replica's camera state to the shared store (docs/deploy.md, "
        "Shared fleet state); 0 = off (one process only)"))
    models_sync_s: float = Field(2.0, ge=0, le=60, description=(
        "Seconds between this replica's reads of the runtime model changes (load, swap, unload) the other "
        "replicas wrote to the event store (docs/models.md, Several replicas); 0 = off"))
    fleet_stale_after_s: float = Field(
        10.0, gt=0, le=3600, description="A replica silent this long: its cameras are stale")
    fleet_orphan_after_s: float = Field(
        120.0, ge=0, description="A replica silent this long: its open events end; 0 = never")
    fleet_frame_interval_s: float = Field(3.0, ge=0, le=3600, description="Share a newest frame at most this often")
    frontends: int = Field(1, ge=1, le=64, description=(
        "HTTP processes on the one socket: 1 = the service is one process; N >= 2 = N front-end processes "
        "parse HTTP and read bodies, one owner process runs the engine, the rules and the state (docs/deploy.md)"))
    rules_workers: int = Field(1, ge=1, le=64, description="Rules processes: 1 = in-process; N >= 2 = camera shards")
    rules_worker_timeout_s: float = Field(30.0, gt=0, le=600, description="A rules worker (RULES_WORKERS >= 2) that "
                                          "has not answered a frame within this is hung: killed and restarted")
    snapshot_budget_mb: float = Field(
        1024.0, ge=0, description="Snapshot and clip disk budget; oldest deleted first; 0 = none")
    retention_sweep_s: float = Field(600.0, gt=0, description="Seconds between retention sweeps")
    audit_retain_days: float = Field(365.0, gt=0, description="Delete audit records older than this")
    detection_log: bool = Field(False, description="Log every evaluated frame's detections for `campusguard replay`")
    detection_log_retention_days: float = Field(7.0, gt=0, description="Delete logged frames captured longer ago")
    detection_log_buffer_size: int = Field(
        50_000, ge=1, description="Logged frames kept in memory before they are written")
    clips: bool = Field(True, description="Write an H.264 MP4 evidence clip per event (needs frames in memory)")
    clip_pre_s: float = Field(5.0, ge=0, le=300, description="Seconds of frames before an event's start in its clip")
    clip_post_s: float = Field(5.0, ge=0, le=300, description="Seconds of frames after an event's start in its clip")
    clip_max_fps: float = Field(5.0, gt=0, le=30, description="Frames kept per second and camera for clips")
    clip_buffer_mb: float = Field(256.0, gt=0, description="Memory cap of the kept frames, all cameras together")
    clip_max_width: int = Field(640, ge=64, le=3840, description="Kept frames are downscaled to at most this width")
    mqtt_url: str | None = Field(
        None, description="MQTT broker (mqtt://host:1883 or mqtts://user:pass@host:8883); none = off")
    mqtt_username: str | None = Field(None, description="Broker user (instead of one in the URL)")
    mqtt_password: SecretStr = Field(SecretStr(""), description="Broker password (instead of one in the URL)")
    mqtt_topic_prefix: str = Field("campusguard", description="Topics: <prefix>/events, <prefix>/<camera>/<rule>, ...")
    mqtt_qos: int = Field(
        1, ge=1, le=2, description="QoS of every publish; 1 or 2 (an outbox row is done on the broker's ack)")
    mqtt_ca_file: Path | None = Field(None, description="CA bundle for mqtts:// (default: the system's)")
    mqtt_client_id: str = Field("", description="MQTT client id; empty = campusguard-<host>-<pid> (unique per replica)")
    mqtt_discovery_prefix: str = Field(
        "homeassistant", description="Home Assistant discovery prefix; empty = no discovery")

    @model_validator(mode="before")
    @classmethod
    def _secret_files(cls, data: Any) -> Any:
        """``<SETTING>_FILE``: the setting's value from a file (Docker and Kubernetes secrets), read
        here so the value is validated like one given directly (app/core/secrets.py)."""
        if isinstance(data, dict):
            data = resolve_file_settings(dict(data), FILE_SETTINGS, ENV_PREFIX)
            data = data_dir_defaults(data)
        return data

    @field_validator("onnx_providers", mode="before")
    @classmethod
    def _providers(cls, value: object) -> object:
        return onnx_providers(value)

    @field_validator("cors_origins", "webhook_urls", "public_routes", mode="before")
    @classmethod
    def _csv(cls, value: object) -> object:
        return split_csv(value)

    @field_validator("mqtt_url", mode="before")
    @classmethod
    def _mqtt_url(cls, value: object) -> object:
        return mqtt_url(value)  # app/config/values.py: empty = off, else mqtt(s)://host[:port] only

    @field_validator("webhook_secret")
    @classmethod
    def _webhook_secret(cls, value: SecretStr) -> SecretStr:
        """Empty is off (URLs without it stop startup below); set, at least 16 characters, blanks not
        counted: " " or "x" signs deliveries with a key anyone can guess (the _FILE twin lands here too)."""
        text = value.get_secret_value()
        if text and len(text.strip()) < MIN_SHARED_SECRET:
            raise ValueError(f"the webhook secret (CAMPUSGUARD_WEBHOOK_SECRET or the file of its _FILE twin) must be "
                             f"at least {MIN_SHARED_SECRET} characters, not counting blanks (openssl rand -hex 32)")
        return value

    @field_validator("mqtt_topic_prefix", "mqtt_discovery_prefix")
    @classmethod
    def _topic(cls, value: str) -> str:
        value = value.strip("/")
        if any(c in value for c in "+#\0"):
            raise ValueError(f"an MQTT topic prefix may not contain '+', '#' or NUL, got {value!r}")
        return value

    @field_validator("api_keys", mode="before")
    @classmethod
    def _keys(cls, value: object) -> object:
        """Empty means no auth; a value that holds only blanks and commas (" ", ",") is a
        mistake that would silently switch auth off, so it stops startup."""
        keys = split_csv(value)
        if isinstance(value, str) and value and not keys:
            raise ValueError("api_keys holds no key (only blanks or commas); leave it empty to turn auth off")
        if isinstance(keys, list):
            from app.core.roles import parse_key

            for key in keys:  # "viewer:" (a role and no key) stops startup
                parse_key(key.get_secret_value() if isinstance(key, SecretStr) else str(key))
        return keys

    @field_validator("public_routes")
    @classmethod
    def _routes(cls, value: list[str]) -> list[str]:
        bad = [route for route in value if not route.startswith("/")]
        if bad:
            raise ValueError(f"public_routes entries are route paths starting with '/', got {bad}")
        return value

    @field_validator("device", "shadow_device")
    @classmethod
    def _device(cls, value: str) -> str:
        return normalize_device(value)

    @field_validator("imgsz", mode="before")
    @classmethod
    def _imgsz(cls, value: object) -> ImgSize:
        return parse_imgsz(value)

    @field_validator("imgsz")
    @classmethod
    def _stride(cls, value: ImgSize) -> ImgSize:
        for side in input_hw(value):
            if not 32 <= side <= 4096:
                raise ValueError(f"imgsz sides must be within 32..4096, got {format_imgsz(value)}")
            if side % 32:
                raise ValueError(
                    f"imgsz must be a multiple of 32 (the model's largest stride), got {format_imgsz(value)}")
        return value

    @field_validator("shapes", mode="before")
    @classmethod
    def _shapes(cls, value: object) -> str:
        text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value or "").strip()
        if text.lower() == "auto":
            return "auto"
        from app.inference.vision.shapes import parse_shapes

        parse_shapes(text, 640)  # every entry valid; the primary shape is added by shape_list
        return text

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        # BACKEND / PRECISION stay as written (``auto`` too): app/wiring/runtime.py resolves them on the
        # machine and checks the result (a precision the backend cannot run, .onnx for torch or openvino)
        suffix = self.weights.suffix.lower()
        if suffix not in {".pt", ".onnx", ".yaml", ".yml"}:
            raise ValueError(f"weights must be a .pt, .onnx or .yaml file, got {self.weights}")
        if self.webhook_urls and not self.webhook_secret.get_secret_value():
            raise ValueError("CAMPUSGUARD_WEBHOOK_URLS is set but CAMPUSGUARD_WEBHOOK_SECRET is empty: webhooks are "
                             "always signed; set CAMPUSGUARD_WEBHOOK_SECRET (or CAMPUSGUARD_WEBHOOK_SECRET_FILE) to a "
                             "long random value shared with the receivers (openssl rand -hex 32)")
        if self.auth == "off" and (self.api_keys or self.api_keys_file is not None):
            raise ValueError("CAMPUSGUARD_AUTH=off and API keys are both set: remove CAMPUSGUARD_AUTH=off to require "
                             "the keys, or the keys to serve without them")
        if self.secrets_dir is not None and not self.secrets_dir.is_dir():
            raise ValueError(f"CAMPUSGUARD_SECRETS_DIR: {self.secrets_dir} is not a directory")
        return self

    def shape_list(self, resolutions: Iterable[tuple[int, int]] = ()) -> tuple[tuple[int, int], ...]:
        """IMGSZ first, then SHAPES (``auto``: the aspect classes of ``resolutions``, the site
        file's cameras)."""
        from app.inference.vision.shapes import parse_shapes, site_shapes

        if self.shapes == "auto":
            return site_shapes(resolutions, self.imgsz)
        return parse_shapes(self.shapes, self.imgsz)

    @property
    def resolved_threads(self) -> int:
        return self.threads or (os.cpu_count() or 1)

    @property
    def resolved_models_dir(self) -> Path:
        """CAMPUSGUARD_MODELS_DIR, or the folder of WEIGHTS."""
        return self.models_dir if self.models_dir is not None else self.weights.parent

    @property
    def display_model_name(self) -> str:
        return self.model_name or self.weights.stem
