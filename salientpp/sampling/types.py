"""What the sampler returns: message-flow graphs, sampled batches, and feature-fetch plans."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..partition.book import PartitionBook


@dataclass
class MFG:
    """The message-flow graph of one layer (one sampling hop).

    Sources are the batch nodes ``n_id[:num_src]``, destinations ``n_id[:num_dst]``
    (destinations are a prefix of the sources), so a PyG convolution consumes it directly::

        x_dst = conv((x_src, x_src[:mfg.num_dst]), mfg.edge_index)   # flow source_to_target

    Attributes:
        num_src: number of source nodes.
        num_dst: number of destination nodes.
        edge_index: int64 ``[2, E]``; row 0 = source local index in ``[0, num_src)``,
            row 1 = destination local index in ``[0, num_dst)``, grouped by destination.
        rowptr: int64 ``[num_dst + 1]``; the edges of destination ``d`` are columns
            ``rowptr[d]:rowptr[d + 1]`` of ``edge_index`` (a CSR over destinations).
        edge_weight: float32 ``[E]`` or None. Layer-wise samplers (LADIES) set it: the layer
            must aggregate ``sum_e edge_weight[e] * x[src_e]`` per destination, an unbiased
            estimate of the neighbour mean, instead of averaging the sampled neighbours.
    """

    num_src: int
    num_dst: int
    edge_index: torch.Tensor
    rowptr: torch.Tensor
    edge_weight: torch.Tensor | None = None

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> MFG:
        weight = None if self.edge_weight is None else self.edge_weight.to(device, non_blocking=non_blocking)
        return MFG(self.num_src, self.num_dst, self.edge_index.to(device, non_blocking=non_blocking),
                   self.rowptr.to(device, non_blocking=non_blocking), weight)


@dataclass
class FetchContext:
    """What a rank knows about feature placement; given to the sampler to plan each batch's fetch.

    Attributes:
        book: the partition book (rank ``k`` owns ids ``[offsets[k], offsets[k + 1])``).
        rank: the partition owned by this process.
        cache_slot: int64 ``[N]``: -1 = not cached; ``0 .. num_gpu_slots - 1`` = slot in the GPU
            cache tier; ``num_gpu_slots + j`` = slot ``j`` in the CPU cache tier. None = no cache.
            Owned ids are never looked up in the cache.
        num_gpu_slots: size of the GPU cache tier.
        local_x: ``[n_rank, F]`` owned feature rows (CPU), or None: the plan then has no ``x``.
        local_row: int64 ``[n_rank]``: storage row in ``local_x`` of local index
            ``id - offsets[rank]`` (owned rows stored in VIP order); None = identity.
        pin: put the plan's ``x`` in pinned memory; defaults to ``torch.cuda.is_available()``.
    """

    book: PartitionBook
    rank: int
    cache_slot: torch.Tensor | np.ndarray | None = None
    num_gpu_slots: int = 0
    local_x: torch.Tensor | np.ndarray | None = None
    local_row: torch.Tensor | np.ndarray | None = None
    pin: bool = field(default_factory=torch.cuda.is_available)


@dataclass
class FetchPlan:
    """Where each feature row of a batch comes from. Positions index ``n_id``.

    The batch's features ``x[n_id]`` are ``local_x[owned_row]`` at ``owned_pos``, the rows received
    for ``remote_id`` (in that order) at ``remote_pos``, ``gpu_cache[gpu_slot]`` at ``gpu_pos`` and
    ``cpu_cache[cpu_slot]`` at ``cpu_pos``.

    Attributes:
        owned_pos, owned_row: int64 ``[n_o]``: positions owned by this rank, their rows in local_x.
        x: ``[num_nodes, F]`` with the owned rows already written at ``owned_pos`` and the other
            rows not yet written (the assembly writes them in place); pinned when the context
            says so; None when the context has no ``local_x``.
        remote_id, remote_pos: int64 ``[n_r]``: ids to request from their owners and their
            positions, grouped by owner (ascending), ``n_id`` order within an owner.
        remote_counts: int64 ``[K]``: how many of ``remote_id`` each partition owns (0 at rank).
        gpu_pos, gpu_slot: int64 ``[n_g]``: positions served by the GPU cache tier, slot in it.
        cpu_pos, cpu_slot: int64 ``[n_c]``: positions served by the CPU cache tier, slot in it
            (already minus ``num_gpu_slots``).
    """

    owned_pos: torch.Tensor
    owned_row: torch.Tensor
    x: torch.Tensor | None
    remote_id: torch.Tensor
    remote_pos: torch.Tensor
    remote_counts: torch.Tensor
    gpu_pos: torch.Tensor
    gpu_slot: torch.Tensor
    cpu_pos: torch.Tensor
    cpu_slot: torch.Tensor


@dataclass
class SampledBatch:
    """One sampled minibatch.

    Attributes:
        n_id: int64 ``[num_nodes]`` global ids of every node of the batch; the first
            ``batch_size`` are the seeds, in order. Nested: ``n_id[:mfgs[l].num_src]`` are the
            nodes reached after hop ``L - l``.
        batch_size: number of seeds.
        mfgs: one :class:`MFG` per layer in MODEL order: ``mfgs[0]`` is the input layer (its
            sources are all of ``n_id``), ``mfgs[-1]`` has the seeds as destinations;
            ``mfgs[l].num_dst == mfgs[l + 1].num_src``.
        y: int64 ``[batch_size]`` seed labels, or None when the loader has no labels.
        fetch: the :class:`FetchPlan`, or None without a fetch context.
    """

    n_id: torch.Tensor
    batch_size: int
    mfgs: list[MFG]
    y: torch.Tensor | None = None
    fetch: FetchPlan | None = None

    @property
    def num_nodes(self) -> int:
        return int(self.n_id.shape[0])

    @property
    def num_sampled_edges(self) -> int:
        return sum(m.num_edges for m in self.mfgs)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> SampledBatch:
        """Moves ``n_id``, the MFGs and ``y`` (not the fetch plan) to ``device``."""
        y = None if self.y is None else self.y.to(device, non_blocking=non_blocking)
        return SampledBatch(self.n_id.to(device, non_blocking=non_blocking), self.batch_size,
                            [m.to(device, non_blocking) for m in self.mfgs], y, self.fetch)


def batch_from_extension(raw: tuple, batch_size: int) -> SampledBatch:
    """Wraps the tuple returned by the C++ extension (hops in sampling order)."""
    n_id, hops, y, fetch = raw
    mfgs = [MFG(num_src, num_dst, edge_index, rowptr) for num_src, num_dst, rowptr, edge_index in reversed(hops)]
    return SampledBatch(n_id, batch_size, mfgs, y, None if fetch is None else FetchPlan(**fetch))
