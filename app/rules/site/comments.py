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


def _last_lines(node: Any) -> list[tuple[Any, Any]]:
    """(container, key) of every block collection on the way to ``node``'s last line, outermost
    first: the places ruamel may keep the comment lines that follow that line."""
    out = []
    while isinstance(node, (CommentedMap, CommentedSeq)) and len(node) and not node.fa.flow_style():
        key = next(reversed(node)) if isinstance(node, CommentedMap) else len(node) - 1
        out.append((node, key))
        node = node[key]
    return out


def _slot(container: Any) -> int:
    return 2 if isinstance(container, CommentedMap) else 0


def _end_text(tokens: list[Any]) -> str:
    """A block sequence's ``end`` comments (one token per line, the indent in ``column``) as text."""
    return "".join((" " * (t.column or 0) if t.value.startswith("#") else "") + t.value for t in tokens)


def take_tail_comment(node: Any) -> str | None:
    """Detach the comment lines that follow ``node``'s last line, as text starting on the next
    line (to re-attach where they belong after an edit); that line's own end-of-line comment stays."""
    pieces: list[tuple[int, str]] = []
    for container, key in _last_lines(node):
        if getattr(container.ca, "end", None):
            first = container.ca.end[0]
            pieces.append((getattr(first.start_mark, "line", 0) or 0, _end_text(container.ca.end)))
            container.ca.end = []
        entry = container.ca.items.get(key)
        token = entry[_slot(container)] if entry else None
        if token is None:
            continue
        own, _, after = token.value.partition("\n")  # the line's own comment, then the lines after it
        if after:
            pieces.append((getattr(token.start_mark, "line", 0) or 0, after))
        entry[_slot(container)] = (CommentToken(own + "\n", token.start_mark, column=token.column)
                                   if own.strip() else None)
    return "".join(text for _, text in sorted(pieces, key=lambda p: p[0])) or None


def put_tail_comment(node: Any, text: str | None) -> None:
    """Attach comment lines (as ``take_tail_comment`` gave them) after ``node``'s last line."""
    chain = _last_lines(node)
    if not text or not chain:
        return
    container, key = chain[-1]
    entry = container.ca.items.setdefault(key, [None, None, None, None])
    old = entry[_slot(container)]
    own = old.value.partition("\n")[0] if old is not None else ""
    mark = old.start_mark if old is not None else CommentMark(0)
    entry[_slot(container)] = CommentToken(own + "\n" + text, mark, column=old.column if old is not None else None)


def replace_head_comment(parent: CommentedMap, key: str, successor: str | None) -> None:
    """Replace the comment lines above the first item of ``parent[key]`` that are indented like
    the items (the deleted first zone's header) by ``successor``, the lines that followed that
    zone (the next one's header). Lines indented like the key speak of the whole list and
    stay. ruamel keeps the head lines in two places (the key's and the list's); both change."""
    seq = parent[key]
    col = seq.lc.col if seq.lc.col is not None else 0
    moved = []
    if successor:
        lines = successor.lstrip("\n")
        indent = len(lines) - len(lines.lstrip(" "))
        moved = [CommentToken(lines.lstrip(" "), CommentMark(indent), column=indent)]
    if seq.ca.comment is None:
        seq.ca.comment = [None, None]
    for holder, slot in ((parent.ca.items.setdefault(key, [None, None, None, None]), 3), (seq.ca.comment, 1)):
        holder[slot] = [t for t in holder[slot] or () if t.column < col] + moved or None
