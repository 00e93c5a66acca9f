"""The trainers: :class:`Trainer`, what both share (the epoch loop, checkpoints, evaluation and
reports), and :class:`MinibatchTrainer`, the built-in minibatch trainer, one client of the
public API (DistGraph + DistNeighborLoader).

Each rank opens its :class:`~salientpp.train.setup.RankSetup` (its
:class:`~salientpp.loader.graph.DistGraph`, task and options, agreed with the other ranks),
iterates a :class:`~salientpp.loader.dist_loader.DistNeighborLoader` over its training nodes (every
rank the same number of batches, so DDP's gradient mean needs no correction), evaluates through
:class:`~salientpp.train.evaluation.Evaluator`, and rank 0 writes checkpoints, JSON lines and
the progress bar. The full-graph trainer (:mod:`salientpp.train.fullgraph`) shares all but the
epoch itself.
"""
from __future__ import annotations

import math
import secrets
import time
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..distributed import CommStats
from ..distributed.health import Stage
from ..embedding import DistEmbedding
from ..embedding.table import load_shard, remove_stale_shards, save_shard
from ..errors import InputError, shown
from ..io import output_errors, strict_json
from ..loader.dist_link_loader import DistLinkNeighborLoader
from ..loader.dist_loader import DistNeighborLoader
from ..models.gnn import ExpectedOutputs, SeedForward, build_model
from ..sampling.link import LINK, NegativeSampling
from ..streams import dropout_seed
from .checkpoint import (PARTITION_ID, Checkpoint, describe_position, has_checkpoint, non_finite_weight,
                         running_sums, save_checkpoint, weights_misfit)
from .config import BF16
from .evaluation import Evaluator
from .link import LinkEvaluator, LinkModel, build_decoder
from .setup import (RankSetup, apply_optimizer_options, build_optimizer, embedded_types, encoder_dims,
                    resume_checkpoint)
from .state import (EMBEDDING_COMM, EPOCH, EVAL_SPLITS, METRIC, TEST_METRIC, TRAIN_CPU, TRAIN_LOSS,
                    TRAIN_METRIC, VALID_MAJORITY, VALID_METRIC, EpochSums, RunState, TrainResult, rng_state,
                    set_rng_state)


def _fold(running: torch.Tensor, sums: EpochSums) -> None:
    """Add the device-side running loss and metric sums (``[1 + Task.num_sums]``) to ``sums`` and zero them."""
    values = running.tolist()  # a copy (on the CPU, .cpu() would alias what zero_ clears)
    running.zero_()
    sums.loss += values[0]
    sums.metric += torch.tensor(values[1:], dtype=torch.float64)


