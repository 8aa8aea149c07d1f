"""Comment lines around a zone edit: they belong to what follows them.

ruamel.yaml keeps the comment lines after a block's last line in one of two places: the
comment slot of the last key or item (after a scalar), or the ``end`` list of the innermost
block sequence (after a flow collection such as ``classes: [person]``). When a zone is
deleted or one is appended, those lines (usually the next camera's header and the blank
line above it) are taken from wherever ruamel put them and re-attached after the new last
line, so no other camera's comment moves or disappears; the end-of-line comment of the last
line stays with that line.
"""

from __future__ import annotations

from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark
from ruamel.yaml.tokens import CommentToken


def _tail(node: Any) -> tuple[Any, Any]:
    """(container, key) of the last line of a block node: where ruamel keeps the comment lines
    that follow it (often the header comment of the next zone or camera)."""
    parent, key = None, None
    while isinstance(node, (CommentedMap, CommentedSeq)) and len(node) and not node.fa.flow_style():
        parent, key = node, (list(node)[-1] if isinstance(node, CommentedMap) else len(node) - 1)
        node = parent[key]
    return parent, key


def take_tail_comment(node: Any) -> Any:
    """Detach the comment lines after ``node`` (to re-attach them where they belong after an edit)."""
    parent, key = _tail(node)
    entry = parent.ca.items.get(key) if parent is not None else None
    slot = 2 if isinstance(parent, CommentedMap) else 0
    if not entry or entry[slot] is None:
        return None
    token, entry[slot] = entry[slot], None
    return token


def put_tail_comment(node: Any, token: Any) -> None:
    parent, key = _tail(node)
    if token is None or parent is None:
        return
    slot = 2 if isinstance(parent, CommentedMap) else 0
    parent.ca.items.setdefault(key, [None, None, None, None])[slot] = token


def replace_head_comment(parent: CommentedMap, key: str, successor: Any) -> None:
    """Replace the comment lines above the first item of ``parent[key]`` that are indented like
    the items (the deleted first zone's header) by ``successor``, the lines that followed that
    zone (the next one's header). Lines indented like the key speak of the whole list and
    stay. ruamel keeps the head lines in two places (the key's and the list's); both change."""
    seq = parent[key]
    col = seq.lc.col if seq.lc.col is not None else 0
    moved = [] if successor is None else [  # it began by ending the deleted zone's last line
        CommentToken(successor.value.lstrip("\n").lstrip(" "), successor.start_mark, column=successor.column)]
    if seq.ca.comment is None:
        seq.ca.comment = [None, None]
    for holder, slot in ((parent.ca.items.setdefault(key, [None, None, None, None]), 3), (seq.ca.comment, 1)):
        holder[slot] = [t for t in holder[slot] or () if t.column < col] + moved or None
