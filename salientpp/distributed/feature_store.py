"""The feature rows one rank can reach without asking anyone: its own and its cache.

Tiers:

* owned rows, reordered by descending VIP (``owned_order`` of the cache plan); the first
  ``num_device_owned`` live on the training device, the rest in (pinned) CPU memory;
* the remote cache, slot ``s < G`` in the device tier and ``G + j`` in the host tier, filled once
  at start-up by an all-to-all from the owners;
* everything else is fetched per batch through :class:`~salientpp.distributed.exchange.RowExchange`.

On a CPU-only run the "device" tiers are CPU tensors too; the split is kept so that the
counters mean the same thing everywhere.

A typed graph's store (:class:`TypedFeatureStore`) keeps these tiers for every node type with
features and fetches the rows of every type in one exchange per batch
(:class:`~salientpp.distributed.exchange.TypedRowExchange`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..partition.book import PartitionBook
from .device import DeviceOps, RowSource, gather_rows
from .exchange import CommStats, RowExchange, TypedRowExchange, typed_pieces
from .group import DistContext


def _inverse(perm: torch.Tensor) -> torch.Tensor:
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.shape[0], dtype=perm.dtype)
    return inv


class FeatureStore:
    """Owned and cached feature rows of one rank.

    Args:
        ctx: the process group context (rank = partition).
        book: the partition book.
        local_x: ``[n_k, F]`` owned rows in local id order (row i = global id ``offsets[rank] + i``).
        owned_order: int64 ``[n_k]`` local rows by descending VIP (``None``: identity).
        num_device_owned: how many of the first rows of ``owned_order`` live on ``ctx.device``
            (the cache plan's ``num_device_owned`` of this partition).
        cache_slot: int64 ``[N]``: -1 not cached, ``[0, G)`` device tier, ``[G, G + C)`` host tier
            (``None``: no cache).
        num_device_slots: G.
    """

    def __init__(self, ctx: DistContext, book: PartitionBook, local_x: np.ndarray,
                 owned_order: np.ndarray | None = None, num_device_owned: int = 0,
                 cache_slot: np.ndarray | None = None, num_device_slots: int = 0):
        self.ctx = ctx
        self.book = book
        self.offset = int(book.offsets[ctx.rank])
        n_k = local_x.shape[0]
        order = np.arange(n_k) if owned_order is None else np.array(owned_order, dtype=np.int64)
        self.local_row = _inverse(torch.from_numpy(order))  # local index -> storage row
        storage = torch.as_tensor(np.asarray(local_x)[order])  # a fresh, writable copy in storage order
        self.num_device_owned = min(int(num_device_owned), n_k)
        self.pin = ctx.device.type == "cuda"  # host tiers in pinned memory: the CUDA kernels read them directly
        self.owned_device = storage[:self.num_device_owned].to(ctx.device)
        self.owned_host = storage[self.num_device_owned:]
        if self.pin:
            self.owned_host = self.owned_host.pin_memory()
        # Serving peers looks storage rows up where the requested ids arrive (the GPU with NCCL).
        self.serve_row = self.local_row.to(ctx.comm_device)
        # The sampler threads copy owned rows into each batch's x from one CPU tensor; that is all of them on CPU.
        self.slice_source = storage if ctx.device.type == "cpu" else None
        self.num_features = int(storage.shape[1])
        self.dtype = storage.dtype
        if cache_slot is None:
            cache_slot = np.full(book.num_nodes, -1, dtype=np.int64)
        self.cache_slot = torch.as_tensor(np.asarray(cache_slot), dtype=torch.int64)
        self.num_device_slots = int(num_device_slots)
        self.cache_device = torch.empty((0, self.num_features), dtype=self.dtype, device=ctx.device)
        self.cache_host = torch.empty((0, self.num_features), dtype=self.dtype)

    @property
    def num_cached(self) -> int:
        return int(self.cache_device.shape[0] + self.cache_host.shape[0])

    @property
    def holds_every_row(self) -> bool:
        """Whether this rank holds every feature row, its own and every remote one cached (full
        replication): its batches fetch nothing."""
        return self.book.num_nodes - self.local_row.shape[0] == self.num_cached

    def serve(self, ids: torch.Tensor) -> torch.Tensor:
        """``[n, F]`` rows of owned global ids (int64 ``[n]``, on ``ctx.comm_device``), on ``ctx.comm_device``.
        With NCCL this runs on the GPU without waiting for it; with gloo and a GPU the rows
        cross to host memory, which gloo needs."""
        rows = torch.index_select(self.serve_row, 0, ids - self.offset).to(self.ctx.device)
        out = torch.empty((rows.shape[0], self.num_features), dtype=self.dtype, device=self.ctx.device)
        gather_rows(out, [RowSource(self.owned_device, rows, high=self.owned_host)])  # both tiers, one launch
        return out.to(self.ctx.comm_device)

    def fill_cache(self, exchange: RowExchange) -> None:
        """Fetch every cached row from its owner (a collective: all ranks call it together)."""
        cached = (self.cache_slot >= 0).nonzero().flatten()
        slots = self.cache_slot[cached]
        by_slot = torch.empty(cached.shape[0], dtype=torch.int64)
        by_slot[slots] = cached
        # Ids sorted ascending are grouped by owner, since owners hold contiguous id ranges.
        ids, order = torch.sort(by_slot)
        counts = torch.from_numpy(np.bincount(self.book.owner(ids.numpy()), minlength=self.book.num_parts))
        fetched = exchange.fetch(ids, counts).cpu()
        rows = torch.empty_like(fetched)
        rows[order] = fetched
        g = self.num_device_slots
        self.cache_device = rows[:g].to(self.ctx.device)
        self.cache_host = rows[g:].pin_memory() if self.pin else rows[g:]
        # A rank never caches rows it sends: fetching the cache is not per-epoch traffic.
        exchange.stats = CommStats()

    def fetch_context_args(self) -> dict[str, Any]:
        """Keyword arguments of the sampler's fetch context for this rank."""
        return dict(book=self.book, rank=self.ctx.rank, cache_slot=self.cache_slot,
                    num_device_slots=self.num_device_slots, local_x=self.slice_source, local_row=self.local_row,
                    pin=self.pin)

    def assemble(self, origins: Any, received: torch.Tensor | None, num_nodes: int, stats: CommStats,
                 ops: DeviceOps) -> torch.Tensor:
        """``[num_nodes, F]`` features of a batch, in ``n_id`` order, on ``ctx.device``: one
        launch of the row gather on ``ops``'s side stream, after the uploads of the origins' indices.
        It completes the origins' ``x`` in place where the sampler threads wrote the owned rows
        into one (CPU runs), else a new tensor.

        ``origins`` is the batch's row origins (positions and rows of each source), ``received``
        the rows fetched for ``origins.remote_id`` (on the device, or on the host with gloo), or
        ``None`` where every remote row is cached (:attr:`holds_every_row`).
        """
        up = ops.upload
        sources = [RowSource(self.cache_device, up(origins.device_slot), up(origins.device_pos)),
                   RowSource(self.cache_host, up(origins.host_slot), up(origins.host_pos))]
        if received is not None:
            sources.insert(0, RowSource(up(received), pos=up(origins.remote_pos)))
        if origins.x is not None:  # the sampler threads wrote the owned rows into it (CPU runs)
            out = up(origins.x)
        else:
            out = ops.empty((num_nodes, self.num_features), self.dtype)
            sources.insert(0, RowSource(self.owned_device, up(origins.owned_row), up(origins.owned_pos),
                                        high=self.owned_host))
        ops.launch(lambda stream: gather_rows(out, sources, stream))
        stats.owned += int(origins.owned_pos.shape[0])
        stats.device_hits += int(origins.device_pos.shape[0])
        stats.host_hits += int(origins.host_pos.shape[0])
        return out


# ---- typed graphs ----------------------------------------------------------------------------------

@dataclass
class TypedRowOrigins:
    """Where each feature row of a typed batch comes from, per node type (lists indexed by type).

    Positions are rows of the batch's ``x_dict[t]``: a node's rank among the batch nodes of its
    type (``n_id`` order within a type). A type without features has empty tensors.

    Attributes:
        remote_id: int64 ``[n_r]`` ids to request, grouped by owner, by type within an owner,
            ``n_id`` order within a type (no id of a type without features).
        remote_counts: int64 ``[K * T]`` how many of ``remote_id`` each (owner, type) block holds.
        num_rows: int64 ``[T]`` the batch nodes of each type.
        owned_pos, owned_row: int64 ``[n_o,t]`` positions owned by this rank, their storage rows
            in the type's owned tiers.
        remote_pos: int64 ``[n_r,t]`` positions of the type's requested ids, owner by owner.
        device_pos, device_slot / host_pos, host_slot: positions served by the type's device /
            host cache tier, and the row in that tier.
    """

    remote_id: torch.Tensor
    remote_counts: torch.Tensor
    num_rows: torch.Tensor
    owned_pos: list[torch.Tensor]
    owned_row: list[torch.Tensor]
    remote_pos: list[torch.Tensor]
    device_pos: list[torch.Tensor]
    device_slot: list[torch.Tensor]
    host_pos: list[torch.Tensor]
    host_slot: list[torch.Tensor]


class TypedFeatureStore:
    """The owned and cached feature rows of one rank of a typed graph: the tiers of
    :class:`FeatureStore` for every node type with features (a type without features has none:
    the model's embedding serves it).

    The row origins of a batch come from the sampler's untyped ones (the C++ split of ``n_id`` by
    owner and cache tier, computed without owned rows) and are split by type in
    :meth:`typed_origins`; the remote rows of every type travel in one
    :class:`~salientpp.distributed.exchange.TypedRowExchange` per batch.

    Args:
        ctx: the process group context (rank = partition).
        book: the typed partition book (``type_offsets``).
        features: node type index -> ``[n_kt, F_t]`` rows of this rank's block of the type (row i
            = global id ``book.block(rank, t)[0] + i``), for every type with features; one dtype.
        owned_order: int64 ``[n_k]`` local indices (``id - offsets[rank]``, every type) by
            descending score (``None``: identity); each type keeps its rows in this order.
        num_device_owned: the first rows of ``owned_order`` that live on ``ctx.device`` (each
            type's among them).
        cache_slot: int64 ``[N]`` as :class:`FeatureStore`'s, over ids of every type (``None``: no
            cache); ids of a type without features are not cached. Each type's tiers hold its
            cached ids in slot order.
        num_device_slots: G.
    """

    def __init__(self, ctx: DistContext, book: PartitionBook, features: dict[int, np.ndarray],
                 owned_order: np.ndarray | None = None, num_device_owned: int = 0,
                 cache_slot: np.ndarray | None = None, num_device_slots: int = 0):
        self.ctx = ctx
        self.book = book
        self.num_types = book.num_types
        self.offset = int(book.offsets[ctx.rank])
        self.widths = [int(features[t].shape[1]) if t in features else 0 for t in range(self.num_types)]
        self.typed = [t for t in range(self.num_types) if t in features]  # the types with features
        self.dtype = torch.as_tensor(np.asarray(features[self.typed[0]][:0])).dtype
        self.pin = ctx.device.type == "cuda"
        n_k = book.part_size(ctx.rank)
        order = np.arange(n_k) if owned_order is None else np.array(owned_order, dtype=np.int64)
        order_type = book.type_of(order + self.offset)
        self.num_device_owned = min(int(num_device_owned), n_k)
        self.start = [book.block(ctx.rank, t)[0] for t in range(self.num_types)]
        self.local_row, self.owned_device, self.owned_host, self.serve_row = ([None] * self.num_types for _ in range(4))
        for t in self.typed:
            local = order[order_type == t] - (self.start[t] - self.offset)  # block rows in storage order
            self.local_row[t] = _inverse(torch.from_numpy(local))
            storage = torch.as_tensor(np.asarray(features[t])[local])
            on_device = int(np.count_nonzero(order_type[:self.num_device_owned] == t))
            self.owned_device[t] = storage[:on_device].to(ctx.device)
            self.owned_host[t] = storage[on_device:].pin_memory() if self.pin else storage[on_device:]
            self.serve_row[t] = self.local_row[t].to(ctx.comm_device)
        slots = np.full(book.num_nodes, -1, dtype=np.int64) if cache_slot is None else np.array(cache_slot, np.int64)
        for k in range(book.num_parts):  # no slot for a type without features: nothing is fetched for it
            for t in set(range(self.num_types)) - set(self.typed):
                start, stop = book.block(k, t)
                slots[start:stop] = -1
        self.cache_slot = torch.from_numpy(slots)
        self.num_device_slots = int(num_device_slots)
        # slot_index[s]: the row of global slot s in its type's tier (slot order within a type and tier)
        cached = np.flatnonzero(slots >= 0)
        self.slot_index = torch.full((int(slots.max(initial=-1)) + 1,), -1, dtype=torch.int64)
        self.cache_device = [torch.empty((0, w), dtype=self.dtype, device=ctx.device) for w in self.widths]
        self.cache_host = [torch.empty((0, w), dtype=self.dtype) for w in self.widths]
        self._cached = (cached, slots[cached], book.type_of(cached))
        for t in self.typed:
            for tier in (slots[cached] < self.num_device_slots, slots[cached] >= self.num_device_slots):
                mine = np.sort(slots[cached][tier & (self._cached[2] == t)])
                self.slot_index[mine] = torch.arange(mine.shape[0])

    @property
    def num_cached(self) -> int:
        return int(self._cached[0].shape[0])

    @property
    def holds_every_row(self) -> bool:
        """Whether this rank holds every feature row of every type with features: its batches fetch nothing."""
        blocks = np.diff(self.book.blocks).reshape(self.book.num_parts, self.num_types)
        remote = int(blocks[:, self.typed].sum() - blocks[self.ctx.rank, self.typed].sum())
        return remote == self.num_cached

    def _owned_rows(self, t: int, ids: torch.Tensor) -> torch.Tensor:
        """``[n, F_t]`` rows of owned global ids of type ``t`` (int64 ``[n]``), on ``ctx.device``."""
        rows = torch.index_select(self.serve_row[t], 0, ids - self.start[t]).to(self.ctx.device)
        out = torch.empty((rows.shape[0], self.widths[t]), dtype=self.dtype, device=self.ctx.device)
        return gather_rows(out, [RowSource(self.owned_device[t], rows, high=self.owned_host[t])])

    def serve(self, ids: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """The rows of owned global ids (int64 ``[n]`` on ``ctx.comm_device``, grouped by requesting
        rank and by type within a rank, ``counts`` int64 ``[K * T]`` per (rank, type), host),
        flattened in that order: 1-D on ``ctx.comm_device``."""
        blocks = counts.view(-1, self.num_types)
        types = torch.repeat_interleave(torch.arange(self.num_types).repeat(blocks.shape[0]), counts)
        rows = {t: self._owned_rows(t, ids[(types == t).to(ids.device)]).split(blocks[:, t].tolist())
                for t in self.typed}
        flat = [rows[t][k].flatten() for k in range(blocks.shape[0]) for t in self.typed]
        out = torch.cat(flat) if flat else torch.empty(0, dtype=self.dtype, device=self.ctx.device)
        return out.to(self.ctx.comm_device)

    def fill_cache(self, exchange: TypedRowExchange) -> None:
        """Fetch every cached row from its owner (a collective: all ranks call it together)."""
        ids, slots, types = self._cached  # ascending ids: grouped by owner, then type
        counts = torch.from_numpy(np.bincount(self.book.block_of(ids), minlength=self.book.blocks.shape[0] - 1))
        pieces = typed_pieces(exchange.fetch(torch.from_numpy(ids), counts).cpu(), counts, self.widths)
        g = self.num_device_slots
        for t in self.typed:
            rows, mine = torch.cat(pieces[t]), slots[types == t]
            for device, tier in ((True, mine < g), (False, mine >= g)):
                table = torch.empty((int(tier.sum()), self.widths[t]), dtype=self.dtype)
                table[self.slot_index[torch.from_numpy(mine[tier])]] = rows[torch.from_numpy(tier)]
                if device:
                    self.cache_device[t] = table.to(self.ctx.device)
                else:
                    self.cache_host[t] = table.pin_memory() if self.pin else table
        exchange.stats = CommStats()

    def fetch_context_args(self) -> dict[str, Any]:
        """Keyword arguments of the sampler's fetch context for this rank: the untyped split by
        owner and cache tier, without owned rows (:meth:`typed_origins` splits it by type)."""
        return dict(book=self.book, rank=self.ctx.rank, cache_slot=self.cache_slot,
                    num_device_slots=self.num_device_slots, pin=self.pin)

    def typed_origins(self, origins: Any, node_type: torch.Tensor, rank: torch.Tensor) -> TypedRowOrigins:
        """The :class:`TypedRowOrigins` of a batch from its untyped row origins (the sampler's,
        from :meth:`fetch_context_args`), ``node_type`` (int64 ``[num_nodes]``) and ``rank`` (int64
        ``[num_nodes]``, each node's row among the batch nodes of its type)."""
        num_parts, num_types = self.book.num_parts, self.num_types
        # numpy views of the CPU tensors: its masked indexing is several times faster than torch's here
        o = {name: getattr(origins, name).numpy() for name in ("owned_pos", "owned_row", "remote_id", "remote_pos",
                                                               "remote_counts", "device_pos", "device_slot",
                                                               "host_pos", "host_slot")}
        node_type, rank = node_type.numpy(), rank.numpy()
        slot_index = self.slot_index.numpy()
        has = np.zeros(num_types, dtype=bool)
        has[self.typed] = True
        remote_type = node_type[o["remote_pos"]]
        keep = has[remote_type]
        block = (np.repeat(np.arange(num_parts), o["remote_counts"]) * num_types + remote_type)[keep]
        order = np.argsort(block, kind="stable")
        remote_pos, remote_type = o["remote_pos"][keep][order], remote_type[keep][order]
        empty = torch.empty(0, dtype=torch.int64)
        lists = {name: [empty] * num_types for name in
                 ("owned_pos", "owned_row", "remote_pos", "device_pos", "device_slot", "host_pos", "host_slot")}
        owned_type, device_type = node_type[o["owned_pos"]], node_type[o["device_pos"]]
        host_type = node_type[o["host_pos"]]
        for t in self.typed:
            mine = owned_type == t
            lists["owned_pos"][t] = rank[o["owned_pos"][mine]]
            lists["owned_row"][t] = self.local_row[t].numpy()[o["owned_row"][mine] - (self.start[t] - self.offset)]
            lists["remote_pos"][t] = rank[remote_pos[remote_type == t]]
            mine = device_type == t
            lists["device_pos"][t] = rank[o["device_pos"][mine]]
            lists["device_slot"][t] = slot_index[o["device_slot"][mine]]
            mine = host_type == t
            lists["host_pos"][t] = rank[o["host_pos"][mine]]
            lists["host_slot"][t] = slot_index[o["host_slot"][mine] + self.num_device_slots]
        lists = {name: [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in arrays]
                 for name, arrays in lists.items()}
        return TypedRowOrigins(torch.from_numpy(o["remote_id"][keep][order]),
                               torch.from_numpy(np.bincount(block, minlength=num_parts * num_types)),
                               torch.from_numpy(np.bincount(node_type, minlength=num_types)), **lists)

    def assemble(self, origins: TypedRowOrigins, received: torch.Tensor | None, num_nodes: int, stats: CommStats,
                 ops: DeviceOps) -> dict[int, torch.Tensor]:
        """Node type index -> ``[n_t, F_t]`` feature rows of the batch's nodes of the type, in ``n_id``
        order, on ``ctx.device``, for every type with features: one gather per type on ``ops``'s
        side stream. ``received`` is the flat rows fetched for ``origins.remote_id`` (``None``: none
        fetched, every remote row is cached)."""
        up = ops.upload
        pieces = None if received is None else typed_pieces(up(received), origins.remote_counts, self.widths)
        out = {}
        for t in self.typed:
            sources = [RowSource(self.owned_device[t], up(origins.owned_row[t]), up(origins.owned_pos[t]),
                                 high=self.owned_host[t]),
                       RowSource(self.cache_device[t], up(origins.device_slot[t]), up(origins.device_pos[t])),
                       RowSource(self.cache_host[t], up(origins.host_slot[t]), up(origins.host_pos[t]))]
            if pieces is not None:
                positions = up(origins.remote_pos[t]).split([p.shape[0] for p in pieces[t]])
                sources += [RowSource(p, pos=pos) for p, pos in zip(pieces[t], positions)]
            out[t] = ops.empty((int(origins.num_rows[t]), self.widths[t]), self.dtype)
            ops.launch(lambda stream, x=out[t], s=sources: gather_rows(x, s, stream))
            stats.owned += int(origins.owned_pos[t].shape[0])
            stats.device_hits += int(origins.device_pos[t].shape[0])
            stats.host_hits += int(origins.host_pos[t].shape[0])
        return out
