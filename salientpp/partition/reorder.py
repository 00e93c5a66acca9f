"""Renumbering of vertices: partition k becomes one contiguous id range
(:mod:`salientpp.partition.assemble` moves the graph and the features accordingly)."""
from __future__ import annotations

from dataclasses import dataclass

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
