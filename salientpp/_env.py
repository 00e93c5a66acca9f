"""Environment variables salientpp sets for the processes it starts (its CLI, its local ranks)
where the user did not set them. torch and OpenMP read them once, when torch is imported, so
this module imports nothing heavy: the CLI applies them before any command imports torch. And
how those processes treat a standard output whose reader has gone (:func:`quiet_broken_pipe`).
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
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def _to_devnull(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())  # what is still buffered goes there too
        finally:
            os.close(devnull)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def quiet_broken_pipe() -> None:
    """Make this process's ``sys.stdout`` drop its output without a word once its reader has gone
    (:class:`_QuietPipe`); the CLI and each local rank call it first."""
    if sys.stdout is not None and not isinstance(sys.stdout, _QuietPipe):
        sys.stdout = _QuietPipe(sys.stdout)
