"""JSON data as YAML nodes that read back exactly as sent, and the checks that they did.

The zone editor receives JSON and writes YAML with ruamel.yaml (round-trip mode, so the rest of
the file keeps its comments and spelling); the service reads that file with PyYAML (YAML 1.1).
Two readers, one file: a string is written plain only when both read it as that string,
otherwise in double quotes, where the emitter escapes what YAML cannot hold literally; a float
always has the dot YAML 1.1 needs. ``same_data`` then compares what the file reads back with
what was sent, and ``coerced`` finds values the validator would have turned into another
kind (``true`` into ``1.0``, ``"0.5"`` into ``0.5``): either would be an edit that does not
read back unchanged, so the writer refuses it.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from app.core.errors import shorten

_STR_TAG = "tag:yaml.org,2002:str"
_RESOLVER = yaml.resolver.Resolver()


def round_trip_yaml() -> YAML:
    y = YAML()  # round-trip: comments, order and quoting are kept
    y.preserve_quotes = True
    y.width = 4096  # never fold long lines (polygons)
    y.indent(mapping=2, sequence=4, offset=2)
    y.representer.add_representer(float, _float)  # new values only: loaded ones keep their spelling
    return y


def _float(representer: Any, value: float) -> Any:
    """A float as YAML 1.1 (PyYAML, which reads the file) reads a float: ``1e-07`` would be the
    string "1e-07" there, so the mantissa gets its dot (``1.0e-07``). Non-finite values never
    get here (refused before)."""
    text = repr(value)
    if "e" in text and "." not in text.split("e")[0]:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent if exponent[0] in '+-' else '+' + exponent}"
    return representer.represent_scalar("tag:yaml.org,2002:float", text)


MAX_DEPTH = 8  # zone > rules > rule > exclude > polygon > point > number is 6


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON data nests deeper than ``limit`` (checked without recursion: a hostile
    body must not exhaust the stack of the writer)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def to_node(value: Any) -> Any:
    """JSON data as YAML nodes written the way the example site file is: lists of scalars
    or of lists (polygons, classes) in flow style, and strings that a YAML 1.1 reader would
    take for something else ("on", "22:00", "null") quoted, so the file reads back as sent."""
    if isinstance(value, dict):
        out = CommentedMap()
        for key, item in value.items():
            out[to_node(str(key))] = to_node(item)
        return out
    if isinstance(value, list):
        seq = CommentedSeq(to_node(v) for v in value)
        if not any(isinstance(v, dict) for v in value):
            seq.fa.set_flow_style()
        return seq
    if isinstance(value, str) and not plain_safe(value):
        return DoubleQuotedScalarString(value)
    return value


_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*\Z")


def plain_safe(text: str) -> bool:
    """Whether ``text`` reads back as the same string when written without quotes: letters,
    digits and ``_./-`` only (names, class names, time zones), and not something YAML 1.1
    resolves to another type (``on``, ``null``, ``1_000``). Everything else is written in
    double quotes, where the emitter escapes what YAML cannot hold literally (NEL, U+2028,
    control characters), so every string the editor writes round-trips exactly."""
    return bool(_PLAIN.match(text)) and _RESOLVER.resolve(yaml.ScalarNode, text, (True, False)) == _STR_TAG


def same_data(read: Any, sent: Any) -> bool:
    """Whether the file reads back exactly what was sent: the same JSON types (``True`` is not
    ``1``, ``"1"`` is not ``1``; an integral float may read back as the float it is) and values."""
    if isinstance(sent, dict):
        return isinstance(read, dict) and list(map(str, sent)) == list(map(str, read)) and all(
            same_data(read[k], v) for k, v in zip(read, sent.values(), strict=True))  # same keys, checked first
    if isinstance(sent, list):
        return isinstance(read, list) and len(read) == len(sent) and all(map(same_data, read, sent))
    if isinstance(sent, bool) or isinstance(read, bool) or sent is None:
        return type(read) is type(sent) and read == sent
    if isinstance(sent, (int, float)):
        return isinstance(read, (int, float)) and type(read) is type(sent) and read == sent
    return type(read) is type(sent) and read == sent


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "text" if isinstance(value, str) else "list or object"


def coerced(sent: Any, kept: Any, loc: tuple = ()) -> list[tuple[tuple, str]]:
    """(location, message) of every value the validator kept as another kind than it was sent
    (pydantic's lax mode reads ``true`` as 1.0 in a number field and ``"yes"`` as a boolean):
    such an edit would not read back as sent. Numbers stay numbers (5 and 5.0 are one JSON
    number); text may be normalized (a time "22:00" is kept as "22:00:00")."""
    out: list[tuple[tuple, str]] = []
    stack = [(sent, kept, loc)]
    while stack:
        s, k, where = stack.pop()
        if isinstance(s, dict) and isinstance(k, dict):
            stack.extend((v, k[key], (*where, key)) for key, v in s.items() if key in k)
        elif isinstance(s, list) and isinstance(k, list):
            # a list kept shorter or longer is not a coercion: only the items both have are compared
            stack.extend((a, b, (*where, i)) for i, (a, b) in enumerate(zip(s, k, strict=False)))
        elif not isinstance(s, (dict, list)) and not isinstance(k, (dict, list)) and _kind(s) != _kind(k):
            out.append((where, f"the {_kind(s)} {shorten(s)} would be kept as the {_kind(k)} {k!r}: "
                               f"send a {_kind(k)}"))
    return out
