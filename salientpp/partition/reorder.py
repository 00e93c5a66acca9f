"""Renumbering of vertices: partition k becomes one contiguous id range, and the CSR follows.

``permute_csr`` works for any vertex permutation, so a later reordering inside the partitions
(e.g. by descending VIP) can reuse it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np


@dataclass(frozen=True)
class Renumbering:
    """A vertex permutation that groups vertices by partition.

    Attributes:
        orig_id: int64 ``[N]`` original id of each new id (new -> old).
        new_id: int64 ``[N]`` new id of each original id (old -> new), the inverse of ``orig_id``.
        offsets: int64 ``[K + 1]``; partition k holds the new ids ``[offsets[k], offsets[k + 1])``.
    """

    orig_id: np.ndarray
    new_id: np.ndarray
    offsets: np.ndarray


def invert_permutation(perm: np.ndarray) -> np.ndarray:
    """int64 ``[N]`` inverse of the permutation ``perm`` (``inv[perm[i]] = i``)."""
    inverse = np.empty(perm.shape[0], dtype=np.int64)
    inverse[perm] = np.arange(perm.shape[0], dtype=np.int64)
    return inverse


def renumber_by_part(parts: np.ndarray, num_parts: int) -> Renumbering:
    """Contiguous id ranges per partition; inside a partition the original id order is kept.

    Args:
        parts: int64 ``[N]`` partition of each original id, values in ``[0, num_parts)``.
    """
    orig_id = np.argsort(parts, kind="stable").astype(np.int64, copy=False)
    offsets = np.zeros(num_parts + 1, dtype=np.int64)
    np.cumsum(np.bincount(parts, minlength=num_parts), out=offsets[1:])
    return Renumbering(orig_id=orig_id, new_id=invert_permutation(orig_id), offsets=offsets)


@numba.njit(parallel=True, cache=True)
def _fill_rows(rowptr, col, orig_id, new_id, new_rowptr, new_col):
    for i in numba.prange(orig_id.shape[0]):
        start = rowptr[orig_id[i]]
        out = new_rowptr[i]
        length = new_rowptr[i + 1] - out
        for t in range(length):
            new_col[out + t] = new_id[col[start + t]]
        new_col[out:out + length].sort()


def permute_csr(rowptr: np.ndarray, col: np.ndarray, orig_id: np.ndarray, new_id: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """The same graph in the new numbering: new row i is old row ``orig_id[i]``, every
    neighbour ``j`` becomes ``new_id[j]``, and each row is sorted again.

    Args:
        rowptr: int64 ``[N + 1]``; col: int64 ``[nnz]`` (may be memory maps).
        orig_id, new_id: int64 ``[N]`` mutually inverse permutations.

    Returns:
        ``rowptr`` int64 ``[N + 1]`` and ``col`` int64 ``[nnz]`` in the new numbering.
    """
    new_rowptr = np.zeros_like(rowptr, dtype=np.int64)
    np.cumsum(np.diff(rowptr)[orig_id], out=new_rowptr[1:])
    new_col = np.empty(col.shape[0], dtype=np.int64)
    _fill_rows(np.asarray(rowptr), np.asarray(col), orig_id, new_id, new_rowptr, new_col)
    return new_rowptr, new_col
