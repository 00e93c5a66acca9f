"""The batch pipeline: its stages, each a small callable object, and the loop that runs them.

The chain, as :func:`fetch_stages` composes it after the source::

    SampleStage -> CountsStage -> IdsStage -> RowsStage -> AssembleStage

A stage takes an :class:`InFlight` record, waits for what the previous stage started (if
anything), starts its own asynchronous work and returns the record. Every rank runs the same
number of steps (its loader yields the same number of balanced batches on every rank). A batch
without seeds, which a rank with fewer seeds than steps gets in sampled evaluation, becomes an
*empty step* (``batch is None``): it still takes part in every collective with zero rows, so
its peers stay in lockstep.

:class:`Pipeline` runs records through the stages with up to ``pipeline_depth`` of them in
flight. At every tick the oldest record moves first and each in-flight record moves one stage;
a record that has passed every stage is handed to the consumer, and then a new one is drawn
from the source while fewer than ``pipeline_depth`` are in flight. Every rank ticks the same
way, so all ranks start their collectives in the same order. ``pipeline_depth=1`` runs the
stages of one batch one after another (no overlap).

:class:`FetchThread` runs the same ticks on a thread of their own (the *fetch thread*), one
record ahead of the consumer, so that the stages' host work (waiting for collectives, serving
peers' rows, queueing uploads and gathers) overlaps the consumer's model step instead of adding
to it. The ticks, the collectives and the records are the same as :class:`Pipeline` gives inline.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence

import torch

from ..distributed.device import DeviceOps, Event
from ..distributed.exchange import CommStats, Pending, RowExchange
from ..distributed.feature_store import FeatureStore
from ..distributed.health import Stage
from ..sampling.convert import moved


@dataclass
class InFlight:
    """One step of an epoch on its way through the pipeline.

    Attributes:
        step: index of the step in the epoch.
        batch: the sampled batch (``n_id``, ``batch_size``, ``mfgs``, ``y``, ``fetch``) or ``None``
            for an empty step (a batch without seeds).
        x_dict: the assembled features: node type index -> ``[n_t, F_t]`` rows of the batch's
            nodes of the type, in ``n_id`` order, on the device (types with features; a
            homogeneous graph's ``{0: [num_nodes, F]}``; empty without a store) (set last).
        mfgs, n_id, y, node_type: the batch's MFGs, int64 ``[num_nodes]`` node ids, its seeds' label
            rows and int64 ``[num_nodes]`` node types, on the device (set last; a one-type graph's
            node types, and a one-relation graph's edge types, stay constant views).
        ready: the event after which ``x_dict``, ``mfgs``, ``n_id`` and ``y`` are complete on the device; the
            consumer makes its stream wait for it (:meth:`DeviceOps.wait`) before using them.
    """

    step: int
    batch: Any = None
    send_counts: torch.Tensor | None = None
    recv_counts: Pending | None = None
    requested: Pending | None = None
    received: Pending | None = None
    x_dict: dict[int, torch.Tensor] | None = None
    mfgs: list | None = None
    n_id: torch.Tensor | None = None
    y: torch.Tensor | None = None
    node_type: torch.Tensor | None = None
    ready: Event | None = None


class SampleStage:
    """The source: records ``first_step .. num_steps - 1``, one per batch of the loader (a
    resumed epoch starts at ``first_step`` with a loader positioned there). A batch without
    seeds (``batch_size == 0``) becomes an empty step (``batch is None``), and so does every
    step after the loader ends early."""

    stage = Stage.SAMPLE

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
    """Start the all-to-all of how many rows this rank needs from each owner (``num_blocks``
    counts: one per owner, or per (owner, node type) block of a typed graph)."""

    stage = Stage.COUNTS

    def __init__(self, exchange: RowExchange, num_blocks: int):
        self.exchange = exchange
        self.num_blocks = num_blocks

    def __call__(self, item: InFlight) -> InFlight:
        if item.batch is None:
            item.send_counts = torch.zeros(self.num_blocks, dtype=torch.int64)
        else:
            item.send_counts = item.batch.origins.remote_counts
        item.recv_counts = self.exchange.counts(item.send_counts)
        return item


class IdsStage:
    """Wait for the counts, start the all-to-all of the requested ids."""

    stage = Stage.IDS

    def __init__(self, exchange: RowExchange):
        self.exchange = exchange

    def __call__(self, item: InFlight) -> InFlight:
        recv_counts = item.recv_counts.wait()
        ids = torch.empty(0, dtype=torch.int64) if item.batch is None else item.batch.origins.remote_id
        item.requested = self.exchange.ids(ids, item.send_counts, recv_counts)
        return item


class RowsStage:
    """Wait for the ids others request, slice those rows, start the all-to-all of rows."""

    stage = Stage.ROWS

    def __init__(self, exchange: RowExchange):
        self.exchange = exchange

    def __call__(self, item: InFlight) -> InFlight:
        requested = item.requested.wait()
        item.received = self.exchange.rows(requested, item.recv_counts.wait(), item.send_counts)
        return item


class AssembleStage:
    """Wait for the rows, then queue on the side stream the uploads of the batch (row origins,
    received rows, MFGs, ids, labels) and the gathers that write the rows of ``n_id`` (one per
    node type with features, into ``x_dict``); record when it is done. ``labels(seeds)`` gives the
    host label rows of int64 seed ids. A batch drawn on the GPU (``--sampling-device cuda``) is
    there already; its seeds and its MFGs' ``rowptr`` come to the host (the labels and the
    loader's hop layout read them there), and the ``rowptr`` goes back up with the batch."""

    stage = Stage.ASSEMBLE

    def __init__(self, store: FeatureStore | None, stats: CommStats, ops: DeviceOps,
                 labels: Callable[[torch.Tensor], torch.Tensor]):
        self.store = store  # None: a loader without features, whose x_dict is empty
        self.stats = stats
        self.ops = ops
        self.labels = labels

    def __call__(self, item: InFlight) -> InFlight:
        received = None if item.received is None else self.ops.receive(item.received)
        batch = item.batch
        if batch is None:
            return item
        if batch.n_id.device != torch.device("cpu"):  # drawn on the GPU: its hop layout is read on the host
            batch.mfgs = [replace(mfg, rowptr=self.ops.download(mfg.rowptr)) for mfg in batch.mfgs]
        up = self.ops.upload
        item.x_dict = {} if self.store is None else self.store.assemble(batch.origins, received, self.stats, self.ops)
        item.mfgs = [replace(mfg, edge_index=up(mfg.edge_index), rowptr=up(mfg.rowptr),
                             edge_weight=None if mfg.edge_weight is None else up(mfg.edge_weight),
                             edge_type=moved(mfg.edge_type, up, self.ops.device))
                     for mfg in batch.mfgs]
        item.n_id = up(batch.n_id)
        item.y = up(self.labels(self.ops.download(batch.n_id[:batch.batch_size])))
        item.node_type = moved(batch.node_type, up, self.ops.device)
        item.ready = self.ops.record()
        structure = [t for mfg in item.mfgs for t in (mfg.edge_index, mfg.rowptr, mfg.edge_weight, mfg.edge_type)
                     if t is not None]
        self.ops.hand_over([*item.x_dict.values(), item.node_type, item.n_id, item.y, *structure])
        return item


def fetch_stages(exchange: RowExchange | None, store: FeatureStore | None, stats: CommStats, ops: DeviceOps,
                 labels: Callable[[torch.Tensor], torch.Tensor]) -> list:
    """The stages after sampling, in order (the pipeline's visible composition). Without an
    exchange (every rank holds every row: full replication) only the assembly; without a store
    either (a loader without features) only the upload of the structure and labels."""
    if exchange is None:
        return [AssembleStage(store, stats, ops, labels)]
    return [CountsStage(exchange, store.book.blocks.shape[0] - 1), IdsStage(exchange), RowsStage(exchange),
            AssembleStage(store, stats, ops, labels)]


class StageTimes(defaultdict):
    """Seconds spent in each named stage (a ``defaultdict(float)``): the wall time under the
    stage's name, and the CPU time of the thread that ran it under :meth:`cpu_key` of the name.
    Wall time minus CPU time is what the stage waited (for a peer, or for the core). With a
    :class:`FetchThread` the stages run on that thread, and :data:`WAIT` holds the seconds the
    consumer waited for its next record."""

    def __init__(self):
        super().__init__(float)

    @staticmethod
    def cpu_key(name: str) -> str:
        """The key of a stage's CPU seconds, e.g. ``"rows_cpu"``."""
        return f"{name}_cpu"


# StageTimes key: seconds the consumer of a FetchThread waited for its next record.
WAIT = "wait"


class Pipeline:
    """``Pipeline(source, stages, pipeline_depth)``: iterate to get fully processed records, in order.

    Args:
        source: called once per new record; returns an :class:`InFlight` or ``None`` when done.
        stages: callables ``InFlight -> InFlight``, each with its :class:`Stage` as ``stage``.
        pipeline_depth: most records in flight (>= 1).
        times: where to add the wall and CPU seconds spent in each stage (the source's included).
        on_stage: called as ``on_stage(stage, step)`` before a stage runs on the record of
            ``step`` (the source: before it draws record ``source.step``).
    """

    def __init__(self, source: SampleStage, stages: Sequence[Callable[[InFlight], InFlight]],
                 pipeline_depth: int, times: StageTimes | None = None,
                 on_stage: Callable[[Stage, int], None] | None = None):
        if pipeline_depth < 1:
            raise ValueError("the pipeline depth must be at least 1")
        self.source = source
        self.stages = list(stages)
        self.pipeline_depth = pipeline_depth
        self.times = StageTimes() if times is None else times
        self.on_stage = on_stage

    def _timed(self, fn, step: int, *args):
        if self.on_stage is not None:
            self.on_stage(fn.stage, step)
        start, cpu_start = time.perf_counter(), time.thread_time()
        out = fn(*args)
        cpu = time.thread_time() - cpu_start  # read inside the wall interval, so that it never exceeds it
        name = fn.stage.value
        self.times[name] += time.perf_counter() - start
        self.times[StageTimes.cpu_key(name)] += cpu
        return out

    def __iter__(self) -> Iterator[InFlight]:
        flight: deque[list] = deque()  # [record, index of its next stage]
        exhausted = False
        while flight or not exhausted:
            for entry in flight:
                entry[0] = self._timed(self.stages[entry[1]], entry[0].step, entry[0])
                entry[1] += 1
            # The finished record leaves before the next is drawn, so that a record drawn now
            # passes its stages in the ticks right after, and the chain stays full: with as many
            # records in flight as stages, every tick hands one over (drawing first would leave
            # every (depth + 1)-th tick without one, its last stage waiting on a collective
            # started in the same tick).
            if flight and flight[0][1] == len(self.stages):
                yield flight.popleft()[0]
            if not exhausted and len(flight) < self.pipeline_depth:
                item = self._timed(self.source, self.source.step)
                if item is None:
                    exhausted = True
                else:
                    flight.append([item, 0])


class FetchThread:
    """``FetchThread(pipeline, device)``: iterate to get ``pipeline``'s records, in order, made on
    a thread of their own.

    The thread makes record ``j + 1`` while the consumer works on record ``j``: it may make
    records until it has made :attr:`LEAD` more than the consumer has taken. So how many
    records it makes depends only on how many the consumer took, never on timing, and every
    rank's thread runs the same ticks, hence the same collectives, in the same order, as
    :class:`Pipeline` run inline does. A consumer that stops early (:meth:`close`, or leaving
    the ``for`` loop) waits for the thread to finish the record it was allowed; every rank that
    stopped at the same step finishes the same record, so its collectives complete.

    An exception on the thread is raised in the consumer, at the record it would have made.
    The seconds the consumer waits for a record add to ``pipeline.times[WAIT]``.

    Args:
        pipeline: the :class:`Pipeline` to run; its stages run only on the thread.
        device: where the batches go; a CUDA device is made the thread's current device (the
            stages' side stream and uploads are its).
    """

    LEAD = 1  # records the thread may make beyond the one the consumer works on

    def __init__(self, pipeline: Pipeline, device: torch.device):
        self.pipeline = pipeline
        self.device = torch.device(device)
        self._cond = threading.Condition()
        self._made: deque = deque()  # (record or None at the end, exception or None)
        self._allowed = self.LEAD  # records the thread may make by now: those taken, and LEAD more
        self._closed = False
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        records = iter(self.pipeline)
        made = 0
        while True:
            with self._cond:
                while made >= self._allowed and not self._closed:
                    self._cond.wait()
                if made >= self._allowed:  # closed, and every allowed record is made
                    return
            try:
                entry = (next(records, None), None)
            except BaseException as exc:  # noqa: BLE001 - raised again in the consumer
                entry = (None, exc)
            made += 1
            with self._cond:
                self._made.append(entry)
                self._cond.notify_all()
            if entry[0] is None:
                return

    def __iter__(self) -> Iterator[InFlight]:
        self._thread = threading.Thread(target=self._run, name="salientpp-fetch", daemon=True)
        self._thread.start()
        try:
            while True:
                start = time.perf_counter()
                with self._cond:
                    while not self._made:
                        self._cond.wait()
                    item, exc = self._made.popleft()
                    self._allowed += 1
                    self._cond.notify_all()
                self.pipeline.times[WAIT] += time.perf_counter() - start
                if exc is not None:
                    raise exc
                if item is None:
                    return
                yield item
        finally:
            self.close()

    def close(self) -> None:
        """Let the thread finish the records it may make, and wait for it (idempotent)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
