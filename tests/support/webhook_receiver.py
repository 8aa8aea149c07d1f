"""Receiver code samples shared by the webhook signature and secret settings tests."""

from __future__ import annotations

import re

from tests.conftest import REPO

DOCS = (REPO / "docs/rules.md").read_text()


def receiver_code() -> dict:
    """The receiver of docs/rules.md, executed as published."""
    block = re.search(r"<!-- receiver: begin -->\s*```python\n(.*?)```\s*<!-- receiver: end -->", DOCS, re.S)
    assert block, "docs/rules.md lost its receiver code"
    namespace: dict = {}
    exec(compile(block.group(1), "docs/rules.md receiver", "exec"), namespace)  # noqa: S102 - our own docs
    return namespace
