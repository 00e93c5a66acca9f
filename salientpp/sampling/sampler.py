"""The sampler interface (:class:`BaseSampler`), the Python face of the C++ node-wise neighbour
sampler (:class:`NeighborSampler`, the ``nodewise`` kind), and what every sampler returns:
message-flow graphs (:class:`MFG`), sampled batches (:class:`SampledBatch`) and the plan of
where each feature row of a batch comes from (:class:`RowOrigins`, made from a
:class:`FetchContext`)."""
from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from .._ext import extension
from ..errors import InputError
from ..partition.book import PartitionBook
from ..data.schema import GraphSchema
from .convert import as_int64_tensor, as_tensor, as_vector, moved, one_type
from .kinds import SamplerKind, check_replace, fanout_table, register_sampler
from .worker import ThreadWorker


# The kind this module draws: the C++ thread-pool sampler, one batch at a time (registered below,
# with NeighborSampler as its builder).
NODEWISE = SamplerKind("nodewise", "node-wise", "nodewise", typed=True)


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
        edge_type: int64 ``[E]``, the relation (an index of the graph's
            :attr:`~salientpp.data.schema.GraphSchema.relations`) of each edge; a destination's
            edges are grouped by relation, ascending. Not given (None): relation 0 for every edge,
            as a constant view (:func:`~salientpp.sampling.convert.one_type`), a one-relation graph's.
    """

    num_src: int
    num_dst: int
    edge_index: torch.Tensor
    rowptr: torch.Tensor
    edge_weight: torch.Tensor | None = None
    edge_type: torch.Tensor = None

    def __post_init__(self):
        if self.edge_type is None:
            self.edge_type = one_type(self.edge_index.shape[1], self.edge_index.device)

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    @classmethod
    def empty(cls, device: torch.device | str = "cpu") -> MFG:
        """An MFG without nodes or edges: a layer of an empty step, which still runs forward and
        backward so that the DDP all-reduce of every rank has a partner."""
        return cls(0, 0, torch.empty((2, 0), dtype=torch.int64, device=device),
                   torch.zeros(1, dtype=torch.int64, device=device))

    def to(self, device: torch.device | str, non_blocking: bool = False) -> MFG:
        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=non_blocking)

        weight = None if self.edge_weight is None else move(self.edge_weight)
        return MFG(self.num_src, self.num_dst, move(self.edge_index), move(self.rowptr), weight,
                   moved(self.edge_type, move, device))


@dataclass
class FetchContext:
    """What a rank knows about feature placement; given to the sampler to find each batch's row origins.

    A homogeneous graph is the one-type case: every per-type value has one entry, and a row's
    position among the batch nodes of its type is its index in ``n_id``.

    Attributes:
        book: the partition book (rank ``k`` owns ids ``[offsets[k], offsets[k + 1])``, type ``t``
            of them the block ``book.block(k, t)``).
        rank: the partition owned by this process.
        cache_slot: int64 ``[N]``: -1 = not cached; for an id of type ``t``, ``0 .. G_t - 1`` = row in
            the type's device cache tier, ``G_t + j`` = row ``j`` of the type's host cache tier. None =
            no cache. Owned ids are never looked up in the cache.
        num_device_slots: ``G_t``, the rows of each type's device cache tier: a sequence of T
            ints, or one int for every type.
        local_x: one entry per node type (``[x]`` for a homogeneous graph): type ``t``'s owned
            feature rows ``[n_t, F_t]`` (CPU), which the sampler threads write into the plan's
            ``x[t]``, or None (a type without features, or without this fast path). None: no
            type has them.
        local_row: int64 ``[n_rank]``: row of local index ``id - offsets[rank]`` among the owned
            rows of its type (``local_x[t]``'s; owned rows stored in VIP order); None = its index
            within its block.
        pin: put the plan's ``x`` in pinned memory; defaults to ``torch.cuda.is_available()``.
        featured: which of the T types have feature rows (None: all); the ids of the others get no
            row origin.
    """

    book: PartitionBook
    rank: int
    cache_slot: torch.Tensor | np.ndarray | None = None
    num_device_slots: int | Sequence[int] = 0
    local_x: Sequence[torch.Tensor | np.ndarray | None] | None = None
    local_row: torch.Tensor | np.ndarray | None = None
    pin: bool = field(default_factory=torch.cuda.is_available)
    featured: Sequence[bool] | None = None

    def to_extension(self, num_nodes: int):
        """This context checked against a graph of ``num_nodes`` nodes, as a ``_C.FetchContext``."""
        offsets = np.asarray(self.book.offsets)
        if offsets.ndim != 1 or offsets.shape[0] < 2 or offsets.dtype != np.int64:
            raise InputError("the partition book's offsets must be a 1-D int64 array of K + 1 >= 2 entries")
        if offsets[0] != 0 or offsets[-1] != num_nodes or np.any(np.diff(offsets) < 0):
            raise InputError(f"the partition book must cover ids 0..{num_nodes} with non-decreasing offsets, "
                             f"got {offsets[0]}..{offsets[-1]}; use the book of this graph's partitioning")
        num_parts, num_types = offsets.shape[0] - 1, self.book.num_types
        if not 0 <= self.rank < num_parts:
            raise InputError(f"rank {self.rank} is not a partition of this book (0..{num_parts - 1})")
        device_slots = np.array(self.num_device_slots, dtype=np.int64)
        if device_slots.ndim == 0:  # one number: every type's
            device_slots = np.full(num_types, device_slots, dtype=np.int64)
        if device_slots.shape != (num_types,) or np.any(device_slots < 0):
            raise InputError(f"num_device_slots must be {num_types} number(s) >= 0 (one per node type), "
                             f"got {self.num_device_slots}")
        featured = np.ones(num_types, dtype=bool) if self.featured is None else np.array(self.featured, dtype=bool)
        if featured.shape != (num_types,):
            raise InputError(f"featured must say for each of the {num_types} node types whether it has features")
        if self.pin and not torch.cuda.is_available():
            raise InputError("pinned memory needs CUDA, which is not available; pass pin=False")
        part_size = int(offsets[self.rank + 1] - offsets[self.rank])

        cache_slot = None
        if self.cache_slot is not None:
            cache_slot = as_int64_tensor(self.cache_slot, "cache_slot")
            if cache_slot.shape[0] != num_nodes:
                raise InputError(f"cache_slot must have one entry per node ({num_nodes}), has {cache_slot.shape[0]}")
            if num_nodes and int(cache_slot.min()) < -1:
                raise InputError("cache_slot holds values below -1; use -1 for ids that are not cached")

        local_x = [None] * num_types if self.local_x is None else self.local_x
        if isinstance(local_x, (torch.Tensor, np.ndarray)) or len(local_x) != num_types:
            raise InputError(f"local_x must hold one array or None per node type ({num_types}); "
                             "wrap a homogeneous graph's owned rows as [x]")
        local_x = [None if x is None else as_tensor(x, "local_x") for x in local_x]
        for t, x in enumerate(local_x):
            if x is not None and (x.dim() != 2 or not featured[t]):
                raise InputError(f"local_x[{t}] must be a 2-D [rows, F] array, or None for a type without "
                                 f"features; got shape {list(x.shape)} for a type "
                                 f"{'with' if featured[t] else 'without'} features")
        block_sizes = self.book.block_sizes[self.rank]  # [T] the owned ids of each type
        num_rows = np.array([n if x is None else x.shape[0] for n, x in zip(block_sizes, local_x)], dtype=np.int64)

        local_row = None
        if self.local_row is not None:
            local_row = as_int64_tensor(self.local_row, "local_row")
            if local_row.shape[0] != part_size:
                raise InputError(f"local_row must have one entry per owned id ({part_size}), has {local_row.shape[0]}")
            limit = np.repeat(num_rows, block_sizes)  # the rows of each owned id's type
            if part_size and (int(local_row.min()) < 0 or np.any(local_row.numpy() >= limit)):
                raise InputError("local_row must map each owned id into the rows of its type's local_x; "
                                 "fix the row order")
        elif np.any(num_rows != block_sizes):
            raise InputError(f"local_x has {num_rows.tolist()} rows per node type but rank {self.rank} owns "
                             f"{block_sizes.tolist()} ids of each; pass local_row or the owned rows only")

        return extension().FetchContext(torch.tensor(np.asarray(self.book.blocks), dtype=torch.int64), num_types,
                                        int(self.rank), cache_slot, torch.from_numpy(device_slots),
                                        torch.from_numpy(featured), local_x, local_row, bool(self.pin))


@dataclass
class RowOrigins:
    """Where each feature row of a batch comes from, per node type (a homogeneous graph: its one type).

    A position is a node's rank among the batch nodes of its type, in ``n_id`` order (with one
    type, its index in ``n_id``): the row of the type's features ``x_t``. Each array below is
    grouped by node type (its ``*_counts`` [T] say how many of each), the remote ones by
    (owner, type) block. ``x_t`` is the type's owned rows ``[owned_row]`` at ``owned_pos``, the
    rows received for ``remote_id`` (in that order) at ``remote_pos``, the type's
    ``device_cache[device_slot]`` at ``device_pos`` and ``host_cache[host_slot]`` at
    ``host_pos``. Ids of a type without features (the context's ``featured``) have no origin.

    Attributes:
        num_rows: int64 ``[T]``: the batch nodes of each type.
        owned_pos, owned_row: int64 ``[n_o]``: positions owned by this rank, their rows among the
            type's owned rows (``local_x``'s); owned_counts: int64 ``[T]``.
        x: one entry per node type: ``x[t]`` ``[num_rows[t], F_t]`` with the type's owned rows
            already written at its ``owned_pos`` and its other rows not yet written (the assembly
            writes them in place), pinned when the context says so; None where the context has no
            ``local_x[t]``.
        remote_id, remote_pos: int64 ``[n_r]``: ids to request from their owners and their
            positions, grouped by block ``k * T + t`` (ascending), ``n_id`` order within a block.
        remote_counts: int64 ``[K * T]``: how many of ``remote_id`` each block holds (0 at rank's).
        device_pos, device_slot: int64 ``[n_g]``: positions served by the device cache tier, row
            in the type's tier; device_counts: int64 ``[T]``.
        host_pos, host_slot: int64 ``[n_c]``: positions served by the host cache tier, row in the
            type's tier (already minus ``G_t``); host_counts: int64 ``[T]``.
    """

    num_rows: torch.Tensor
    owned_pos: torch.Tensor
    owned_row: torch.Tensor
    owned_counts: torch.Tensor
    x: list[torch.Tensor | None]
    remote_id: torch.Tensor
    remote_pos: torch.Tensor
    remote_counts: torch.Tensor
    device_pos: torch.Tensor
    device_slot: torch.Tensor
    device_counts: torch.Tensor
    host_pos: torch.Tensor
    host_slot: torch.Tensor
    host_counts: torch.Tensor


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
        origins: the :class:`RowOrigins`, or None without a fetch context.
        node_type: int64 ``[num_nodes]``, the node type (an index of the graph's
            :attr:`~salientpp.data.schema.GraphSchema.node_types`) of each node of ``n_id``. Not
            given (None): type 0 for every node, as a constant view
            (:func:`~salientpp.sampling.convert.one_type`), a one-type graph's.
    """

    n_id: torch.Tensor
    batch_size: int
    mfgs: list[MFG]
    y: torch.Tensor | None = None
    origins: RowOrigins | None = None
    node_type: torch.Tensor = None

    def __post_init__(self):
        if self.node_type is None:
            self.node_type = one_type(self.n_id.shape[0], self.n_id.device)

    @property
    def num_nodes(self) -> int:
        return int(self.n_id.shape[0])

    @property
    def num_sampled_edges(self) -> int:
        return sum(m.num_edges for m in self.mfgs)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> SampledBatch:
        """Moves ``n_id``, the MFGs, ``y`` and ``node_type`` (not the row origins) to ``device``."""
        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=non_blocking)

        return SampledBatch(move(self.n_id), self.batch_size, [m.to(device, non_blocking) for m in self.mfgs],
                            None if self.y is None else move(self.y), self.origins, moved(self.node_type, move, device))


