"""The feature rows one rank can reach without asking anyone: its own and its cache.

Tiers:

* owned rows, reordered by descending VIP (``owned_order`` of the cache plan); the first
  ``num_device_owned`` live on the training device, the rest in (pinned) CPU memory;
* the remote cache, slot ``s < G`` in the device tier and ``G + j`` in the host tier, filled once
  at start-up by an all-to-all from the owners;
* everything else is fetched per batch through :class:`~salientpp.distributed.exchange.RowExchange`.

On a CPU-only run the "device" tiers are CPU tensors too; the split is kept so that the
counters mean the same thing everywhere.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..partition.book import PartitionBook
from .device import DeviceOps, RowSource, gather_rows
from .exchange import CommStats, RowExchange
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
