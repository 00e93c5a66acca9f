"""Cache plans: which remote rows each partition caches (GPU tier, then CPU tier) and in which
order it keeps its own rows, saved next to the partitioned data.

On-disk layout (``.npy`` + ``meta.json``, default ``PART_DIR/cache/<name>/``)::

    meta.json              kind, policy, workloads, budget, gpu_fraction, row_bytes,
                           partitioning identity, per-partition counts, files
    part_<k>/gpu_ids.npy   int64 [n_gpu]  remote global ids of the GPU tier, best first
    part_<k>/cpu_ids.npy   int64 [n_cpu]  remote global ids of the CPU tier, best first
    part_<k>/local_order.npy int64 [n_k]  local row indices by descending score
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import __version__
from ..data.format import check_permutation
from .. import streams
from ..errors import InputError
from ..io import atomic_output_dir, load_listed, read_meta, save_array, shown, write_meta
from .policies import PolicyContext, policy_scores, rank_vertices
from ..sampling.kinds import DEFAULT_SAMPLER
from .workload import Workload

KIND = "salientpp-cache-plan"
PLAN_ARRAYS = ("gpu_ids", "cpu_ids", "local_order")
FIX = "re-run `salientpp analyze`"
# The default share of each partition's own rows kept on the GPU, of `salientpp analyze` and of
# the plan `salientpp train` builds without --plan (TrainConfig.gpu_fraction).
GPU_FRACTION = 0.15
def partition_identity(part_dir_meta: dict[str, Any]) -> str:
    """A digest of the checksums of the topology, partition book and renumbering of a partitioned dir."""
    files = part_dir_meta.get("files", {})
    try:
        parts = [f"{name}={files[name]['checksum']}" for name in ("rowptr", "col", "offsets", "orig_id")]
    except (KeyError, TypeError):
        raise InputError("the partitioned directory's meta.json lacks file checksums; re-partition it") from None
    return "sha256:" + hashlib.sha256("\n".join(parts).encode()).hexdigest()


@dataclass(frozen=True)
class Budget:
    """How much each partition caches: a replication factor, or byte budgets per tier.

    Attributes:
        replication: alpha in ``[0, K-1]``: cache the top ``floor(alpha * N / K)`` remote rows,
            all in the GPU tier; ``K-1`` caches every remote row (``None`` when byte budgets are used).
        gpu_bytes, cpu_bytes: tier budgets in bytes; the GPU tier is filled first, each tier
            holds ``budget // row_bytes`` rows (0 = no such tier).
    """

    replication: float | None = None
    gpu_bytes: int = 0
    cpu_bytes: int = 0

    def check(self, num_parts: int, row_bytes: int) -> None:
        if self.replication is not None:
            if self.gpu_bytes or self.cpu_bytes:
                raise InputError("give either a replication factor or byte budgets, not both")
            if not (math.isfinite(self.replication) and 0 <= self.replication <= num_parts - 1):
                raise InputError(f"replication factor {self.replication} is outside [0, {num_parts - 1}] "
                                 f"(0 = no cache, K-1 = {num_parts - 1} = every remote row); pass a fraction "
                                 "such as 0.1")
            return
        for tier, value in (("GPU", self.gpu_bytes), ("CPU", self.cpu_bytes)):
            if 0 < value < row_bytes:
                raise InputError(f"the {tier} cache budget of {value} bytes is smaller than one feature row "
                                 f"({row_bytes} bytes); raise it or pass 0 for no {tier} tier")

    def rows(self, num_remote: int, num_nodes: int, num_parts: int, row_bytes: int) -> tuple[int, int]:
        """(GPU rows, CPU rows) for a partition with ``num_remote`` remote vertices."""
        if self.replication is not None:
            if self.replication >= num_parts - 1:  # full replication, also for partitions smaller than N/K
                return num_remote, 0
            return min(num_remote, int(math.floor(self.replication * num_nodes / num_parts + 1e-9))), 0
        n_gpu = min(num_remote, self.gpu_bytes // row_bytes)
        return n_gpu, min(num_remote - n_gpu, self.cpu_bytes // row_bytes)

    def to_json(self) -> dict:
        return {"replication": self.replication, "gpu_cache_bytes": self.gpu_bytes, "cpu_cache_bytes": self.cpu_bytes}


@dataclass(frozen=True)
class PlanMeta:
    """What a set of plans was built for; shared by the plans of all partitions.

    Attributes:
        policy: the policy's registered name.
        workloads: training workload first (its fanouts and batch size bind the trainer).
        budget: the replication factor or the byte budgets.
        row_bytes: bytes of one feature row (``F * itemsize``).
        num_nodes, num_parts: of the partitioned dataset.
        partition_id: :func:`partition_identity` of the partitioned directory.
        seed: the seed of the policy context (tie-breaks, sampled policies).
        vip_method: the VIP estimate used by the ``vip`` policy.
    """

    policy: str
    workloads: tuple[Workload, ...]
    budget: Budget
    row_bytes: int
    num_nodes: int
    num_parts: int
    partition_id: str
    seed: int
    vip_method: str

    @property
    def training(self) -> Workload:
        """``workloads[0]``: its sampler, seeds, fanouts and batch size bind the trainer."""
        return self.workloads[0]

    def to_json(self) -> dict:
        return {"policy": self.policy, "workloads": [w.to_json() for w in self.workloads],
                "budget": self.budget.to_json(), "row_bytes": self.row_bytes, "num_nodes": self.num_nodes,
                "num_parts": self.num_parts, "partition_id": self.partition_id, "seed": self.seed,
                "vip_method": self.vip_method}

    @classmethod
    def from_json(cls, entry: dict) -> "PlanMeta":
        budget = entry["budget"]
        return cls(policy=entry["policy"], workloads=tuple(Workload.from_json(w) for w in entry["workloads"]),
                   budget=Budget(budget["replication"], int(budget["gpu_cache_bytes"]), int(budget["cpu_cache_bytes"])),
                   row_bytes=int(entry["row_bytes"]), num_nodes=int(entry["num_nodes"]),
                   num_parts=int(entry["num_parts"]), partition_id=entry["partition_id"], seed=int(entry["seed"]),
                   vip_method=entry["vip_method"])


def _join(fanouts: Sequence[int]) -> str:
    return ",".join(str(f) for f in fanouts)


@dataclass
class CachePlan:
    """The cache plan of partition ``part``.

    Attributes:
        part: the partition k.
        gpu_ids: int64 ``[n_gpu]`` remote global ids cached in the GPU tier, by descending score.
        cpu_ids: int64 ``[n_cpu]`` remote global ids cached in the CPU tier, by descending score.
        local_order: int64 ``[n_k]`` local row indices (``id - offsets[k]``) by descending score.
        gpu_fraction: fraction of the local rows kept on the GPU.
        num_gpu_local: ``floor(gpu_fraction * n_k)``: rows ``local_order[:num_gpu_local]`` live on the GPU.
        meta: what the plan was built for.
    """

    part: int
    gpu_ids: np.ndarray
    cpu_ids: np.ndarray
    local_order: np.ndarray
    gpu_fraction: float
    num_gpu_local: int
    meta: PlanMeta

    @property
    def num_cached(self) -> int:
        return int(self.gpu_ids.shape[0] + self.cpu_ids.shape[0])

    def slot_map(self) -> np.ndarray:
        """int64 ``[N]``: -1 = not cached, ``0..n_gpu-1`` GPU tier slot, ``n_gpu..`` CPU tier slot ``- n_gpu``."""
        slots = np.full(self.meta.num_nodes, -1, dtype=np.int64)
        n_gpu = self.gpu_ids.shape[0]
        slots[self.gpu_ids] = np.arange(n_gpu, dtype=np.int64)
        slots[self.cpu_ids] = np.arange(n_gpu, n_gpu + self.cpu_ids.shape[0], dtype=np.int64)
        return slots

    def with_gpu_fraction(self, gpu_fraction: float) -> "CachePlan":
        """The same plan with another share of the local rows on the GPU (no re-scoring needed)."""
        gpu_fraction = _check_gpu_fraction(gpu_fraction)
        return replace(self, gpu_fraction=gpu_fraction,
                       num_gpu_local=local_gpu_rows(gpu_fraction, int(self.local_order.shape[0])))


def _check_gpu_fraction(gpu_fraction: float) -> float:
    if not (math.isfinite(gpu_fraction) and 0 <= gpu_fraction <= 1):
        raise InputError(f"gpu fraction {gpu_fraction} is outside [0, 1]; pass e.g. --gpu-fraction {GPU_FRACTION}")
    return float(gpu_fraction)


def local_gpu_rows(gpu_fraction: float, num_local: int) -> int:
    """``floor(gpu_fraction * num_local)``: how many of a partition's own rows (the first of its
    local order) live on the GPU."""
    return int(math.floor(gpu_fraction * num_local + 1e-9))


def row_bytes_of(dataset) -> int:
    return int(dataset.num_features * dataset.feature_dtype.itemsize)


def build_plans(ctx: PolicyContext, policy: str, budget: Budget, gpu_fraction: float = 0.0) -> list[CachePlan]:
    """Score every vertex with ``policy`` for each partition and fill the budget with the best remote rows."""
    dataset = ctx.dataset
    gpu_fraction = _check_gpu_fraction(gpu_fraction)
    row_bytes = row_bytes_of(dataset)
    budget.check(dataset.num_parts, row_bytes)
    meta = PlanMeta(policy=policy, workloads=ctx.workloads, budget=budget, row_bytes=row_bytes,
                    num_nodes=dataset.num_nodes, num_parts=dataset.num_parts,
                    partition_id=partition_identity(dataset.meta), seed=ctx.seed, vip_method=ctx.vip_method)
    plans = []
    offsets = dataset.book.offsets
    for k in range(dataset.num_parts):
        scores = policy_scores(ctx, policy, k)
        rng = ctx.rng(k, streams.TIEBREAK_STREAM)
        remote = rank_vertices(scores, np.flatnonzero(ctx.remote_mask(k)), rng)
        n_gpu, n_cpu = budget.rows(remote.size, dataset.num_nodes, dataset.num_parts, row_bytes)
        local = rank_vertices(scores, dataset.book.owned(k), rng) - offsets[k]
        plans.append(CachePlan(part=k, gpu_ids=remote[:n_gpu].copy(), cpu_ids=remote[n_gpu:n_gpu + n_cpu].copy(),
                               local_order=local, gpu_fraction=gpu_fraction,
                               num_gpu_local=local_gpu_rows(gpu_fraction, local.size), meta=meta))
        ctx.forget(k)
    return plans


# The longest default plan name: file systems refuse names of more than 255 bytes.
MAX_PLAN_NAME = 128


def default_plan_name(policy: str, workloads: Sequence[Workload], budget: Budget) -> str:
    """``vip-f15-10-5-b1024-r0.1``: the policy, the training workload (its sampler kind unless it
    is the default one: ``vip-ladies-f...``) and the budget. A name longer than
    :data:`MAX_PLAN_NAME` (the fanouts of a deep model) keeps its first characters and ends in a
    digest of the whole name, so distinct plans keep distinct names."""
    size = (f"r{budget.replication:g}" if budget.replication is not None
            else f"g{budget.gpu_bytes}-c{budget.cpu_bytes}")
    training = workloads[0]
    sampler = "" if training.sampler is DEFAULT_SAMPLER else f"-{training.sampler.value}"
    if training.edges is not None:
        sampler += "-link"
    name = f"{policy}{sampler}-f{'-'.join(str(f) for f in training.fanouts)}-b{training.batch_size}-{size}"
    if len(name) <= MAX_PLAN_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"{name[:MAX_PLAN_NAME - len(digest) - 1]}-{digest}"


def default_plan_dir(part_dir: str | os.PathLike, policy: str, workloads: Sequence[Workload], budget: Budget,
                     name: str | None = None) -> Path:
    """Where ``salientpp analyze`` writes a plan without ``--out``: ``PART_DIR/cache/NAME``, NAME
    by default from the policy, the training workload and the budget (:func:`default_plan_name`)."""
    return Path(part_dir) / "cache" / (name or default_plan_name(policy, workloads, budget))


def build_and_save_plans(ctx: PolicyContext, policy: str, budget: Budget, gpu_fraction: float,
                         out_dir: str | os.PathLike) -> list[CachePlan]:
    """What ``salientpp analyze`` does once its input is checked: score every vertex with
    ``policy``, fill ``budget`` for every partition (:func:`build_plans`) and write the plans
    atomically to ``out_dir`` (:func:`save_plans`; an existing ``out_dir`` is refused with
    :class:`InputError`, so two jobs saving the same plan at once leave exactly one). Returns
    the plans. ``salientpp train`` without ``--plan`` calls it too, so the plan it builds is the
    one ``analyze`` writes with the same options."""
    plans = build_plans(ctx, policy, budget, gpu_fraction)
    save_plans(plans, out_dir)
    return plans


def save_plans(plans: Sequence[CachePlan], out_dir: str | os.PathLike) -> Path:
    """Write the plans of all partitions atomically (refuses an existing ``out_dir``)."""
    if not plans:
        raise ValueError("no plans to save")
    meta = plans[0].meta
    with atomic_output_dir(out_dir) as tmp:
        files, parts = {}, []
        for plan in plans:
            (tmp / f"part_{plan.part}").mkdir()
            for name in PLAN_ARRAYS:
                files[f"part_{plan.part}/{name}"] = save_array(tmp / f"part_{plan.part}", name, getattr(plan, name))
            parts.append({"part": plan.part, "num_gpu": int(plan.gpu_ids.size), "num_cpu": int(plan.cpu_ids.size),
                          "num_local": int(plan.local_order.size), "num_gpu_local": plan.num_gpu_local})
        write_meta(tmp, {"kind": KIND, "salientpp_version": __version__, **meta.to_json(),
                         "gpu_fraction": plans[0].gpu_fraction, "parts": parts, "files": files})
    return Path(out_dir)


@dataclass(frozen=True)
class PlanInfo:
    """What a plan directory's meta.json says, read and checked without loading the arrays
    (:func:`read_plan_info`, the one reader of a plan's meta.json).

    Attributes:
        path: the plan directory.
        meta: what the plans were built for.
        gpu_fraction: share of each partition's own rows on the device.
        num_gpu, num_cpu, num_local, num_gpu_local: per partition, the rows of the device tier
            and of the host tier, its own rows, and those of them on the device.
        raw: meta.json as read (file checksums included): the plan's identity.
    """

    path: Path
    meta: PlanMeta
    gpu_fraction: float
    num_gpu: tuple[int, ...]
    num_cpu: tuple[int, ...]
    num_local: tuple[int, ...]
    num_gpu_local: tuple[int, ...]
    raw: dict

    @property
    def max_cached_rows(self) -> int:
        """The most remote rows any partition caches (both tiers)."""
        return max(g + c for g, c in zip(self.num_gpu, self.num_cpu))


def read_plan_info(plan_dir: str | os.PathLike) -> PlanInfo:
    """Read a plan directory's meta.json; :class:`InputError` (one sentence) unless it is one."""
    raw = read_meta(plan_dir, KIND)
    try:
        meta = PlanMeta.from_json(raw)
        gpu_fraction = float(raw["gpu_fraction"])
        counts = [tuple(int(entry[key]) for key in ("num_gpu", "num_cpu", "num_local", "num_gpu_local"))
                  for entry in raw["parts"]]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"meta.json in {plan_dir} is incomplete ({shown(str(exc))}); {FIX}") from None
    if len(counts) != meta.num_parts:
        raise InputError(f"meta.json in {plan_dir} describes {len(counts)} partitions but says num_parts is "
                         f"{meta.num_parts}; {FIX}")
    num_gpu, num_cpu, num_local, num_gpu_local = (tuple(column) for column in zip(*counts))
    return PlanInfo(Path(plan_dir), meta, gpu_fraction, num_gpu, num_cpu, num_local, num_gpu_local, raw)