# A per-node type lookup: int64 ``[n]`` node type of each global id of an int64 ``[n]`` array
# (:meth:`~salientpp.data.schema.GraphSchema.type_of`).
TypeOf = Callable[[np.ndarray], np.ndarray]

# What gives a batch its ``node_type``: int64 ``[n]`` node ids -> int64 ``[n]`` their types (:func:`node_types`).
NodeTypes = Callable[[torch.Tensor], torch.Tensor]


def node_types(schema: GraphSchema, type_of: TypeOf | None = None) -> NodeTypes:
    """The node types of a batch's ``n_id`` (on its device) on a graph of ``schema``, decided once:
    by ``type_of`` (None: ``schema.type_of``, a lookup on the host), or, with one node type, the constant view
    :func:`~salientpp.sampling.convert.one_type` (no per-node lookup or memory)."""
    if schema.num_types == 1:
        return lambda n_id: one_type(n_id.shape[0], n_id.device)
    lookup = type_of or schema.type_of
    return lambda n_id: torch.from_numpy(lookup(n_id.cpu().numpy()).astype(np.int64, copy=False)).to(n_id.device)


def batch_from_extension(raw: tuple, batch_size: int, types: NodeTypes) -> SampledBatch:
    """Wraps the tuple returned by the C++ extension (hops in sampling order); ``types`` gives
    the batch its ``node_type`` (:func:`node_types`)."""
    n_id, hops, y, fetch = raw
    mfgs = [MFG(num_src, num_dst, edge_index, rowptr, None, edge_type)
            for num_src, num_dst, rowptr, edge_index, edge_type in reversed(hops)]
    return SampledBatch(n_id, batch_size, mfgs, y, None if fetch is None else RowOrigins(**fetch), types(n_id))


