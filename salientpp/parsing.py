"""Text a user typed (an option value) turned into checked values, with one-sentence errors."""
from __future__ import annotations

import argparse
import numbers
import re

from .errors import InputError, check_seed, shown

# The largest size in bytes any option takes: an int64.
MAX_BYTES = 2**63 - 1
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40}


# Options renamed in 0.2, old flag -> new flag (one name per concept, docs/glossary.md): the old
# flag is still accepted until the next release, and using it prints a note (salientpp.cli.main).
RENAMED_FLAGS = {
    "--cache": "--policy",
    "--alphas": "--replication",
    "--gpu-fraction": "--device-fraction",
    "--gpu-cache-bytes": "--device-cache-bytes",
    "--cpu-cache-bytes": "--host-cache-bytes",
    "--inference-fanouts": "--eval-fanouts",
    "--inference-batch-size": "--eval-batch-size",
    "--inference-splits": "--eval-splits",
    "--inference-weight": "--eval-weight",
    "--threads": "--sampler-threads",
}


def flag_names(flag: str) -> tuple[str, ...]:
    """``flag`` and the old name it replaced, if any (:data:`RENAMED_FLAGS`): the option strings
    an option registers, so that the old spelling keeps working for one release."""
    return (flag, *(old for old, new in RENAMED_FLAGS.items() if new == flag))


def renamed_flag_notes(argv: list[str]) -> list[str]:
    """A note for each old flag of :data:`RENAMED_FLAGS` in ``argv`` (``--old`` or ``--old=value``)."""
    used = dict.fromkeys(word.split("=", 1)[0] for word in argv if word.split("=", 1)[0] in RENAMED_FLAGS)
    return [f"note: {old} is now {RENAMED_FLAGS[old]}; the old name is accepted until the next release"
            for old in used]


_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*", re.ASCII)
# A number as :func:`real` reads it, without its sign: 12, 0.5, .5, 1e-3, inf, nan.
_NUMBER = r"(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)"
_REAL = re.compile(rf"\s*[+-]?{_NUMBER}\s*", re.ASCII | re.IGNORECASE)
# An option's value that starts with a minus and is no option: a negative number as :func:`real`
# reads it (-1, -.5, -1e-3, -inf), or a comma-separated list of numbers that starts with one
# (--eval-fanouts -1,-1). argparse reads -1e-3 as an unknown option ("expected one argument").
NEGATIVE_NUMBERS = re.compile(rf"-{_NUMBER}(?:,[+-]?{_NUMBER})*\Z", re.ASCII | re.IGNORECASE)


def integer(text: str) -> int:
    """``"12"`` -> 12: ASCII digits with an optional sign, nothing else. Python's ``int`` also
    reads ``"1_2"`` and other scripts' digits, which a user who typed them did not mean as a
    number; raises ``ValueError`` for them (argparse reports it as an invalid integer)."""
    if not _INTEGER.fullmatch(str(text)):
        raise ValueError(f"not an integer: {text!r}")
    return int(text)


def real(text: str) -> float:
    """``"0.5"``, ``"1e-3"``, ``"inf"`` -> float, with the rules of :func:`integer` (no
    underscores, ASCII digits only); ``ValueError`` otherwise."""
    if not _REAL.fullmatch(str(text)):
        raise ValueError(f"not a number: {text!r}")
    return float(text)


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
    convert = integer if kind is int else real
    try:
        return tuple(convert(p) for p in items)
    except ValueError:
        noun = "integers" if kind is int else "numbers"
        raise InputError(f"{what} must be comma-separated {noun} like {example}, got {text!r}") from None


def name_list(text: str, what: str, example: str) -> list[str]:
    """``"vip, degree"`` -> ``["vip", "degree"]``: names separated by commas, with the rules of
    :func:`number_list` (a blank ``text`` gives ``[]``; an empty item is refused)."""
    return _items(text, what, example)


def parse_bytes(text: str | int) -> int:
    """``"512MiB"`` -> 536870912; plain integers are bytes; units B, KB/MB/GB/TB (10^3) and
    KiB/MiB/GiB/TiB (2^10). A negative size is refused."""
    if isinstance(text, numbers.Integral) and not isinstance(text, bool):
        value = int(text)
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
        if not match or match.group(2).lower() not in _UNITS:
            raise InputError(f"cannot read {shown(repr(text))} as a number of bytes; write e.g. 2000000000, 512MiB or "
                             "2GB")
        number, unit = match.group(1), _UNITS[match.group(2).lower()]
        value = int(number) * unit if number.isdigit() else int(float(number) * unit)
    if value < 0:
        raise InputError(f"a size in bytes cannot be negative, got {shown(repr(text))}")
    if value > MAX_BYTES:
        raise InputError(f"a size of {shown(str(text))} bytes is more than 2^63 - 1 bytes, beyond any machine; "
                         "write e.g. 512MiB or 2GB")
    return value


def parse_seed(text: str) -> int:
    """An argparse ``type`` for ``--seed``: an integer in ``[0, 2^63)`` (:func:`check_seed`)."""
    try:
        return check_seed(int(text), "a seed")
    except (ValueError, InputError) as exc:
        message = str(exc) if isinstance(exc, InputError) else f"a seed must be an integer, got {text!r}"
        raise argparse.ArgumentTypeError(message) from None


def parse_memory_limit(text: str | None) -> int | None:
    """``--memory-limit`` in bytes (``"12GiB"``, ``"16GB"``, plain bytes), or ``None`` when not given."""
    if text is None:
        return None
    try:
        limit = parse_bytes(text)
    except InputError:
        raise InputError(f"--memory-limit {shown(repr(text))} is not a size of at most 2^63 - 1 bytes; write e.g. "
                         "12GiB, 16GB or 16000000000") from None
    if limit <= 0:
        raise InputError(f"--memory-limit must be a positive size such as 12GiB, got {shown(repr(text))}")
    return limit
