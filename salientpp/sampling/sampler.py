"""The Python face of the C++ node-wise neighbour sampler."""
from __future__ import annotations

import abc
from collections.abc import Sequence

import numpy as np
import torch

from .._ext import extension
from ..errors import InputError
from .convert import as_int64_tensor
from .fetch import fetch_to_extension
from .types import FetchContext, SampledBatch, batch_from_extension


class BaseSampler(abc.ABC):
    """What a loader needs from a sampler: ``num_nodes``, ``fanouts`` and one method that draws a
    batch of checked seeds (:class:`NeighborSampler`, :class:`~salientpp.sampling.BulkSampler`)."""

    num_nodes: int
    fanouts: list[int]

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    def sample(self, seeds: torch.Tensor | np.ndarray | Sequence[int], seed: int = 0, batch_index: int = 0,
               labels: torch.Tensor | np.ndarray | None = None, labels_offset: int = 0,
               fetch: FetchContext | None = None) -> SampledBatch:
        """Samples one batch.

        Args:
            seeds: int64 ``[b]`` distinct node ids.
            seed, batch_index: the random stream; the same pair gives the same batch
                (batch ``i`` of a :class:`NeighborLoader` epoch uses ``(loader.epoch_seed(), i)``).
            labels: int64 ``[M]``; the batch gets ``y = labels[seeds - labels_offset]``.
            fetch: plan where each feature row comes from (see :class:`FetchPlan`).
        """
        seeds_t = check_seeds(seeds, self.num_nodes, "seeds")
        labels_t = check_labels(labels, labels_offset, seeds_t)
        ctx = None if fetch is None else fetch_to_extension(fetch, self.num_nodes)
        return self._sample(seeds_t, seed, batch_index, labels_t, labels_offset, ctx)

    @abc.abstractmethod
    def _sample(self, seeds: torch.Tensor, seed: int, batch_index: int, labels: torch.Tensor | None,
                labels_offset: int, fetch) -> SampledBatch:
        """One batch of checked ``seeds`` with checked ``labels`` and a ``_C.FetchContext`` or None."""


class NeighborSampler(BaseSampler):
    """Node-wise uniform neighbour sampling with one message-flow graph (MFG) per hop.

    Semantics (the VIP analysis models exactly this): the layer-0 nodes are the seeds. At hop
    ``h`` (``h = 1..L``, fanout ``f_h = fanouts[h - 1]``) EVERY node reached so far, not only
    the newest frontier, draws its neighbours again, independently of earlier hops:

    * ``replace=False``: ``min(f_h, deg)`` distinct neighbours, every subset of that size
      equally likely (Floyd's algorithm); ``f_h = -1`` takes all neighbours.
    * ``replace=True``: ``f_h`` independent uniform draws (none for an isolated node); a
      neighbour drawn twice gives two parallel edges, so mean aggregation stays an unbiased
      estimate of the neighbour mean.

    Newly reached nodes are appended to ``n_id``, so ``n_id`` is nested: the nodes after hop
    ``h`` are a prefix of those after hop ``h + 1``. Without replacement, and assuming
    independence across nodes, a node ``u`` is in the batch after hop ``h`` with probability
    ``p^h(u) = 1 - (1 - p^{h-1}(u)) * prod_{v in N(u)} (1 - min(1, f_h / d(v)) p^{h-1}(v))``.

    Randomness comes only from ``(seed, batch_index)`` (a SplitMix64 stream per batch).

    Args:
        rowptr: int64 ``[N + 1]`` and col: int64 ``[nnz]``: CSR of a symmetric graph, numpy
            arrays (memory maps too) or CPU tensors; shared, not copied, when contiguous int64.
            Only the cheap checks are done here; a corrupt CSR is reported when sampling meets it.
        fanouts: ``[f_1, ..., f_L]``; ``fanouts[0]`` applies at the seeds. Each >= 1 or -1 (all).
        replace: sample with replacement.
    """

    def __init__(self, rowptr: torch.Tensor | np.ndarray, col: torch.Tensor | np.ndarray,
                 fanouts: Sequence[int], replace: bool = False):
        rowptr_t = as_int64_tensor(rowptr, "rowptr")
        col_t = as_int64_tensor(col, "col")
        check_csr(rowptr_t, col_t)
        self.fanouts = fanouts = check_fanout_list(fanouts)
        self.replace = bool(replace)
        self.num_nodes = int(rowptr_t.shape[0] - 1)
        self._core = extension().Sampler(rowptr_t, col_t, fanouts, self.replace)

    def _sample(self, seeds: torch.Tensor, seed: int, batch_index: int, labels: torch.Tensor | None,
                labels_offset: int, fetch) -> SampledBatch:
        try:  # the GIL is released while C++ works
            raw = self._core.sample(seeds, to_uint64(seed), to_uint64(batch_index), labels, labels_offset, fetch)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        return batch_from_extension(raw, int(seeds.shape[0]))


