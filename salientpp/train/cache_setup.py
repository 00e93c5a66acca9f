"""The cache plan a rank trains with: an existing one under ``PART_DIR/cache``, or one built now.

Rank 0 builds missing plans (for all partitions, with the policy's own seed) and saves them
under ``PART_DIR/cache/<default name>`` so the next run and ``salientpp simulate`` find them;
the other ranks wait at a barrier and load partition ``rank``'s plan. Two jobs that build the
same plan at once both succeed: the plan is renamed into place atomically, and the job that
loses the race uses the winner's. Where the directory is not writable every rank builds the
plans itself (same seed, same result).
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch.distributed as dist

from ..cache import Budget, CachePlan, PolicyContext, Workload, build_plans, load_plan, save_plans
from ..cache.plan import KIND as PLAN_KIND, default_plan_name
from ..errors import InputError
from ..io import read_meta
from ..partition import PartitionedDataset
from .config import TrainConfig


@dataclass
class ResolvedCache:
    """What the feature store of one rank needs from the plan.

    Attributes:
        policy: the policy name (``none`` without a cache).
        local_order: int64 ``[n_k]`` local rows by descending score, or ``None`` (id order).
        num_device_local: owned rows kept on the device (``floor(gpu_fraction * n_k)``).
        cache_slot: int64 ``[N]`` cache slot of each id (-1: not cached), or ``None``.
        num_device_slots: size of the device tier of the remote cache.
        source: where the plan came from (``loaded <dir>``, ``built``, ``none``).
        identity: what every rank's plan must agree on: the plan set's meta (policy, budget,
            workloads, partitioning) and, for a loaded plan, its files' checksums.
    """

    policy: str
    local_order: np.ndarray | None
    num_device_local: int
    cache_slot: np.ndarray | None
    num_device_slots: int
    source: str
    identity: dict = field(default_factory=dict)


def _from_plan(plan: CachePlan, config: TrainConfig, n_k: int, source: str, files: dict | None = None) -> ResolvedCache:
    identity = {"meta": plan.meta.to_json(), "files": files or {}}
    return ResolvedCache(plan.meta.policy, np.asarray(plan.local_order),
                         int(math.floor(config.gpu_fraction * n_k + 1e-9)), plan.slot_map(),
                         int(plan.gpu_ids.shape[0]), source, identity)


def plan_dir(config: TrainConfig) -> Path:
    """Where the plan matching the configuration lives (or will be saved)."""
    workloads = (Workload(config.fanouts, config.batch_size),)
    return Path(config.part_dir) / "cache" / default_plan_name(config.cache, workloads,
                                                               Budget(replication=config.replication))


def _save_shared(plans: list[CachePlan], path: Path) -> bool:
    """Save ``plans`` at ``path``, where other jobs on the same partitioned directory look for them.

    Returns True when ``path`` holds a complete plan afterwards: this job's, or that of another
    job that built the same plan at the same time and renamed it into place first (the loser's
    temporary directory is removed and it uses the winner's). Returns False, after saying why,
    when the directory cannot be written: every rank then builds the plans itself.
    """
    try:
        path.parent.mkdir(exist_ok=True)
        save_plans(plans, path)
    except (OSError, InputError) as exc:
        if path.exists():  # another job won the race
            return True
        print(f"salientpp: could not save the cache plan to {path} ({exc}); every rank builds it in memory",
              file=sys.stderr, flush=True)
        return False
    return True


def resolve_cache(config: TrainConfig, data: PartitionedDataset, rank: int) -> ResolvedCache:
    """The cache of partition ``rank`` (a collective when distributed: every rank calls it)."""
    n_k = data.book.part_size(rank)
    if config.cache == "none" or data.num_parts == 1:  # one partition has no remote rows
        return ResolvedCache("none", None, int(math.floor(config.gpu_fraction * n_k + 1e-9)), None, 0, "none")
    budget = Budget(replication=config.replication)
    budget.check(data.num_parts, 1)
    path = plan_dir(config)
    if not path.exists() and rank == 0:
        ctx = PolicyContext(data, (Workload(config.fanouts, config.batch_size),), seed=config.seed)
        plans = build_plans(ctx, config.cache, budget, config.gpu_fraction)
        if not _save_shared(plans, path) and not dist.is_initialized():
            return _from_plan(plans[rank], config, n_k, "built")
    if dist.is_initialized():
        dist.barrier()
    if path.exists():
        plan = load_plan(path, rank)
        plan.check_compatible(config.part_dir, config.fanouts, config.batch_size, path)
        return _from_plan(plan, config, n_k, f"loaded {path}", read_meta(path, PLAN_KIND).get("files"))
    ctx = PolicyContext(data, (Workload(config.fanouts, config.batch_size),), seed=config.seed)
    return _from_plan(build_plans(ctx, config.cache, budget, config.gpu_fraction)[rank], config, n_k, "built")
