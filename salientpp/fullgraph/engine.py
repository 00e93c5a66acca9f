"""One rank's full-graph forward pass over a :class:`~salientpp.fullgraph.schedule.DependencySchedule`.

Layer i reads a table of ``h^i`` rows: those the rank computed (``computed[i]``: the owned ones,
then the cached remote ones) followed, at a hidden level, by the rows communicated from their
owners (``fetched[i]``), and writes ``h^{i+1}`` of ``computed[i + 1]``. The destinations must be
the first sources of an MFG; where they are not (a vertex cached at i + 1 but communicated at i)
the table is permuted once per layer. The communication is :class:`_Exchange`, an autograd
function: forward, each owner sends the rows asked of it; backward, each rank sends the rows'
gradients back and the owner adds them to its own rows' gradients, so the gradients of every
mode are those of one process running the whole graph. The features of remote vertices never
change, so they are fetched once, when the engine is built.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from ..data.csr import row_edge_positions
from ..distributed import CommStats, DistContext, RowExchange
from ..distributed.exchange import Halo
from ..models import MFGModel
from ..models.ops import keyed_relu_dropout
from ..sampling import MFG
from .schedule import DependencySchedule


class LevelExchange:
    """The communicated rows of one hidden level: forward, ``h^l`` of the rows this rank fetches;
    backward, their gradients back to the owners. ``stats`` counts rows and bytes both ways and
    ``seconds`` the time spent in the collectives."""

    def __init__(self, ctx: DistContext, halo: Halo, lo: int, num_owned: int, stats: CommStats):
        self.ctx, self.halo, self.lo, self.num_owned, self.stats = ctx, halo, lo, num_owned, stats
        self.seconds = 0.0
        comm = ctx.comm_device
        self._requested, self._requested_local = halo.requested.to(comm), (halo.requested - lo).to(ctx.device)

    def rows(self, h_owned: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        comm = self.ctx.comm_device
        width = int(h_owned.shape[1])
        exchange = RowExchange(self.ctx, lambda ids, counts: h_owned[ids.to(h_owned.device) - self.lo].to(comm),
                               width, h_owned.dtype)
        exchange.stats = self.stats
        out = exchange.rows(self._requested, self.halo.requested_counts, self.halo.counts).wait()
        out = out.view(-1, width).to(h_owned.device)
        self.seconds += time.perf_counter() - start
        return out

    def gradients(self, grad_rows: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        exchange = RowExchange(self.ctx, lambda ids, counts: None, int(grad_rows.shape[1]), grad_rows.dtype)
        back = exchange.send_back(grad_rows.contiguous(), self.halo.counts, self.halo.requested_counts).wait()
        row_bytes = grad_rows.shape[1] * grad_rows.element_size()
        self.stats.sent += int(grad_rows.shape[0])
        self.stats.bytes_sent += int(grad_rows.shape[0]) * row_bytes
        self.stats.received += int(back.shape[0])
        self.stats.bytes_received += int(back.shape[0]) * row_bytes
        grad = torch.zeros((self.num_owned, grad_rows.shape[1]), dtype=grad_rows.dtype, device=grad_rows.device)
        grad.index_add_(0, self._requested_local, back.to(grad.device))
        self.seconds += time.perf_counter() - start
        return grad


class _Exchange(torch.autograd.Function):
    """Rows of the level's halo from ``h_owned``; backward, their gradients to the owners."""

    @staticmethod
    def forward(ctx, h_owned: torch.Tensor, level: LevelExchange) -> torch.Tensor:
        ctx.level = level
        return level.rows(h_owned)

    @staticmethod
    def backward(ctx, grad_rows: torch.Tensor):
        return ctx.level.gradients(grad_rows), None


def exchange_rows(h_owned: torch.Tensor, level: LevelExchange) -> torch.Tensor:
    """``[n_h, d]`` rows of ``level``'s halo, from their owners' ``h_owned`` (``[n_k, d]``, this
    rank's owned rows): differentiable, the backward sends the gradients back (a collective)."""
    return _Exchange.apply(h_owned, level)


@dataclass
class _Layer:
    """What layer i reads: the exchange of level i (``None``: nothing moves there), the
    permutation putting the destinations first (``None``: they are), the MFG, and the original
    ids of the destinations (they key the dropout masks, so that the masks do not depend on the
    partitioning either)."""

    exchange: LevelExchange | None
    order: torch.Tensor | None
    mfg: MFG
    dst_ids: torch.Tensor


