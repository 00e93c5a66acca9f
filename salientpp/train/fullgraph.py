"""Full-graph training (``salientpp train --mode full-graph``): one exact gradient step per epoch.

Each rank computes every layer over all neighbours for its training vertices, getting the
hidden rows of remote vertices as its dependency schedule says (:mod:`salientpp.fullgraph`). The
loss of rank k is the sum of its training vertices' losses over the training vertices of all
ranks, and the parameter gradients are summed over the ranks: together, the gradient of the
mean loss over the whole graph, as one process would compute it. The checkpoints, the JSON
lines, the report and the evaluation (exact, layer-wise) are the minibatch trainer's.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ..distributed.health import Stage
from ..errors import InputError
from ..fullgraph import CostModel, Dependencies, FullGraphEngine, calibrate, schedule_dependencies, predicted_epoch_s
from ..fullgraph.schedule import DependencySchedule, candidate_schedules
from ..models.gnn import build_model
from ..streams import dropout_seed
from .config import LAYERWISE
from .evaluation import Evaluator
from .loop import Trainer
from .setup import RankSetup, build_optimizer
from .state import TRAIN_CPU, TRAIN_LOSS, TRAIN_METRIC

# Keys of the "full_graph" entry of an epoch's record.
DEPENDENCIES, PLAN, PREDICTED_S, PROBED_S, REDUNDANT, CACHED_FRACTION, EXCHANGED_BYTES = (
    "dependencies", "schedule", "predicted_epoch_s", "probed_s", "redundant_vertex_layers", "cached_fraction",
    "exchanged_bytes")
FULL_GRAPH_KEY = "full_graph"
# Stage-time keys of a full-graph epoch.
FORWARD, BACKWARD, EXCHANGE = "forward", "backward", "exchange"


# hybrid times every candidate schedule predicted within this fraction of the fastest prediction:
# measured over predicted differed between two schedules on one graph by up to 1.3x with a rank
# per core on this project's machine (docs/full-graph.md, "The probe"), more than many schedules
# differ.
PROBE_BAND = 0.30
# ... and trains the fastest schedule it timed only if that is this much faster than the schedule
# predicted fastest: the probe does not tell closer schedules apart on this machine, and the goal
# tolerates 5% ("never more than 5% slower than the faster pure schedule").
PROBE_MARGIN = 0.05
# Timed passes per probed schedule, the faster counts: on this machine one epoch in four was more
# than 5% off the median of its schedule's epochs, and the slow tail is the longer (5% of epochs
# were 19% slower or more, 5% 11% faster or more: other processes' interference).
PROBE_PASSES = 2


def choose_schedule(names: list[str], probed: dict[str, float]) -> str:
    """The schedule ``hybrid`` trains: of ``names`` (:func:`shortlist`'s order), the fastest one the
    probe timed if it was :data:`PROBE_MARGIN` faster than the first, else the first."""
    if not probed:
        return names[0]
    fastest = min(probed, key=probed.__getitem__)
    return fastest if probed[fastest] < (1 - PROBE_MARGIN) * probed[names[0]] else names[0]


def shortlist(predictions: dict[str, float]) -> list[str]:
    """The schedules ``hybrid`` probes, fastest prediction first (a pure schedule first among equal
    predictions, so that it names a schedule equal to it): those predicted within
    :data:`PROBE_BAND` of the fastest (one name: no probe is needed)."""
    best = min(predictions.values())
    pure = (Dependencies.CACHE.value, Dependencies.COMMUNICATE.value)
    return sorted((name for name, s in predictions.items() if s <= (1 + PROBE_BAND) * best),
                  key=lambda name: (predictions[name], name not in pure))


def probe_times(probed: dict[str, float]) -> str:
    """The probe's seconds per schedule, as printed: ``"cache 0.0225 s, communicate 0.0257 s"``."""
    return ", ".join(f"{name} {seconds:.4f} s" for name, seconds in probed.items())


class FullGraphTrainer(Trainer):
    """The full-graph counterpart of :class:`~salientpp.train.loop.MinibatchTrainer` (the same
    :class:`~salientpp.train.loop.Trainer`: ``fit``, checkpoints, evaluation, reports).

    Building it is a collective: the ranks calibrate the cost model together (unless ``cost``
    is given: trainers compared side by side share one), schedule, and fetch their remote features.
    ``hybrid`` then times forward and backward passes of each schedule of :func:`shortlist` (a
    probe: the weights and the optimizer are left as they were) and trains the one
    :func:`choose_schedule` picks. Rank 0 prints the predicted epoch time of each candidate schedule and
    the probe's times. ``schedule`` names a candidate of
    :func:`~salientpp.fullgraph.schedule.candidate_schedules` to train instead of the one
    ``config.dependencies`` gives (``bench fullgraph --candidates``).

    Attributes:
        predictions: predicted seconds per epoch of every schedule of
            :func:`~salientpp.fullgraph.schedule.candidate_schedules`, by name.
        chosen: the name of the schedule trained with.
        probed: seconds of one forward and backward pass (the slowest rank's, the fastest of
            :data:`PROBE_PASSES`) of each schedule ``hybrid`` probed, by name; empty where it did not.
    """

    def __init__(self, setup: RankSetup, cost: CostModel | None = None, schedule: str | None = None):
        super().__init__(setup)
        config, ctx, graph = self.config, self.ctx, self.graph
        torch.manual_seed(config.seed)
        self.model = build_model(config.model, graph.num_features, config.hidden, self.task.num_outputs,
                                 config.layers, config.dropout).to(ctx.device)
        self.optimizer = build_optimizer(config, self.model.parameters())
        self.evaluator = Evaluator(graph, self.model, self.task, LAYERWISE, None, config.eval_batch_size,
                                   splits=self.eval_splits)
        self.train_ids = graph.split("train")
        # the loss targets of this rank's training vertices, in the order the engine outputs them
        self.train_targets = self.task.targets(graph.labels(torch.from_numpy(np.array(self.train_ids)))).to(ctx.device)
        total = torch.tensor([self.train_ids.shape[0]], dtype=torch.int64)
        if ctx.distributed:
            total = total.to(ctx.comm_device)
            dist.all_reduce(total)
        self.num_train = int(total.cpu()[0])
        dims = [graph.num_features] + [config.hidden] * (config.layers - 1) + [self.task.num_outputs]
        self.cost = calibrate(ctx, self.model, dims) if cost is None else cost
        # What hybrid chooses from (every candidate, so each mode's prediction is printed too).
        schedules = {name: schedule_dependencies(graph.rowptr, graph.col, graph.offset, graph.offset + graph.num_owned,
                                         self.train_ids, config.layers, modes, self.cost, dims)
                 for name, modes in candidate_schedules(config.layers).items()}
        self.predictions = {name: predicted_epoch_s(ctx, schedule, self.cost, dims) for name, schedule in schedules.items()}
        self.chosen, self.probed = config.dependencies, {}
        if schedule is not None:
            if schedule not in schedules:
                raise InputError(f"unknown schedule {schedule!r} for {config.layers} layers; choose one of {', '.join(schedules)}")
            self.chosen = schedule
        elif config.dependencies == Dependencies.HYBRID.value:
            names = self._distinct(shortlist(self.predictions), schedules)
            self.probed = self._probe({name: schedules[name] for name in names}) if len(names) > 1 else {}
            self.chosen = choose_schedule(names, self.probed)
        self.schedule = schedules[self.chosen]
        self.engine = FullGraphEngine(ctx, graph, self.schedule)
        self.cache_info = {"policy": "none", "plan": None, "source": setup.run.cache.reason, "cached_rows": 0,
                           "device_cached_rows": 0, "device_local_rows": 0}
        self._redundant = self._sum(self.schedule.redundant_vertex_layers)
        self._remote = self._sum(self.schedule.redundant_vertex_layers + self.schedule.exchanged_rows)
        if ctx.rank == 0 and config.progress:
            print(self.describe(), flush=True)

    def _distinct(self, names: list[str], schedules: dict[str, DependencySchedule]) -> list[str]:
        """``names`` without the schedules that are, on every rank, an earlier one's (a collective):
        the per-vertex schedule that caches nothing is ``communicate``."""
        repeats = torch.tensor([any(schedules[name].same_sets(schedules[earlier]) for earlier in names[:i])
                                for i, name in enumerate(names)], dtype=torch.int64)
        if self.ctx.distributed:
            repeats = repeats.to(self.ctx.comm_device)
            dist.all_reduce(repeats, op=dist.ReduceOp.MIN)
        return [name for name, repeat in zip(names, repeats.cpu().tolist()) if not repeat]

    def _probe(self, schedules: dict[str, DependencySchedule]) -> dict[str, float]:
        """Seconds of one forward and backward pass of each schedule: the slowest rank's, the fastest
        of :data:`PROBE_PASSES` (a collective). An untimed pass of the first schedule warms up; each
        schedule's engine is built, timed and dropped in turn. The gradients are discarded: training
        starts as without the probe."""
        self.model.train()
        seconds = {}
        for i, (name, schedule) in enumerate(schedules.items()):
            engine = FullGraphEngine(self.ctx, self.graph, schedule)
            times = []
            for _ in range(PROBE_PASSES + (i == 0)):
                start = time.perf_counter()
                self._loss(engine.forward(self.model, dropout_seed(self.config.seed, 0))).backward()
                self.model.zero_grad(set_to_none=True)
                times.append(self._reduce(time.perf_counter() - start))
            seconds[name] = min(times[-PROBE_PASSES:])
        return seconds

    def _loss(self, out: torch.Tensor) -> torch.Tensor:
        """This rank's share of the mean loss over every rank's training vertices, from ``out``
        (``[n_k, out_dim]``, the engine's outputs); a zero that keeps the graph where n_k = 0."""
        local = out.shape[0]
        return self.task.loss(out, self.train_targets) * (local / self.num_train) if local else out.sum() * 0.0

    def describe(self) -> str:
        """One line: the mode, the schedule it chose, every candidate's predicted epoch time and the
        probe's measured passes."""
        predicted = ", ".join(f"{mode} {seconds:.3f} s" for mode, seconds in self.predictions.items())
        schedule = "" if self.chosen == self.config.dependencies else f" (schedule: {self.chosen})"
        if self.probed:
            predicted += "; probed " + probe_times(self.probed)
        return (f"full-graph training, dependencies {self.config.dependencies}{schedule}: predicted epoch {predicted}; "
                f"{self._redundant:,.0f} remote vertex-layers recomputed ({self.cached_fraction:.0%} of the remote hidden rows), "
                f"{self.engine.startup.received:,} remote feature rows fetched at start-up")

    def _epoch_time_note(self, metrics: dict[str, Any]) -> str:
        """The schedule's predicted epoch time, beside the measured one."""
        return f" (predicted {metrics[FULL_GRAPH_KEY][PREDICTED_S]:.2f} s)"

    @property
    def cached_fraction(self) -> float:
        """The share of remote hidden rows (vertex-levels) the ranks recompute rather than exchange."""
        return self._redundant / self._remote if self._remote else 0.0

    def _sum(self, value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64)
        if self.ctx.distributed:
            t = t.to(self.ctx.comm_device)
            dist.all_reduce(t)
        return float(t.cpu()[0])

    def _reduce_gradients(self) -> None:
        """Sum every parameter's gradient over the ranks (one flat all-reduce)."""
        if not self.ctx.distributed:
            return
        params = [p for p in self.model.parameters() if p.grad is not None]
        flat = torch.cat([p.grad.reshape(-1) for p in params]).to(self.ctx.comm_device)
        dist.all_reduce(flat)
        flat = flat.to(self.ctx.device)
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()

    def train_epoch(self, epoch: int, first_step: int = 0, sums=None, state=None) -> dict[str, Any]:
        """One full-graph gradient step; the record of a minibatch epoch (one step) plus
        :data:`FULL_GRAPH_KEY`: the dependency mode, the schedule, the predicted epoch time, the
        probe's seconds per schedule (:attr:`probed`), the remote vertex-layers recomputed and the
        bytes exchanged per epoch (all ranks)."""
        self.health.enter(Stage.TRAIN, epoch, 0)
        self._epoch, self._evaluating = epoch, False
        self.model.train()
        self.engine.reset_stats()
        start, cpu_start = time.perf_counter(), time.process_time()
        out = self.engine.forward(self.model, dropout_seed(self.config.seed, epoch))
        forward_s = time.perf_counter() - start
        local = out.shape[0]
        loss = self._loss(out)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self._reduce_gradients()
        self.optimizer.step()
        train_s = time.perf_counter() - start
        values = torch.zeros(1 + self.task.num_sums, dtype=torch.float64)
        values[0] = float(loss.detach())
        if self.task.num_sums and local:
            values[1:] = self.task.metric_sums(out.detach(), self.train_targets).cpu()
        if self.ctx.distributed:
            values = values.to(self.ctx.comm_device)
            dist.all_reduce(values)
        values = values.cpu()
        self._stop_if_diverged(float(values[0]), epoch, 0)
        exchange_s = self.engine.exchange_seconds
        comm = self.engine.stats.summed(self.ctx)
        record = {TRAIN_LOSS: float(values[0]), "steps": 1, "epoch_s": self._reduce(time.perf_counter() - start),
                  "cpu_s": time.process_time() - cpu_start,
                  "stage_s": {FORWARD: forward_s, BACKWARD: train_s - forward_s, EXCHANGE: exchange_s,
                              Stage.TRAIN.value: train_s, TRAIN_CPU: time.process_time() - cpu_start},
                  "comm": comm.as_dict(),
                  FULL_GRAPH_KEY: {DEPENDENCIES: self.config.dependencies, PLAN: self.chosen,
                                   PREDICTED_S: self.predictions[self.chosen], PROBED_S: self.probed,
                                   REDUNDANT: self._redundant,
                                   CACHED_FRACTION: self.cached_fraction,
                                   EXCHANGED_BYTES: comm.bytes_received}}
        if self.task.num_sums:
            record[TRAIN_METRIC] = self.task.metric_from_sums(values[1:])
        return record

