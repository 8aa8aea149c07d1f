"""Inference runtimes behind one ``Detector`` interface, picked by name from a registry."""

from app.inference.backends.base import BackendOptions, Detector
from app.inference.backends.registry import BACKENDS, load_backend

__all__ = ["BACKENDS", "BackendOptions", "Detector", "load_backend"]
