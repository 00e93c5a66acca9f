"""The cache plan a rank trains with, and where it comes from.

* ``--plan DIR`` (:attr:`TrainConfig.plan`): any plan ``salientpp analyze`` wrote, with a
  replication factor or byte budgets, under any ``--name`` or ``--out``. Its GPU and CPU tiers,
  its order of the owned rows and its number of owned rows on the device (``num_gpu_local``)
  are used as they are; nothing is recomputed from the training options.
* Otherwise, with a cache policy and more than one partition: the plan ``salientpp analyze``
  writes for ``--cache``, ``--replication`` and ``--gpu-fraction``, at analyze's default location
  ``PART_DIR/cache/<default name>`` (:func:`default_plan_dir`). When it is there, it is used;
  else rank 0 builds it with analyze's own function
  (:func:`~salientpp.cache.plan.build_and_save_plans`) and saves it there while the other ranks
  wait at a barrier. Two jobs that build the same plan at once both succeed: the plan is renamed
  into place atomically and the job that loses the race uses the winner's. A rank whose machine
  does not share rank 0's file system finds no plan after the barrier: the first rank of that
  machine builds and saves it there too (same options and seed, so the same files). Any other
  failed save stops the job with one sentence; an unwritable ``PART_DIR`` is refused before any
  rank starts (:func:`plan_source`), so a plan never silently lives only in memory.
* ``--cache none`` or one partition: no remote cache; the owned rows stay in id order and the
  first ``floor(gpu_fraction * n_k)`` of them live on the device.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch.distributed as dist

from ..sampling.kinds import SamplerKind
from ..cache import plan as plans
from ..cache.plan import Budget, PlanInfo, build_and_save_plans, read_plan_info
from ..cache.policies import PolicyContext
from ..cache.workload import EdgeSeeds, Workload
from ..errors import InputError
from ..io import check_writable_dir, output_errors
from ..partition import PartitionedDataset
from .config import TrainConfig
from .link import LINK


@dataclass(frozen=True)
class ResolvedCache:
    """The plan a run trains with, once it is on disk (the feature store loads it from there).

    Attributes:
        policy: the policy name (``none`` without a cache).
        source: what rank 0 reports: ``built PATH``, ``using PATH`` or ``none``.
        path: the plan directory, or ``None`` without a plan.
    """

    policy: str
    source: str
    path: Path | None = None


@dataclass(frozen=True)
class PlanSource:
    """Where a run's cache plan comes from, worked out and checked before any rank starts.

    Attributes:
        path: the plan directory; ``None`` when the run has no plan (``--cache none`` or one
            partition).
        given: the user passed it with ``--plan``.
        info: its meta.json when the plan exists; ``None`` when rank 0 is to build it at ``path``.
    """

    path: Path | None
    given: bool = False
    info: PlanInfo | None = None


def _workloads(config: TrainConfig) -> tuple[Workload, ...]:
    edges = EdgeSeeds(config.num_negatives, config.negative_sampling) if config.task == LINK else None
    return (Workload(tuple(config.fanouts), config.batch_size, sampler=config.sampler, edges=edges),)


def default_plan_dir(config: TrainConfig) -> Path:
    """Where ``salientpp analyze`` writes, by default, the plan of ``config``'s cache options (and
    where ``salientpp train`` without ``--plan`` looks for it or saves it)."""
    return plans.default_plan_dir(config.part_dir, config.cache, _workloads(config),
                                  Budget(replication=config.replication))


def analyze_command(config: TrainConfig) -> str:
    """The ``salientpp analyze`` command that writes the plan of ``config``'s cache options to DIR."""
    return (f"salientpp analyze {config.part_dir} --fanouts {','.join(map(str, config.fanouts))} --batch-size "
            f"{config.batch_size} --policy {config.cache} --replication {config.replication:g} --gpu-fraction "
            f"{config.gpu_fraction:g} --out DIR")


def check_default_plan(info: PlanInfo, config: TrainConfig) -> None:
    """Raise :class:`InputError` unless the plan at the default location is the one ``salientpp
    analyze`` writes for ``config``: for its partitioning, fanouts and batch size, with its
    policy, replication factor and GPU fraction."""
    info.meta.check_compatible(config.part_dir, config.fanouts, config.batch_size, info.path,
                               sampler=SamplerKind(config.sampler), link=config.task == LINK)
    wanted = Budget(replication=config.replication)
    for what, theirs, ours in (("policy", info.meta.policy, config.cache),
                               ("budget", info.meta.budget.to_json(), wanted.to_json()),
                               ("GPU fraction", info.gpu_fraction, config.gpu_fraction)):
        if theirs != ours:
            raise InputError(f"{info.path} was built with {what} {theirs} but this run asks for {ours}; train with "
                             f"--plan {info.path} to use that plan as it is, or remove it so that this run builds "
                             "the plan of its options")


