"""CampusGuard Detector: a YOLOv8 detection service for ROCm, CUDA and CPU nodes."""

__version__ = "0.1.0"

import os as _os

# Ultralytics must never reach the network from this service (weights, fonts, update checks).
_os.environ.setdefault("YOLO_OFFLINE", "1")
_os.environ.setdefault("YOLO_VERBOSE", "False")
