"""Starting a training run: local ranks (with restarts) or one rank of a torchrun job.

``train(config)`` decides everything the run leaves open once, before any rank starts
(:func:`~salientpp.train.setup.resolve_run`: the options, the thread budget and pipeline depth,
the cache plan), checks the memory estimate of this machine's ranks, then either runs this
process as one rank of ``torchrun``'s job, or starts one local rank per partition with
:func:`salientpp.distributed.launch` and restarts them all from the last checkpoint when one
fails (``--max-restarts``). Every rank receives the same :class:`~salientpp.train.setup.ResolvedRun`.
"""
from __future__ import annotations

import os
import sys
import traceback
from contextlib import ExitStack, contextmanager
from typing import Iterator

from ..distributed import DistContext, WorkerError, init_distributed, launch, shutdown_distributed
from ..distributed.faults import injector_from_env
from ..distributed.group import (RESTART_ENV, env_is_distributed, is_first_rank, is_torchrun_worker,
                                 may_be_a_restart)
from ..distributed.health import Health, Stage
from ..distributed.network import parse_network
from ..errors import InputError
from ..host import local_world_size
from ..io import output_lock
from .checkpoint import check_checkpoint_dir, has_checkpoint
from .config import FULL_GRAPH, TrainConfig
from .fullgraph import FullGraphTrainer
from .loop import MinibatchTrainer, Trainer
from .setup import RankSetup, ResolvedRun, resolve_run
from .state import TrainResult


def open_trainer(setup: RankSetup) -> Trainer:
    """The trainer of the run's mode: full-graph, or minibatches."""
    return FullGraphTrainer(setup) if setup.config.mode == FULL_GRAPH else MinibatchTrainer(setup)


def trainer_for(config: TrainConfig, ctx: DistContext) -> Trainer:
    """The trainer of ``config`` on the rank of ``ctx``, for a process that joined the group
    itself (a script, the self-check): the run resolved for this machine's
    ``LOCAL_WORLD_SIZE`` ranks, as every rank of a launched job receives it."""
    return open_trainer(RankSetup.open(resolve_run(config, local_world_size()), ctx))


def run_rank(run: ResolvedRun) -> TrainResult:
    """The body of one rank: apply its thread budget, join the group, train, leave the group.

    In a job of several ranks any failure other than bad input is raised as a
    :class:`~salientpp.distributed.health.StageError` naming this rank, its stage and its peers' stages;
    alone, as the :class:`~salientpp.distributed.WorkerError` a launched rank's failure becomes.
    """
    config = run.config
    run.threads.apply()
    ctx = init_distributed(config.device, config.timeout_s, reuse_freed_memory=config.reuse_freed_memory,
                           network=None if config.network is None else parse_network(config.network),
                           threads=run.threads)
    health = Health(ctx, injector_from_env(ctx.rank, ctx.attempt))
    try:
        if config.checkpoint_dir and is_torchrun_worker():
            # torchrun counts restarts per machine, so only the ranks together know whether this is
            # a restart (ctx.attempt): a fresh run must not write into another run's directory.
            check_checkpoint_dir(config.checkpoint_dir, config.resume, restarted=ctx.attempt > 0)
        health.enter(Stage.STARTUP)
        result = open_trainer(RankSetup.open(run, ctx, health)).fit()
        result.restarts = ctx.attempt
        return result
    except InputError:
        raise
    except (Exception, SystemExit) as exc:  # a user's model may also call sys.exit
        failure = health.failure(exc)
        if ctx.distributed:
            raise failure from exc
        # Alone, the rank is this process: fail as a launched rank does (WorkerError, one line).
        raise WorkerError(ctx.rank, f"{type(failure).__name__}: {failure}", traceback.format_exc()) from exc
    finally:
        health.close()
        shutdown_distributed(ctx)


def prepare(config: TrainConfig) -> ResolvedRun:
    """Before any rank starts (or, under torchrun, before this rank joins): :func:`resolve_run`,
    with the memory check of this machine's ranks on one process per machine; on a run with
    progress output, print the memory estimate and the thread budget."""
    torchrun = env_is_distributed()
    run = resolve_run(config, local_world_size() if torchrun else None,
                      memory_check=not torchrun or int(os.environ.get("LOCAL_RANK", 0)) == 0)
    if config.progress and run.memory:
        print(run.memory, flush=True)
    if config.progress and is_first_rank():
        print(run.threads.describe(config.mode != FULL_GRAPH, config.pipeline_depth), flush=True)
    return run


@contextmanager
def locked_outputs(config: TrainConfig) -> Iterator[None]:
    """Hold the locks of the run's outputs (``--checkpoint-dir``, ``--json``) for the block, in
    the process that writes them (this one, or rank 0 of a torchrun job), so a second run given
    the same outputs is refused (:func:`~salientpp.io.output_lock`). Under the lock the
    checkpoint directory is checked again: another run may have written it since
    :meth:`TrainConfig.validate` looked."""
    with ExitStack() as stack:
        if is_first_rank():
            if config.checkpoint_dir:
                stack.enter_context(output_lock(config.checkpoint_dir, "--checkpoint-dir", directory=True))
                check_checkpoint_dir(config.checkpoint_dir, config.resume, restarted=may_be_a_restart())
            if config.json_path:
                stack.enter_context(output_lock(config.json_path, "--json", directory=False))
        yield


def train(config: TrainConfig) -> TrainResult:
    """Train as configured and return rank 0's :class:`TrainResult`.

    Under ``torchrun`` (``RANK``/``WORLD_SIZE`` set) this process is one rank; torchrun's
    ``--max-restarts`` restarts it, and a restarted rank continues from the last checkpoint.
    Otherwise it starts ``config.nprocs`` local ranks (default: one per partition), or trains in
    this process when there is one partition and no restarts are asked for. When a rank fails,
    the local launcher stops every rank and, up to ``config.max_restarts`` times, starts them
    all again; they continue from the last checkpoint in ``config.checkpoint_dir``.
    """
    run = prepare(config)
    with locked_outputs(run.config):
        return _train(run)


def _train(run: ResolvedRun) -> TrainResult:
    if env_is_distributed() or (run.local_ranks == 1 and run.config.max_restarts == 0):
        return run_rank(run)
    attempt = 0
    while True:
        try:
            return launch(run_rank, (run,), run.local_ranks, env={RESTART_ENV: str(attempt)},
                          stall_s=run.config.timeout_s)[0]
        except WorkerError as exc:
            if attempt == run.config.max_restarts:
                raise
            attempt += 1
            checkpoint_dir = run.config.checkpoint_dir
            where = ("from the last checkpoint in " + checkpoint_dir if has_checkpoint(checkpoint_dir)
                     else "from the start (no checkpoint yet)")
            print(f"\nsalientpp: {exc}; restarting all {run.local_ranks} ranks {where} "
                  f"(restart {attempt} of {run.config.max_restarts})", file=sys.stderr, flush=True)
