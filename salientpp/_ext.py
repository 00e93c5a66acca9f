"""Import of the compiled extension ``salientpp._C`` with one clear message when it is absent."""
from __future__ import annotations

import functools

from .errors import InputError

REBUILD = "rebuild it with `pip install --no-build-isolation -e .` in the salientpp source tree"
# Entry points this version of the Python code calls; an older build lacks some of them.
REQUIRED = ("Sampler", "BatchLoader", "FetchContext", "gather_rows", "row_origins")


@functools.lru_cache(maxsize=1)
def extension():
    """The ``salientpp._C`` module; raises :class:`InputError` saying how to rebuild it."""
    import torch  # noqa: F401  (loads libc10 and libtorch, which _C links against)

    try:
        from . import _C
    except ImportError as exc:
        raise InputError(f"the salientpp C++ extension could not be loaded ({exc}); {REBUILD}") from None
    missing = [name for name in REQUIRED if not hasattr(_C, name)]
    if missing:
        raise InputError(f"the salientpp C++ extension is older than the Python code (it lacks "
                         f"{', '.join(missing)}); {REBUILD}")
    return _C