def load_plan(plan: PlanInfo | str | os.PathLike, k: int) -> CachePlan:
    """Load partition ``k``'s plan of ``plan`` (a :class:`PlanInfo` already read, or a plan
    directory), its arrays memory-mapped and compared with their checksums.

    Raises :class:`InputError` unless the files match meta.json, ``gpu_ids`` and ``cpu_ids``
    are distinct ids in ``[0, N)``, ``local_order`` is a permutation of ``0..n_k-1`` and
    ``num_gpu_local <= n_k``: ids that would index out of bounds never leave here.
    """
    info = plan if isinstance(plan, PlanInfo) else read_plan_info(plan)
    plan_dir, meta = info.path, info.meta
    if not 0 <= k < meta.num_parts:
        raise InputError(f"the cache plan in {plan_dir} has partitions 0..{meta.num_parts - 1}, not {k}")
    arrays = {name: load_listed(plan_dir, f"part_{k}/{name}", info.raw, FIX, ("int64",), 1)
              for name in PLAN_ARRAYS}
    num_local, num_gpu_local = info.num_local[k], info.num_gpu_local[k]
    folder = plan_dir / f"part_{k}"
    order = arrays["local_order"]
    if order.shape[0] != num_local or not 0 <= num_gpu_local <= num_local:
        raise InputError(f"meta.json in {plan_dir} gives partition {k} {num_local} local rows, {num_gpu_local} of "
                         f"them on the device, but local_order.npy has {order.shape[0]}; {FIX}")
    check_permutation(order, num_local, str(folder / "local_order.npy"), FIX, what="rows")
    cached = np.concatenate([arrays["gpu_ids"], arrays["cpu_ids"]])
    if cached.size and (cached.min() < 0 or cached.max() >= meta.num_nodes):
        raise InputError(f"the cached ids in {folder} lie outside [0, {meta.num_nodes}); {FIX}")
    cached.sort()
    if np.any(cached[1:] == cached[:-1]):
        raise InputError(f"the cached ids in {folder} repeat an id; {FIX}")
    return CachePlan(part=k, gpu_fraction=info.gpu_fraction, num_gpu_local=num_gpu_local, meta=meta, **arrays)


