"""Text a user typed (an option value) turned into checked values, with one-sentence errors."""
from __future__ import annotations

from .errors import InputError


def number_list(text: str, kind: type, what: str, example: str) -> tuple:
    """``"0,0.1,0.5"`` -> ``(0.0, 0.1, 0.5)`` with ``kind`` int or float; blanks are skipped.

    Raises :class:`InputError` naming ``what`` (e.g. ``"--replication"``) and showing ``example``.
    """
    try:
        return tuple(kind(p) for p in str(text).split(",") if p.strip())
    except ValueError:
        noun = "integers" if kind is int else "numbers"
        raise InputError(f"{what} must be comma-separated {noun} like {example}, got {text!r}") from None
