#!/usr/bin/env python3
"""Print the runtime requirements of pyproject.toml, one per line, minus the excluded names.

The ROCm image takes torch/torchvision from its base image and ONNX Runtime from AMD's
wheel, so those must not be asked of PyPI. Reading the list from pyproject.toml at build
time (instead of keeping a copy) means the image can never drift from the package.

    python deploy/docker/pyproject-deps.py --exclude torch torchvision onnxruntime
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(pyproject: Path, exclude: set[str], extras: list[str]) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project.get("optional-dependencies", {})[extra]
    out = []
    for req in reqs:
        match = _NAME.match(req)
        if match is None:
            raise SystemExit(f"cannot parse requirement {req!r}")
        if canonical(match.group(1)) not in exclude:
            out.append(req)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyproject", type=Path, default=Path("pyproject.toml"))
    parser.add_argument("--exclude", nargs="*", default=[])
    parser.add_argument("--extra", action="append", default=[], help="also list this optional-dependency group")
    args = parser.parse_args(argv)
    exclude = {canonical(name) for name in args.exclude}
    sys.stdout.write("".join(f"{req}\n" for req in requirements(args.pyproject, exclude, args.extra)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