def plan_source(config: TrainConfig, num_parts: int) -> PlanSource:
    """Where the cache plan of ``config`` (validated) comes from; :class:`InputError` (one
    sentence) when the plan cannot be used or, when it is to be built, cannot be saved."""
    if config.plan is not None:
        return PlanSource(Path(config.plan), True, read_plan_info(config.plan))
    if config.cache == "none" or num_parts == 1 or not config.features:
        return PlanSource(None)
    Budget(replication=config.replication).check(num_parts, 1)
    path = default_plan_dir(config)
    if path.exists() or path.is_symlink():
        info = read_plan_info(path)
        check_default_plan(info, config)
        return PlanSource(path, False, info)
    try:
        check_writable_dir(path.parent, "cache plan directory", exist_ok=True)
    except InputError as exc:
        reason = str(exc).split("; ")[0]
        raise InputError(f"there is no cache plan at {path} and this run could not save the one it builds there "
                         f"({reason}); write it elsewhere with `{analyze_command(config)}` and train with "
                         "--plan DIR") from None
    return PlanSource(path)


def _there(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _build_unless_there(config: TrainConfig, data: PartitionedDataset, path: Path, sampler_threads: int) -> bool:
    """Build the plans of every partition with analyze's own function and save them at ``path``
    (the policies that sample run ``sampler_threads`` sampler threads).

    Returns True when this job saved them, False when ``path`` already held a plan, or another
    job that built the same plan at the same time renamed it into place first (its temporary
    directory is then removed, and this job uses the winner's plan). Any other failure raises.
    """
    if _there(path):
        return False
    ctx = PolicyContext(data, _workloads(config), seed=config.seed, num_threads=sampler_threads)
    try:
        with output_errors(path.parent):
            path.parent.mkdir(exist_ok=True)
        build_and_save_plans(ctx, config.cache, Budget(replication=config.replication), config.gpu_fraction, path)
    except InputError:
        if _there(path):  # another job won the race to rename the same plan into place
            return False
        raise
    return True


def _checked(path: Path, config: TrainConfig, verb: str, given: bool) -> ResolvedCache:
    info = read_plan_info(path)
    if given:
        info.meta.check_compatible(config.part_dir, config.fanouts, config.batch_size, path, given=True,
                                   sampler=SamplerKind(config.sampler), link=config.task == LINK)
    else:
        check_default_plan(info, config)
    return ResolvedCache(info.meta.policy, f"{verb} {path}", path)


def resolve_cache(config: TrainConfig, data: PartitionedDataset, rank: int, local_rank: int | None = None,
                  sampler_threads: int | None = None) -> ResolvedCache:
    """The cache plan of the run, built and saved first when needed (a collective when
    distributed: every rank calls it).

    ``local_rank`` (default ``rank``) is the rank's index on its machine: where a machine does
    not see the plan rank 0 saved, its local rank 0 builds and saves it there. A policy that
    samples to build the plan (``oracle``, ``vip-simulation``) runs ``sampler_threads`` sampler
    threads (default: ``config.num_threads``, else 1), the rank's thread budget in training.
    """
    sampler_threads = sampler_threads or config.num_threads or 1
    if config.plan is not None:
        return _checked(Path(config.plan), config, "using", given=True)
    if config.cache == "none" or data.num_parts == 1:  # one partition has no remote rows
        return ResolvedCache("none", "none")
    if not config.features:  # the embedding's rows are never cached
        return ResolvedCache("none", "none (no features)")
    path = default_plan_dir(config)
    built = rank == 0 and _build_unless_there(config, data, path, sampler_threads)
    if dist.is_initialized():
        dist.barrier()
        if (rank if local_rank is None else local_rank) == 0 and not _there(path):  # not rank 0's file system
            built = _build_unless_there(config, data, path, sampler_threads)
        dist.barrier()
    if not _there(path):
        raise InputError(f"rank {rank} finds no cache plan at {path}, which the first rank of its machine should "
                         f"have built; write one with `{analyze_command(config)}`, copy it to every machine and "
                         "train with --plan DIR")
    return _checked(path, config, "built" if built else "using", given=False)
