"""Text a user typed (an option value) turned into checked values, with one-sentence errors."""
from __future__ import annotations

from .errors import InputError


def _items(text: str, what: str, example: str) -> list[str]:
    """The comma-separated items of ``text``, stripped; ``[]`` for a blank ``text``. An empty item
    (``"5,,5"``, ``"5,"``, ``",5"``) is refused: it is a typo, not a value to skip."""
    text = str(text)
    if not text.strip():
        return []
    items = [p.strip() for p in text.split(",")]
    if not all(items):
        raise InputError(f"{what} has an empty item in {text!r}; write the values separated by single commas, "
                         f"like {example}")
    return items


def number_list(text: str, kind: type, what: str, example: str) -> tuple:
    """``"0,0.1,0.5"`` -> ``(0.0, 0.1, 0.5)`` with ``kind`` int or float.

    Spaces around items are allowed; a blank ``text`` gives ``()`` (callers refuse an empty list
    with their own sentence). Raises :class:`InputError` naming ``what`` (e.g.
    ``"--replication"``) and showing ``example`` for an item that is not a number and for an
    empty item (``"5,,5"``, a trailing comma).
    """
    items = _items(text, what, example)
    try:
        return tuple(kind(p) for p in items)
    except ValueError:
        noun = "integers" if kind is int else "numbers"
        raise InputError(f"{what} must be comma-separated {noun} like {example}, got {text!r}") from None


def name_list(text: str, what: str, example: str) -> list[str]:
    """``"vip, degree"`` -> ``["vip", "degree"]``: names separated by commas, with the rules of
    :func:`number_list` (a blank ``text`` gives ``[]``; an empty item is refused)."""
    return _items(text, what, example)
