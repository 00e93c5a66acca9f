"""The distributed trainer: one rank per partition, DDP + Adam over pipelined, cached batches.

``train(config)`` starts the ranks (or joins ``torchrun``'s), each rank builds a
:class:`Trainer` and runs :meth:`Trainer.fit`. Per epoch every rank runs the same number of
steps (the largest number of batches of any rank; the others add empty steps), evaluates by
sampled inference through the same cache and exchange (or by layer-wise full-neighbour
inference), and rank 0 writes the checkpoint, the JSON line and the progress bar.

On a step where only ``r`` of the ``K`` ranks have a batch, the real ranks scale their loss by
``K / r``: DDP divides the summed gradient by ``K``, so the update is the mean over the ranks
with data, as on a full step, instead of shrinking by ``r / K``.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterator

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from .. import __version__
from ..cache.accesses import loader_seed
from ..cache.plan import partition_identity
from ..dist import (CommStats, DistContext, FeatureStore, RowExchange, WorkerError, init_distributed, launch,
                    shutdown_distributed)
from ..dist.faults import injector_from_env
from ..dist.group import RESTART_ENV, env_is_distributed
from ..dist.health import Health, agree
from ..errors import InputError
from ..io import output_errors
from ..models import EmptyBlock, MFGModel
from ..partition import load_partitioned
from ..pipeline import InFlight, Pipeline, SampleStage, StageTimes, fetch_stages
from ..resources import check_memory, estimate_train
from .cache_setup import resolve_cache
from .checkpoint import Checkpoint, has_checkpoint, load_checkpoint, save_checkpoint
from .config import TrainConfig
from .layerwise import LayerwiseInference

# Loader workload index of sampled inference (training is 0), as in salientpp.cache.
EVAL_WORKLOAD = 1
# Options every rank must share (the others, such as paths, threads and progress, may differ).
AGREED_OPTIONS = ("epochs", "model", "hidden", "layers", "fanouts", "batch_size", "lr", "dropout", "cache",
                  "replication", "gpu_fraction", "device", "pipeline_depth", "inference", "eval_fanouts",
                  "eval_batch_size", "eval_every", "checkpoint_every", "seed", "timeout_s")


@dataclass
class TrainResult:
    """What a run produced (as seen by rank 0).

    Attributes:
        history: one dict per epoch run in this call (the JSON lines).
        best_valid, best_epoch: best validation accuracy and its epoch (-1 when never evaluated).
        test_at_best: test accuracy at the best-validation epoch.
        final_test: test accuracy after the last epoch.
        epochs_done: total epochs completed, resumed ones included.
        resumed_from: ``(epoch, step)`` of the checkpoint this run continued from, or ``None``.
        restarts: how many times the local launcher restarted the ranks after a failure.
    """

    history: list[dict[str, Any]] = field(default_factory=list)
    best_valid: float = -1.0
    best_epoch: int = -1
    test_at_best: float = -1.0
    final_test: float = -1.0
    epochs_done: int = 0
    resumed_from: tuple[int, int] | None = None
    restarts: int = 0


@dataclass
class EpochSums:
    """One rank's running sums over the steps of an epoch done so far (checkpointed mid-epoch)."""

    loss: float = 0.0
    correct: float = 0.0
    count: float = 0.0
    seconds: float = 0.0
    comm: CommStats = field(default_factory=CommStats)

    def to_tensor(self) -> torch.Tensor:
        """float64 ``[4 + len(fields(CommStats))]``."""
        return torch.cat([torch.tensor([self.loss, self.correct, self.count, self.seconds], dtype=torch.float64),
                          self.comm.to_tensor()])

    @classmethod
    def from_tensor(cls, values: torch.Tensor) -> "EpochSums":
        loss, correct, count, seconds = values[:4].tolist()
        return cls(loss, correct, count, seconds, CommStats.from_tensor(values[4:]))


