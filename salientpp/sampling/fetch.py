"""Validation of a :class:`FetchContext` and its conversion for the C++ extension."""
from __future__ import annotations

import numpy as np
import torch

from .._ext import extension
from ..errors import InputError
from .convert import as_int64_tensor, as_tensor
from .types import FetchContext


def fetch_to_extension(ctx: FetchContext, num_nodes: int):
    """Checks ``ctx`` against a graph of ``num_nodes`` nodes; returns a ``_C.FetchContext``."""
    offsets = np.asarray(ctx.book.offsets)
    if offsets.ndim != 1 or offsets.shape[0] < 2 or offsets.dtype != np.int64:
        raise InputError("the partition book's offsets must be a 1-D int64 array of K + 1 >= 2 entries")
    if offsets[0] != 0 or offsets[-1] != num_nodes or np.any(np.diff(offsets) < 0):
        raise InputError(f"the partition book must cover ids 0..{num_nodes} with non-decreasing offsets, "
                         f"got {offsets[0]}..{offsets[-1]}; use the book of this graph's partitioning")
    num_parts = offsets.shape[0] - 1
    if not 0 <= ctx.rank < num_parts:
        raise InputError(f"rank {ctx.rank} is not a partition of this book (0..{num_parts - 1})")
    if ctx.num_gpu_slots < 0:
        raise InputError(f"num_gpu_slots must be >= 0, got {ctx.num_gpu_slots}")
    if ctx.pin and not torch.cuda.is_available():
        raise InputError("pinned memory needs CUDA, which is not available; pass pin=False")
    part_size = int(offsets[ctx.rank + 1] - offsets[ctx.rank])

    cache_slot = None
    if ctx.cache_slot is not None:
        cache_slot = as_int64_tensor(ctx.cache_slot, "cache_slot")
        if cache_slot.shape[0] != num_nodes:
            raise InputError(f"cache_slot must have one entry per node ({num_nodes}), has {cache_slot.shape[0]}")
        if num_nodes and int(cache_slot.min()) < -1:
            raise InputError("cache_slot holds values below -1; use -1 for ids that are not cached")

    local_x = None
    if ctx.local_x is not None:
        local_x = as_tensor(ctx.local_x, "local_x")
        if local_x.dim() != 2:
            raise InputError(f"local_x must be a 2-D [rows, F] array, got shape {list(local_x.shape)}")
    num_rows = part_size if local_x is None else int(local_x.shape[0])

    local_row = None
    if ctx.local_row is not None:
        local_row = as_int64_tensor(ctx.local_row, "local_row")
        if local_row.shape[0] != part_size:
            raise InputError(f"local_row must have one entry per owned id ({part_size}), has {local_row.shape[0]}")
        if part_size and (int(local_row.min()) < 0 or int(local_row.max()) >= num_rows):
            raise InputError(f"local_row must map into the {num_rows} rows of local_x; fix the row order")
    elif local_x is not None and num_rows != part_size:
        raise InputError(f"local_x has {num_rows} rows but rank {ctx.rank} owns {part_size} ids; "
                         "pass local_row or the owned rows only")

    return extension().FetchContext(torch.tensor(offsets, dtype=torch.int64), int(ctx.rank), cache_slot,
                                    int(ctx.num_gpu_slots), local_x, local_row, bool(ctx.pin))