def _lookup(table_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Positions of ``ids`` in ``table_ids`` (distinct; every id present)."""
    order = np.argsort(table_ids, kind="stable")
    return order[np.searchsorted(table_ids[order], ids)]


def active_levels(ctx: DistContext, schedule: DependencySchedule) -> list[bool]:
    """Per level, whether any rank communicates rows there (a collective): every rank must then
    join that level's all-to-all."""
    counts = torch.tensor([f.shape[0] for f in schedule.fetched], dtype=torch.int64)
    if ctx.distributed:
        counts = counts.to(ctx.comm_device)
        dist.all_reduce(counts)
    return [bool(c) for c in counts.cpu().tolist()]


class FullGraphEngine:
    """Runs a model over one rank's schedule (building it is a collective: every rank at once).

    Args:
        ctx: the process group context; graph: this rank's
            :class:`~salientpp.loader.graph.DistGraph`; schedule: its dependency schedule.

    Attributes:
        stats: rows and bytes of the exchanges since :meth:`reset_stats`; startup: those of the
            feature fetch.
    """

    def __init__(self, ctx: DistContext, graph, schedule: DependencySchedule):
        self.ctx, self.schedule = ctx, schedule
        device, lo, num_owned = ctx.device, schedule.lo, schedule.hi - schedule.lo
        self.stats, self.startup = CommStats(), CommStats()
        x_owned = torch.from_numpy(np.array(graph.x, dtype=np.float32))  # a writable copy
        halo = Halo.build(ctx, schedule.computed[0][num_owned:], graph.book)
        width = int(x_owned.shape[1])
        exchange = RowExchange(ctx, lambda ids, counts: x_owned[ids.cpu() - lo].to(ctx.comm_device), width,
                               torch.float32)
        exchange.stats = self.startup
        remote = exchange.rows(halo.requested.to(ctx.comm_device), halo.requested_counts, halo.counts).wait()
        self.x = torch.cat([x_owned, remote.cpu().view(-1, width)]).to(device)
        active = active_levels(ctx, schedule)
        rowptr, col = graph.rowptr, graph.col
        self.layers: list[_Layer] = []
        for i in range(schedule.num_layers):
            table_ids = schedule.computed[i] if i == 0 else np.concatenate([schedule.computed[i], schedule.fetched[i]])
            level = None
            if i > 0 and active[i]:
                level = LevelExchange(ctx, Halo.build(ctx, schedule.fetched[i], graph.book), lo, num_owned, self.stats)
            dst = schedule.computed[i + 1]
            first = _lookup(table_ids, dst)
            order = None
            if not np.array_equal(first, np.arange(dst.shape[0])):
                rest = np.setdiff1d(np.arange(table_ids.shape[0]), first)
                order_np = np.concatenate([first, rest])
                table_ids, order = table_ids[order_np], torch.from_numpy(order_np).to(device)
            positions, degree = row_edge_positions(rowptr, dst)
            sources = torch.from_numpy(_lookup(table_ids, np.asarray(col[positions], dtype=np.int64)))
            targets = torch.repeat_interleave(torch.arange(dst.shape[0]), torch.from_numpy(degree))
            mfg = MFG(int(table_ids.shape[0]), int(dst.shape[0]), torch.stack([sources, targets]).to(device),
                        torch.from_numpy(np.concatenate([[0], np.cumsum(degree)])).to(device))
            keys = torch.from_numpy(graph.original_ids(dst).astype(np.int64))
            self.layers.append(_Layer(level, order, mfg, keys.to(device)))

    def reset_stats(self) -> None:
        """Zero the per-epoch counters: :attr:`stats` and the exchanges' seconds."""
        self.stats = CommStats()
        for layer in self.layers:
            if layer.exchange is not None:
                layer.exchange.stats, layer.exchange.seconds = self.stats, 0.0

    @property
    def exchange_seconds(self) -> float:
        """Seconds spent in the per-level all-to-alls so far, forward and backward."""
        return sum(layer.exchange.seconds for layer in self.layers if layer.exchange is not None)

    def forward(self, model: MFGModel, seed: int) -> torch.Tensor:
        """``[len(schedule.computed[L]), out_dim]`` outputs of the training targets (a collective). The
        dropout of layer i is keyed by ``seed + i`` and the vertices' original ids."""
        h = self.x
        num_owned = self.schedule.hi - self.schedule.lo
        for i, layer in enumerate(self.layers):
            table = h
            if layer.exchange is not None:
                table = torch.cat([h, exchange_rows(h[:num_owned], layer.exchange)])
            if layer.order is not None:
                table = table[layer.order]
            h = model.convolve(i, table, layer.mfg)
            if i < len(self.layers) - 1:
                h = keyed_relu_dropout(h, layer.dst_ids, model.dropout, (seed + i) % (1 << 63), model.training)
        return h


def predicted_epoch_s(ctx: DistContext, schedule: DependencySchedule, cost, dims) -> float:
    """The epoch time ``schedule`` predicts (a collective): per segment between synchronisations
    (:meth:`~salientpp.fullgraph.schedule.DependencySchedule.segment_seconds`) the slowest rank's
    seconds, summed, and the all-reduce of the gradients."""
    seconds = torch.tensor(schedule.segment_seconds(cost, dims, active_levels(ctx, schedule)), dtype=torch.float64)
    if ctx.distributed:
        seconds = seconds.to(ctx.comm_device)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    return float(seconds.cpu().sum()) + cost.step_s