def load_plans(plan_dir: str | os.PathLike) -> list[CachePlan]:
    """Load the plans of every partition."""
    info = read_plan_info(plan_dir)
    return [load_plan(info, k) for k in range(info.meta.num_parts)]


@dataclass(frozen=True)
class PlanOptions:
    """What ``salientpp analyze`` builds a plan with, besides the workloads: the policy, the
    budget and the share of each partition's own rows on the device."""

    policy: str
    budget: Budget
    gpu_fraction: float


@dataclass(frozen=True)
class PlanRequest:
    """What a training run asks of a cache plan (:func:`check_plan`).

    Attributes:
        workload: the training workload: its sampler, seeds (nodes or edges), fanouts and batch size.
        built_with: for the plan at the default location (``salientpp train`` without ``--plan``),
            the options it must have been built with; ``None`` for a plan the user chose
            (``--plan``), which is used with whatever policy, budget and device share it has.
    """

    workload: Workload
    built_with: PlanOptions | None = None


def check_plan(info: PlanInfo, data, request: PlanRequest | None = None) -> None:
    """The one compatibility check of a cache plan: :class:`InputError` (one sentence) unless
    ``info`` was built for the partitioned dataset ``data`` (a
    :class:`~salientpp.partition.PartitionedDataset`) and serves ``request`` (``None``: any
    workload, as a loader's cache serves any loader of its graph).

    A plan serves the sampler kinds of the distribution it was built for
    (``SamplerKind.distribution``): node-wise and bulk node-wise sampling draw the same batches in
    distribution, so a plan of one serves the other; a LADIES plan serves LADIES only (its fanouts
    are layer sizes). A plan scored for link prediction (edge seeds) serves link training only,
    and the other way round.
    The message says how to build a fitting plan: into another directory for a plan the user
    chose, else in the place of the one found, once it is removed (an existing plan directory
    is never overwritten).
    """
    part_dir, plan_dir, planned = data.path, info.path, info.meta.training

    def rebuild(option: str) -> str:
        if request.built_with is None:
            return f"build a fitting plan with `salientpp analyze {part_dir} {option} ... --out DIR` and use that"
        return f"remove {plan_dir} and build a fitting plan with `salientpp analyze {part_dir}` {option}"

    if partition_identity(data.meta) != info.meta.partition_id:
        raise InputError(f"{plan_dir} was built for another partitioning than {part_dir}; build a plan for it "
                         f"with `salientpp analyze {part_dir} ... --out DIR`")
    if request is None:
        return
    wanted = request.workload
    if planned.sampler.distribution != wanted.sampler.distribution:
        raise InputError(f"{plan_dir} was built for the {planned.sampler.value} sampler but training uses "
                         f"{wanted.sampler.value}; {rebuild('--sampler ' + wanted.sampler.value)}")
    if (planned.edges is None) != (wanted.edges is None):
        planned_task, task = ("node", "link") if planned.edges is None else ("link", "node")
        raise InputError(f"{plan_dir} was built for {planned_task} seeds but training uses {task} seeds; "
                         f"{rebuild('--task ' + task)}")
    if wanted.fanouts != planned.fanouts:
        raise InputError(f"{plan_dir} was built for fanouts {_join(planned.fanouts)} but training uses "
                         f"{_join(wanted.fanouts)}; {rebuild('--fanouts ' + _join(wanted.fanouts))}")
    if wanted.batch_size != planned.batch_size:
        raise InputError(f"{plan_dir} was built for batch size {planned.batch_size} but training uses "
                         f"{wanted.batch_size}; {rebuild(f'--batch-size {wanted.batch_size}')}")
    if request.built_with is None:
        return
    wanted_options = request.built_with
    for what, theirs, ours in (("policy", info.meta.policy, wanted_options.policy),
                               ("budget", info.meta.budget.to_json(), wanted_options.budget.to_json()),
                               ("GPU fraction", info.gpu_fraction, wanted_options.gpu_fraction)):
        if theirs != ours:
            raise InputError(f"{plan_dir} was built with {what} {theirs} but this run asks for {ours}; train with "
                             f"--plan {plan_dir} to use that plan as it is, or remove it so that this run builds "
                             "the plan of its options")


