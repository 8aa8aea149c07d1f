"""argparse types shared by bench and loadtest: comma lists and per-size overrides."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

DEFAULT_WEIGHTS = {"n": "../shared/models/yolov8n.pt", "m": "yolov8m.yaml", "l": "yolov8l.yaml"}


def csv_list(kind: type = str, choices: tuple | None = None) -> Callable[[str], list]:
    """argparse type: 'a,b,c' -> [kind(a), kind(b), kind(c)], checked against choices."""

    def parse(text: str) -> list:
        items = [item.strip() for item in text.split(",") if item.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        try:
            values = [kind(item) for item in items]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"bad value in {text!r}: {exc}") from None
        if choices is not None:
            bad = [v for v in values if v not in choices]
            if bad:
                raise argparse.ArgumentTypeError(f"{bad} not in {list(choices)}")
        if kind is int and any(v < 1 for v in values):
            raise argparse.ArgumentTypeError("values must be >= 1")
        return values

    return parse


def size_override(kind: type) -> Callable[[str], tuple[str, Any]]:
    """argparse type: 'm=1,4' -> ('m', [1, 4]) for lists, 'm=5' -> ('m', 5) for int."""

    def parse(text: str) -> tuple[str, Any]:
        size, sep, value = text.partition("=")
        if not sep or size not in DEFAULT_WEIGHTS:
            raise argparse.ArgumentTypeError(f"expected SIZE=VALUE with SIZE in n,m,l, got {text!r}")
        if kind is list:
            return size, csv_list(int)(value)
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer in {text!r}") from None
        if number < 1:
            raise argparse.ArgumentTypeError(f"expected a positive integer in {text!r}")
        return size, number

    return parse


def weights_override(text: str) -> tuple[str, str]:
    size, sep, value = text.partition("=")
    if not sep or size not in DEFAULT_WEIGHTS or not value:
        raise argparse.ArgumentTypeError(f"expected SIZE=PATH with SIZE in n,m,l, got {text!r}")
    return size, value
