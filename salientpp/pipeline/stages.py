"""The stages a batch goes through before the model sees it, each a small callable object.

A stage takes an :class:`InFlight` record, waits for what the previous stage started (if
anything), starts its own asynchronous work and returns the record. Every rank runs the same
number of steps (its loader yields the same number of balanced batches on every rank). A batch
without seeds, which a rank with fewer seeds than steps gets in sampled evaluation, becomes an
*empty step* (``batch is None``): it still takes part in every collective with zero rows, so
its peers stay in lockstep.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

import torch

from ..distributed.exchange import CommStats, Pending, RowExchange
from ..distributed.feature_store import FeatureStore
from ..distributed.health import Stage
from .device import DeviceOps, Event


@dataclass
class InFlight:
    """One step of an epoch on its way through the pipeline.

    Attributes:
        step: index of the step in the epoch.
        batch: the sampled batch (``n_id``, ``batch_size``, ``mfgs``, ``y``, ``fetch``) or ``None``
            for an empty step (a batch without seeds).
        x: ``[num_nodes, F]`` assembled features in ``n_id`` order, on the device (set last).
        mfgs, n_id, y: the batch's MFGs, int64 ``[num_nodes]`` node ids and its seeds' label rows,
            on the device (set last).
        ready: the event after which ``x``, ``mfgs``, ``n_id`` and ``y`` are complete on the device; the
            consumer makes its stream wait for it (:meth:`DeviceOps.wait`) before using them.
    """

    step: int
    batch: Any = None
    send_counts: torch.Tensor | None = None
    recv_counts: Pending | None = None
    requested: Pending | None = None
    received: Pending | None = None
    x: torch.Tensor | None = None
    mfgs: list | None = None
    n_id: torch.Tensor | None = None
    y: torch.Tensor | None = None
    ready: Event | None = None


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
    """Wait for the rows, then queue on the side stream the uploads of the batch (fetch plan,
    received rows, MFGs, ids, labels) and the one gather that writes ``x[n_id]``; record when it
    is done. ``labels(seeds)`` gives the host label rows of int64 seed ids."""

    name = Stage.ASSEMBLE.value

    def __init__(self, store: FeatureStore | None, stats: CommStats, ops: DeviceOps,
                 labels: Callable[[torch.Tensor], torch.Tensor]):
        self.store = store  # None: a loader without features, whose x is float32 [num_nodes, 0]
        self.stats = stats
        self.ops = ops
        self.labels = labels

    def __call__(self, item: InFlight) -> InFlight:
        received = None if item.received is None else self.ops.receive(item.received)
        batch = item.batch
        if batch is None:
            return item
        up = self.ops.upload
        num_nodes = int(batch.n_id.shape[0])
        if self.store is None:
            item.x = self.ops.empty((num_nodes, 0), torch.float32)
        else:
            item.x = self.store.assemble(batch.fetch, received, num_nodes, self.stats, self.ops)
        item.mfgs = [replace(mfg, edge_index=up(mfg.edge_index), rowptr=up(mfg.rowptr),
                             edge_weight=None if mfg.edge_weight is None else up(mfg.edge_weight))
                     for mfg in batch.mfgs]
        item.n_id = up(batch.n_id)
        item.y = up(self.labels(batch.n_id[:batch.batch_size]))
        item.ready = self.ops.record()
        structure = [t for mfg in item.mfgs for t in (mfg.edge_index, mfg.rowptr, mfg.edge_weight) if t is not None]
        self.ops.hand_over([item.x, item.n_id, item.y, *structure])
        return item


def fetch_stages(exchange: RowExchange | None, store: FeatureStore | None, stats: CommStats, ops: DeviceOps,
                 labels: Callable[[torch.Tensor], torch.Tensor]) -> list:
    """The stages after sampling, in order (the pipeline's visible composition); without a store
    (a loader without features) only the upload of the structure and labels."""
    if store is None:
        return [AssembleStage(None, stats, ops, labels)]
    return [CountsStage(exchange, store.book.num_parts), IdsStage(exchange), RowsStage(exchange),
            AssembleStage(store, stats, ops, labels)]
