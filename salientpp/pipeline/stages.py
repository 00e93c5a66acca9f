"""The stages a batch goes through before the model sees it, each a small callable object.

A stage takes an :class:`InFlight` record, waits for what the previous stage started (if
anything), starts its own asynchronous work and returns the record. Every rank runs the same
number of steps (its loader yields the same number of balanced batches on every rank). A batch
without seeds, which a rank with fewer seeds than steps gets in sampled evaluation, becomes an
*empty step* (``batch is None``): it still takes part in every collective with zero rows, so
its peers stay in lockstep.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import torch

from ..distributed.exchange import CommStats, Pending, RowExchange
from ..distributed.feature_store import FeatureStore
from ..distributed.health import Stage


@dataclass
class InFlight:
    """One step of an epoch on its way through the pipeline.

    Attributes:
        step: index of the step in the epoch.
        batch: the sampled batch (``n_id``, ``batch_size``, ``mfgs``, ``y``, ``fetch``) or ``None``
            for an empty step (a batch without seeds).
        x: ``[num_nodes, F]`` assembled features in ``n_id`` order, on the device (set last).
        mfgs, y: the batch's MFGs and int64 ``[batch_size]`` seed labels, on the device (set last).
    """

    step: int
    batch: Any = None
    send_counts: torch.Tensor | None = None
    recv_counts: Pending | None = None
    requested: Pending | None = None
    received: Pending | None = None
    x: torch.Tensor | None = None
    mfgs: list | None = None
    y: torch.Tensor | None = None


class SampleStage:
    """The source: records ``first_step .. num_steps - 1``, one per batch of the loader (a
    resumed epoch starts at ``first_step`` with a loader positioned there). A batch without
    seeds (``batch_size == 0``) becomes an empty step (``batch is None``), and so does every
    step after the loader ends early."""

    name = Stage.SAMPLE.value

    def __init__(self, batches: Iterator[Any], num_steps: int, first_step: int = 0):
        self.batches = batches
        self.num_steps = num_steps
        self.step = first_step

    def __call__(self) -> InFlight | None:
        if self.step >= self.num_steps:
            return None
        batch = next(self.batches, None)
        item = InFlight(self.step, None if batch is None or batch.batch_size == 0 else batch)
        self.step += 1
        return item


class CountsStage:
    """Start the all-to-all of how many rows this rank needs from each owner."""

    name = Stage.COUNTS.value

    def __init__(self, exchange: RowExchange, num_parts: int):
        self.exchange = exchange
        self.num_parts = num_parts

    def __call__(self, item: InFlight) -> InFlight:
        if item.batch is None:
            item.send_counts = torch.zeros(self.num_parts, dtype=torch.int64)
        else:
            item.send_counts = item.batch.fetch.remote_counts
        item.recv_counts = self.exchange.counts(item.send_counts)
        return item


class IdsStage:
    """Wait for the counts, start the all-to-all of the requested ids."""

    name = Stage.IDS.value

    def __init__(self, exchange: RowExchange):
        self.exchange = exchange

    def __call__(self, item: InFlight) -> InFlight:
        recv_counts = item.recv_counts.wait()
        ids = torch.empty(0, dtype=torch.int64) if item.batch is None else item.batch.fetch.remote_id
        item.requested = self.exchange.ids(ids, item.send_counts, recv_counts)
        return item


class RowsStage:
    """Wait for the ids others request, slice those rows, start the all-to-all of rows."""

    name = Stage.ROWS.value

    def __init__(self, exchange: RowExchange):
        self.exchange = exchange

    def __call__(self, item: InFlight) -> InFlight:
        requested = item.requested.wait()
        item.received = self.exchange.rows(requested, item.recv_counts.wait(), item.send_counts)
        return item


class AssembleStage:
    """Wait for the rows, combine owned, received and cached rows into ``x[n_id]`` on the device,
    and move the MFGs and labels there."""

    name = Stage.ASSEMBLE.value

    def __init__(self, store: FeatureStore, stats: CommStats):
        self.store = store
        self.stats = stats

    def __call__(self, item: InFlight) -> InFlight:
        received = item.received.wait()
        batch = item.batch
        if batch is None:
            return item
        dev = self.store.ctx.device
        item.x = self.store.assemble(batch.fetch, received, int(batch.n_id.shape[0]), self.stats)
        item.mfgs = [mfg.to(dev) for mfg in batch.mfgs]
        item.y = None if batch.y is None else batch.y.to(dev, non_blocking=True)
        return item


def fetch_stages(exchange: RowExchange, store: FeatureStore, stats: CommStats) -> list:
    """The stages after sampling, in order (the pipeline's visible composition)."""
    return [CountsStage(exchange, store.book.num_parts), IdsStage(exchange), RowsStage(exchange),
            AssembleStage(store, stats)]
