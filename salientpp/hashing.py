"""Counter-based hashing for numba kernels and numpy arrays: draws and tie-breaks that depend on a
seed and a position only, never on thread count or processing order."""
from __future__ import annotations

import numba
import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64_array(z):
    """The splitmix64 finaliser of uint64 ``z`` (a scalar or an array of any shape): a bijection
    with good avalanche. Plain numpy, so array callers start without compiling anything."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


# The same function compiled, for calls from numba kernels.
splitmix64 = numba.njit(cache=True, inline="always")(splitmix64_array)
