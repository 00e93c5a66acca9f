"""Renumbering of vertices: partition k becomes one contiguous id range, and inside it each node
type one contiguous sub-range (:mod:`salientpp.partition.assemble` moves the graph and the features
accordingly)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Renumbering:
    """A vertex permutation that groups vertices by partition, then by node type.

    Attributes:
        orig_id: int64 ``[N]`` original id of each new id (new -> old).
        new_id: int64 ``[N]`` new id of each original id (old -> new), the inverse of ``orig_id``.
        type_offsets: int64 ``[K * T + 1]``; block ``k * T + t`` = partition k's nodes of type t
            hold the new ids ``[type_offsets[k * T + t], type_offsets[k * T + t + 1])``
            (T = 1 for a homogeneous graph: the partition book itself).
        num_types: T.
    """

    orig_id: np.ndarray
    new_id: np.ndarray
    type_offsets: np.ndarray
    num_types: int = 1

    @property
    def offsets(self) -> np.ndarray:
        """int64 ``[K + 1]``; partition k holds the new ids ``[offsets[k], offsets[k + 1])``."""
        return np.ascontiguousarray(self.type_offsets[::self.num_types])


def invert_permutation(perm: np.ndarray) -> np.ndarray:
    """int64 ``[N]`` inverse of the permutation ``perm`` (``inv[perm[i]] = i``)."""
    inverse = np.empty(perm.shape[0], dtype=np.int64)
    inverse[perm] = np.arange(perm.shape[0], dtype=np.int64)
    return inverse


def renumber_by_part(parts: np.ndarray, num_parts: int, type_offsets: np.ndarray | None = None) -> Renumbering:
    """Contiguous id ranges per partition, partition-major and type-minor; inside a (partition,
    type) block the original id order is kept.

    Args:
        parts: int64 ``[N]`` partition of each original id, values in ``[0, num_parts)``.
        type_offsets: int64 ``[T + 1]``, node type t holds the original ids ``[type_offsets[t],
            type_offsets[t + 1])`` (:attr:`~salientpp.data.schema.GraphSchema.offsets`); ``None``:
            one type. Original ids are grouped by type, so the stable sort by partition already
            orders each partition's ids by type.
    """
    orig_id = np.argsort(parts, kind="stable").astype(np.int64, copy=False)
    num_types = 1 if type_offsets is None else int(type_offsets.shape[0] - 1)
    block = parts if num_types == 1 else parts * num_types + np.repeat(np.arange(num_types, dtype=np.int64),
                                                                         np.diff(type_offsets))
    offsets = np.zeros(num_parts * num_types + 1, dtype=np.int64)
    np.cumsum(np.bincount(block, minlength=num_parts * num_types), out=offsets[1:])
    return Renumbering(orig_id=orig_id, new_id=invert_permutation(orig_id), type_offsets=offsets, num_types=num_types)
