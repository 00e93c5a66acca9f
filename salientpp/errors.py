"""The one exception type that reaches a user as a sentence instead of a traceback."""
from __future__ import annotations

import enum
import numbers
import re
from collections.abc import Collection, Mapping
from typing import TypeVar

Choice = TypeVar("Choice", bound=enum.Enum)


class InputError(Exception):
    """Bad input from the user: a missing file, a wrong shape, an impossible option.

    The message is one sentence that says what is wrong and how to fix it. The CLI prints it
    and exits with code 2; the Python API lets it propagate.
    """


# The longest value :func:`shown` echoes whole, and the longest message the CLI prints whole.
SHOWN_CHARS = 200
MESSAGE_CHARS = 900
_LONG_WORD = re.compile(rf"\S{{{SHOWN_CHARS + 1},}}")


def shown(text: object, limit: int = SHOWN_CHARS) -> str:
    """``text`` (``repr`` unless a string) on one line of a message, for echoing what a user or a
    file gave (a path, an option's value, a meta.json entry, another library's error): every
    character that is not printable escaped as ``repr`` writes it (a newline as ``\\n``, ESC as
    ``\\x1b``), so it cannot split the line or reach the terminal as a control sequence; every
    run of more than :data:`SHOWN_CHARS` non-blank characters (a path) shortened in its middle
    with ``"…"``, and then the whole to at most ``limit`` characters the same way. The CLI passes
    every error message through it (``limit=MESSAGE_CHARS``)."""
    text = text if isinstance(text, str) else repr(text)
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return _shortened(_LONG_WORD.sub(lambda word: _shortened(word.group(), SHOWN_CHARS), text), limit)


def _shortened(text: str, limit: int) -> str:
    """``text`` with its middle replaced by ``"…"`` when it is longer than ``limit`` characters."""
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


# Seeds reach numpy's and torch's generators as int64: [0, 2^63).
SEED_LIMIT = 2**63


def check_seed(value, what: str = "--seed") -> int:
    """``value`` as an ``int`` seed in ``[0, 2^63)``, else :class:`InputError` naming ``what``: the
    one rule of every seed a user gives."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value < SEED_LIMIT:
        raise InputError(f"{what} must be an integer in [0, 2^63), got {value!r}")
    return int(value)


def check_choice(kind: type[Choice], value, what: str) -> Choice:
    """``value`` as a member of the enum ``kind``, or :class:`InputError` naming ``what`` and
    the choices."""
    try:
        return kind(value)
    except ValueError:
        raise InputError(f"unknown {what} {value!r}; choose one of "
                         f"{', '.join(str(m.value) for m in kind)}") from None


def check_int(value, what: str, minimum: int = 1, hint: str = "") -> int:
    """``value`` as an ``int`` when it is an integer (not a bool) of at least ``minimum``, else
    :class:`InputError` naming ``what`` (e.g. ``"--batch-size"``), with ``hint`` (e.g. ``"pass e.g.
    --batch-size 1024"``) after a semicolon. The one check of every count a user gives."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        rule = "a positive integer" if minimum == 1 else (
            "a non-negative integer" if minimum == 0 else f"an integer of at least {minimum}")
        raise InputError(f"{what} must be {rule}, got {value!r}" + (f"; {hint}" if hint else ""))
    return int(value)


def check_keys(state, keys: Collection[str], what: str, fix: str) -> Mapping:
    """``state`` when it is a dict (a mapping) with exactly the keys ``keys``, else
    :class:`InputError` naming ``what`` (e.g. ``"the loader state"``), the missing and the
    unexpected keys, then ``fix`` after a semicolon: the one check of a state handed to a
    ``load_state_dict``."""
    if not isinstance(state, Mapping):
        raise InputError(f"{what} must be a dict with the keys {', '.join(keys)}, got a {type(state).__name__}; {fix}")
    missing = [repr(key) for key in keys if key not in state]
    unexpected = sorted(repr(key) for key in state if key not in keys)
    wrong = []
    if missing:
        wrong.append(f"lacks {'the key' if len(missing) == 1 else 'the keys'} {', '.join(missing)}")
    if unexpected:
        wrong.append(f"has the unexpected {'key' if len(unexpected) == 1 else 'keys'} {', '.join(unexpected)}")
    if wrong:
        raise InputError(f"{what} {' and '.join(wrong)}; {fix}")
    return state


def counted(count: int, noun: str, plural: str | None = None, spec: str = "") -> str:
    """``count`` and ``noun`` for a message, singular for one: ``"1 node"``, ``"2 nodes"``,
    ``"1 entry"``/``"3 entries"`` (``plural="entries"``); ``spec`` formats the count
    (``","``: ``"2,708 nodes"``)."""
    return f"{count:{spec}} {noun if count == 1 else plural or noun + 's'}"