@dataclass(frozen=True)
class EpochSchedule:
    """Which batches of an epoch a sampler draws (:meth:`BaseSampler.start_epoch`).

    Batch ``i`` holds the seeds ``order[bounds[i]:bounds[i + 1]]`` (checked, possibly none) and is
    drawn from the stream ``(seed, i)`` alone; batches ``first:`` are drawn, in order.

    Attributes:
        order: int64 ``[n]`` contiguous, the epoch's seeds in order.
        bounds: int64 ``[S + 1]``, the batch boundaries in ``order``.
        seed: the epoch's sampling seed.
        first: the first batch drawn (a resumed epoch starts later).
    """

    order: torch.Tensor
    bounds: torch.Tensor
    seed: int
    first: int = 0

    def sizes(self) -> list[int]:
        """The seeds of batches ``first:``, in order."""
        return (self.bounds[self.first + 1:] - self.bounds[self.first:-1]).tolist()


@dataclass(frozen=True)
class BatchStages:
    """What a batch gets after its topology is drawn: its seeds' labels and its row origins.

    Attributes:
        labels: int64 ``[M]`` checked labels (:func:`check_labels`); the batch gets
            ``y = labels[seeds - labels_offset]``. None: no ``y``.
        labels_offset: the id of ``labels[0]``.
        fetch: a ``_C.FetchContext`` (:meth:`FetchContext.to_extension`); the batch gets its
            :class:`RowOrigins`. None: no row origins.
    """

    labels: torch.Tensor | None = None
    labels_offset: int = 0
    fetch: Any = None

    def apply(self, batch: SampledBatch) -> SampledBatch:
        """``batch`` (its topology drawn, on any device) with its seeds' labels and row origins."""
        seeds = batch.n_id[:batch.batch_size].cpu()
        if self.labels is not None:
            batch.y = self.labels[seeds - self.labels_offset]
        if self.fetch is not None:
            batch.origins = RowOrigins(**extension().row_origins(self.fetch, batch.n_id.cpu().contiguous()))
        return batch


