"""The feature rows one rank can reach without asking anyone: its own and its cache.

One store serves every graph: its rows are those of each node type with features, and a
homogeneous graph is the one-type case (type 0, whose block is the whole partition). For every
such type it keeps these tiers:

* owned rows, reordered by descending VIP (``owned_order`` of the cache plan); the first
  ``num_device_owned`` live on the training device (as many of the wanted as fit in the device
  budget, :func:`device_rows_that_fit`), the rest in (pinned) CPU memory;
* the remote cache, its device tier and its host tier, filled once at start-up by an
  all-to-all from the owners;
* everything else is fetched per batch through :class:`~salientpp.distributed.exchange.RowExchange`,
  the rows of every type in one exchange.

On a CPU-only run the "device" tiers are CPU tensors too; the split is kept so that the
counters mean the same thing everywhere.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ..partition.book import PartitionBook
from .device import DeviceOps, RowSource, gather_rows
from .exchange import CommStats, RowExchange, row_pieces, row_runs
from .group import DistContext


def _type_slots(book: PartitionBook, slots: np.ndarray, num_device_slots: int, featured: list[int]
                ) -> tuple[np.ndarray, list[int]]:
    """A plan's cache slots (int64 ``[N]``: -1, ``[0, G)`` device tier, ``[G, G + C)`` host tier)
    as rows of each type's tiers: int64 ``[N]``, for an id of type ``t`` -1 (not cached, or ``t``
    without features), ``[0, G_t)`` its row in the type's device tier, ``G_t + j`` row ``j`` of its
    host tier (the plan's slot order within a type and tier), and ``G_t`` of every type."""
    num_types = book.num_types
    cached = np.flatnonzero(slots >= 0)
    types = book.type_of(cached)
    keep = np.isin(types, featured)  # no row of a type without features is ever fetched
    cached, types, slot = cached[keep], types[keep], slots[cached[keep]]
    host = slot >= num_device_slots
    order = np.lexsort((slot, host, types))  # by type, its device tier first, slot order within
    sorted_types = types[order]
    out = np.full(slots.shape[0], -1, dtype=np.int64)
    out[cached[order]] = np.arange(order.shape[0]) - np.searchsorted(sorted_types, sorted_types)
    return out, np.bincount(types[~host], minlength=num_types).tolist()


def device_rows_that_fit(row_bytes: np.ndarray, wanted: int, budget: int | None) -> int:
    """How many of the first ``wanted`` owned rows fit in ``budget`` bytes (``None``: no limit),
    in owned order; ``row_bytes``: int64 ``[n_k]`` the bytes of each row in that order (0 for a
    type without features)."""
    wanted = min(int(wanted), int(row_bytes.shape[0]))
    if budget is None:
        return wanted
    return int(np.searchsorted(np.cumsum(row_bytes[:wanted]), max(int(budget), 0), side="right"))


class FeatureStore:
    """Owned and cached feature rows of one rank, per node type with features (a type without
    features has none: the model's embedding serves it).

    Args:
        ctx: the process group context (rank = partition).
        book: the partition book.
        features: node type index -> ``[n_kt, F_t]`` rows of this rank's block of the type (row i =
            global id ``book.block(rank, t)[0] + i``), for every type with features, one dtype; or
            one ``[n_k, F]`` array: the rows of a one-type book (a homogeneous graph's partition,
            row i = global id ``offsets[rank] + i``).
        owned_order: int64 ``[n_k]`` local indices (``id - offsets[rank]``, every type) by descending
            VIP (``None``: identity); each type keeps its rows in this order.
        num_device_owned: how many of the first rows of ``owned_order`` live on ``ctx.device``
            (each type's among them; the cache plan's ``num_device_owned`` of this partition).
        cache_slot: int64 ``[N]``: -1 not cached, ``[0, G)`` device tier, ``[G, G + C)`` host tier,
            over ids of every type (``None``: no cache); ids of a type without features are not
            cached. Each type's tiers hold its cached ids in slot order.
        num_device_slots: G.
        device_budget: bytes the device tiers may take (``None``: no limit; on a GPU
            :func:`~salientpp.distributed.device.device_row_budget`). The cache's device tier is the
            plan's; the owned rows on the device are the first ``num_device_owned`` that fit in
            what it leaves.

    Attributes:
        num_device_owned, num_device_owned_wanted: the owned rows on the device, and those asked for.
        widths: ``F_t`` of every type (0 without features); featured: the types with features.
        local_row: int64 ``[n_k]`` the row of each local index among its type's owned rows.
        owned_device, owned_host, cache_device, cache_host: per type, ``[rows, F_t]`` tiers
            (None for a type without features).
        slice_source: per type, the ``[n_kt, F_t]`` CPU tensor of its owned rows in storage order
            from which the sampler threads copy them into each batch (the fetch context's
            ``local_x``): set for every type with features on a CPU run, else None.
        cache_slot: int64 ``[N]`` the row of each cached id in its type's tiers
            (:class:`~salientpp.sampling.FetchContext`'s), -1 elsewhere; device_slots: ``G_t``.
    """

    def __init__(self, ctx: DistContext, book: PartitionBook, features: Mapping[int, np.ndarray] | np.ndarray,
                 owned_order: np.ndarray | None = None, num_device_owned: int = 0,
                 cache_slot: np.ndarray | None = None, num_device_slots: int = 0, device_budget: int | None = None):
        self.ctx = ctx
        self.book = book
        self.num_types = book.num_types
        self.offset = int(book.offsets[ctx.rank])
        if not isinstance(features, Mapping):
            features = {0: features}
        self.featured = sorted(features)
        self.widths = [0] * self.num_types  # 0: a type without features
        for t, rows in features.items():
            self.widths[t] = int(rows.shape[1])
        self.pin = ctx.device.type == "cuda"  # host tiers in pinned memory: the CUDA kernels read them directly
        n_k = book.part_size(ctx.rank)
        order = np.arange(n_k) if owned_order is None else np.array(owned_order, dtype=np.int64)
        order_type = book.type_of(order + self.offset)
        slots = np.full(book.num_nodes, -1, dtype=np.int64) if cache_slot is None else np.asarray(cache_slot)
        cache_slot, self.device_slots = _type_slots(book, slots, int(num_device_slots), self.featured)
        itemsize = np.asarray(features[self.featured[0]]).dtype.itemsize
        type_row_bytes = np.asarray(self.widths, dtype=np.int64) * itemsize  # bytes of a row of each type
        if device_budget is not None:
            device_budget -= int(np.dot(self.device_slots, type_row_bytes))  # the cache's device tier first
        self.num_device_owned_wanted = min(int(num_device_owned), n_k)
        self.num_device_owned = device_rows_that_fit(type_row_bytes[order_type], self.num_device_owned_wanted,
                                                     device_budget)
        local_row = np.zeros(n_k, dtype=np.int64)  # 0 for a type without features: never looked up
        # On CPU every owned row of a type is in one tensor, from which the sampler threads copy the
        # type's owned rows into each batch's x[t] (the fetch context's local_x; None: not sliced).
        self.slice_source: list[torch.Tensor | None] = [None] * self.num_types
        self.owned_device, self.owned_host, self.cache_device, self.cache_host = ([None] * self.num_types
                                                                                  for _ in range(4))
        for t in self.featured:
            local = order[order_type == t]  # the type's local indices in storage order
            local_row[local] = np.arange(local.shape[0])
            start = book.block(ctx.rank, t)[0] - self.offset
            storage = torch.as_tensor(np.asarray(features[t])[local - start])  # a fresh, writable copy
            on_device = int(np.count_nonzero(order_type[:self.num_device_owned] == t))
            self.owned_device[t] = storage[:on_device].to(ctx.device)
            self.owned_host[t] = storage[on_device:].pin_memory() if self.pin else storage[on_device:]
            if ctx.device.type == "cpu":
                self.slice_source[t] = storage
        self.dtype = self.owned_host[self.featured[0]].dtype
        self.local_row = torch.from_numpy(local_row)
        # Serving peers looks storage rows up where the requested ids arrive (the GPU with NCCL).
        self.serve_row = self.local_row.to(ctx.comm_device)
        self.cache_slot = torch.from_numpy(cache_slot)
        self.num_cached = int(np.count_nonzero(cache_slot >= 0))
        self.num_device_slots = int(num_device_slots)
        for t in self.featured:
            self.cache_device[t] = torch.empty((0, self.widths[t]), dtype=self.dtype, device=ctx.device)
            self.cache_host[t] = torch.empty((0, self.widths[t]), dtype=self.dtype)

    @property
    def holds_every_row(self) -> bool:
        """Whether this rank holds every feature row of every type with features, its own and every
        remote one cached (full replication): its batches fetch nothing."""
        blocks = self.book.block_sizes
        remote = int(blocks[:, self.featured].sum() - blocks[self.ctx.rank, self.featured].sum())
        return remote == self.num_cached

    def _owned_rows(self, out: torch.Tensor, t: int, ids: torch.Tensor) -> torch.Tensor:
        """Writes the rows of owned global ids of type ``t`` (int64 ``[n]``) into ``out`` (``[n, F_t]``)."""
        rows = torch.index_select(self.serve_row, 0, ids - self.offset).to(self.ctx.device)
        return gather_rows(out, [RowSource(self.owned_device[t], rows, high=self.owned_host[t])])  # both tiers, one launch

    def serve(self, ids: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """The rows of owned global ids (int64 ``[n]``, on ``ctx.comm_device``), on ``ctx.comm_device``,
        as :class:`~salientpp.distributed.exchange.RowExchange` asks: ``ids`` grouped by requesting
        rank and by type within a rank (``counts`` int64 ``[K * T]`` per (rank, type), host) and
        their rows flattened in that order (1-D; one type: one run, one gather). With NCCL
        this runs on the GPU without waiting for it; with gloo and a GPU the rows cross to host
        memory, which gloo needs."""
        runs = row_runs(counts, self.widths)
        out = torch.empty(runs[-1].stop if runs else 0, dtype=self.dtype, device=self.ctx.device)
        for run in runs:
            self._owned_rows(out[run.start:run.stop].view(-1, self.widths[run.node_type]), run.node_type,
                             ids[run.first:run.last])
        return out.to(self.ctx.comm_device)

    def fill_cache(self, exchange: RowExchange) -> None:
        """Fetch every cached row from its owner (a collective: all ranks call it together)."""
        ids = torch.nonzero(self.cache_slot >= 0).flatten()  # ascending: grouped by owner, then type
        counts = torch.from_numpy(np.bincount(self.book.block_of(ids.numpy()), minlength=self.book.blocks.shape[0] - 1))
        slot, types = self.cache_slot[ids], torch.from_numpy(self.book.type_of(ids.numpy()))
        fetched = row_pieces(exchange.fetch(ids, counts).cpu(), counts, self.widths)
        for t in self.featured:
            rows = [piece for run, piece in fetched if run.node_type == t]
            rows = torch.cat(rows) if rows else torch.empty((0, self.widths[t]), dtype=self.dtype)
            table = torch.empty_like(rows)
            table[slot[types == t]] = rows
            g = self.device_slots[t]
            self.cache_device[t] = table[:g].to(self.ctx.device)
            self.cache_host[t] = table[g:].pin_memory() if self.pin else table[g:]
        # A rank never caches rows it sends: fetching the cache is not per-epoch traffic.
        exchange.stats = CommStats()

    def fetch_context_args(self) -> dict[str, Any]:
        """Keyword arguments of the sampler's fetch context for this rank."""
        featured = [t in self.featured for t in range(self.num_types)]
        return dict(book=self.book, rank=self.ctx.rank, cache_slot=self.cache_slot,
                    num_device_slots=self.device_slots, local_x=self.slice_source, local_row=self.local_row,
                    pin=self.pin, featured=featured)

    def assemble(self, origins: Any, received: torch.Tensor | None, stats: CommStats,
                 ops: DeviceOps) -> dict[int, torch.Tensor]:
        """Node type index -> ``[n_t, F_t]`` feature rows of the batch's nodes of the type, in
        ``n_id`` order, on ``ctx.device``, for every type with features (a homogeneous graph: ``{0:
        [num_nodes, F]}``): one launch of the row gather per type on ``ops``'s side stream, after
        the uploads of the origins' indices. It completes the origins' ``x[t]`` in place where the
        sampler threads wrote the type's owned rows into one (CPU runs), else a new tensor.

        ``origins`` is the batch's :class:`~salientpp.sampling.RowOrigins`, ``received`` the rows
        fetched for ``origins.remote_id`` (on the device, or on the host with gloo), or ``None``
        where every remote row is cached (:attr:`holds_every_row`).
        """
        up = ops.upload

        def by_type(name: str, counts: torch.Tensor) -> tuple[torch.Tensor, ...]:  # uploaded, then split by type
            return up(getattr(origins, name)).split(counts.tolist())
        owned_pos, owned_row = by_type("owned_pos", origins.owned_counts), by_type("owned_row", origins.owned_counts)
        device_pos, device_slot = by_type("device_pos", origins.device_counts), by_type("device_slot", origins.device_counts)
        host_pos, host_slot = by_type("host_pos", origins.host_counts), by_type("host_slot", origins.host_counts)
        sources = {t: [RowSource(self.cache_device[t], device_slot[t], device_pos[t]),
                       RowSource(self.cache_host[t], host_slot[t], host_pos[t])] for t in self.featured}
        if received is not None:
            remote_pos = up(origins.remote_pos)
            for run, rows in row_pieces(up(received), origins.remote_counts, self.widths):
                sources[run.node_type].insert(0, RowSource(rows, pos=remote_pos[run.first:run.last]))
        num_rows = origins.num_rows.tolist()
        out = {}
        for t in self.featured:
            if origins.x[t] is not None:  # the sampler threads wrote the type's owned rows (CPU runs)
                out[t] = up(origins.x[t])
            else:
                out[t] = ops.empty((num_rows[t], self.widths[t]), self.dtype)
                sources[t].insert(0, RowSource(self.owned_device[t], owned_row[t], owned_pos[t], high=self.owned_host[t]))
            ops.launch(lambda stream, x=out[t], s=sources[t]: gather_rows(x, s, stream))
        stats.owned += int(origins.owned_pos.shape[0])
        stats.device_hits += int(origins.device_pos.shape[0])
        stats.host_hits += int(origins.host_pos.shape[0])
        return out
