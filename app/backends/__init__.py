"""Inference runtimes behind one ``Detector`` interface, picked by name from a registry."""

from app.backends.base import Detector
from app.backends.registry import BACKENDS, load_backend

__all__ = ["BACKENDS", "Detector", "load_backend"]
