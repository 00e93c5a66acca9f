"""Output locks: ``flock`` on an output path, so two runs never write the same output
(:func:`output_lock`), and the same refusal as a check before the work (:func:`check_unlocked`)."""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import InputError
from .outputs import _exists, write_error


@contextmanager
def output_lock(path: str | os.PathLike, what: str, directory: bool) -> Iterator[None]:
    """Hold an exclusive lock on an output ``path`` (a directory, or a file appended to) for
    the block, so two runs never write the same output: a second run is refused in one sentence
    naming ``what`` (``"--checkpoint-dir"``).

    The lock is ``flock`` on the path itself, which the kernel releases when the holder exits,
    however it exits (a killed run leaves no stale lock). ``path`` is created when absent (its
    parent must exist) and removed again at the end when it is still empty, so a run that fails
    before writing leaves nothing behind.
    """
    out = Path(path)
    created = not _exists(out, out)
    try:
        if directory:
            out.mkdir(exist_ok=True)
            fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
        else:
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as exc:
        raise write_error(out, exc) from None
    try:
        _lock(fd, out, what)
        try:
            yield
        finally:
            if created:
                try:
                    if directory:
                        out.rmdir()
                    elif out.stat().st_size == 0:
                        out.unlink()
                except OSError:
                    pass  # not empty (or already gone): the run wrote it
    finally:
        os.close(fd)


def _lock(fd: int, path: Path, what: str) -> None:
    """Take the exclusive lock of :func:`output_lock` on ``fd``, or refuse in one sentence."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise InputError(f"another salientpp run is writing {what} {path} (it holds its lock); wait for it to end, "
                         f"or choose another {what}") from None


def check_unlocked(path: str | os.PathLike, what: str) -> None:
    """Refuse, like :func:`output_lock`, an output that another run holds the lock of; takes no
    lock itself (a check before the long work; the run takes the lock when it starts)."""
    out = Path(path)
    if out.exists() and not (out.is_file() or out.is_dir()):
        return  # a FIFO, device or socket, whose opening may block: the writability checks refuse it
    try:
        fd = os.open(out, os.O_RDONLY)
    except OSError:
        return  # absent or unreadable: nobody holds it, or the writability checks say why
    try:
        _lock(fd, out, what)
    finally:
        os.close(fd)  # closing releases the lock just taken