def predicted_rows(ctx: PolicyContext, plans: Sequence[CachePlan]) -> tuple[np.ndarray, np.ndarray]:
    """Analytic remote rows per epoch of each partition, float64 ``[K]`` without and with each plan's cache."""
    expected = ctx.expected_accesses()
    no_cache = np.array([expected[ctx.remote_mask(p.part), p.part].sum() for p in plans])
    cached = np.array([expected[p.gpu_ids, p.part].sum() + expected[p.cpu_ids, p.part].sum() for p in plans])
    return no_cache, no_cache - cached


def describe(plans: Sequence[CachePlan]) -> str:
    """A short text table of the plans (rows and bytes per tier)."""
    meta = plans[0].meta
    lines = [f"policy {meta.policy}, fanouts {_join(meta.training.fanouts)}, batch size {meta.training.batch_size}, "
             f"{json.dumps(meta.budget.to_json())}, row {meta.row_bytes} bytes",
             f"{'part':>4} {'local':>10} {'gpu local':>10} {'gpu cache':>10} {'cpu cache':>10} {'cache MiB':>10}"]
    for p in plans:
        mib = p.num_cached * meta.row_bytes / 2**20
        lines.append(f"{p.part:>4} {p.local_order.size:>10} {p.num_gpu_local:>10} {p.gpu_ids.size:>10} "
                     f"{p.cpu_ids.size:>10} {mib:>10.1f}")
    return "\n".join(lines)
