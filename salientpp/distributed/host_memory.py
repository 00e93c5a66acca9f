"""How a rank's host memory allocator treats freed blocks.

Every training step allocates tensors of hundreds of MB on the host: the batch's features, the
rows it receives and serves, the model's activations and gradients. glibc's malloc serves each
block above 32 MB with a fresh ``mmap`` and unmaps it when it is freed, so every step faults
its pages in again and the kernel zeroes each one; blocks that sampler threads allocate come
from per-thread arenas that do the same above 64 MB. On the ``products`` preset in 2 parts
(2 cores) that cost about 40% of the model step's CPU time and half of the loader's
(docs/training-performance.md, "Host memory reuse").

:func:`keep_freed_memory` makes malloc keep freed blocks for the next step instead: no
``mmap`` for large blocks, one arena for every thread, and the heap's free top returned to the
system only beyond 2 GiB. The process's resident memory then stays near its peak rather than
falling between steps. It changes glibc's settings for the whole process, at run time
(``mallopt``), so it applies to blocks allocated after the call and lasts until the process
ends; elsewhere than glibc it does nothing.
"""
from __future__ import annotations

import ctypes
import platform

# mallopt parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
M_ARENA_MAX = -8
# Free memory at the top of the heap beyond this goes back to the system (mallopt takes an int).
TRIM_THRESHOLD = 2**31 - 1


def keep_freed_memory() -> bool:
    """Make glibc's malloc keep freed host memory for reuse in this process (see the module
    docstring); returns whether it did (``False`` on a C library other than glibc)."""
    if platform.libc_ver()[0] != "glibc":
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return all(mallopt(param, value) == 1 for param, value in
               ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_ARENA_MAX, 1)))