# Stages that add nothing: a batch's topology alone.
NO_STAGES = BatchStages()


@dataclass(frozen=True)
class Workers:
    """How a loader runs its sampler's epoch (the loader's choice, not the sampler's).

    Attributes:
        sampler_threads: the sampling threads of a sampler that draws in a pool of its own (the
            node-wise C++ sampler); one background thread otherwise.
        read_ahead: the most batches sampled ahead of the consumer.
        low_priority: run the sampling threads at a lower scheduling priority.
    """

    sampler_threads: int = 1
    read_ahead: int = 4
    low_priority: bool = False


# ---- the sampler interface and the node-wise sampler ----------------------------------------------


class BatchWorker(Protocol):
    """What :meth:`BaseSampler.start_epoch` returns: it samples an epoch's batches in order."""

    def next(self) -> SampledBatch | None:
        """The next batch; ``None`` once closed. Raises what sampling raised (``ValueError`` for a
        corrupt graph)."""

    def close(self) -> None:
        """Stops sampling; a batch in hand is finished first."""


class BaseSampler(abc.ABC):
    """What a loader needs from a sampler, whatever its kind (:class:`NeighborSampler`,
    :class:`~salientpp.sampling.BulkSampler`, any kind registered with
    :func:`~salientpp.sampling.kinds.register_sampler`): ``num_nodes``, ``fanouts``,
    :meth:`sample` for one batch and :meth:`start_epoch` for an epoch's batches (PyG's
    ``BaseSampler`` shape). A kind draws a batch's topology from its seeds and a random stream
    (:meth:`_draw`); the :class:`BatchStages` then add labels and row origins, and the loader's
    :class:`Workers` say how the epoch runs (threads, read-ahead).

    Batch ``i`` of an epoch is drawn from the stream ``(seed, i)`` alone, so :meth:`sample` and
    :meth:`start_epoch` give the same batch, whichever thread or bulk draws it.

    ``fanouts`` is the int64 ``[L, R]`` fanout table (:func:`~salientpp.sampling.kinds.fanout_table`:
    row ``h`` the fanout of each relation at hop ``h``; ``R = 1`` for a homogeneous graph)."""

    num_nodes: int
    fanouts: np.ndarray

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
            fetch: what the rank knows of feature placement, from which each batch gets its
                :class:`RowOrigins`, where each of its feature rows comes from.
        """
        seeds_t = check_seeds(seeds, self.num_nodes, "seeds")
        stages = BatchStages(check_labels(labels, labels_offset, seeds_t), labels_offset,
                             None if fetch is None else fetch.to_extension(self.num_nodes))
        return self._sample(seeds_t, seed, batch_index, stages)

    @abc.abstractmethod
    def _draw(self, seeds: torch.Tensor, seed: int, batch_index: int) -> SampledBatch:
        """The topology of one batch of checked ``seeds`` (possibly none: a batch of a rank without
        seeds) from the stream ``(seed, batch_index)``: ``n_id``, MFGs and ``node_type``, without
        labels or row origins (the :class:`BatchStages` add them)."""

    def _sample(self, seeds: torch.Tensor, seed: int, batch_index: int, stages: BatchStages) -> SampledBatch:
        """One batch: :meth:`_draw`, then ``stages``. A kind that fuses the stages into its draw
        (the node-wise C++ sampler) overrides it."""
        return stages.apply(self._draw(seeds, seed, batch_index))

    def start_epoch(self, schedule: EpochSchedule, stages: BatchStages, workers: Workers) -> BatchWorker:
        """Starts sampling the batches of ``schedule``, in order, each through ``stages``, run as
        ``workers`` says; :class:`NeighborLoader` calls it.

        This default runs :meth:`_epoch_batches` in one background thread
        (:class:`~salientpp.sampling.worker.ThreadWorker`, at most ``workers.read_ahead`` batches
        ahead; ``workers.sampler_threads`` does not apply)."""
        return ThreadWorker(self._epoch_batches(schedule, stages), workers.read_ahead, workers.low_priority)

    def _epoch_batches(self, schedule: EpochSchedule, stages: BatchStages) -> Iterator[SampledBatch]:
        """The batches of :meth:`start_epoch`, one :meth:`_sample` each."""
        order, bounds = schedule.order, schedule.bounds.tolist()
        for i in range(schedule.first, len(bounds) - 1):
            yield self._sample(order[bounds[i]:bounds[i + 1]], schedule.seed, i, stages)


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

    Randomness comes only from ``(seed, batch_index)`` (a SplitMix64 stream per batch). A
    loader's epoch runs in the C++ thread pool (:meth:`start_epoch`).

    A typed graph (``edge_rel`` and its ``schema``) is sampled with PyG's semantics: at hop ``h``
    every node reached draws, for each relation ``r`` in order, ``table[h][r]`` of its relation-``r``
    neighbours as above (``table = fanout_table(fanouts, schema)``, int64 ``[L, R]``; 0 draws
    none), so a node draws only along the relations into its type. Its MFGs carry ``edge_type``
    and its batches ``node_type``. With one relation the draws are exactly the untyped ones.

    Args:
        rowptr: int64 ``[N + 1]`` and col: int64 ``[nnz]``: CSR of a symmetric graph, numpy
            arrays (memory maps too) or CPU tensors; shared, not copied, when contiguous int64.
            Only the cheap checks are done here; a corrupt CSR is reported when sampling meets it.
        fanouts: ``[f_1, ..., f_L]``; ``fanouts[0]`` applies at the seeds. Each >= 1 or -1 (all).
            Also a dict relation -> list or the ``[L, R]`` table itself, the forms
            :func:`~salientpp.sampling.kinds.fanout_table` reads.
        replace: sample with replacement.
        edge_rel: int8 ``[nnz]``, the relation of each CSR entry, a row's entries grouped by
            relation ascending (:func:`~salientpp.data.csr.build_typed_csr`; ``Dataset.edge_rel``);
            None for a homogeneous graph.
        schema: the graph's :class:`~salientpp.data.schema.GraphSchema` (``Dataset.schema``);
            needed with ``edge_rel``. Not given: the homogeneous schema of the CSR's nodes.
        type_of: the node type of ids (int64 ``[n]`` -> int64 ``[n]``) for the batches'
            ``node_type``; None: ``schema.type_of`` (a partitioned graph, whose ids are renumbered
            into (partition, type) blocks, passes its book's ``type_of``).

    Attributes:
        fanouts: int64 ``[L, R]``, the fanout of each hop and relation (``R = 1`` for a
            homogeneous graph).
        schema: the graph's schema (the homogeneous one when not given).
    """

    def __init__(self, rowptr: torch.Tensor | np.ndarray, col: torch.Tensor | np.ndarray,
                 fanouts: Sequence[int] | Mapping[Any, Sequence[int]], replace: bool = False, *,
                 edge_rel: torch.Tensor | np.ndarray | None = None, schema: GraphSchema | None = None,
                 type_of: TypeOf | None = None):
        rowptr_t = as_int64_tensor(rowptr, "rowptr")
        col_t = as_int64_tensor(col, "col")
        check_csr_ends(rowptr_t, col_t)
        self.num_nodes = int(rowptr_t.shape[0] - 1)
        self.schema = graph_schema(schema, edge_rel, self.num_nodes)
        edge_rel_t = check_typed_graph_arrays(edge_rel, self.schema, col_t, self.num_nodes)
        self.fanouts = fanout_table(fanouts, self.schema, NODEWISE)
        self.replace = check_replace(replace, NODEWISE)
        self._types = node_types(self.schema, type_of)
        self._core = extension().Sampler(rowptr_t, col_t, edge_rel_t, torch.from_numpy(self.fanouts), self.replace)

    def _draw(self, seeds: torch.Tensor, seed: int, batch_index: int) -> SampledBatch:
        return self._sample(seeds, seed, batch_index, NO_STAGES)

    def _sample(self, seeds: torch.Tensor, seed: int, batch_index: int, stages: BatchStages) -> SampledBatch:
        """The draw with its stages fused in C++ (the node-wise fast path)."""
        try:  # the GIL is released while C++ works
            raw = self._core.sample(seeds, to_uint64(seed), to_uint64(batch_index), stages.labels,
                                    stages.labels_offset, stages.fetch)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        return batch_from_extension(raw, int(seeds.shape[0]), self._types)

    def start_epoch(self, schedule: EpochSchedule, stages: BatchStages, workers: Workers) -> BatchWorker:
        """:meth:`BaseSampler.start_epoch` in ``workers.sampler_threads`` C++ threads (a
        ``_C.BatchLoader``), the stages fused into each draw."""
        core = extension().BatchLoader(self._core, schedule.order, schedule.bounds, schedule.seed, stages.labels,
                                       stages.labels_offset, stages.fetch, workers.sampler_threads,
                                       workers.read_ahead, schedule.first, workers.low_priority)
        return _ExtensionWorker(core, schedule.sizes(), self._types)


