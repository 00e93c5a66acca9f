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
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from ..cache.accesses import loader_seed
from ..dist import (CommStats, DistContext, FeatureStore, RowExchange, init_distributed, launch,
                    shutdown_distributed)
from ..dist.group import env_is_distributed
from ..errors import InputError
from ..models import EmptyBlock, MFGModel
from ..partition import load_partitioned
from ..pipeline import InFlight, Pipeline, SampleStage, StageTimes, fetch_stages
from .cache_setup import resolve_cache
from .checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from .config import TrainConfig
from .layerwise import LayerwiseInference

# Loader workload index of sampled inference (training is 0), as in salientpp.cache.
EVAL_WORKLOAD = 1


@dataclass
class TrainResult:
    """What a run produced (as seen by rank 0).

    Attributes:
        history: one dict per epoch run in this call (the JSON lines).
        best_valid, best_epoch: best validation accuracy and its epoch (-1 when never evaluated).
        test_at_best: test accuracy at the best-validation epoch.
        final_test: test accuracy after the last epoch.
        epochs_done: total epochs completed, resumed ones included.
    """

    history: list[dict[str, Any]] = field(default_factory=list)
    best_valid: float = -1.0
    best_epoch: int = -1
    test_at_best: float = -1.0
    final_test: float = -1.0
    epochs_done: int = 0