class Trainer:
    """Everything one rank needs: its partition, feature store, exchange, samplers, model."""

    def __init__(self, config: TrainConfig, ctx: DistContext, health: Health | None = None):
        from ..sampling import NeighborSampler

        self.config = config
        self.ctx = ctx
        self.health = Health(ctx) if health is None else health
        agree(ctx, "options and package versions",
              {"salientpp": __version__, "torch": torch.__version__, "ranks": ctx.world_size,
               **{key: value for key, value in config.to_dict().items() if key in AGREED_OPTIONS}})
        data = load_partitioned(config.part_dir)
        if data.num_parts != ctx.world_size:
            raise InputError(f"{config.part_dir} has {data.num_parts} partitions but the job has {ctx.world_size} "
                             f"ranks; run one rank per partition (--nprocs {data.num_parts})")
        self.dataset_id = partition_identity(data.meta)
        agree(ctx, "partitioned dataset", {"partitioned dataset": self.dataset_id})
        self.data = data
        self.part = data.part(ctx.rank)
        if self.part.train_idx.shape[0] == 0:
            raise InputError(f"partition {ctx.rank} of {config.part_dir} has no training nodes, so rank {ctx.rank} "
                             "would never train; re-partition with fewer parts or a balanced training split")
        self.offset = int(data.book.offsets[ctx.rank])
        plan = resolve_cache(config, data, ctx.rank)
        agree(ctx, "cache plan", {"cache plan": plan.identity})
        self.store = FeatureStore(ctx, data.book, self.part.x, plan.local_order, plan.num_device_local,
                                  plan.cache_slot, plan.num_device_slots)
        self.exchange = RowExchange(ctx, self.store.serve, self.store.num_features, self.store.dtype)
        self.store.fill_cache(self.exchange)
        rowptr, col = np.asarray(data.rowptr), np.asarray(data.col)
        self.sampler = NeighborSampler(rowptr, col, fanouts=list(config.fanouts))
        self.eval_sampler = NeighborSampler(rowptr, col, fanouts=list(config.eval_fanouts))
        self.labels = np.asarray(self.part.y)
        torch.manual_seed(config.seed)
        self.model = MFGModel(config.model, data.num_features, config.hidden, data.num_classes, config.layers,
                              config.dropout).to(ctx.device)
        self.ddp = DistributedDataParallel(self.model) if ctx.distributed else self.model
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr)
        self.empty_x = torch.empty((0, data.num_features), device=ctx.device)
        self.empty_mfgs = [EmptyBlock(edge_index=torch.empty((2, 0), dtype=torch.int64, device=ctx.device))
                           for _ in range(config.layers)]
        self.cache_info = {"policy": plan.policy, "source": plan.source, "cached_rows": self.store.num_cached,
                           "device_cached_rows": int(plan.num_device_slots)}
        self._layerwise: LayerwiseInference | None = None

    # -- collectives on the default group --------------------------------------------------------
    def _reduce(self, values: list[float], op=dist.ReduceOp.SUM) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64)
        if self.ctx.distributed:
            t = t.to(self.ctx.comm_device)
            dist.all_reduce(t, op=op)
        return t.cpu().tolist()

    def _loader(self, sampler, seeds: np.ndarray, batch_size: int, workload: int, epoch: int, first_step: int = 0):
        from ..sampling import FetchContext, NeighborLoader

        loader = NeighborLoader(sampler, seeds=torch.from_numpy(np.asarray(seeds)), batch_size=batch_size,
                                shuffle=True, drop_last=False,
                                seed=loader_seed(self.config.seed, self.ctx.rank, workload=workload),
                                num_threads=self.config.num_threads, queue_depth=self.config.pipeline_depth,
                                labels=self.labels, labels_offset=self.offset,
                                fetch=FetchContext(**self.store.fetch_context_args()))
        loader.load_state_dict({"epoch": epoch, "next_batch": min(first_step, len(loader))})
        return loader

    def batches(self, epoch: int, training: bool, stats: CommStats, times: StageTimes,
                first_step: int = 0) -> tuple[list[int], Iterator[InFlight]]:
        """The steps of one epoch (``training``) or of one evaluation pass over the validation and
        test nodes, through the pipeline: ``(batches of each rank, records with assembled features)``.

        The number of steps, ``max`` of the batches of each rank, is the same on every rank (a
        collective); records past this rank's last batch are empty steps (``batch is None``). A
        resumed epoch yields steps ``first_step ..`` only, the same as in an uninterrupted epoch.
        """
        if training:
            loader = self._loader(self.sampler, self.part.train_idx, self.config.batch_size, 0, epoch, first_step)
        else:
            seeds = np.concatenate([np.asarray(self.part.valid_idx), np.asarray(self.part.test_idx)])
            loader = self._loader(self.eval_sampler, seeds, self.config.eval_batch_size, EVAL_WORKLOAD, epoch)
        mine = [0.0] * self.ctx.world_size
        mine[self.ctx.rank] = len(loader)
        per_rank = [int(n) for n in self._reduce(mine)]
        self.exchange.stats = stats
        phase = "" if training else "eval:"
        pipeline = Pipeline(SampleStage(iter(loader), max(per_rank), first_step),
                            fetch_stages(self.exchange, self.store, stats), self.config.pipeline_depth, times,
                            on_stage=lambda name, step: self.health.enter(phase + name, epoch, step))

        def run() -> Iterator[InFlight]:
            try:
                yield from pipeline
            finally:
                loader.close()
        return per_rank, run()

    def _bar(self, total: int, desc: str, initial: int = 0):
        if self.ctx.rank != 0 or not self.config.progress:
            return None
        from tqdm import tqdm
        return tqdm(total=total, initial=initial, desc=desc, unit="batch", leave=False, dynamic_ncols=True)

    # -- one epoch ---------------------------------------------------------------------------------
    def backward_step(self, item: InFlight, per_rank: list[int]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Forward and backward of one step; DDP all-reduces the gradients (every rank calls it).

        ``per_rank`` are the batches of each rank this epoch. Returns the batch's loss and
        ``[batch_size, C]`` logits, both detached, or ``(None, None)`` on an empty step.
        """
        self.optimizer.zero_grad(set_to_none=True)
        if item.batch is None:
            (self.ddp(self.empty_x, self.empty_mfgs).sum() * 0.0).backward()
            return None, None
        out = self.ddp(item.x.float(), item.mfgs)
        loss = F.cross_entropy(out, item.y)
        ranks_with_data = sum(n > item.step for n in per_rank)
        (loss * (len(per_rank) / ranks_with_data)).backward()
        return loss.detach(), out.detach()

    def train_epoch(self, epoch: int, first_step: int = 0, sums: EpochSums | None = None,
                    state: "RunState | None" = None) -> dict[str, Any]:
        """Train one epoch (from ``first_step`` with the running ``sums`` of a resumed epoch);
        returns the rank-summed loss/accuracy, the exchange counters and the stage times of this
        rank. With ``state`` (the run's history and best values) it checkpoints mid-epoch as
        ``checkpoint_every`` asks."""
        if first_step == 0:  # a resumed epoch has its ranks' RNG states restored instead
            torch.manual_seed(loader_seed(self.config.seed, self.ctx.rank, stream=7, workload=epoch))
        self.ddp.train()
        sums = EpochSums() if sums is None else sums
        times = StageTimes()
        start, cpu_start = time.perf_counter(), time.process_time()
        per_rank, pipeline = self.batches(epoch, True, sums.comm, times, first_step)
        steps = max(per_rank)
        every, unit = self.config.checkpoint_interval
        bar = self._bar(steps, f"epoch {epoch}", first_step)
        for item in pipeline:
            self.health.enter("train", epoch, item.step)
            t0, c0 = time.perf_counter(), time.thread_time()
            loss, out = self.backward_step(item, per_rank)
            if loss is not None:
                n = int(item.y.shape[0])
                sums.loss += float(loss) * n
                sums.correct += int((out.argmax(-1) == item.y).sum())
                sums.count += n
            self.optimizer.step()
            times["train"] += time.perf_counter() - t0
            # CPU seconds of this thread: what the model cost, whatever else shares the cores.
            times["train_cpu"] += time.thread_time() - c0
            if bar is not None:
                bar.update(1)
                elapsed = max(time.perf_counter() - start, 1e-9)
                bar.set_postfix(fetched_MBps=f"{sums.comm.bytes_received / elapsed / 1e6:.1f}")
            done = item.step + 1
            if state is not None and unit == "steps" and done % every == 0 and done < steps:
                self.checkpoint(state, epoch, done, replace(sums, seconds=sums.seconds + time.perf_counter() - start))
        if bar is not None:
            bar.close()
        epoch_s = sums.seconds + time.perf_counter() - start
        cpu_s = time.process_time() - cpu_start
        loss_sum, correct, count, *comm = self._reduce([sums.loss, sums.correct, sums.count,
                                                        *sums.comm.to_tensor().tolist()])
        total = CommStats.from_tensor(torch.tensor(comm))
        return {"train_loss": loss_sum / max(count, 1), "train_acc": correct / max(count, 1), "steps": steps,
                "epoch_s": self._reduce([epoch_s], dist.ReduceOp.MAX)[0], "cpu_s": cpu_s,
                "stage_s": dict(times), "comm": total.as_dict()}

    # -- checkpoints -------------------------------------------------------------------------------
    def _gather(self, t: torch.Tensor) -> torch.Tensor:
        """``[K, *t.shape]``: ``t`` of every rank (a collective)."""
        if not self.ctx.distributed:
            return t.unsqueeze(0)
        parts = [torch.empty_like(t, device=self.ctx.comm_device) for _ in range(self.ctx.world_size)]
        dist.all_gather(parts, t.to(self.ctx.comm_device))
        return torch.stack(parts).cpu()

    def _rng_state(self) -> torch.Tensor:
        """uint8 ``[S]``: the CPU generator's state, then the CUDA one when training on a GPU."""
        states = [torch.get_rng_state()]
        if self.ctx.device.type == "cuda":
            states.append(torch.cuda.get_rng_state(self.ctx.device))
        return torch.cat(states)

    def _set_rng_state(self, state: torch.Tensor) -> None:
        cpu_size = torch.get_rng_state().numel()
        torch.set_rng_state(state[:cpu_size].clone())
        if self.ctx.device.type == "cuda":
            torch.cuda.set_rng_state(state[cpu_size:].clone(), self.ctx.device)

    def checkpoint(self, state: "RunState", epoch: int, step: int, sums: EpochSums | None = None,
                   best: bool = False) -> None:
        """Write a checkpoint to continue from ``step`` steps into ``epoch`` (a collective: rank 0
        writes, then every rank waits for it, so a checkpoint any rank has passed is on disk)."""
        if not self.config.checkpoint_dir:
            return
        self.health.enter("checkpoint", epoch, step)
        mid_epoch = step > 0
        rng = self._gather(self._rng_state()) if mid_epoch else torch.empty((0, 0), dtype=torch.uint8)
        partial = self._gather(sums.to_tensor()) if mid_epoch else torch.empty((0, 0), dtype=torch.float64)
        if self.ctx.rank == 0:
            save_checkpoint(self.config.checkpoint_dir,
                            Checkpoint(epoch, step, self.model.state_dict(), self.optimizer.state_dict(), rng,
                                       partial, state.result.best_valid, state.result.best_epoch, state.history,
                                       state.options), best=best)
        if self.ctx.distributed:
            dist.barrier()

    def layerwise_logits(self, local_ids: np.ndarray, stats: CommStats | None = None) -> torch.Tensor:
        """``[len(local_ids), C]`` full-neighbour outputs of the model for owned local ids (a
        collective: the halo is set up on the first call, then each layer exchanges rows)."""
        if self._layerwise is None:
            self._layerwise = LayerwiseInference(self.ctx, self.data, self.part.x, self.config.eval_batch_size)
        return self._layerwise(self.model, local_ids, CommStats() if stats is None else stats)

    def _predictions(self, epoch: int, stats: CommStats) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``(correct, local id)`` bool/int64 ``[n]`` pairs over this rank's validation and test nodes."""
        if self.config.inference == "layerwise":
            local = np.concatenate([np.asarray(self.part.valid_idx), np.asarray(self.part.test_idx)]) - self.offset
            pred = self.layerwise_logits(local, stats).argmax(-1)
            yield pred == torch.from_numpy(self.labels[local]), torch.from_numpy(local)
            return
        _, pipeline = self.batches(epoch, False, stats, StageTimes())
        for item in pipeline:
            if item.batch is not None:
                right = (self.model(item.x.float(), item.mfgs).argmax(-1) == item.y).cpu()
                yield right, item.batch.n_id[:item.batch.batch_size].cpu() - self.offset

    @torch.no_grad()
    def evaluate(self, epoch: int) -> dict[str, Any]:
        """Inference over this rank's validation and test nodes (one pass over both), sampled
        or layer-wise as configured; returns accuracies over all ranks, the exchange counters and
        this rank's seconds (``eval_s``)."""
        self.health.enter("eval", epoch)
        start = time.perf_counter()
        self.model.eval()
        is_valid = torch.zeros(self.part.y.shape[0], dtype=torch.bool)
        is_valid[torch.from_numpy(np.asarray(self.part.valid_idx) - self.offset)] = True
        stats = CommStats()
        hits = [0, 0, 0, 0]  # valid correct, valid total, test correct, test total
        for right, local in self._predictions(epoch, stats):
            in_valid = is_valid[local]
            hits[0] += int(right[in_valid].sum())
            hits[1] += int(in_valid.sum())
            hits[2] += int(right[~in_valid].sum())
            hits[3] += int((~in_valid).sum())
        vc, vt, tc, tt, *comm = self._reduce([*hits, *stats.to_tensor().tolist()])
        return {"valid_acc": vc / vt if vt else float("nan"), "test_acc": tc / tt if tt else float("nan"),
                "eval_comm": CommStats.from_tensor(torch.tensor(comm)).as_dict(), "eval_s": time.perf_counter() - start}

    # -- the run -------------------------------------------------------------------------------------
    def _resume(self, state: "RunState") -> tuple[int, int, EpochSums | None]:
        """Load ``last.pt`` into the model, optimizer, RNG and ``state``; returns where to continue."""
        config = self.config
        ckpt = load_checkpoint(config.checkpoint_dir, state.options)
        try:
            self.model.load_state_dict(ckpt.model)
            self.optimizer.load_state_dict(ckpt.optimizer)
        except (RuntimeError, ValueError, KeyError) as exc:
            raise InputError(f"the checkpoint in {config.checkpoint_dir} does not fit this model ({exc}); "
                             "resume with the options it was trained with or use a new --checkpoint-dir") from None
        state.history = list(ckpt.history)
        state.result.best_valid, state.result.best_epoch = ckpt.best_valid, ckpt.best_epoch
        state.result.test_at_best = next((h["test_acc"] for h in state.history if h["epoch"] == ckpt.best_epoch),
                                         -1.0)
        state.result.resumed_from = (ckpt.epoch, ckpt.step)
        if self.ctx.rank == 0 and config.json_path:  # the lines of the epochs the checkpoint holds, no more
            with output_errors(config.json_path), open(config.json_path, "w") as f:
                f.writelines(json.dumps(h) + "\n" for h in state.history)
        if ckpt.step == 0:
            return ckpt.epoch, 0, None
        if ckpt.rng.shape[0] != self.ctx.world_size:
            raise InputError(f"the checkpoint in {config.checkpoint_dir} was written mid-epoch by {ckpt.rng.shape[0]} "
                             f"ranks, not {self.ctx.world_size}; resume with as many ranks")
        self._set_rng_state(ckpt.rng[self.ctx.rank])
        return ckpt.epoch, ckpt.step, EpochSums.from_tensor(ckpt.partial[self.ctx.rank])

    def fit(self) -> TrainResult:
        config = self.config
        state = RunState(TrainResult(), [], {**config.to_dict(), "dataset": self.dataset_id})
        result = state.result
        start_epoch, start_step, sums = 0, 0, None
        if config.resume or (self.ctx.attempt > 0 and has_checkpoint(config.checkpoint_dir)):
            start_epoch, start_step, sums = self._resume(state)
        every, unit = config.checkpoint_interval
        for epoch in range(start_epoch, config.epochs):
            first = start_step if epoch == start_epoch else 0
            metrics = {"epoch": epoch, **self.train_epoch(epoch, first, sums if first else None, state)}
            if config.eval_every and ((epoch + 1) % config.eval_every == 0 or epoch == config.epochs - 1):
                metrics.update(self.evaluate(epoch))
            metrics["cache"] = self.cache_info
            state.history.append(metrics)
            result.history.append(metrics)
            improved = metrics.get("valid_acc", -1.0) > result.best_valid
            if improved:
                result.best_valid, result.best_epoch = metrics["valid_acc"], epoch
                result.test_at_best = metrics["test_acc"]
            if "test_acc" in metrics:
                result.final_test = metrics["test_acc"]
            if self.ctx.rank == 0:
                self.health.enter("report", epoch)
                self._report(metrics)
            if unit == "steps" or (epoch + 1) % every == 0 or epoch == config.epochs - 1 or improved:
                self.checkpoint(state, epoch + 1, 0, best=improved)
        result.epochs_done = config.epochs
        if not result.history and state.history:
            result.final_test = state.history[-1].get("test_acc", -1.0)
        return result

    def _report(self, metrics: dict[str, Any]) -> None:
        config = self.config
        if config.json_path:
            with output_errors(config.json_path), open(config.json_path, "a") as f:
                f.write(json.dumps(metrics) + "\n")
        if config.progress:
            line = (f"epoch {metrics['epoch']}: loss {metrics['train_loss']:.4f} train {metrics['train_acc']:.4f} "
                    f"{metrics['epoch_s']:.2f} s, fetched {metrics['comm']['received']} rows")
            if "valid_acc" in metrics:
                line += f", valid {metrics['valid_acc']:.4f} test {metrics['test_acc']:.4f}"
            print(line, flush=True)


@dataclass
class RunState:
    """What a checkpoint saves besides the model: the result so far, the history, the options."""

    result: TrainResult
    history: list[dict[str, Any]]
    options: dict[str, Any]


def run_rank(config: TrainConfig) -> TrainResult:
    """The body of one rank: join the group, train, leave the group.

    In a job of several ranks any failure other than bad input is raised as a
    :class:`~salientpp.dist.health.StageError` naming this rank, its stage and its peers' stages.
    """
    ctx = init_distributed(config.device, config.timeout_s)
    health = Health(ctx, injector_from_env(ctx.rank, ctx.attempt))
    try:
        health.enter("startup")
        result = Trainer(config, ctx, health).fit()
        result.restarts = ctx.attempt
        return result
    except InputError:
        raise
    except Exception as exc:
        if ctx.distributed:
            raise health.failure(exc) from exc
        raise
    finally:
        shutdown_distributed(ctx)


def check_train_memory(config: TrainConfig, data, local_ranks: int) -> None:
    """Refuse (InputError) when ``local_ranks`` ranks of this run would not fit in this machine's
    memory or ``config.memory_limit``; print the estimate on a run with progress output."""
    sampled_eval = config.eval_every > 0 and config.inference == "sampled"
    estimate = estimate_train(data, fanouts=config.fanouts, batch_size=config.batch_size, hidden=config.hidden,
                              layers=config.layers, replication=config.replication,
                              pipeline_depth=config.pipeline_depth, cache=config.cache, local_ranks=local_ranks,
                              model=config.model, eval_fanouts=config.eval_fanouts if sampled_eval else None,
                              eval_batch_size=config.eval_batch_size if sampled_eval else None)
    summary = check_memory(estimate, config.memory_limit)
    if config.progress:
        print(summary, flush=True)


def train(config: TrainConfig) -> TrainResult:
    """Train as configured and return rank 0's :class:`TrainResult`.

    Under ``torchrun`` (``RANK``/``WORLD_SIZE`` set) this process is one rank; torchrun's
    ``--max-restarts`` restarts it, and a restarted rank continues from the last checkpoint.
    Otherwise it starts ``config.nprocs`` local ranks (default: one per partition), or trains in
    this process when there is one partition and no restarts are asked for. When a rank fails,
    the local launcher stops every rank and, up to ``config.max_restarts`` times, starts them
    all again; they continue from the last checkpoint in ``config.checkpoint_dir``.
    """
    config.validate()
    if env_is_distributed():
        if int(os.environ.get("LOCAL_RANK", 0)) == 0:  # one check per machine, for its ranks
            check_train_memory(config, load_partitioned(config.part_dir, verify=False, check=False),
                               int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])))
        return run_rank(config)
    data = load_partitioned(config.part_dir, verify=False, check=False)  # the ranks verify and check it
    num_parts = data.num_parts
    nprocs = config.nprocs or num_parts
    if nprocs != num_parts:
        raise InputError(f"{config.part_dir} has {num_parts} partitions but --nprocs is {nprocs}; "
                         f"run one rank per partition (--nprocs {num_parts})")
    check_train_memory(config, data, nprocs)
    if nprocs == 1 and config.max_restarts == 0:
        return run_rank(config)
    attempt = 0
    while True:
        try:
            return launch(run_rank, (config,), nprocs, env={RESTART_ENV: str(attempt)})[0]
        except WorkerError as exc:
            if attempt == config.max_restarts:
                raise
            attempt += 1
            where = ("from the last checkpoint in " + config.checkpoint_dir if has_checkpoint(config.checkpoint_dir)
                     else "from the start (no checkpoint yet)")
            print(f"\nsalientpp: {exc}; restarting all {nprocs} ranks {where} "
                  f"(restart {attempt} of {config.max_restarts})", file=sys.stderr, flush=True)