class Trainer:
    """What both trainers share: the rank's set-up, the epoch loop (:meth:`fit`), checkpoints,
    evaluation and the report of each epoch. A subclass builds its model, optimizer and
    evaluator after ``super().__init__(setup)`` (setting :attr:`model`, :attr:`optimizer`,
    :attr:`evaluator`, :attr:`cache_info` and, with one, :attr:`embedding`) and implements
    :meth:`train_epoch`.

    Attributes:
        setup: the :class:`~salientpp.train.setup.RankSetup` it starts from; config, ctx,
            health, threads, graph and task are its own.
    """

    def __init__(self, setup: RankSetup):
        self.setup = setup
        self.config, self.ctx, self.health, self.threads = setup.config, setup.ctx, setup.health, setup.threads
        self.graph, self.task = setup.graph, setup.task
        self.embedding = None
        self._best_embedding = ""  # the embedding shards of best.pt
        self._epoch, self._evaluating = -1, False  # where the stages of the loaders run, for health reports
        self._checkpointed: tuple[int, int] | None = None  # (epoch, step) of the last checkpoint written or resumed
        self.run_id = ""  # the run's identity in its checkpoints and embedding shards (Checkpoint.run_id)
        self.eval_splits = self._nonempty_eval_splits()
        self._noted_majority = False

    def _nonempty_eval_splits(self) -> tuple[str, ...]:
        """The evaluation splits (``"valid"``, ``"test"``) with a node (or, for link prediction,
        an edge) on some rank; rank 0 says which are empty and so not evaluated."""
        link = self.config.task == LINK
        splits = tuple(s for s in EVAL_SPLITS if self.graph.data.split_size(s, edges=link) > 0)
        empty = [s for s in EVAL_SPLITS if s not in splits]
        if empty and self.config.eval_every and self.ctx.rank == 0:
            names = [{"valid": "validation"}.get(s, s) for s in empty]
            print(f"salientpp: there are no {' or '.join(names)} {'edges' if link else 'nodes'} in "
                  f"{self.config.part_dir}, so {'neither split is' if len(empty) > 1 else 'that split is not'} "
                  "evaluated", flush=True)
        return splits

    def _on_stage(self, stage: Stage, step: int) -> None:
        """Report a loader's pipeline stage to the health reports (of an evaluation pass when evaluating)."""
        self.health.enter(stage, self._epoch, step, evaluation=self._evaluating)

    def train_epoch(self, epoch: int, first_step: int = 0, sums: EpochSums | None = None,
                    state: RunState | None = None) -> dict[str, Any]:
        """Train one epoch and return its record (see :meth:`MinibatchTrainer.train_epoch`)."""
        raise NotImplementedError

    def _reduce(self, value: float | torch.Tensor, op: dist.ReduceOp = dist.ReduceOp.MAX) -> float:
        """``value`` (a number, or a one-element tensor on any device) reduced over the ranks with ``op``."""
        t = torch.as_tensor(value, dtype=torch.float64).reshape(1)
        if self.ctx.distributed:
            t = t.to(self.ctx.comm_device)
            dist.all_reduce(t, op=op)
        return float(t.cpu()[0])

    def _stop_if_diverged(self, loss_sum: float, epoch: int, first_bad_step: float | torch.Tensor) -> None:
        """Stop the run on every rank at once when the training loss was not finite.

        ``loss_sum`` must be the same on every rank (reduced over them), so every rank takes the
        same branch; ``first_bad_step`` is this rank's first step of ``epoch`` with a loss that is
        not finite (``inf`` if none). Raises :class:`InputError` naming the first such step of
        any rank, the likely causes, and the last checkpoint, which holds finite weights: no
        checkpoint is written after a loss that is not finite.
        """
        if math.isfinite(loss_sum):
            return
        step = self._reduce(first_bad_step, dist.ReduceOp.MIN)
        where = f"epoch {epoch}, step {int(step)}" if math.isfinite(step) else f"epoch {epoch}"
        kept = ""
        if self.config.checkpoint_dir:
            kept = (f"; {self.config.checkpoint_dir} keeps the last checkpoint, {describe_position(*self._checkpointed)}"
                    if self._checkpointed else "; no checkpoint was written before it")
        raise InputError(f"the training loss was not finite ({loss_sum}) at {where}, so training stopped: lower the "
                         f"learning rate (--lr {self.config.lr:g}), or look for NaN or huge values in the input "
                         f"features or the model's outputs{kept}")

    def _stop_if_weights_diverged(self, epoch: int, step: int) -> None:
        """Stop the run before it writes a checkpoint of weights that are not finite: an update can
        make them so after a finite loss (an infinite weight decay). Every rank holds the same
        weights, so every rank stops here at once; the last checkpoint stays as it was."""
        bad = non_finite_weight(self.model.state_dict())
        if not bad:
            return
        kept = (f"{self.config.checkpoint_dir} keeps the last checkpoint, {describe_position(*self._checkpointed)}"
                if self._checkpointed else "no checkpoint was written")
        raise InputError(f"the model's weights are not finite ({shown(bad)}) at {describe_position(epoch, step)}, so "
                         f"training stopped before writing them: lower the learning rate (--lr {self.config.lr:g}) or "
                         f"the weight decay (--weight-decay {self.config.weight_decay:g}); {kept}")

    # -- checkpoints -------------------------------------------------------------------------------
    def _gather(self, t: torch.Tensor) -> torch.Tensor:
        """``[K, *t.shape]``: ``t`` of every rank (a collective)."""
        if not self.ctx.distributed:
            return t.unsqueeze(0)
        parts = [torch.empty_like(t, device=self.ctx.comm_device) for _ in range(self.ctx.world_size)]
        dist.all_gather(parts, t.to(self.ctx.comm_device))
        return torch.stack(parts).cpu()

    def checkpoint(self, state: RunState, epoch: int, step: int, sums: EpochSums | None = None,
                   best: bool = False) -> None:
        """Write a checkpoint to continue from ``step`` steps into ``epoch`` (a collective: rank 0
        writes, then every rank waits for it, so a checkpoint any rank has passed is on disk)."""
        if not self.config.checkpoint_dir:
            return
        self.health.enter(Stage.CHECKPOINT, epoch, step)
        self._stop_if_weights_diverged(epoch, step)
        mid_epoch = step > 0
        rng = self._gather(rng_state(self.ctx.device)) if mid_epoch else torch.empty((0, 0), dtype=torch.uint8)
        partial = self._gather(sums.to_tensor()) if mid_epoch else torch.empty((0, 0), dtype=torch.float64)
        tag = ""
        if self.embedding is not None:  # every rank writes its shard before rank 0 writes last.pt
            tag = f"e{epoch}s{step}"
            save_shard(self.config.checkpoint_dir, tag, self.embedding, self.run_id)
            if best:
                self._best_embedding = tag
            if self.ctx.distributed:
                dist.barrier()
        if self.ctx.rank == 0:
            save_checkpoint(self.config.checkpoint_dir,
                            Checkpoint(epoch, step, self.model.state_dict(), self.optimizer.state_dict(), rng,
                                       partial, state.result.best_valid, state.result.best_epoch, state.history,
                                       state.options, tag, self._best_embedding, self.run_id,
                                       self.task.num_sums), best=best)
        if self.ctx.distributed:
            dist.barrier()
        self._checkpointed = (epoch, step)
        if self.embedding is not None:  # shards neither last.pt nor best.pt points to
            remove_stale_shards(self.config.checkpoint_dir, {tag, self._best_embedding}, self.ctx.rank)

    def _new_run_id(self) -> str:
        """The identity of a run that starts afresh: 16 random hex digits, rank 0's on every rank
        (a collective). Drawn from the system, so the training's RNG streams are untouched."""
        drawn = torch.tensor([secrets.randbits(63)], dtype=torch.int64)
        return f"{int(self._gather(drawn)[0, 0]):016x}"

    def _check_rng_states(self, rng: torch.Tensor) -> None:
        """Refuse (:class:`InputError`) a mid-epoch checkpoint's RNG states (uint8 ``[K, S]``) that
        this job cannot restore: another number of ranks, or states of another size than this
        rank's generators (:func:`~salientpp.train.state.rng_state`: a GPU adds its own)."""
        directory = self.config.checkpoint_dir
        if rng.shape[0] != self.ctx.world_size:
            raise InputError(f"the checkpoint in {directory} was written mid-epoch by {rng.shape[0]} ranks, not "
                             f"{self.ctx.world_size}; resume with as many ranks")
        size = rng_state(self.ctx.device).numel()
        if rng.shape[1] != size:
            raise InputError(f"the checkpoint in {directory} was written mid-epoch with RNG states of {rng.shape[1]} "
                             f"bytes, but a rank training on {self.ctx.device.type} keeps {size}; resume on the kind "
                             "of device that wrote it, or from a checkpoint at an epoch's end")

    def _resume(self, state: RunState) -> tuple[int, int, EpochSums | None]:
        """Load ``last.pt`` into the model, optimizer, RNG and ``state``; returns where to continue."""
        config = self.config
        ckpt = resume_checkpoint(config, self.graph.partition_id, self.graph.data.schema)
        sums = None
        if ckpt.step > 0:  # refused before anything is loaded or rewritten
            self._check_rng_states(ckpt.rng)
            sums = running_sums(ckpt, self.ctx.rank, self.task.num_sums, self.task.metric, config.checkpoint_dir)
        misfit = weights_misfit(self.model.state_dict(), ckpt.model)
        if misfit:
            raise InputError(f"the checkpoint in {config.checkpoint_dir} does not fit this model ({misfit}); "
                             "resume with the options it was trained with or use a new --checkpoint-dir")
        try:
            self.model.load_state_dict(ckpt.model)
            self.optimizer.load_state_dict(ckpt.optimizer)
            apply_optimizer_options(self.optimizer, config)  # the run's --lr, not the checkpoint's
        except (RuntimeError, ValueError, KeyError) as exc:
            raise InputError(f"the checkpoint in {config.checkpoint_dir} does not fit this model ({exc}); "
                             "resume with the options it was trained with or use a new --checkpoint-dir") from None
        self.run_id = ckpt.run_id
        if self.embedding is not None:
            load_shard(config.checkpoint_dir, ckpt.embedding, self.embedding, ckpt.run_id,
                       "resume from a checkpoint whose embedding shards, written by its run on as many ranks, lie "
                       "whole beside it, or use a new --checkpoint-dir")
            self._best_embedding = ckpt.best_embedding
        state.history = list(ckpt.history)
        state.result.best_valid, state.result.best_epoch = ckpt.best_valid, ckpt.best_epoch
        state.result.test_at_best = next((h[TEST_METRIC] for h in state.history if h[EPOCH] == ckpt.best_epoch),
                                         -1.0)
        state.result.resumed_from = self._checkpointed = (ckpt.epoch, ckpt.step)
        if self.ctx.rank == 0 and config.json_path:  # the lines of the epochs the checkpoint holds, no more
            with output_errors(config.json_path), open(config.json_path, "w") as f:
                f.writelines(strict_json(h) + "\n" for h in state.history)
        if ckpt.step == 0:
            return ckpt.epoch, 0, None
        set_rng_state(ckpt.rng[self.ctx.rank], self.ctx.device)
        return ckpt.epoch, ckpt.step, sums

    # -- the run -------------------------------------------------------------------------------------
    def finish(self) -> None:
        """After the last epoch: stop what runs ahead of the loop (nothing here)."""

    def evaluate(self, epoch: int) -> dict[str, Any]:
        if not self.eval_splits:
            return {}
        self.health.enter(Stage.EVAL, epoch)
        self._epoch, self._evaluating = epoch, True
        return self.evaluator(epoch)

    def fit(self) -> TrainResult:
        config = self.config
        state = RunState(TrainResult(metric=self.task.metric), [],
                         {**config.to_dict(), PARTITION_ID: self.graph.partition_id})
        result = state.result
        start_epoch, start_step, sums = 0, 0, None
        if config.resume or (self.ctx.attempt > 0 and has_checkpoint(config.checkpoint_dir)):
            start_epoch, start_step, sums = self._resume(state)
        elif config.checkpoint_dir:
            self.run_id = self._new_run_id()
        every, unit = config.checkpoint_interval
        for epoch in range(start_epoch, config.epochs):
            first = start_step if epoch == start_epoch else 0
            metrics = {EPOCH: epoch, METRIC: self.task.metric,
                       **self.train_epoch(epoch, first, sums if first else None, state)}
            if config.eval_every and ((epoch + 1) % config.eval_every == 0 or epoch == config.epochs - 1):
                metrics.update(self.evaluate(epoch))
            metrics["cache"] = self.cache_info
            state.history.append(metrics)
            result.history.append(metrics)
            valid = metrics.get(VALID_METRIC, float("nan"))
            improved = bool(valid > result.best_valid)  # NaN (no validation nodes) never improves
            if improved:
                result.best_valid, result.best_epoch = valid, epoch
                result.test_at_best = metrics.get(TEST_METRIC, -1.0)
            if TEST_METRIC in metrics:
                result.final_test = metrics[TEST_METRIC]
            if self.ctx.rank == 0:
                self.health.enter(Stage.REPORT, epoch)
                self._report(metrics)
                self._note_majority(metrics)
            if unit == "steps" or (epoch + 1) % every == 0 or epoch == config.epochs - 1 or improved:
                self.checkpoint(state, epoch + 1, 0, best=improved)
        result.epochs_done = config.epochs
        self.finish()
        if not result.history and state.history:
            result.final_test = state.history[-1].get(TEST_METRIC, -1.0)
        return result

    def _note_majority(self, metrics: dict[str, Any]) -> None:
        """Say once when the validation accuracy is the share of the most common class: the model
        may predict that class for every node, which accuracy on imbalanced classes hides."""
        majority = metrics.get(VALID_MAJORITY)
        if self._noted_majority or majority is None or not math.isclose(metrics[VALID_METRIC], majority, abs_tol=1e-9):
            return
        self._noted_majority = True
        hint = ("; --metric roc-auc scores how the model ranks the two classes instead" if self.task.num_outputs == 2
                else "")
        print(f"note: the validation accuracy {majority:.4f} of epoch {metrics[EPOCH]} is the share of the most "
              f"common class, as if the model predicted that class for every node{hint}", flush=True)

    def _epoch_time_note(self, metrics: dict[str, Any]) -> str:
        """What the progress line adds after the epoch's seconds (nothing here)."""
        return ""

    def _report(self, metrics: dict[str, Any]) -> None:
        config = self.config
        if config.json_path:
            with output_errors(config.json_path), open(config.json_path, "a") as f:
                f.write(strict_json(metrics) + "\n")
        if config.progress:
            name = metrics[METRIC]
            line = f"epoch {metrics[EPOCH]}: loss {metrics[TRAIN_LOSS]:.4f}"
            if TRAIN_METRIC in metrics:
                line += f" train {name} {metrics[TRAIN_METRIC]:.4f}"
            line += f" {metrics['epoch_s']:.2f} s{self._epoch_time_note(metrics)}"
            line += f", fetched {metrics['comm']['received']} rows"
            if EMBEDDING_COMM in metrics:
                line += f" and {metrics[EMBEDDING_COMM]['received']} embedding rows"
            scores = [f"{split} {metrics[key]:.4f}" for key, split in ((VALID_METRIC, "valid"), (TEST_METRIC, "test"))
                      if key in metrics]
            if scores:
                line += ", " + " ".join(scores)
            print(line, flush=True)