class Trainer:
    """Everything one rank needs: its partition, feature store, exchange, samplers, model."""

    def __init__(self, config: TrainConfig, ctx: DistContext):
        from ..sampling import NeighborSampler

        self.config = config
        self.ctx = ctx
        data = load_partitioned(config.part_dir)
        if data.num_parts != ctx.world_size:
            raise InputError(f"{config.part_dir} has {data.num_parts} partitions but the job has {ctx.world_size} "
                             f"ranks; run one rank per partition (--nprocs {data.num_parts})")
        self.data = data
        self.part = data.part(ctx.rank)
        self.offset = int(data.book.offsets[ctx.rank])
        plan = resolve_cache(config, data, ctx.rank)
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

    def _loader(self, sampler, seeds: np.ndarray, batch_size: int, workload: int, epoch: int):
        from ..sampling import FetchContext, NeighborLoader

        loader = NeighborLoader(sampler, seeds=torch.from_numpy(np.asarray(seeds)), batch_size=batch_size,
                                shuffle=True, drop_last=False,
                                seed=loader_seed(self.config.seed, self.ctx.rank, workload=workload),
                                num_threads=self.config.num_threads, queue_depth=self.config.pipeline_depth,
                                labels=self.labels, labels_offset=self.offset,
                                fetch=FetchContext(**self.store.fetch_context_args()))
        loader.set_epoch(epoch)
        return loader

    def batches(self, epoch: int, training: bool, stats: CommStats,
                times: StageTimes) -> tuple[list[int], Iterator[InFlight]]:
        """The steps of one epoch (``training``) or of one evaluation pass over the validation and
        test nodes, through the pipeline: ``(batches of each rank, records with assembled features)``.

        The number of steps, ``max`` of the batches of each rank, is the same on every rank (a
        collective); records past this rank's last batch are empty steps (``batch is None``).
        """
        if training:
            loader = self._loader(self.sampler, self.part.train_idx, self.config.batch_size, 0, epoch)
        else:
            seeds = np.concatenate([np.asarray(self.part.valid_idx), np.asarray(self.part.test_idx)])
            loader = self._loader(self.eval_sampler, seeds, self.config.eval_batch_size, EVAL_WORKLOAD, epoch)
        mine = [0.0] * self.ctx.world_size
        mine[self.ctx.rank] = len(loader)
        per_rank = [int(n) for n in self._reduce(mine)]
        self.exchange.stats = stats
        pipeline = Pipeline(SampleStage(iter(loader), max(per_rank)), fetch_stages(self.exchange, self.store, stats),
                            self.config.pipeline_depth, times)

        def run() -> Iterator[InFlight]:
            try:
                yield from pipeline
            finally:
                loader.close()
        return per_rank, run()

    def _bar(self, total: int, desc: str):
        if self.ctx.rank != 0 or not self.config.progress:
            return None
        from tqdm import tqdm
        return tqdm(total=total, desc=desc, unit="batch", leave=False, dynamic_ncols=True)

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

    def train_epoch(self, epoch: int) -> dict[str, Any]:
        """Train one epoch; returns the rank-summed loss/accuracy, the exchange counters and
        the stage times of this rank."""
        torch.manual_seed(loader_seed(self.config.seed, self.ctx.rank, stream=7, workload=epoch))
        self.ddp.train()
        stats, times = CommStats(), StageTimes()
        start, cpu_start = time.perf_counter(), time.process_time()
        per_rank, pipeline = self.batches(epoch, True, stats, times)
        steps = max(per_rank)
        bar = self._bar(steps, f"epoch {epoch}")
        loss_sum = correct = count = 0.0
        for item in pipeline:
            t0, c0 = time.perf_counter(), time.thread_time()
            loss, out = self.backward_step(item, per_rank)
            if loss is not None:
                n = int(item.y.shape[0])
                loss_sum += float(loss) * n
                correct += int((out.argmax(-1) == item.y).sum())
                count += n
            self.optimizer.step()
            times["train"] += time.perf_counter() - t0
            # CPU seconds of this thread: what the model cost, whatever else shares the cores.
            times["train_cpu"] += time.thread_time() - c0
            if bar is not None:
                bar.update(1)
                elapsed = max(time.perf_counter() - start, 1e-9)
                bar.set_postfix(fetched_MBps=f"{stats.bytes_received / elapsed / 1e6:.1f}")
        if bar is not None:
            bar.close()
        epoch_s, cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
        loss_sum, correct, count, *comm = self._reduce([loss_sum, correct, count, *stats.to_tensor().tolist()])
        total = CommStats.from_tensor(torch.tensor(comm))
        return {"train_loss": loss_sum / max(count, 1), "train_acc": correct / max(count, 1), "steps": steps,
                "epoch_s": self._reduce([epoch_s], dist.ReduceOp.MAX)[0], "cpu_s": cpu_s,
                "stage_s": dict(times), "comm": total.as_dict()}

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
    def fit(self) -> TrainResult:
        config = self.config
        options = config.to_dict()
        result = TrainResult()
        history: list[dict[str, Any]] = []
        start_epoch = 0
        if config.resume:
            ckpt = load_checkpoint(config.checkpoint_dir, options)
            self.model.load_state_dict(ckpt.model)
            self.optimizer.load_state_dict(ckpt.optimizer)
            start_epoch = ckpt.epoch + 1
            history = list(ckpt.history)
            result.best_valid, result.best_epoch = ckpt.best_valid, ckpt.best_epoch
            result.test_at_best = next((h["test_acc"] for h in history if h["epoch"] == ckpt.best_epoch), -1.0)
        for epoch in range(start_epoch, config.epochs):
            metrics = {"epoch": epoch, **self.train_epoch(epoch)}
            if config.eval_every and ((epoch + 1) % config.eval_every == 0 or epoch == config.epochs - 1):
                metrics.update(self.evaluate(epoch))
            history.append(metrics)
            result.history.append(metrics)
            improved = metrics.get("valid_acc", -1.0) > result.best_valid
            if improved:
                result.best_valid, result.best_epoch = metrics["valid_acc"], epoch
                result.test_at_best = metrics["test_acc"]
            if "test_acc" in metrics:
                result.final_test = metrics["test_acc"]
            if self.ctx.rank == 0:
                self._report(metrics, history, result, improved, options)
        result.epochs_done = config.epochs
        if config.resume and not result.history and history:
            result.final_test = history[-1].get("test_acc", -1.0)
        return result

    def _report(self, metrics: dict[str, Any], history: list, result: TrainResult, improved: bool,
                options: dict) -> None:
        config = self.config
        if config.checkpoint_dir:
            ckpt = Checkpoint(epoch=metrics["epoch"], model=self.model.state_dict(),
                              optimizer=self.optimizer.state_dict(), best_valid=result.best_valid,
                              best_epoch=result.best_epoch, history=history, options=options)
            save_checkpoint(config.checkpoint_dir, ckpt, best=improved)
        if config.json_path:
            with open(config.json_path, "a") as f:
                f.write(json.dumps({**metrics, "cache": self.cache_info}) + "\n")
        if config.progress:
            line = (f"epoch {metrics['epoch']}: loss {metrics['train_loss']:.4f} train {metrics['train_acc']:.4f} "
                    f"{metrics['epoch_s']:.2f} s, fetched {metrics['comm']['received']} rows")
            if "valid_acc" in metrics:
                line += f", valid {metrics['valid_acc']:.4f} test {metrics['test_acc']:.4f}"
            print(line, flush=True)


def run_rank(config: TrainConfig) -> TrainResult:
    """The body of one rank: join the group, train, leave the group."""
    ctx = init_distributed(config.device, config.timeout_s)
    try:
        return Trainer(config, ctx).fit()
    finally:
        shutdown_distributed(ctx)


def train(config: TrainConfig) -> TrainResult:
    """Train as configured and return rank 0's :class:`TrainResult`.

    Under ``torchrun`` (``RANK``/``WORLD_SIZE`` set) this process is one rank. Otherwise it
    starts ``config.nprocs`` local ranks (default: one per partition), or trains in this
    process when there is one partition.
    """
    config.validate()
    if env_is_distributed():
        return run_rank(config)
    num_parts = load_partitioned(config.part_dir).num_parts
    nprocs = config.nprocs or num_parts
    if nprocs != num_parts:
        raise InputError(f"{config.part_dir} has {num_parts} partitions but --nprocs is {nprocs}; "
                         f"run one rank per partition (--nprocs {num_parts})")
    if nprocs == 1:
        return run_rank(config)
    return launch(run_rank, (config,), nprocs)[0]
