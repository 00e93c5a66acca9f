"""The one exception type that reaches a user as a sentence instead of a traceback."""
from __future__ import annotations

import enum
from typing import TypeVar

Choice = TypeVar("Choice", bound=enum.Enum)


class InputError(Exception):
    """Bad input from the user: a missing file, a wrong shape, an impossible option.

    The message is one sentence that says what is wrong and how to fix it. The CLI prints it
    and exits with code 2; the Python API lets it propagate.
    """


def check_choice(kind: type[Choice], value, what: str) -> Choice:
    """``value`` as a member of the enum ``kind``, or :class:`InputError` naming ``what`` and
    the choices."""
    try:
        return kind(value)
    except ValueError:
        raise InputError(f"unknown {what} {value!r}; choose one of "
                         f"{', '.join(str(m.value) for m in kind)}") from None
