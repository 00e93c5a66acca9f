"""Environment variables salientpp sets for the processes it starts (its CLI, its local ranks)
where the user did not set them. torch and OpenMP read them once, when torch is imported, so
this module imports nothing heavy: the CLI applies them before any command imports torch.
"""
from __future__ import annotations

import os

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
