"""One rank's view of a partitioned graph: :class:`DistGraph`.

The topology (CSR) and the partition book are replicated on every rank; the feature rows and
labels are not: rank ``r`` holds partition ``r``. Remote rows reach a batch through the
:class:`~salientpp.distributed.feature_store.FeatureStore` (owned rows and the cache a plan chose)
and the :class:`~salientpp.distributed.exchange.RowExchange` (all-to-all of the rest).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from ..cache.plan import (CheckedPlan, PlanInfo, default_device_fraction, load_plan, device_owned_rows, open_plan,
                          partition_identity)
from ..data.format import SPLITS
from ..distributed.device import device_row_budget
from ..distributed.exchange import RowExchange
from ..distributed.feature_store import FeatureStore
from ..distributed.group import DistContext
from ..distributed.health import agree
from ..errors import InputError
from ..partition import load_partitioned


class DistGraph:
    """This rank's partition of a partitioned directory (``salientpp partition``).

    Opening it is a collective when distributed: every rank checks that it opened the same
    partitioning (checksums of the topology and partition book), and the job must have one
    rank per partition.

    Args:
        path: the partitioned directory.
        ctx: the process-group context :func:`salientpp.init_distributed` returned (required:
            ``DistGraph(path, init_distributed())``; anything else is refused with :class:`InputError`).

    Attributes:
        path: the directory; ctx: the context; rank, num_parts.
        rowptr: int64 ``[N + 1]``, col: int64 ``[nnz]``: the global CSR (memory-mapped).
        offset: the first global id this rank owns (it owns ``[offset, offset + num_owned)``).
        x: ``[num_owned, F]`` owned feature rows (memory-mapped); y: owned labels.
        schema: the node types and relations (one of each on a homogeneous graph).

    **Typed graphs.** ``x``, ``y`` and the splits concern the target type: row i is the id
    ``seed_start + i``, and ``num_owned`` counts this rank's nodes of the target type (for a
    homogeneous graph ``seed_start`` is ``offset``). The feature store holds every type with
    features (the one :class:`~salientpp.distributed.feature_store.FeatureStore`, per type).
    """

    def __init__(self, path: str | os.PathLike, ctx: DistContext | None = None):
        if not isinstance(ctx, DistContext):  # None: the one-argument form DistGraph(path) too
            raise InputError(f"DistGraph needs the DistContext that init_distributed() returns as its second argument, "
                             f"got {'None' if ctx is None else 'a ' + type(ctx).__name__}; open it with "
                             "DistGraph(path, init_distributed())")
        self.ctx = ctx
        self.path = Path(path)
        data = load_partitioned(self.path)
        if data.num_parts != self.ctx.world_size:
            raise InputError(f"{self.path} has {data.num_parts} partitions but the job has {self.ctx.world_size} "
                             f"ranks; run one rank per partition (--nprocs {data.num_parts}, or "
                             f"torchrun --nproc-per-node {data.num_parts})")
        self.partition_id = partition_identity(data.meta)
        agree(self.ctx, "partitioned dataset", {"partitioned dataset": self.partition_id})
        self.data = data
        self.rank = self.ctx.rank
        self.num_parts = data.num_parts
        self.part = data.part(self.rank)
        self.offset = int(data.book.offsets[self.rank])
        self.rowptr, self.col = np.asarray(data.rowptr), np.asarray(data.col)
        self.schema = data.schema
        self.seed_start = data.book.block(self.rank, data.schema.target_index)[0]
        self._stores: dict[str | None, tuple[FeatureStore, RowExchange]] = {}
        self._known_edges: np.ndarray | None = None

    # -- sizes ------------------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return self.data.num_nodes

    @property
    def num_owned(self) -> int:
        return int(self.part.x.shape[0])

    @property
    def num_features(self) -> int:
        return self.data.num_features

    @property
    def num_classes(self) -> int:
        """The number of classes of single-label (int64 ``[N]``) labels; a ``ValueError`` for
        multi-label ones, whose width is :attr:`num_outputs`."""
        return self.data.num_classes

    @property
    def num_outputs(self) -> int:
        """The width of a model's output: the number of classes, or of binary targets."""
        return self.data.num_outputs

    @property
    def book(self):
        return self.data.book

    @property
    def x(self) -> np.ndarray:
        return self.part.x

    @property
    def y(self) -> np.ndarray:
        return self.part.y

    # -- ids ----------------------------------------------------------------------------------------
    def split(self, split: str | torch.Tensor | np.ndarray) -> np.ndarray:
        """int64 ``[n]`` global ids of this rank's seeds: its ``"train"``, ``"valid"`` or ``"test"``
        split (a writable copy of the memory-mapped file, so ``torch.from_numpy`` takes it as it
        is), or the given ids (which must be distinct ids this rank owns)."""
        if isinstance(split, str):
            if split not in SPLITS:
                raise InputError(f"unknown split {split!r}; choose train, valid or test, or pass an id tensor")
            return np.array(getattr(self.part, f"{split}_idx"), dtype=np.int64)
        ids = np.asarray(split.cpu() if isinstance(split, torch.Tensor) else split)
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise InputError(f"seed ids must be a 1-D integer tensor, got shape {list(ids.shape)} of {ids.dtype}")
        ids = ids.astype(np.int64)
        outside = (ids < self.seed_start) | (ids >= self.seed_start + self.num_owned)
        if outside.any():
            raise InputError(f"seed id {int(ids[outside][0])} is not owned by rank {self.rank} (it owns "
                             f"{self.seed_start}..{self.seed_start + self.num_owned - 1}); give each rank its own ids "
                             "(graph.split(...) or ids in [graph.seed_start, graph.seed_start + graph.num_owned))")
        if np.unique(ids).shape[0] != ids.shape[0]:
            raise InputError("seed ids repeat; pass distinct ids")
        return ids

    def edges(self, split: str) -> np.ndarray:
        """int64 ``[2, E_k]`` this rank's edges of ``split`` (``"train"``, ``"valid"``, ``"test"``):
        the held-out edges of link prediction whose sources it owns, in global ids."""
        if split not in SPLITS:
            raise InputError(f"unknown split {split!r}; choose train, valid or test")
        if not self.data.has_link_split:
            raise InputError(f"{self.path} has no held-out edges for link prediction; prepare the dataset with "
                             "`salientpp prepare ... --link-split 0.85,0.05,0.10` and partition it again")
        return np.asarray(getattr(self.part, f"{split}_edges"), dtype=np.int64)

    def known_edges(self) -> np.ndarray:
        """int64 ``[2, M]``: the pairs ``(s, d)`` with ``s`` owned by this rank that are edges of the
        link relation in any split (global ids): the negatives evaluation never draws. A relation
        that joins a type to itself is symmetric and stores each edge once, either way round, so its
        edges come in both orientations, the reversed ones from the ranks that store them (a
        collective when distributed, at the first call only; the result is kept)."""
        if self._known_edges is None:
            edges = np.concatenate([self.edges(split) for split in SPLITS], axis=1)
            relation = self.data.link_relation
            if relation.reversed() == relation:
                edges = np.concatenate([edges, self._to_owners(edges[::-1])], axis=1)
            self._known_edges = edges
        return self._known_edges

    def _to_owners(self, pairs: np.ndarray) -> np.ndarray:
        """int64 ``[2, M']``: the pairs (int64 ``[2, M]``, any rank's) whose first id this rank owns,
        of every rank's ``pairs`` (an all-to-all on the host when distributed)."""
        owner = np.asarray(self.book.owner(pairs[0]))
        if not self.ctx.distributed or self.num_parts == 1:
            return pairs[:, owner == self.rank]
        order = np.argsort(owner, kind="stable")
        send = torch.from_numpy(np.ascontiguousarray(pairs[:, order].T)).reshape(-1)
        send_counts = torch.from_numpy(np.bincount(owner, minlength=self.num_parts).astype(np.int64) * 2)
        recv_counts = torch.empty_like(send_counts)
        group = self.ctx.count_group
        torch.distributed.all_to_all_single(recv_counts, send_counts, group=group)
        recv = torch.empty(int(recv_counts.sum()), dtype=torch.int64)
        torch.distributed.all_to_all_single(recv, send, recv_counts.tolist(), send_counts.tolist(), group=group)
        return recv.view(-1, 2).T.numpy()

    def labels(self, ids: torch.Tensor) -> torch.Tensor:
        """The labels of owned global ids (int64 ``[n]``): ``[n]`` or ``[n, T]``, CPU."""
        return torch.from_numpy(np.asarray(self.part.y[ids.numpy() - self.seed_start]))

    def original_ids(self, ids: np.ndarray | torch.Tensor) -> np.ndarray:
        """The ids of the dataset before partitioning (``orig_id``) of global ids."""
        return np.asarray(self.data.orig_id)[np.asarray(ids)]

    # -- features -----------------------------------------------------------------------------------
    def feature_store(self, plan: CheckedPlan | PlanInfo | str | os.PathLike | None,
                      device_fraction: float | None = None) -> tuple[FeatureStore, RowExchange]:
        """The feature store and row exchange of this rank with the cache of ``plan`` (a plan
        ``salientpp analyze`` wrote for this partitioning: its directory, its
        :class:`~salientpp.cache.plan.PlanInfo` already read, or a plan already checked for this
        partitioning; ``None``: no cache); one per plan, shared by every loader of this graph.
        Opening one is a collective (the cache is filled from the owners). A plan scored for
        other fanouts or batches still serves any loader: its rows are cached, only chosen for
        another workload. The plan says how many owned rows live on the device (``device_fraction``
        is then ignored); without one, the first ``floor(device_fraction * n_k)`` do (``n_k``: the
        ids this rank owns, of every type; ``None``: the device's
        :func:`~salientpp.cache.plan.default_device_fraction`). Either way only as many as fit in
        the device's :func:`~salientpp.distributed.device.device_row_budget`. A typed graph's holds the rows of every type with
        features, and its exchange moves them all at once (per-type row widths)."""
        key = None if plan is None else str(Path(plan.path if isinstance(plan, (CheckedPlan, PlanInfo)) else plan
                                                 ).resolve())
        if key not in self._stores:
            owned_order, cache_slot, num_device_slots, identity = None, None, 0, {}
            if plan is None:
                device_fraction = default_device_fraction(self.ctx.device, device_fraction)
                num_device_owned = device_owned_rows(device_fraction, self.book.part_size(self.rank))
            else:
                info = open_plan(plan, self.data).info  # built for this partitioning (any workload serves)
                loaded = load_plan(info, self.rank)
                owned_order, num_device_owned = np.asarray(loaded.owned_order), loaded.num_device_owned
                cache_slot, num_device_slots = loaded.slot_map(), int(loaded.device_ids.shape[0])
                identity = info.raw
            # one fact per field of the plan's meta.json, the plain ones (policy, budget) before
            # the tables (files), so a disagreement names the field that tells the plans apart
            fields = sorted(identity.items(), key=lambda item: isinstance(item[1], (dict, list)))
            agree(self.ctx, "cache plan", {f"the cache plan's {key}": value for key, value in fields}
                  if identity else {"cache plan": None})
            store = FeatureStore(self.ctx, self.book, self._features(), owned_order, num_device_owned, cache_slot,
                                 num_device_slots, device_row_budget(self.ctx.device))
            exchange = RowExchange(self.ctx, store.serve, store.widths, store.dtype)
            store.fill_cache(exchange)
            self._stores[key] = (store, exchange)
        return self._stores[key]

    def _features(self) -> dict[int, np.ndarray]:
        """Node type index -> this rank's ``[n_kt, F_t]`` rows of the type, for every type with
        features (a homogeneous graph: ``{0: x}``)."""
        schema = self.schema
        return {schema.target_index: self.part.x,
                **{t: self.part.features[schema.node_types[t]] for t in self.data.feature_types}}
