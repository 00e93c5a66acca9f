"""The partition book: which partition owns a (renumbered) vertex id, and, for a typed graph, its
node type and its row among its partition's nodes of that type."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


def _search(bounds: np.ndarray, ids: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    """int64 index ``b`` of the range ``[bounds[b], bounds[b + 1])`` holding each id (same type and
    shape as ``ids``)."""
    if isinstance(ids, torch.Tensor):
        return torch.searchsorted(torch.from_numpy(np.asarray(bounds)), ids, right=True) - 1
    return np.searchsorted(bounds, ids, side="right").astype(np.int64) - 1


@dataclass(frozen=True)
class PartitionBook:
    """Contiguous ownership ranges after renumbering, partition-major and type-minor.

    The renumbering gives partition k the ids ``[offsets[k], offsets[k + 1])`` and, inside them,
    each node type t (in the schema's order) one contiguous block: ids
    ``[type_offsets[k * T + t], type_offsets[k * T + t + 1])``. A homogeneous graph has T = 1 and
    ``type_offsets`` equal to ``offsets``. The owner, the type and the row of an id within its
    block are each one search over these boundaries.

    Attributes:
        offsets: int64 ``[K + 1]``; partition k owns ids ``[offsets[k], offsets[k + 1])``.
        type_offsets: int64 ``[K * T + 1]``, the blocks of every (partition, type); ``None``: one
            type (``offsets`` itself).
    """

    offsets: np.ndarray
    type_offsets: np.ndarray | None = None

    @property
    def blocks(self) -> np.ndarray:
        """int64 ``[K * T + 1]``: :attr:`type_offsets`, or :attr:`offsets` for one type."""
        return self.offsets if self.type_offsets is None else self.type_offsets

    @property
    def num_parts(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def num_types(self) -> int:
        """T, the node types (1 for a homogeneous graph)."""
        return int(self.blocks.shape[0] - 1) // self.num_parts

    @property
    def num_nodes(self) -> int:
        return int(self.offsets[-1])

    @property
    def block_sizes(self) -> np.ndarray:
        """int64 ``[K, T]``: the nodes of each type that each partition owns."""
        return np.diff(self.blocks).reshape(self.num_parts, self.num_types)

    def part_size(self, k: int) -> int:
        return int(self.offsets[k + 1] - self.offsets[k])

    def owner(self, ids: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """int64 partition id of each id in ``ids`` (same type and shape as ``ids``)."""
        return _search(self.offsets, ids)

    def owned(self, k: int) -> np.ndarray:
        """int64 ``[part_size(k)]`` the global ids owned by partition ``k``."""
        return np.arange(self.offsets[k], self.offsets[k + 1], dtype=np.int64)

    def block(self, k: int, node_type: int = 0) -> tuple[int, int]:
        """The ids ``[start, stop)`` of partition ``k``'s nodes of the type ``node_type`` (an index
        of the schema's node types); row ``i`` of that partition's features of the type is the id
        ``start + i``."""
        b = k * self.num_types + node_type
        return int(self.blocks[b]), int(self.blocks[b + 1])

    def block_of(self, ids: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """int64 block ``k * T + t`` of each id in ``ids``: its owner ``k`` and node type ``t`` (same
        type and shape as ``ids``; for one type, the owner)."""
        return _search(self.blocks, ids)

    def type_of(self, ids: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """int64 node type index of each id in ``ids`` (same type and shape as ``ids``)."""
        return self.block_of(ids) % self.num_types

    def local_index(self, ids: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """int64 row of each id of ``ids`` within its (partition, type) block: the row of its
        features in its owner's features of its type (same type and shape as ``ids``; for one
        type, ``ids - offsets[owner(ids)]``)."""
        bounds = np.asarray(self.blocks)
        block = _search(bounds, ids)
        return ids - (torch.from_numpy(bounds)[block] if isinstance(ids, torch.Tensor) else bounds[block])
