"""Text a client may send that every store and serializer can hold: no NUL, no lone surrogates.

PostgreSQL refuses NUL in text (``psycopg.DataError``) while SQLite stores it; a lone
surrogate (a JSON ``"\\ud800"``) is not Unicode at all, and encoding it to UTF-8 fails in
whichever serializer meets it first (the database driver, the JSON reply, the site file).
Refusing both where the text enters (the API's parameters and bodies, the site file)
makes every store and reply behave the same.
"""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored or shown as text, or None when it can."""
    if "\x00" in value:
        return "contains a NUL character (\\u0000)"
    m = _SURROGATE.search(value)
    if m is not None:
        return f"contains a lone surrogate (U+{ord(m.group()):04X}), which is not valid Unicode"
    return None


def clean_text(value: str | None) -> str | None:
    """A pydantic ``AfterValidator``: the value unchanged, or ValueError saying what is wrong."""
    if value is not None:
        problem = text_problem(value)
        if problem is not None:
            raise ValueError(problem)
    return value


MAX_ID_LENGTH = 64  # event ids are 32 hex digits; anything longer is not ours


def is_event_id(value: str) -> bool:
    """An id an event can have: short ASCII letters and digits (so it can only name a file of
    its own, and never carries NUL or 300 characters to a store or a file name)."""
    return 0 < len(value) <= MAX_ID_LENGTH and value.isascii() and value.isalnum()