class _ExtensionWorker:
    """A ``_C.BatchLoader`` whose batches come out as :class:`SampledBatch` (a :class:`BatchWorker`);
    ``sizes`` are the seeds of the batches it samples, in order; ``types`` gives them their
    ``node_type`` (:func:`node_types`)."""

    def __init__(self, core, sizes: list[int], types: NodeTypes):
        self._core = core
        self._sizes = iter(sizes)
        self._types = types

    def next(self) -> SampledBatch | None:
        raw = self._core.next()
        return None if raw is None else batch_from_extension(raw, next(self._sizes), self._types)

    def close(self) -> None:
        self._core.close()


register_sampler(NODEWISE, NeighborSampler)


def check_csr_ends(rowptr: torch.Tensor, col: torch.Tensor) -> None:
    """The cheap checks of a CSR pair: its ``rowptr`` runs from 0 to ``len(col)`` (a corrupt one
    is reported when sampling meets it; :func:`salientpp.data.csr.check_csr` is the full check of
    a graph on disk)."""
    if rowptr.shape[0] < 2:
        raise InputError("rowptr must have N + 1 >= 2 entries; pass the CSR of a graph with at least one node")
    if int(rowptr[0]) != 0 or int(rowptr[-1]) != col.shape[0]:
        raise InputError(f"rowptr must run from 0 to len(col) = {col.shape[0]}, "
                         f"got {int(rowptr[0])}..{int(rowptr[-1])}; pass a matching CSR pair")


