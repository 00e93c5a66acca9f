"""The partition book: which partition owns a (renumbered) vertex id."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class PartitionBook:
    """Contiguous ownership ranges after renumbering.

    Attributes:
        offsets: int64 ``[K + 1]``; partition k owns ids ``[offsets[k], offsets[k + 1])``.
    """

    offsets: np.ndarray

    @property
    def num_parts(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def num_nodes(self) -> int:
        return int(self.offsets[-1])

    def part_size(self, k: int) -> int:
        return int(self.offsets[k + 1] - self.offsets[k])

    def owner(self, ids: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """int64 partition id of each id in ``ids`` (same type and shape as ``ids``)."""
        if isinstance(ids, torch.Tensor):
            return torch.searchsorted(torch.from_numpy(np.asarray(self.offsets)), ids, right=True) - 1
        return np.searchsorted(self.offsets, ids, side="right").astype(np.int64) - 1

    def owned(self, k: int) -> np.ndarray:
        """int64 ``[part_size(k)]`` the global ids owned by partition ``k``."""
        return np.arange(self.offsets[k], self.offsets[k + 1], dtype=np.int64)
