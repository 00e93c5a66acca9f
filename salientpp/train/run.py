"""Starting a training run: local ranks (with restarts) or one rank of a torchrun job.

``train(config)`` validates every option before any rank starts, checks the memory estimate of
this machine's ranks, then either runs this process as one rank of ``torchrun``'s job, or starts
one local rank per partition with :func:`salientpp.distributed.launch` and restarts them all from the
last checkpoint when one fails (``--max-restarts``).
"""
from __future__ import annotations

import os
import sys

from ..distributed import WorkerError, init_distributed, launch, shutdown_distributed
from ..distributed.faults import injector_from_env
from ..distributed.group import RESTART_ENV, env_is_distributed
from ..distributed.health import Health, Stage
from ..errors import InputError
from ..partition import load_partitioned
from ..resources import check_memory, estimate_full_graph, estimate_train
from .cache_setup import plan_source
from .checkpoint import check_checkpoint_dir, has_checkpoint
from .config import FULL_GRAPH, TrainConfig
from .fullgraph import FullGraphTrainer
from .link import LINK, require_link_split
from .loop import Trainer
from .state import TrainResult

# Set by torchrun in every worker it starts.
TORCHRUN_ENV = "TORCHELASTIC_RUN_ID"


def run_rank(config: TrainConfig) -> TrainResult:
    """The body of one rank: apply its thread budget, join the group, train, leave the group.

    The budget shares this machine's cores among its ``LOCAL_WORLD_SIZE`` ranks (1 when unset),
    with ``config.torch_threads`` and ``config.num_threads`` as overrides; rank 0 prints it on a
    run with progress output. In a job of several ranks any failure other than bad input is raised as a
    :class:`~salientpp.distributed.health.StageError` naming this rank, its stage and its peers' stages.
    """
    threads = config.thread_budget()
    threads.apply()
    ctx = init_distributed(config.device, config.timeout_s, reuse_freed_memory=config.reuse_freed_memory)
    if ctx.rank == 0 and config.progress:
        print(threads.describe(config.mode != FULL_GRAPH, config.pipeline_depth, config.device), flush=True)
    health = Health(ctx, injector_from_env(ctx.rank, ctx.attempt))
    try:
        if config.checkpoint_dir and TORCHRUN_ENV in os.environ:
            # torchrun counts restarts per machine, so only the ranks together know whether this is
            # a restart (ctx.attempt): a fresh run must not write into another run's directory.
            check_checkpoint_dir(config.checkpoint_dir, config.resume, restarted=ctx.attempt > 0)
        health.enter(Stage.STARTUP)
        trainer = FullGraphTrainer if config.mode == FULL_GRAPH else Trainer
        result = trainer(config, ctx, health, threads).fit()
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


def check_task_data(config: TrainConfig, data) -> None:
    """Refuse (InputError) a task the partitioned dataset has no data for: link prediction needs held-out edges."""
    if config.task == LINK:
        require_link_split(data, config.part_dir)


def _minibatch_estimate(config: TrainConfig, data, local_ranks: int):
    """:func:`estimate_train` of a minibatch run, with the cache its plan source gives."""
    source = plan_source(config, data.num_parts)
    if source.path is None:
        cache = {"cache": "none"}
    elif source.info is not None:
        cache = {"cache": source.info.meta.policy, "cached_rows": source.info.max_cached_rows}
    else:
        cache = {"cache": config.cache, "replication": config.replication}
    sampled_eval = config.eval_every > 0 and config.inference == "sampled"
    budget = config.thread_budget(local_ranks)
    return estimate_train(data, fanouts=config.fanouts, batch_size=config.batch_size, hidden=config.hidden,
                          layers=config.layers, local_ranks=local_ranks,
                          pipeline_depth=budget.pipeline_depth(config.pipeline_depth, config.device),
                          sampler_threads=budget.sampler_threads,
                          model=config.model, eval_fanouts=config.eval_fanouts if sampled_eval else None,
                          eval_batch_size=config.eval_batch_size if sampled_eval else None,
                          embedding_dim=config.embedding_dim, features=config.features,
                          reuse_freed_memory=config.reuse_freed_memory, **cache)


def check_train_memory(config: TrainConfig, data, local_ranks: int) -> None:
    """Before any rank starts: check where the cache plan comes from (:func:`plan_source`: a
    ``--plan`` or an existing default plan that fits, or a place rank 0 can save the one it
    builds), then refuse (InputError) when ``local_ranks`` ranks of this run would not fit in
    this machine's memory or ``config.memory_limit``; print the estimate on a run with progress
    output. The cached rows are the plan's when it exists, else what ``replication`` gives.
    Full-graph training has no plan; its estimate counts every layer's activations instead."""
    if config.mode == FULL_GRAPH:
        estimate = estimate_full_graph(data, hidden=config.hidden, layers=config.layers, model=config.model,
                                       dependencies=config.dependencies, local_ranks=local_ranks,
                                       reuse_freed_memory=config.reuse_freed_memory)
    else:
        estimate = _minibatch_estimate(config, data, local_ranks)
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
            data = load_partitioned(config.part_dir, verify=False, check=False)
            check_task_data(config, data)
            check_train_memory(config, data, int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])))
        return run_rank(config)
    data = load_partitioned(config.part_dir, verify=False, check=False)  # the ranks verify and check it
    check_task_data(config, data)
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
