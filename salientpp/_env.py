"""Environment variables salientpp sets for the processes it starts (its CLI, its local ranks)
where the user did not set them. torch and OpenMP read them once, when torch is imported, so
this module imports nothing heavy: the CLI applies them before any command imports torch. And
how those processes treat a standard output whose reader has gone (:func:`quiet_broken_pipe`)
or that can no longer be written (:func:`discard_stdout`).
"""
from __future__ import annotations

import os
import sys

# OpenMP's wait policy. torch's intra-op threads otherwise spin between parallel regions, and on
# cores shared with other work a spinning thread holds a core its descheduled peer needs:
# measured on the small preset, 1 rank, 2 cores, 2 busy outside processes, epochs of 6-11 s
# instead of 6 s; on an idle machine both take 3.5 s (docs/training.md, "Threads").
OMP_WAIT = ("OMP_WAIT_POLICY", "PASSIVE")
# torch's C++ log level in local ranks: when a rank fails, its peers' c10d logs (store retries,
# C++ stack frames) would bury the one-line report of the cause.
CPP_LOG = ("TORCH_CPP_LOG_LEVEL", "FATAL")


def set_defaults(*pairs: tuple[str, str]) -> list[str]:
    """Set each ``(name, value)`` not yet in ``os.environ``; returns the names it set."""
    unset = [name for name, _ in pairs if name not in os.environ]
    os.environ.update({name: value for name, value in pairs if name in unset})
    return unset


class _QuietPipe:
    """A standard output that, once its reader has gone (``salientpp train P | head -1``), sends
    the rest of the output to ``/dev/null`` instead of raising ``BrokenPipeError`` in the middle
    of a run: the run goes on and finishes, as if its output were read."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            _to_devnull(self._stream)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            _to_devnull(self._stream)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _to_devnull(stream) -> None:
    """Point ``stream``'s file descriptor at /dev/null: what it still buffers, and all it is
    given later, goes there. Nothing happens to a stream without a file descriptor (a test's
    capture)."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def discard_stdout() -> None:
    """Send the rest of this process's standard output to /dev/null, what is buffered included:
    for one that can no longer be written (a full disk), so that neither later prints nor the
    flush at exit fail on it (which would end Python with exit code 120 and a traceback)."""
    if sys.stdout is not None:
        _to_devnull(sys.stdout)


def quiet_broken_pipe() -> None:
    """Make this process's ``sys.stdout`` drop its output without a word once its reader has gone
    (:class:`_QuietPipe`); the CLI and each local rank call it first."""
    if sys.stdout is not None and not isinstance(sys.stdout, _QuietPipe):
        sys.stdout = _QuietPipe(sys.stdout)
