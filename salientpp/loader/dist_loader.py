"""The distributed loader a user's own training loop iterates: :class:`DistNeighborLoader`.

It owns everything between a seed split and a model's input: C++ sampling threads, the fetch
plan of each batch (owned rows, cache tiers, rows to request), the three all-to-alls, the
assembly of ``x[n_id]`` on the device, and the pipeline that overlaps them::

    Pipeline(SampleStage(loader), fetch_stages(...), pipeline_depth)   # one visible line in __iter__

**Lockstep.** The exchange is a collective, so every rank must run the same number of steps.
The loader gives every rank exactly ``S = max_k ceil(|seeds_k| / batch_size)`` batches per epoch,
and rank k cuts its shuffled seeds into ``S`` batches whose sizes differ by at most one (at most
``batch_size``). A user's loop therefore never sees an empty batch on a split every rank has at
least ``S`` seeds of (always the case for the training split of a METIS partitioning, which
balances training vertices; the loader refuses the training split otherwise), and needs no loss
scaling. On an uneven evaluation split a rank may get batches with ``batch_size == 0``; they
still take part in the collectives. The VIP analysis and the simulator model these batches.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Iterator

import numpy as np
import torch
import torch.distributed as dist

from ..cache.plan import CheckedPlan, PlanInfo, check_device_fraction
from ..cache.workload import check_batch_size, check_training_seeds, lockstep_steps
from ..distributed.device import device_ops
from ..distributed.exchange import CommStats
from ..distributed.health import Stage
from ..errors import InputError, check_int, check_seed
from ..data.schema import GraphSchema
from ..host import ThreadBudget, local_world_size, sampler_read_ahead
from ..models.typed import type_ranks
from ..sampling import (DEFAULT_SAMPLER, MINIBATCHES_PER_BULK, FetchContext, NeighborLoader, SamplerKind, check_sampler,
                        check_sampling_device, fanout_table, make_sampler)
from ..sampling import MFG
from ..streams import OTHER_WORKLOAD, TRAIN_WORKLOAD, loader_seed
from .graph import DistGraph
from .pipeline import FetchThread, InFlight, Pipeline, SampleStage, StageTimes, fetch_stages


def hop_layout(mfgs: list[MFG], batch_size: int) -> tuple[list[int], list[int], list[tuple[int, int, int]]]:
    """The PyG layout of a sample from its MFGs (model order, CPU): ``(num_sampled_nodes [L + 1],
    num_sampled_edges [L], hop_ranges)``, where range ``h - 1`` = ``(layer, first, last)`` says that
    the edges of hop ``h`` are columns ``first:last`` of ``mfgs[layer].edge_index``: those whose
    destinations were first reached at hop ``h - 1`` (edges are grouped by destination)."""
    hops = len(mfgs)
    reached = [batch_size] + [mfgs[hops - h].num_src for h in range(1, hops + 1)]  # nodes after hop h
    nodes = [reached[0]] + [reached[h] - reached[h - 1] for h in range(1, hops + 1)]
    starts = [0] + reached[:-1]
    hop_ranges = []
    for h in range(1, hops + 1):
        rowptr = mfgs[hops - h].rowptr
        hop_ranges.append((hops - h, int(rowptr[starts[h - 1]]), int(rowptr[reached[h - 1]])))
    return nodes, [last - first for _, first, last in hop_ranges], hop_ranges


@dataclass
class Batch:
    """One minibatch, ready for a model.

    A homogeneous graph is the one-type case: its batch has the same fields, with the
    homogeneous :class:`~salientpp.data.schema.GraphSchema` (type ``"node"``, relation
    ``node__to__node``), ``node_type`` and ``edge_type`` zeros (constant views, no per-node
    memory) and ``x_dict == {"node": x}``.

    Attributes:
        y: the seeds' labels on the device: int64 ``[batch_size]`` or ``[batch_size, T]``.
        n_id: int64 ``[num_nodes]`` global ids (partitioned numbering) on the device; the first
            ``batch_size`` are the seeds.
        batch_size: number of seeds (the model's outputs for them are its first rows).
        mfgs: one :class:`~salientpp.sampling.MFG` per layer, model order (``mfgs[0]`` is
            the input layer), on the device.
        num_sampled_nodes: ``[L + 1]`` nodes first reached at hop 0 (the seeds), 1, ..., L, as in
            PyG: ``n_id`` lists them hop by hop.
        num_sampled_edges: ``[L]`` edges of :attr:`edge_index` per hop.
        schema: the graph's node types and relations (the homogeneous schema for an untyped graph).
        node_type: int64 ``[num_nodes]`` the type index of each node of ``n_id``. The MFGs'
            ``edge_type`` give each edge's relation.
        x_dict: node type name -> ``[n_t, F_t]`` feature rows of the batch nodes of that type, in
            ``n_id`` order, on the device (owned rows, cache tiers and fetched rows, assembled;
            float16 datasets stay float16); a type without features has no entry, nor has any
            type in the batches of a loader without features.

    **Typed graphs** follow PyG's heterogeneous conventions as its ``NeighborLoader`` sets them:
    :attr:`edge_index_dict` holds one edge index per relation (PyG's edge type triple) for the
    whole sample, hop by hop, whose rows index the source and destination types' rows of
    :attr:`x_dict`; :attr:`num_sampled_nodes_dict` and :attr:`num_sampled_edges_dict` count them
    per hop (for ``trim_to_layer``), :attr:`n_id_dict` gives each type's global ids, and
    :meth:`to_pyg` returns a ``HeteroData``; so a ``to_hetero`` model written for PyG's loader
    runs unchanged. The seeds are the first :attr:`batch_size` rows of the target type.

    :attr:`edge_index` is the PyG view of the same sample: int64 ``[2, E]`` (row 0 source, row 1
    destination, both indices into ``n_id``) holding, hop by hop, the edges drawn for the nodes
    first reached at the previous hop. A PyG model's ``forward(x, edge_index)`` over it computes
    what PyG's ``NeighborLoader`` semantics give, and ``torch_geometric.utils.trim_to_layer``
    works with ``num_sampled_nodes`` and ``num_sampled_edges``. :attr:`mfgs` give SALIENT's
    semantics (every layer re-sampled for every node reached so far).
    """

    y: torch.Tensor
    n_id: torch.Tensor
    batch_size: int
    mfgs: list[MFG]
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]
    hop_ranges: list[tuple[int, int, int]] = field(repr=False)
    schema: GraphSchema = field(kw_only=True)
    node_type: torch.Tensor = field(kw_only=True)
    x_dict: dict[str, torch.Tensor] = field(kw_only=True)

    @cached_property
    def x(self) -> torch.Tensor:
        """``[n_t, F]`` the rows of the target type, :attr:`x_dict` ``[target_type]`` (a homogeneous
        batch's every row: ``[num_nodes, F]``). A target type without features, or a loader without
        features, gives float32 ``[n_t, 0]``: no columns, one row per batch node of the type."""
        rows = self.x_dict.get(self.target_type)
        if rows is None:
            num_rows = int((self.node_type == self.schema.target_index).sum())
            rows = torch.empty((num_rows, 0), device=self.n_id.device)
        return rows

    @cached_property
    def edge_index(self) -> torch.Tensor:
        return self._hop_ordered("edge_index", (2, 0))

    @cached_property
    def edge_type(self) -> torch.Tensor:
        """int64 ``[E]`` the relation of each edge of :attr:`edge_index`."""
        return self._hop_ordered("edge_type", (0,))

    def _hop_ordered(self, name: str, empty: tuple[int, ...]) -> torch.Tensor:
        """The MFGs' int64 edge tensor ``name`` (edges last) of the edges of :attr:`hop_ranges`, hop
        by hop; int64 of shape ``empty`` without layers."""
        parts = [getattr(self.mfgs[layer], name)[..., first:last] for layer, first, last in self.hop_ranges]
        return torch.cat(parts, dim=-1) if parts else torch.empty(empty, dtype=torch.int64, device=self.n_id.device)

    @property
    def num_nodes(self) -> int:
        return int(self.n_id.shape[0])

    @property
    def target_type(self) -> str:
        """The node type of the seeds (a homogeneous graph's one type, ``"node"``)."""
        return self.schema.target

    @cached_property
    def _typed_view(self) -> tuple[dict, dict, dict, dict]:
        """``(edge_index_dict, num_sampled_edges_dict, num_sampled_nodes_dict, n_id_dict)`` of
        PyG's heterogeneous convention (one host synchronisation for the counts)."""
        schema, node_type, edge_type = self.schema, self.node_type, self.edge_type
        device, hops = self.n_id.device, len(self.num_sampled_edges)
        rank, _ = type_ranks(node_type, schema.num_types)
        rank = rank.to(device)
        node_hop = torch.repeat_interleave(torch.arange(hops + 1, device=device),
                                           torch.tensor(self.num_sampled_nodes, device=device))
        edge_hop = torch.repeat_interleave(torch.arange(hops, device=device),
                                           torch.tensor(self.num_sampled_edges, device=device))
        nodes = torch.bincount(node_type * (hops + 1) + node_hop, minlength=schema.num_types * (hops + 1))
        edges = torch.bincount(edge_type * hops + edge_hop, minlength=schema.num_relations * hops)
        nodes, edges = nodes.view(schema.num_types, hops + 1).tolist(), edges.view(schema.num_relations, hops).tolist()
        edge_index = {}
        for r, relation in enumerate(schema.relations):
            chosen = self.edge_index[:, edge_type == r]
            edge_index[relation.key] = rank[chosen]
        n_id = {name: self.n_id[node_type == t] for t, name in enumerate(schema.node_types)}
        return (edge_index, {r.key: edges[i] for i, r in enumerate(schema.relations)},
                dict(zip(schema.node_types, nodes)), n_id)

    @property
    def edge_index_dict(self) -> dict[tuple[str, str, str], torch.Tensor]:
        """Relation ``(src, name, dst)`` -> int64 ``[2, E_r]``: its edges of :attr:`edge_index`, hop by
        hop, row 0 indexing the rows of ``src`` in :attr:`x_dict`, row 1 those of ``dst`` (every
        relation of the schema, without edges too)."""
        return self._typed_view[0]

    @property
    def num_sampled_edges_dict(self) -> dict[tuple[str, str, str], list[int]]:
        """Relation -> ``[L]`` its edges in :attr:`edge_index_dict` per hop."""
        return self._typed_view[1]

    @property
    def num_sampled_nodes_dict(self) -> dict[str, list[int]]:
        """Node type -> ``[L + 1]`` its nodes first reached at hop 0 (the seeds), 1, ..., L."""
        return self._typed_view[2]

    @property
    def n_id_dict(self) -> dict[str, torch.Tensor]:
        """Node type -> int64 global ids of its batch nodes, in ``n_id`` order (its :attr:`x_dict` rows)."""
        return self._typed_view[3]

    def to_pyg(self):
        """This batch as PyG's ``NeighborLoader`` gives it: a homogeneous graph's (one node type and
        one relation, PyG's convention) as a ``torch_geometric.data.Data`` (x, y, edge_index, n_id,
        batch_size, num_sampled_nodes, num_sampled_edges); a typed graph's as a ``HeteroData`` with, per node type, ``x`` (types
        with features), ``n_id``, ``num_nodes`` and ``num_sampled_nodes``, per relation
        ``edge_index`` and ``num_sampled_edges``, and ``y`` and ``batch_size`` on the target type."""
        from torch_geometric.data import Data, HeteroData

        if self.schema.is_homogeneous:
            return Data(x=self.x, y=self.y, edge_index=self.edge_index, n_id=self.n_id, batch_size=self.batch_size,
                        num_sampled_nodes=self.num_sampled_nodes, num_sampled_edges=self.num_sampled_edges)
        data = HeteroData()
        for name, ids in self.n_id_dict.items():
            store = data[name]
            if name in self.x_dict:
                store.x = self.x_dict[name]
            store.n_id, store.num_nodes = ids, int(ids.shape[0])
            store.num_sampled_nodes = self.num_sampled_nodes_dict[name]
        for key, edge_index in self.edge_index_dict.items():
            data[key].edge_index = edge_index
            data[key].num_sampled_edges = self.num_sampled_edges_dict[key]
        data[self.target_type].y = self.y
        data[self.target_type].batch_size = self.batch_size
        return data


class DistNeighborLoader:
    """Minibatches of this rank's seeds with their features, in lockstep with the other ranks.

    Constructing it is a collective (the ranks agree on the number of batches, and the first
    loader of a plan fills the cache): build the loaders in the same order on every rank, and
    iterate them in the same order.

    Args:
        graph: the :class:`DistGraph`.
        split: ``"train"``, ``"valid"``, ``"test"``, or int64 ids this rank owns.
        fanouts: neighbours per hop, ``fanouts[0]`` at the seeds (-1: all); one per model layer:
            one list for every relation, a dict relation -> list, or the int64 ``[L, R]`` fanout
            table itself (one row per hop, one column per relation of the graph's schema, as
            :attr:`~salientpp.cache.workload.Workload.fanouts` holds it), all read by
            :func:`~salientpp.sampling.kinds.fanout_table` into :attr:`fanouts`, the table.
        batch_size: at most this many seeds per batch (see the module docstring).
        shuffle: reshuffle the seeds every epoch (from ``seed`` and the epoch).
        plan: a cache plan (``salientpp analyze``) built for this partitioning: its directory or
            its :class:`~salientpp.cache.plan.PlanInfo`; ``None``: no cache, every remote row is
            fetched. Loaders of one graph and plan share
            its cache (evaluation loaders too); it is best for the fanouts and batch size it was
            scored for.
        seed: an int in [0, 2^63); seeds the shuffle and the sampling (with the rank and the
            split's stream).
        replace: sample with replacement.
        sampler_threads: C++ sampling threads; ``None``: the rank's thread budget's
            (``graph.ctx.threads``, :class:`~salientpp.host.ThreadBudget`), as ``salientpp
            train`` gives them.
        pipeline_depth: batches in flight between sampling and the model (1: no overlap);
            ``None``: the rank's thread budget's choice (4 on a GPU, 1 on the CPU, where the
            torch threads take every core).
        read_ahead: the most batches the sampling threads sample ahead of the pipeline (the
            sampler read-ahead); ``None``: :func:`~salientpp.host.sampler_read_ahead`, the
            pipeline's depth and at least one batch per sampling thread when it overlaps, so that
            the pipeline finds its next batch sampled and no thread waits for work.
        on_stage: called as ``on_stage(stage, step)`` with the :class:`~salientpp.distributed.health.Stage`
            before each pipeline stage runs on a step (health reports).
        allow_empty: allow ranks with fewer seeds than batches (empty batches); the default is
            to allow them except on the training split.
        device_fraction: without a plan, the fraction of owned rows kept on the device, in
            [0, 1] (a plan decides it itself); ``None``: the plan's, or ``train``'s default for
            the device (:func:`~salientpp.cache.plan.default_device_fraction`: 0.15 on the CPU,
            every row on a GPU). On a GPU only as many as fit in the
            :func:`~salientpp.distributed.device.device_row_budget` are placed there.
        sampler: the sampler kind (:class:`~salientpp.sampling.SamplerKind` or its name):
            ``"nodewise"`` (the C++ sampler), ``"bulk"`` (the same distribution drawn
            ``minibatches_per_bulk`` batches at a time with sparse-matrix operations) or ``"ladies"``
            (layer-wise: ``fanouts`` are nodes per layer, and each MFG carries ``edge_weight``,
            which the model must use; see :class:`~salientpp.sampling.BulkSampler`), or any kind
            registered with :func:`~salientpp.sampling.register_sampler`.
        minibatches_per_bulk: batches a bulk sampler draws at once (the batches do not depend on it).
        sampling_device: where the batches are drawn: ``"cpu"``, or ``"cuda"`` (a kind that draws
            on a GPU, ``bulk`` or ``ladies``, with the graph's CSR on the training GPU, on a stream
            of the sampling thread's own; :func:`~salientpp.sampling.kinds.check_sampling_device`).
            The batches follow the same distribution; the GPU's generator draws other ones.
        fetch_thread: run the pipeline's fetch stages on a thread of their own, one batch ahead
            of the loop (:class:`~salientpp.loader.pipeline.FetchThread`; the same batches and
            collectives); ``None``: the thread budget's choice
            (:meth:`~salientpp.host.ThreadBudget.fetch_thread`: on a GPU with a pipeline). Only
            True, False or None: anything else (a string such as ``"off"``) is an :class:`InputError`.
        low_priority: run the sampling threads at a lower scheduling priority, so that they fill
            the time the training thread waits instead of taking its cores (``None``: the thread
            budget's choice, when its threads do not fit in the rank's cores); the consumer then
            samples a batch itself rather than wait for one a starved thread has not finished.
            The batches are identical either way: batch ``i`` is sampled from the random stream
            ``(seed, i)`` whichever thread samples it.
        prefetch_next_epoch: when an epoch's last batch is sampled, start sampling the next
            epoch's first ``read_ahead`` batches, so they are ready when it starts; for a loop
            that calls ``set_epoch(e)`` with ``e = 0, 1, 2, ...`` (the batches are the same; any
            other next epoch discards them). After the last epoch, :meth:`close` stops that
            sampling.
        features: assemble the batch's feature rows; ``False`` fetches none (no cache either,
            so ``plan`` must be ``None``): ``Batch.x_dict`` is empty and ``Batch.x`` float32
            ``[n_t, 0]``, for a model fed by a :class:`~salientpp.embedding.DistEmbedding` alone.

    After each epoch, :attr:`stats` holds its exchange counters (rows owned, cache hits, rows
    fetched and bytes) and :attr:`times` the seconds spent in each stage.

    **Typed graphs.** On a typed :class:`DistGraph` the sampler is the typed node-wise one
    (``edge_rel``, the schema, the fanout table) and each :class:`Batch` carries ``x_dict`` (the
    rows of every node type with features, exactly the dataset's), ``node_type``, MFGs with
    ``edge_type``, the seeds' ``y`` and the ``schema``; ``x`` is the target type's rows. A
    homogeneous graph's batches are the one-type case of the same. The rows of every type
    travel in one exchange per batch (:class:`~salientpp.distributed.exchange.RowExchange`),
    and :attr:`stats` counts the rows received per type (``received_by_type``).
    """

    def __init__(self, graph: DistGraph, split: str | torch.Tensor | np.ndarray, fanouts, batch_size: int,
                 shuffle: bool = True, plan: CheckedPlan | PlanInfo | str | os.PathLike | None = None, seed: int = 0,
                 replace: bool = False, sampler_threads: int | None = None, pipeline_depth: int | None = None,
                 read_ahead: int | None = None, on_stage: Callable[[Stage, int], None] | None = None,
                 allow_empty: bool | None = None, device_fraction: float | None = None,
                 low_priority: bool | None = None, fetch_thread: bool | None = None,
                 sampler: str | SamplerKind = DEFAULT_SAMPLER, minibatches_per_bulk: int = MINIBATCHES_PER_BULK,
                 features: bool = True, prefetch_next_epoch: bool = False, sampling_device: str = "cpu"):
        self.graph = graph
        self.sampler = check_sampler(sampler)
        self.sampling_device = check_sampling_device(sampling_device, self.sampler, graph.ctx.device)
        # read first, before any collective: int64 [L, R]
        self.fanouts = fanout_table(fanouts, graph.schema, self.sampler)
        sampler_core = make_sampler(graph.rowptr, graph.col, self.fanouts, self.sampler, replace, minibatches_per_bulk,
                                    self.sampling_device,
                                    **graph.data.sampler_args)
        self.num_layers = sampler_core.num_layers
        self.batch_size = check_batch_size(batch_size)
        seed = check_seed(seed, "seed")
        if device_fraction is not None:  # None: the plan's, or without one the device's default
            device_fraction = check_device_fraction(device_fraction, "device_fraction")
        budget = graph.ctx.threads or ThreadBudget.for_rank(local_world_size(), device=graph.ctx.device)
        sampler_threads = check_int(budget.sampler_threads if sampler_threads is None else sampler_threads,
                                "the number of sampler threads")
        low_priority = budget.low_priority_sampler if low_priority is None else bool(low_priority)
        self.pipeline_depth = check_int(budget.pipeline_depth(pipeline_depth), "the pipeline depth")
        self.fetch_thread = budget.fetch_thread(self.pipeline_depth, fetch_thread)
        self.read_ahead = (sampler_read_ahead(self.pipeline_depth, sampler_threads) if read_ahead is None
                           else check_int(read_ahead, "the sampler read-ahead"))
        self.seeds = self._split_seeds(split)
        workload = TRAIN_WORKLOAD if isinstance(split, str) and split == "train" else OTHER_WORKLOAD
        if not features and plan is not None:
            raise InputError("a loader without features has nothing to cache; pass plan=None with features=False")
        self.store, self.exchange = graph.feature_store(plan, device_fraction) if features else (None, None)
        counts, fetching = self._seed_counts()
        if not fetching:  # every rank holds every row (full replication): no exchange at all
            self.exchange = None
        if allow_empty is None:
            allow_empty = not (isinstance(split, str) and split == "train")
        # every rank raises the same error, from the counts every rank holds
        self.num_batches = (lockstep_steps(counts, self.batch_size) if allow_empty
                            else check_training_seeds(counts, self.batch_size, graph.path, self.SEEDS))
        self.on_stage = on_stage
        self._next_batch = 0  # the batch the loop gets next
        self.stats = CommStats()
        self.times = StageTimes()
        self._loader = self._inner_loader(
            sampler_core, batch_size=self.batch_size, shuffle=shuffle, num_batches=self.num_batches,
            seed=loader_seed(seed, graph.rank, workload=workload), sampler_threads=sampler_threads, low_priority=low_priority,
            read_ahead=self.read_ahead, prefetch_next_epoch=prefetch_next_epoch,
            fetch=FetchContext(**self.store.fetch_context_args()) if features else None)
        # an empty step's rows: none of each type with features
        self._empty_x_dict = {} if not features else {
            t: torch.empty((0, self.store.widths[t]), dtype=self.store.dtype, device=graph.ctx.device)
            for t in self.store.featured}
        self.ops = device_ops(graph.ctx.device)  # the side stream of this loader's copies and gathers

    SEEDS = "nodes"  # what a seed is, in messages

    def _split_seeds(self, split) -> np.ndarray:
        """This rank's seeds of ``split``: int64 ``[n]`` node ids (a link loader: ``[2, E]`` edges)."""
        return self.graph.split(split)

    def _inner_loader(self, sampler, **options) -> NeighborLoader:
        """The sampling loader over this rank's seeds (``options``: NeighborLoader's keywords)."""
        return NeighborLoader(sampler, seeds=torch.from_numpy(self.seeds), **options)

    def _labels(self, seeds: torch.Tensor) -> torch.Tensor:
        """The label rows of a batch's seeds (host)."""
        return self.graph.labels(seeds)

    def _seed_counts(self) -> tuple[list[int], int]:
        """The number of seeds of every rank, and how many ranks fetch rows from others (a
        collective): 0 when every rank holds every feature row, or none fetches any."""
        ctx = self.graph.ctx
        counts = torch.zeros(ctx.world_size + 1, dtype=torch.int64)
        counts[ctx.rank] = int(self.seeds.shape[-1])
        counts[-1] = int(self.store is not None and not self.store.holds_every_row)
        if ctx.distributed:
            counts = counts.to(ctx.comm_device)
            dist.all_reduce(counts)
        counts = counts.cpu().tolist()
        return counts[:-1], counts[-1]

    def __len__(self) -> int:
        return self.num_batches

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle and reseed for ``epoch``, a non-negative int (call it on every rank before
        iterating; without it, every iteration repeats the same epoch's batches)."""
        self._loader.set_epoch(epoch)
        self._next_batch = 0

    def state_dict(self) -> dict[str, int]:
        """``{"epoch", "next_batch"}``: where the running epoch stands for the loop: the batch it
        gets next (the sampling threads run up to ``read_ahead`` batches ahead of it), and
        ``next_batch`` 0 once the epoch is over."""
        return {"epoch": self._loader.epoch, "next_batch": self._next_batch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Make the next iteration continue at ``state["next_batch"]`` of ``state["epoch"]``,
        with the batches an uninterrupted epoch would have yielded; ``state`` is what
        :meth:`state_dict` returned (:class:`InputError` for another dict)."""
        self._loader.load_state_dict(state)
        self._next_batch = int(state["next_batch"])

    def close(self) -> None:
        """Stop the sampling threads, a prefetched next epoch's too (a loop that ends after its
        last epoch: a bulk sampler's thread would otherwise still draw while the process exits).
        The loader can be iterated again."""
        self._loader.close()

    def __iter__(self) -> Iterator[Batch]:
        first = self._next_batch
        self._loader.load_state_dict({"epoch": self._loader.epoch, "next_batch": first})  # back from sampling ahead
        self.stats, self.times = CommStats(), StageTimes()
        if self.exchange is not None:
            self.exchange.stats = self.stats
        pipeline = Pipeline(SampleStage(iter(self._loader), self.num_batches, first),
                            fetch_stages(self.exchange, self.store, self.stats, self.ops, self._labels),
                            self.pipeline_depth, self.times, on_stage=self.on_stage)
        records = FetchThread(pipeline, self.graph.ctx.device) if self.fetch_thread else pipeline
        finished = False
        try:
            for item in records:
                self._next_batch = item.step + 1
                yield self._batch(item)
            self._next_batch = 0
            finished = True
        finally:
            if not finished:  # a loop that stopped early: stop the fetch thread, then the sampling threads
                if self.fetch_thread:
                    records.close()
                self._loader.close()

    def _batch(self, item: InFlight) -> Batch:
        device, schema = self.graph.ctx.device, self.graph.schema
        batch = item.batch
        rows = self._empty_x_dict if batch is None else item.x_dict  # node type index -> its rows
        x_dict = {schema.node_types[t]: x for t, x in rows.items()}
        if batch is None:  # no seeds on this rank for this step
            seeds = torch.empty(0, dtype=torch.int64)
            mfgs = [MFG.empty() for _ in range(self.num_layers)]
            return Batch(self._labels(seeds).to(device), seeds.to(device), 0, [m.to(device) for m in mfgs],
                         *hop_layout(mfgs, 0), schema=schema, node_type=torch.empty(0, dtype=torch.int64, device=device),
                         x_dict=x_dict)
        self.ops.wait(item.ready)  # the compute stream waits for the side stream; the host does not
        return Batch(item.y, item.n_id, batch.batch_size, item.mfgs, *hop_layout(batch.mfgs, batch.batch_size),
                     schema=schema, node_type=item.node_type, x_dict=x_dict)