def check_csr(rowptr: torch.Tensor, col: torch.Tensor) -> None:
    """The cheap checks of a CSR pair (a corrupt one is reported when sampling meets it)."""
    if rowptr.shape[0] < 2:
        raise InputError("rowptr must have N + 1 >= 2 entries; pass the CSR of a graph with at least one node")
    if int(rowptr[0]) != 0 or int(rowptr[-1]) != col.shape[0]:
        raise InputError(f"rowptr must run from 0 to len(col) = {col.shape[0]}, "
                         f"got {int(rowptr[0])}..{int(rowptr[-1])}; pass a matching CSR pair")


def check_fanout_list(fanouts: Sequence[int]) -> list[int]:
    """``fanouts`` as a non-empty list of ints, each >= 1 or -1, or :class:`InputError`."""
    fanouts = [int(f) for f in fanouts]
    if not fanouts or any(f != -1 and f < 1 for f in fanouts):
        raise InputError(f"fanouts must be a non-empty list of integers >= 1 or -1 (all neighbours), got {fanouts}")
    return fanouts


def to_uint64(value: int) -> int:
    """``value`` reduced modulo 2**64, so negative or huge seeds are accepted."""
    return int(value) % (1 << 64)


def check_seeds(seeds: torch.Tensor | np.ndarray | Sequence[int], num_nodes: int, name: str) -> torch.Tensor:
    """A contiguous int64 tensor of distinct ids in ``[0, num_nodes)``, or :class:`InputError`."""
    if not isinstance(seeds, (torch.Tensor, np.ndarray)):
        seeds = np.asarray(seeds, dtype=np.int64)
    seeds_t = as_int64_tensor(seeds, name)
    if seeds_t.shape[0] == 0:
        raise InputError(f"{name} is empty; pass at least one node id")
    if int(seeds_t.min()) < 0 or int(seeds_t.max()) >= num_nodes:
        raise InputError(f"{name} holds ids outside [0, {num_nodes}); pass node ids of this graph")
    if torch.unique(seeds_t).shape[0] != seeds_t.shape[0]:
        raise InputError(f"{name} holds duplicate ids; pass each node once")
    return seeds_t


def check_labels(labels: torch.Tensor | np.ndarray | None, offset: int, seeds: torch.Tensor) -> torch.Tensor | None:
    """``labels`` as an int64 tensor covering ``seeds - offset``, or :class:`InputError`.

    Only multi-class labels (int64 ``[M]``) are gathered by the sampler; multi-label targets
    (``[M, T]``) are refused with the way round: gather their rows from the batch's seeds.
    """
    if labels is None:
        return None
    if getattr(labels, "ndim", 1) == 2:
        raise InputError(f"the sampler gathers multi-class labels (int64 [M]) only, got multi-label targets of shape "
                         f"{list(labels.shape)}; pass labels=None and take the rows of the batch's seeds "
                         "(labels[batch.n_id[:batch.batch_size] - labels_offset]) yourself")
    labels_t = as_int64_tensor(labels, "labels")
    if int(seeds.min()) - offset < 0 or int(seeds.max()) - offset >= labels_t.shape[0]:
        raise InputError(f"labels cover ids [{offset}, {offset + labels_t.shape[0]}) but the seeds do not all lie "
                         "there; pass labels for every seed (and the matching labels_offset)")
    return labels_t
