"""Timed micro-benchmarks that fit the :class:`~salientpp.fullgraph.schedule.CostModel` of this machine.

* Compute, per layer i: the model's layer i (its convolution, then ReLU and the keyed dropout
  below the last layer) forward and backward on two random blocks of ``ROWS`` destinations, with
  1 and ``DEGREE`` edges each from a table of up to ``SOURCES`` rows. The time is ``rows * row_s + edges * edge_s``; two blocks give both.
* Communication: the round trip training makes (:class:`~salientpp.fullgraph.engine.LevelExchange`:
  the owners gather the rows asked of them, one all-to-all forward, one backward with the
  gradients, the owners add them up) of 1 row and of ``ROWS_PER_PEER`` rows per peer, of the
  hidden width. The first is the fixed cost of one exchange; the difference, per byte received.
  And the all-reduce of the parameters' gradients, once per epoch in every mode.

Each is the median of ``repeats`` runs after a warm-up. Every rank measures at once (so the
cores they share count) and the ranks keep the largest of each cost, so all of them schedule with
the same numbers. One process has no exchange: both of its communication costs are 0.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist

from ..distributed import CommStats, DistContext
from ..distributed.exchange import Halo
from ..models import MFGModel
from ..models.ops import keyed_relu_dropout
from ..sampling import MFG
from ..timing import median_seconds
from .engine import LevelExchange, exchange_rows
from .schedule import CostModel

ROWS, DEGREE, ROWS_PER_PEER = 16384, 16, 1024
# Source rows of the random blocks: a table as large as a graph's (gathers miss the CPU caches as
# they do in training), up to this many bytes.
SOURCES, SOURCE_BYTES = 1 << 16, 64 << 20


def _random_mfg(rows: int, num_src: int, degree: int, generator: torch.Generator, device: torch.device) -> MFG:
    """``rows`` destinations (the first of ``num_src`` sources) with ``degree`` random sources each."""
    sources = torch.randint(0, num_src, (rows * degree,), generator=generator)
    targets = torch.arange(rows).repeat_interleave(degree)
    rowptr = torch.arange(0, rows * degree + 1, degree)
    return MFG(num_src, rows, torch.stack([sources, targets]).to(device), rowptr.to(device))


def _layer_seconds(model: MFGModel, i: int, width: int, degree: int, repeats: int, generator: torch.Generator,
                   device: torch.device) -> float:
    mfg = _random_mfg(ROWS, max(ROWS, min(SOURCES, SOURCE_BYTES // (4 * width))), degree, generator, device)
    # The features (layer 0's input) need no gradient; the hidden rows do.
    x = torch.randn((mfg.num_src, width), generator=generator).to(device).requires_grad_(i > 0)
    ids = torch.arange(ROWS, device=device)

    def run() -> None:
        out = model.convolve(i, x, mfg)
        if i < model.num_layers - 1:
            out = keyed_relu_dropout(out, ids, model.dropout, 0, True)
        out.sum().backward()
    return median_seconds(run, repeats)


def _all_reduce_seconds(ctx: DistContext, model: MFGModel, repeats: int) -> float:
    """One all-reduce of every parameter's gradient (the trainer's, once per epoch)."""
    flat = torch.zeros(sum(p.numel() for p in model.parameters()), dtype=torch.float32, device=ctx.comm_device)
    return median_seconds(lambda: dist.all_reduce(flat), repeats)


def _round_trip_seconds(ctx: DistContext, rows_per_peer: int, width: int, repeats: int,
                        generator: torch.Generator) -> float:
    """Rows forward and gradients back: ``rows_per_peer`` random rows of a ``ROWS_PER_PEER``-row
    table from every other rank (with one row, twice the fixed cost of an exchange)."""
    k, owned = ctx.world_size, ROWS_PER_PEER
    counts = torch.full((k,), rows_per_peer, dtype=torch.int64)
    counts[ctx.rank] = 0
    halo = Halo(torch.empty(0, dtype=torch.int64), counts, torch.randint(0, owned, (int(counts.sum()),),
                                                                          generator=generator), counts.clone())
    level = LevelExchange(ctx, halo, 0, owned, CommStats())
    h = torch.randn((owned, width), generator=generator).to(ctx.device).requires_grad_(True)
    return median_seconds(lambda: exchange_rows(h, level).sum().backward(), repeats)


def calibrate(ctx: DistContext, model: MFGModel, dims: Sequence[int], repeats: int = 5) -> CostModel:
    """The :class:`CostModel` of ``model`` (widths ``dims`` = ``[d_0, ..., d_L]``) on this machine,
    agreed by every rank (a collective)."""
    generator = torch.Generator().manual_seed(0)
    was_training = model.training
    model.train()
    row_s, edge_s = [], []
    for i in range(model.num_layers):
        one = _layer_seconds(model, i, dims[i], 1, repeats, generator, ctx.device)
        many = _layer_seconds(model, i, dims[i], DEGREE, repeats, generator, ctx.device)
        per_edge = max(many - one, 0.0) / (ROWS * (DEGREE - 1))
        edge_s.append(per_edge)
        row_s.append(max(one - per_edge * ROWS, 0.0) / ROWS)
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    byte_s = exchange_s = step_s = 0.0
    if ctx.distributed and ctx.world_size > 1:
        step_s = _all_reduce_seconds(ctx, model, repeats)
        width = max(dims[1:-1], default=dims[0])
        small = _round_trip_seconds(ctx, 1, width, repeats, generator)
        large = _round_trip_seconds(ctx, ROWS_PER_PEER, width, repeats, generator)
        exchange_s = small / 2
        # Per byte of one direction: CostModel.row_exchange_s counts both.
        byte_s = max(large - small, 0.0) / (2 * (ctx.world_size - 1) * ROWS_PER_PEER * width * 4)
    values = torch.tensor(row_s + edge_s + [byte_s, exchange_s, step_s], dtype=torch.float64)
    if ctx.distributed:
        values = values.to(ctx.comm_device)
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
    values = values.cpu().tolist()
    layers = model.num_layers
    return CostModel(tuple(values[:layers]), tuple(values[layers:2 * layers]), *values[2 * layers:])
