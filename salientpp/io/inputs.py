"""Input files: the one check that a path a command reads is a regular file (:func:`check_input_file`)."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import InputError, shown

# What a path that is not a regular file is, by the test of its mode (after symbolic links).
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def check_input_file(path: str | os.PathLike, what: str = "", fix: str = "check the path") -> Path:
    """``path`` as a :class:`Path` when it names a regular file (itself or through symbolic links);
    else :class:`InputError`, one sentence saying what it is instead: absent, a broken symbolic
    link, a directory, a named pipe, a device (``/dev/zero``, or a link to it) or a socket.

    ``what`` names the input before the path (``"npz file"``, ``"labels file"``; empty: the path
    alone), ``fix`` ends the sentence. Only ``stat`` is called, so a named pipe is never opened
    and cannot block the command, and a device is never read without end.
    """
    path = Path(path)
    name = f"{what} {path}" if what else str(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            raise InputError(f"{name} is a symbolic link to {shown(os.readlink(path))}, which does not exist; "
                             f"{fix}") from None
        raise InputError(f"{name} does not exist; {fix}") from None
    except (OSError, ValueError) as exc:  # no permission on a directory above, a path through a file, a NUL byte
        reason = (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)).lower()
        raise InputError(f"{name} cannot be read ({shown(reason)}); {fix}") from None
    if not stat.S_ISREG(mode):
        kind = next((kind for test, kind in _KINDS if test(mode)), "a special file")
        raise InputError(f"{name} is {kind}, not a regular file; {fix}")
    return path
