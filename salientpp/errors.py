"""The one exception type that reaches a user as a sentence instead of a traceback."""


class InputError(Exception):
    """Bad input from the user: a missing file, a wrong shape, an impossible option.

    The message is one sentence that says what is wrong and how to fix it. The CLI prints it
    and exits with code 2; the Python API lets it propagate.
    """