def graph_schema(schema: GraphSchema | None, edge_rel: torch.Tensor | np.ndarray | None,
                 num_nodes: int) -> GraphSchema:
    """The schema a sampler of a graph of ``num_nodes`` nodes draws with: ``schema``, or the
    homogeneous one when not given; :class:`InputError` for an ``edge_rel`` without its schema
    (relations the sampler could not name: not a homogeneous graph)."""
    if schema is None and edge_rel is not None:
        raise InputError("edge_rel needs the graph's schema to name its relations; pass schema=dataset.schema")
    return schema or GraphSchema.homogeneous(num_nodes)


def check_typed_graph_arrays(edge_rel: torch.Tensor | np.ndarray | None, schema: GraphSchema,
                             col: torch.Tensor, num_nodes: int) -> torch.Tensor | None:
    """The cheap checks of a graph's arrays against its ``schema``: ``num_nodes`` nodes, and
    ``edge_rel`` as an int8 tensor of one entry per entry of ``col`` (its values are checked when
    sampling meets them), given for a schema of several relations; None for a graph of one
    relation (whose ``edge_rel``, if given, says nothing: every entry is relation 0, which the
    sampler draws without it). :class:`InputError` otherwise."""
    if schema.total_nodes != num_nodes:
        raise InputError(f"the schema counts {schema.total_nodes} nodes but the CSR has {num_nodes}; pass the "
                         "schema of this graph")
    if edge_rel is None:
        if schema.num_relations > 1:
            raise InputError("a typed graph needs the relation of each CSR entry; pass edge_rel=dataset.edge_rel "
                             "with its schema")
        return None
    edge_rel_t = as_vector(edge_rel, "edge_rel", torch.int8)
    if edge_rel_t.shape[0] != col.shape[0]:
        raise InputError(f"edge_rel must have one entry per entry of col ({col.shape[0]}), has "
                         f"{edge_rel_t.shape[0]}; pass the edge_rel of this CSR")
    return None if schema.num_relations == 1 else edge_rel_t


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