class MinibatchTrainer(Trainer):
    """The minibatch trainer: its loaders, model, optimizer and evaluator on one rank.

    The loaders take their sampler threads and priority from the rank's thread budget
    (``ctx.threads``, the run's) and keep the run's resolved pipeline depth and fetch thread.
    """

    def __init__(self, setup: RankSetup):
        super().__init__(setup)
        config, ctx, graph = self.config, self.ctx, self.graph
        link = config.task == LINK
        cache = setup.open_cache()
        several = graph.data.is_typed  # several node types or relations: the model's input and DDP decide by it
        if config.embedding_dim:
            self.embedding = DistEmbedding(graph, config.embedding_dim, optimizer=config.embedding_optimizer,
                                           lr=config.embedding_lr, seed=config.seed, node_types=embedded_types(graph.data, config.features))
        if ctx.rank == 0 and cache.plan is not None:
            print(f"cache plan: {cache.source}", flush=True)
        # the sampler threads and their priority come from the rank's thread budget (ctx.threads)
        common = dict(plan=cache.plan, seed=config.seed, pipeline_depth=config.pipeline_depth,
                      fetch_thread=config.fetch_thread,
                      device_fraction=config.device_fraction, features=config.features, on_stage=self._on_stage)
        train_options = dict(sampler=config.sampler, minibatches_per_bulk=config.minibatches_per_bulk,
                             sampling_device=config.sampling_device, prefetch_next_epoch=True, **common)
        if link:
            self.loader = DistLinkNeighborLoader(graph, "train", config.fanouts, config.batch_size,
                                                 config.num_negatives, config.negative_sampling, **train_options)
        else:
            self.loader = DistNeighborLoader(graph, "train", config.fanouts, config.batch_size, **train_options)
        torch.manual_seed(config.seed)
        encoder = build_model(config.model, *encoder_dims(config, graph.data, self.task),
                              config.layers, config.dropout, inputs=setup.run.inputs, structure=config.structure)
        self.model = (LinkModel(encoder, build_decoder(config.decoder, config.hidden)) if link else encoder).to(ctx.device)
        # a typed model's weights of a relation or node type that a batch does not reach get no gradient
        self.ddp = (DistributedDataParallel(encoder, find_unused_parameters=several) if ctx.distributed
                    else encoder)
        expected = (ExpectedOutputs(config.hidden, f"a {config.hidden}-wide embedding per node (--hidden) for the "
                                    f"{config.decoder} decoder", config.model) if link else
                    ExpectedOutputs(self.task.num_outputs, self.task.outputs_meaning, config.model))
        self.forward = SeedForward.of(self.ddp, self.embedding, config.features, expected, several)
        self.decoder = None
        if link:  # the decoder, under DDP of its own when it has parameters
            decoder = self.model.decoder
            has_parameters = len(list(decoder.parameters())) > 0
            self.decoder = DistributedDataParallel(decoder) if ctx.distributed and has_parameters else decoder
        self.optimizer = build_optimizer(config, self.model.parameters())
        eval_forward = SeedForward.of(encoder, self.embedding, config.features, expected, several)
        if link:
            self.evaluator = LinkEvaluator(
                graph, eval_forward, self.model.decoder,
                lambda split: DistLinkNeighborLoader(graph, split, config.eval_fanouts, config.eval_batch_size,
                                                     config.eval_negatives, NegativeSampling.PER_SOURCE,
                                                     exclude_edges=True, shuffle=False, **common), self.task.metric, self.eval_splits)
        else:
            self.evaluator = Evaluator(graph, self.model, self.task, config.inference,
                                       lambda seeds: DistNeighborLoader(graph, seeds, config.eval_fanouts,
                                                                        config.eval_batch_size, **common),
                                       config.eval_batch_size, eval_forward, self.eval_splits)
        store = self.loader.store
        self.cache_info = {"policy": cache.policy, "plan": None if cache.path is None else str(cache.path),
                           "source": cache.source, "cached_rows": 0 if store is None else store.num_cached,
                           "device_cached_rows": 0 if store is None else int(store.num_device_slots),
                           "device_local_rows": 0 if store is None else store.num_device_owned}

    def finish(self) -> None:
        """After the last epoch: stop the training loader's sampling of an epoch that will not run."""
        self.loader.close()

    # -- one epoch ---------------------------------------------------------------------------------
    def _bar(self, total: int, desc: str, initial: int = 0):
        if self.ctx.rank != 0 or not self.config.progress:
            return None
        from tqdm import tqdm
        return tqdm(total=total, initial=initial, desc=desc, unit="batch", leave=False, dynamic_ncols=True)

    def train_epoch(self, epoch: int, first_step: int = 0, sums: EpochSums | None = None,
                    state: RunState | None = None) -> dict[str, Any]:
        """Train one epoch (from ``first_step`` with the running ``sums`` of a resumed epoch);
        returns the rank-summed loss and metric, the exchange counters and this rank's stage
        times. With ``state`` it checkpoints mid-epoch as ``checkpoint_every`` asks."""
        if first_step == 0:  # a resumed epoch has its ranks' RNG states restored instead
            torch.manual_seed(dropout_seed(self.config.seed, epoch, self.ctx.rank))
        self.ddp.train()
        self._epoch, self._evaluating = epoch, False
        sums = EpochSums.zeros(self.task.num_sums) if sums is None else sums
        start, cpu_start = time.perf_counter(), time.process_time()
        self.loader.load_state_dict({"epoch": epoch, "next_batch": first_step})
        steps = len(self.loader)
        every, unit = self.config.checkpoint_interval
        bar = self._bar(steps, f"epoch {epoch}", first_step)
        train_s = train_cpu = 0.0
        # Loss and metric sums stay on the device during the epoch, so a GPU step never waits for them.
        running = torch.zeros(1 + self.task.num_sums, dtype=torch.float64, device=self.ctx.device)
        # This rank's first step with a loss that is not finite (inf: none yet), also kept on the device.
        first_bad = torch.full((), math.inf, dtype=torch.float64, device=self.ctx.device)
        if self.embedding is not None:
            self.embedding.reset_stats()
        for step, batch in enumerate(self.loader, start=first_step):
            self.health.enter(Stage.TRAIN, epoch, step)
            t0, c0 = time.perf_counter(), time.thread_time()
            with torch.autocast(self.ctx.device.type, torch.bfloat16, enabled=self.config.precision == BF16):
                out = self.forward(batch)
                if self.decoder is not None:
                    out = self.decoder(out, batch.edge_label_index)
            out = out.float()
            targets = self.task.targets(batch.y if self.decoder is None else batch.edge_label.unsqueeze(1))
            loss = self.task.loss(out, targets)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            if self.embedding is not None:
                self.embedding.step()
            running[0] += loss.detach().double() * targets.shape[0]
            first_bad = torch.where(torch.isfinite(loss.detach()), first_bad, first_bad.clamp(max=step))
            sums.count += targets.shape[0]
            if self.task.num_sums:
                running[1:] += self.task.metric_sums(out.detach(), targets)
            train_s += time.perf_counter() - t0
            train_cpu += time.thread_time() - c0  # what the model cost, whatever else shares the cores
            if bar is not None:
                bar.update(1)
                comm = self.loader.stats
                bar.set_postfix(fetched_MBps=f"{comm.bytes_received / max(time.perf_counter() - start, 1e-9) / 1e6:.1f}")
            done = step + 1
            if state is not None and unit == "steps" and done % every == 0 and done < steps:
                _fold(running, sums)
                self._stop_if_diverged(self._reduce(sums.loss, dist.ReduceOp.SUM), epoch, first_bad)
                partial = replace(sums, seconds=sums.seconds + time.perf_counter() - start)
                partial.comm = CommStats()  # the epoch's counters so far: its folded sums and the loader's since
                partial.comm.add(sums.comm)
                partial.comm.add(self.loader.stats)
                self.checkpoint(state, epoch, done, partial)
        if bar is not None:
            bar.close()
        _fold(running, sums)
        sums.comm.add(self.loader.stats)
        times = {**self.loader.times, Stage.TRAIN.value: train_s, TRAIN_CPU: train_cpu}
        values = torch.cat([torch.tensor([sums.loss, sums.count], dtype=torch.float64), sums.metric])
        if self.ctx.distributed:
            values = values.to(self.ctx.comm_device)
            dist.all_reduce(values)
        loss_sum, count, metric_sums = float(values[0]), float(values[1]), values[2:].cpu()
        self._stop_if_diverged(loss_sum, epoch, first_bad)
        record = {TRAIN_LOSS: loss_sum / max(count, 1), "steps": steps,
                  "epoch_s": self._reduce(sums.seconds + time.perf_counter() - start),
                  "cpu_s": time.process_time() - cpu_start, "stage_s": times, "comm": sums.comm.summed(self.ctx).as_dict()}
        if self.embedding is not None:
            record[EMBEDDING_COMM] = self.embedding.stats.summed(self.ctx).as_dict()
        if self.task.num_sums:
            record[TRAIN_METRIC] = self.task.metric_from_sums(metric_sums)
        return record
