"""Cache plans: which remote rows each partition caches (device tier, then host tier) and in which
order it keeps its own rows, saved next to the partitioned data.

On-disk layout (``.npy`` + ``meta.json``, default ``PART_DIR/cache/<name>/``)::

    meta.json              kind, policy, workloads, budget, device_fraction, row_bytes,
                           partitioning identity, per-partition counts, files
    part_<k>/device_ids.npy   int64 [n_device] remote global ids of the device tier, best first
    part_<k>/host_ids.npy     int64 [n_host]   remote global ids of the host tier, best first
    part_<k>/owned_order.npy int64 [n_k]  local row indices by descending score
"""
from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
import shlex
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from .. import __version__
from ..data.format import check_permutation
from .. import streams
from ..errors import InputError, shown
from ..io import atomic_output_dir, load_listed, read_meta, save_array, write_meta
from ..partition.format import TYPED_FORMATS, feature_file
from .policies import PolicyContext, policy_scores, rank_vertices
from .vip import default_method
from ..sampling.kinds import DEFAULT_SAMPLER
from .workload import Workload, fanouts_tag, fanouts_text

KIND = "salientpp-cache-plan"
PLAN_ARRAYS = ("device_ids", "host_ids", "owned_order")
FIX = "re-run `salientpp analyze`"
# The layout of a plan directory: 2 since 0.2 (device/host tiers: device_ids, host_ids,
# owned_order); a plan without the key was written by 0.1 (gpu_ids, cpu_ids, local_order).
PLAN_FORMAT = 2
# The training devices a plan is for (train's --device, analyze's --device).
DEVICES = ("cpu", "cuda")
# The default share of each partition's own rows kept on the device when it is the CPU
# (default_device_fraction), and PlanOptions' default, which a plan's default name leaves out.
DEVICE_FRACTION = 0.15
# The same on a GPU: every owned row, as far as the device memory allows (the feature store keeps
# its device tiers within device_row_budget); half of products' features are 480 MB.
GPU_DEVICE_FRACTION = 1.0


def default_device_fraction(device: str | torch.device, given: float | None = None) -> float:
    """``given``, or else the share of a partition's own rows kept on ``device``: the one default
    of every command (``train``'s ``--device-fraction`` for its ``--device``, ``analyze``'s for
    the ``--device`` the plan is for), so one request names one plan whichever command builds it:
    :data:`GPU_DEVICE_FRACTION` on a GPU, :data:`DEVICE_FRACTION` on the CPU (where both tiers are
    host memory and the share only names the split in the counters)."""
    if given is not None:
        return given
    return GPU_DEVICE_FRACTION if torch.device(device).type == "cuda" else DEVICE_FRACTION


def partition_identity(part_dir_meta: dict[str, Any]) -> str:
    """A digest of the checksums of the topology, partition book and renumbering of a partitioned
    dir, and of a typed graph's blocks and relations (a homogeneous directory's digest is the one
    it had before typed graphs)."""
    files = part_dir_meta.get("files", {})
    names = ("rowptr", "col", "offsets", "orig_id") + tuple(name for name in TYPED_FORMATS if name in files)
    try:
        parts = [f"{name}={files[name]['checksum']}" for name in names]
    except (KeyError, TypeError):
        raise InputError("the partitioned directory's meta.json lacks file checksums; re-partition it") from None
    return "sha256:" + hashlib.sha256("\n".join(parts).encode()).hexdigest()


@dataclass(frozen=True)
class Budget:
    """How much each partition caches: a replication factor, or byte budgets per tier.

    Attributes:
        replication: alpha in ``[0, K-1]``: cache the top ``floor(alpha * N / K)`` remote rows,
            all in the device tier; ``K-1`` caches every remote row (``None`` when byte budgets are used).
        device_bytes, host_bytes: tier budgets in bytes; the device tier is filled first, each tier
            holds ``budget // row_bytes`` rows (0 = no such tier).
    """

    replication: float | None = None
    device_bytes: int = 0
    host_bytes: int = 0

    def __post_init__(self) -> None:
        if self.replication is not None and (self.device_bytes or self.host_bytes):
            raise InputError("give either a replication factor (--replication) or byte budgets "
                             "(--device-cache-bytes, --host-cache-bytes), not both")

    @classmethod
    def given(cls, replication: float | None, device_bytes: int | None, host_bytes: int | None) -> "Budget":
        """The budget of the options a user gave (``None``: not given): a replication factor or
        byte budgets, exactly one of the two (the one rule; :class:`InputError` otherwise)."""
        if replication is None and device_bytes is None and host_bytes is None:
            raise InputError("say how much to cache: --replication ALPHA or --device-cache-bytes B --host-cache-bytes C")
        return cls(replication, device_bytes or 0, host_bytes or 0)

    def check(self, num_parts: int, row_bytes: int) -> None:
        if self.replication is not None:
            if not (math.isfinite(self.replication) and 0 <= self.replication <= num_parts - 1):
                raise InputError(f"replication factor {self.replication} is outside [0, {num_parts - 1}] "
                                 f"(0 = no cache, K-1 = {num_parts - 1} = every remote row); pass a fraction "
                                 "such as 0.1")
            return
        for tier, value in (("device", self.device_bytes), ("host", self.host_bytes)):
            if 0 < value < row_bytes:
                raise InputError(f"the {tier} cache budget of {value} bytes is smaller than one feature row "
                                 f"({row_bytes} bytes); raise it or pass 0 for no {tier} tier")

    def rows(self, num_remote: int, num_nodes: int, num_parts: int, row_bytes: int,
             ranked_bytes: np.ndarray | None = None, total_bytes: int = 0) -> tuple[int, int]:
        """(device rows, host rows) for a partition with ``num_remote`` remote vertices: the one
        place a budget becomes rows.

        Rows of one width (``ranked_bytes`` None: an estimate, ``row_bytes`` each): alpha
        caches ``floor(alpha * N / K)`` rows, a tier ``budget // row_bytes``. The rows of a graph
        (:func:`budget_rows`): ``ranked_bytes`` int64 ``[num_remote]`` is the bytes of each
        remote row in the order the rows are taken (by score; a type without features is never
        among them) and ``total_bytes`` the bytes of every feature row of the graph; alpha is
        then ``alpha * total_bytes / K`` bytes (alpha times an average partition's feature rows
        of all types), and each tier takes rows in order while their bytes fit. Counted in rows
        of the mean width, ``total_bytes / N``, so that rows of one width take exactly the rows
        of the first form."""
        if ranked_bytes is None:
            if self.replication is not None:
                if self.replication >= num_parts - 1:  # full replication, also for partitions smaller than N/K
                    return num_remote, 0
                return min(num_remote, int(math.floor(self.replication * num_nodes / num_parts + 1e-9))), 0
            n_device = min(num_remote, self.device_bytes // row_bytes)
            return n_device, min(num_remote - n_device, self.host_bytes // row_bytes)
        spent = np.cumsum(ranked_bytes, dtype=np.int64)
        if self.replication is not None:
            if self.replication >= num_parts - 1:
                return num_remote, 0
            mean_rows = spent / (total_bytes / num_nodes)  # integers when every row has the mean width
            return int(np.searchsorted(mean_rows, self.replication * num_nodes / num_parts + 1e-9, side="right")), 0
        n_device = int(np.searchsorted(spent, self.device_bytes, side="right"))
        used = int(spent[n_device - 1]) if n_device else 0
        return n_device, int(np.searchsorted(spent, used + self.host_bytes, side="right")) - n_device

    def to_json(self) -> dict:
        return {"replication": self.replication, "device_cache_bytes": self.device_bytes, "host_cache_bytes": self.host_bytes}


# Epochs the oracle policy counts and epochs vip-simulation samples when a plan is built: the
# defaults of `salientpp analyze --epochs/--simulation-epochs` and what `salientpp train` uses.
PLAN_EPOCHS = 10
SIMULATION_EPOCHS = 5


@dataclass(frozen=True)
class PlanOptions:
    """Everything a set of plans is built with besides its workloads and data: each field is
    recorded in meta.json, is compared by :func:`check_plan` for a plan at the default
    location, and appears in the default plan name (:func:`default_plan_name`) after its
    ``tag`` when it differs from its default.

    Attributes:
        policy: the policy's registered name.
        budget: the replication factor or the byte budgets.
        device_fraction: share of each partition's own rows on the device.
        seed: the seed of the policy context (tie-breaks, sampled policies).
        epochs: epochs the oracle counts; simulation_epochs: epochs vip-simulation samples.
        vip_method: the VIP estimate of the ``vip`` policy (``None``: the training sampler's
            default, which a :class:`PlanRequest` fills in).
    """

    policy: str
    budget: Budget
    device_fraction: float = field(default=DEVICE_FRACTION, metadata={"tag": "df", "flag": "--device-fraction"})
    seed: int = field(default=0, metadata={"tag": "s", "flag": "--seed"})
    epochs: int = field(default=PLAN_EPOCHS, metadata={"tag": "e", "flag": "--epochs"})
    simulation_epochs: int = field(default=SIMULATION_EPOCHS, metadata={"tag": "se", "flag": "--simulation-epochs"})
    vip_method: str | None = field(default=None, metadata={"tag": "", "flag": "--vip-method"})

    @classmethod
    def of(cls, ctx: PolicyContext, policy: str, budget: Budget, device_fraction: float) -> "PlanOptions":
        """The options of plans built with ``policy``, ``budget`` and ``device_fraction`` in ``ctx``."""
        return cls(policy, budget, device_fraction, ctx.seed, ctx.epochs, ctx.simulation_epochs, ctx.vip_method)

    def changed_fields(self, defaults: "PlanOptions") -> list:
        """The tagged fields (those besides the policy and the budget) whose value differs from ``defaults``'."""
        return [f for f in fields(self) if "tag" in f.metadata and getattr(self, f.name) != getattr(defaults, f.name)]

    def to_json(self) -> dict:
        return {"policy": self.policy, "budget": self.budget.to_json(), "device_fraction": self.device_fraction,
                "seed": self.seed, "epochs": self.epochs, "simulation_epochs": self.simulation_epochs,
                "vip_method": self.vip_method}

    @classmethod
    def from_json(cls, entry: dict) -> "PlanOptions":
        budget = entry["budget"]
        return cls(policy=entry["policy"], device_fraction=float(entry["device_fraction"]), seed=int(entry["seed"]),
                   budget=Budget(budget["replication"], int(budget["device_cache_bytes"]), int(budget["host_cache_bytes"])),
                   # plans of salientpp before 0.1.0's plan request did not record their epochs
                   epochs=entry.get("epochs"), simulation_epochs=entry.get("simulation_epochs"),
                   vip_method=entry["vip_method"])


@dataclass(frozen=True)
class PlanMeta:
    """What a set of plans was built for; shared by the plans of all partitions.

    Attributes:
        workloads: training workload first (its fanouts and batch size bind the trainer).
        options: the policy, budget, device share, seed and epochs (:class:`PlanOptions`).
        row_bytes: bytes of one feature row (``F * itemsize``).
        num_nodes, num_parts: of the partitioned dataset.
        partition_id: :func:`partition_identity` of the partitioned directory.
    """

    workloads: tuple[Workload, ...]
    options: PlanOptions
    row_bytes: int
    num_nodes: int
    num_parts: int
    partition_id: str

    @property
    def training(self) -> Workload:
        """``workloads[0]``: its sampler, seeds, fanouts and batch size bind the trainer."""
        return self.workloads[0]

    def to_json(self) -> dict:
        return {**self.options.to_json(), "workloads": [w.to_json() for w in self.workloads],
                "row_bytes": self.row_bytes, "num_nodes": self.num_nodes, "num_parts": self.num_parts,
                "partition_id": self.partition_id}

    @classmethod
    def from_json(cls, entry: dict) -> "PlanMeta":
        return cls(workloads=tuple(Workload.from_json(w) for w in entry["workloads"]),
                   options=PlanOptions.from_json(entry), row_bytes=int(entry["row_bytes"]),
                   num_nodes=int(entry["num_nodes"]), num_parts=int(entry["num_parts"]),
                   partition_id=entry["partition_id"])


@dataclass
class CachePlan:
    """The cache plan of partition ``part``.

    Attributes:
        part: the partition k.
        device_ids: int64 ``[n_device]`` remote global ids cached in the device tier, by descending score.
        host_ids: int64 ``[n_host]`` remote global ids cached in the host tier, by descending score.
        owned_order: int64 ``[n_k]`` local row indices (``id - offsets[k]``) by descending score.
        num_device_owned: ``floor(device_fraction * n_k)``: rows ``owned_order[:num_device_owned]`` live on the device.
        meta: what the plan was built for (``meta.options.device_fraction``: the share of the local
            rows on the device).
    """

    part: int
    device_ids: np.ndarray
    host_ids: np.ndarray
    owned_order: np.ndarray
    num_device_owned: int
    meta: PlanMeta

    @property
    def num_cached(self) -> int:
        return int(self.device_ids.shape[0] + self.host_ids.shape[0])

    @property
    def device_fraction(self) -> float:
        """The share of the owned rows kept on the device."""
        return self.meta.options.device_fraction

    def slot_map(self) -> np.ndarray:
        """int64 ``[N]``: -1 = not cached, ``0..n_device-1`` device tier slot, ``n_device..`` host tier slot ``- n_device``."""
        slots = np.full(self.meta.num_nodes, -1, dtype=np.int64)
        n_device = self.device_ids.shape[0]
        slots[self.device_ids] = np.arange(n_device, dtype=np.int64)
        slots[self.host_ids] = np.arange(n_device, n_device + self.host_ids.shape[0], dtype=np.int64)
        return slots

    def with_device_fraction(self, device_fraction: float) -> "CachePlan":
        """The same plan with another share of the owned rows on the device (no re-scoring needed)."""
        device_fraction = check_device_fraction(device_fraction)
        return replace(self, meta=replace(self.meta, options=replace(self.meta.options, device_fraction=device_fraction)),
                       num_device_owned=device_owned_rows(device_fraction, int(self.owned_order.shape[0])))


def check_device_fraction(device_fraction: float, what: str = "the device fraction") -> float:
    """``device_fraction`` as a float when it is a real number (not a bool) in [0, 1], else
    :class:`InputError` naming ``what`` (``"--device-fraction"``, ``"device_fraction"``): the one
    rule of the share of a partition's owned rows kept on the device."""
    if isinstance(device_fraction, bool) or not isinstance(device_fraction, numbers.Real) or not (
            0 <= device_fraction <= 1):
        raise InputError(f"{what} must be a number in [0, 1], got {device_fraction!r}; pass e.g. {DEVICE_FRACTION}, "
                         "the default")
    return float(device_fraction)


def device_owned_rows(device_fraction: float, num_owned: int) -> int:
    """``floor(device_fraction * num_owned)``: how many of a partition's own rows (the first of its
    owned order) live on the device."""
    return int(math.floor(device_fraction * num_owned + 1e-9))


def row_bytes_of(dataset) -> int:
    """Bytes of one feature row, ``F * itemsize``; on a typed graph, whose rows differ in width
    (:func:`type_row_bytes`), the widest."""
    return int(type_row_bytes(dataset).max())


def type_row_bytes(dataset) -> np.ndarray:
    """int64 ``[T]``: ``F_t * itemsize`` of a feature row of each node type of a partitioned
    dataset (the schema's order; ``[F * itemsize]`` for a homogeneous one), 0 for a type without
    features, whose rows are learnable embeddings and never cached."""
    schema, files = dataset.schema, dataset.meta["files"]
    out = np.zeros(schema.num_types, dtype=np.int64)
    for t in range(schema.num_types):
        if t == schema.target_index:
            out[t] = dataset.num_features * dataset.feature_dtype.itemsize
        elif t in dataset.feature_types:
            out[t] = dataset.feature_width(t) * np.dtype(files[f"part_0/{feature_file(t)}"]["dtype"]).itemsize
    return out


def node_types(dataset) -> np.ndarray:
    """int64 ``[N]``: the node type of each vertex of a partitioned dataset (``book.type_of``; 0
    on a homogeneous graph, its one type)."""
    return dataset.book.type_of(np.arange(dataset.num_nodes, dtype=np.int64))


def node_row_bytes(dataset) -> np.ndarray:
    """int64 ``[N]``: the bytes of each vertex's feature row, :func:`type_row_bytes` of its type
    (:func:`node_types`)."""
    return type_row_bytes(dataset)[node_types(dataset)]


def cacheable_remote(ctx: PolicyContext, k: int, node_bytes: np.ndarray) -> np.ndarray:
    """int64 ids partition ``k`` may cache: the vertices it does not own whose rows have features
    (``node_bytes`` of :func:`node_row_bytes`)."""
    return np.flatnonzero(ctx.remote_mask(k) & (node_bytes > 0))


def budget_rows(budget: Budget, dataset, ranked: np.ndarray, node_bytes: np.ndarray) -> tuple[int, int]:
    """(device rows, host rows) of ``budget`` when a partition takes the remote rows ``ranked``
    (int64 ids, best first) of ``dataset``: :meth:`Budget.rows` with each row's bytes
    (``node_bytes`` of :func:`node_row_bytes`)."""
    return budget.rows(ranked.size, dataset.num_nodes, dataset.num_parts, row_bytes_of(dataset),
                       node_bytes[ranked], int(node_bytes.sum()))


def smallest_row_bytes(dataset) -> int:
    """The bytes of the narrowest feature row (every row's on a homogeneous graph): a tier's
    budget below it caches nothing (:meth:`Budget.check`)."""
    sizes = type_row_bytes(dataset)
    return int(sizes[sizes > 0].min(initial=sizes.max()))


def build_plans(ctx: PolicyContext, policy: str, budget: Budget, device_fraction: float = 0.0) -> list[CachePlan]:
    """Score every vertex with ``policy`` for each partition and fill the budget with the best remote rows."""
    dataset = ctx.dataset
    device_fraction = check_device_fraction(device_fraction)
    row_bytes = row_bytes_of(dataset)
    budget.check(dataset.num_parts, smallest_row_bytes(dataset))
    node_bytes = node_row_bytes(dataset)
    meta = PlanMeta(workloads=ctx.workloads, options=PlanOptions.of(ctx, policy, budget, device_fraction),
                    row_bytes=row_bytes, num_nodes=dataset.num_nodes, num_parts=dataset.num_parts,
                    partition_id=partition_identity(dataset.meta))
    plans = []
    offsets = dataset.book.offsets
    for k in range(dataset.num_parts):
        scores = policy_scores(ctx, policy, k)
        rng = ctx.rng(k, streams.TIEBREAK_STREAM)
        remote = rank_vertices(scores, cacheable_remote(ctx, k, node_bytes), rng)
        n_gpu, n_cpu = budget_rows(budget, dataset, remote, node_bytes)
        local = rank_vertices(scores, dataset.book.owned(k), rng) - offsets[k]
        plans.append(CachePlan(part=k, device_ids=remote[:n_gpu].copy(), host_ids=remote[n_gpu:n_gpu + n_cpu].copy(),
                               owned_order=local, num_device_owned=device_owned_rows(device_fraction, local.size), meta=meta))
        ctx.forget(k)
    return plans


@dataclass(frozen=True)
class PlanRequest:
    """What a run asks of a cache plan, decided once: ``salientpp train`` derives it from its
    configuration (:func:`~salientpp.train.setup.plan_request`), ``salientpp analyze`` from its
    options (:func:`~salientpp.cache.options.plan_request_from`); choosing, naming, building,
    checking and suggesting a plan (:func:`~salientpp.cache.options.analyze_command`) all read it.

    Attributes:
        workloads: what the cache serves, the training workload first: its sampler, seeds
            (nodes or edges), fanouts and batch size.
        options: the plan's policy, budget, device share, seed and epochs; ``None`` for a plan
            the user chose (``--plan``), which is used with whatever options it has. A
            ``vip_method`` left ``None`` becomes the training sampler's default.
    """

    workloads: tuple[Workload, ...]
    options: PlanOptions | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "workloads", tuple(self.workloads))
        if self.options is not None and self.options.vip_method is None:
            object.__setattr__(self, "options", replace(self.options,
                                                        vip_method=default_method(self.workload.sampler)))

    @property
    def workload(self) -> Workload:
        """The training workload, ``workloads[0]``."""
        return self.workloads[0]

    @property
    def default_options(self) -> PlanOptions:
        """The options of this request's policy and budget with every other field at its default."""
        return PlanRequest(self.workloads, PlanOptions(self.options.policy, self.options.budget)).options

    def default_dir(self, part_dir: str | os.PathLike, name: str | None = None) -> Path:
        """Where ``salientpp analyze`` writes this plan without ``--out``: ``PART_DIR/cache/NAME``,
        NAME by default :func:`default_plan_name`; a given NAME must be one plain directory name."""
        if name is not None and (name in ("", ".", "..") or "/" in name or os.sep in name or "\0" in name):
            raise InputError(f"--name {shown(repr(name))} is not a plain directory name; give a name such as "
                             "my-plan (it is created under PART_DIR/cache/), or a path with --out")
        return Path(part_dir) / "cache" / (name or default_plan_name(self))

    def context(self, dataset, sampler_threads: int = 1, progress: bool = False) -> PolicyContext:
        """The policy context the plan is built in."""
        options = self.options
        return PolicyContext(dataset, self.workloads, seed=options.seed, epochs=options.epochs,
                             simulation_epochs=options.simulation_epochs, vip_method=options.vip_method,
                             sampler_threads=sampler_threads, progress=progress)

    def build_and_save(self, ctx: PolicyContext, out_dir: str | os.PathLike) -> list[CachePlan]:
        """What ``salientpp analyze`` does once its input is checked, and ``salientpp train``
        without ``--plan`` too, so that the plan train builds is the one analyze writes: in
        ``ctx`` (:meth:`context`), score every vertex with the policy, fill the budget for every
        partition (:func:`build_plans`) and write the plans atomically to ``out_dir``
        (:func:`save_plans`; an existing ``out_dir`` is refused with :class:`InputError`, so two
        jobs saving the same plan at once leave exactly one). Returns the plans."""
        options = self.options
        plans = build_plans(ctx, options.policy, options.budget, options.device_fraction)
        if plans[0].meta.options != options or ctx.workloads != self.workloads:
            raise ValueError("build_and_save needs the policy context of the request's own context()")
        save_plans(plans, out_dir)
        return plans


# The longest default plan name: file systems refuse names of more than 255 bytes.
MAX_PLAN_NAME = 128


def default_plan_name(request: "PlanRequest") -> str:
    """``vip-f15-10-5-b1024-r0.1``: the policy, the training workload, the budget, each further
    workload (:func:`workload_tag`: ``-eval-valid.test-f20-20-20-b1024-w0.5`` for sampled
    evaluation every other epoch) and each other option of the request that is not its default
    (``-s3`` for seed 3, ``-e20`` for 20 oracle epochs, ``-cavity`` for another VIP method,
    ``-df0.3`` for another device share), so that plans built differently never share a name. A
    name longer than :data:`MAX_PLAN_NAME` (the fanouts of a deep model) keeps its first
    characters and ends in a digest of the whole name, so distinct plans keep distinct names."""
    options, training = request.options, request.workload
    budget = options.budget
    size = (f"r{budget.replication:g}" if budget.replication is not None
            else f"d{budget.device_bytes}-h{budget.host_bytes}")
    sampler = "" if training.sampler.value == DEFAULT_SAMPLER else f"-{training.sampler.value}"
    if training.edges is not None:
        sampler += "-link"
    others = "".join(f"-{f.metadata['tag']}{shown_option(getattr(options, f.name))}"
                     for f in options.changed_fields(request.default_options))
    served = "".join(workload_tag(workload) for workload in request.workloads[1:])
    name = f"{options.policy}{sampler}-f{fanouts_tag(training)}-b{training.batch_size}-{size}{served}{others}"
    if len(name) <= MAX_PLAN_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"{name[:MAX_PLAN_NAME - len(digest) - 1]}-{digest}"


def workload_tag(workload: Workload) -> str:
    """A workload besides training in a plan's name: ``-eval``, its splits joined by ``.``, its
    fanouts and batch size, then what differs from one pass per epoch of nodes drawn without
    replacement: ``-w0.333333`` (its weight, 6 digits), ``-n100.per-source`` (edge seeds with their negatives),
    ``-replace``, ``-SAMPLER``."""
    tag = f"-eval-{'.'.join(workload.splits)}-f{fanouts_tag(workload)}-b{workload.batch_size}"
    if workload.weight != 1:
        tag += f"-w{workload.weight:g}"
    if workload.edges is not None:
        tag += f"-n{workload.edges.num_negatives}.{workload.edges.negative_sampling.value}"
    if workload.replace:
        tag += "-replace"
    if workload.sampler.value != DEFAULT_SAMPLER:
        tag += f"-{workload.sampler.value}"
    return tag


def shown_option(value) -> str:
    """An option's value as it is typed (``0.3``, not ``0.30000000000000004``), and read back as
    that value: a float that ``:g`` would round (``1/3``) in full."""
    if not isinstance(value, float):
        return str(value)
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


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
            parts.append({"part": plan.part, "num_device": int(plan.device_ids.size), "num_host": int(plan.host_ids.size),
                          "num_owned": int(plan.owned_order.size), "num_device_owned": plan.num_device_owned})
        write_meta(tmp, {"kind": KIND, "salientpp_version": __version__, "format": PLAN_FORMAT, **meta.to_json(),
                         "parts": parts, "files": files})
    return Path(out_dir)


@dataclass(frozen=True)
class PlanInfo:
    """What a plan directory's meta.json says, read and checked without loading the arrays
    (:func:`read_plan_info`, the one reader of a plan's meta.json).

    Attributes:
        path: the plan directory.
        meta: what the plans were built for.
        num_device, num_host, num_owned, num_device_owned: per partition, the rows of the device tier
            and of the host tier, its own rows, and those of them on the device.
        raw: meta.json as read (file checksums included): the plan's identity.
    """

    path: Path
    meta: PlanMeta
    num_device: tuple[int, ...]
    num_host: tuple[int, ...]
    num_owned: tuple[int, ...]
    num_device_owned: tuple[int, ...]
    raw: dict

    @property
    def device_fraction(self) -> float:
        """The share of each partition's own rows on the device."""
        return self.meta.options.device_fraction

    @property
    def max_cached_rows(self) -> int:
        """The most remote rows any partition caches (both tiers)."""
        return max(g + c for g, c in zip(self.num_device, self.num_host))


def read_plan_info(plan_dir: str | os.PathLike) -> PlanInfo:
    """Read a plan directory's meta.json; :class:`InputError` (one sentence) unless it is one."""
    raw = read_meta(plan_dir, KIND)
    if raw.get("format", 1) != PLAN_FORMAT:
        raise InputError(f"the cache plan in {plan_dir} was written by salientpp "
                         f"{shown(str(raw.get('salientpp_version', 'before 0.2')))} in a layout this version cannot "
                         f"read; delete it (rm -r {plan_dir}) and train again, or {FIX}")
    try:
        meta = PlanMeta.from_json(raw)
        counts = [tuple(int(entry[key]) for key in ("num_device", "num_host", "num_owned", "num_device_owned"))
                  for entry in raw["parts"]]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"meta.json in {plan_dir} is incomplete ({shown(str(exc))}); {FIX}") from None
    if len(counts) != meta.num_parts:
        raise InputError(f"meta.json in {plan_dir} describes {len(counts)} partitions but says num_parts is "
                         f"{meta.num_parts}; {FIX}")
    num_device, num_host, num_owned, num_device_owned = (tuple(column) for column in zip(*counts))
    return PlanInfo(Path(plan_dir), meta, num_device, num_host, num_owned, num_device_owned, raw)


def load_plan(plan: PlanInfo | str | os.PathLike, k: int) -> CachePlan:
    """Load partition ``k``'s plan of ``plan`` (a :class:`PlanInfo` already read, or a plan
    directory), its arrays memory-mapped and compared with their checksums.

    Raises :class:`InputError` unless the files match meta.json, ``device_ids`` and ``host_ids``
    are distinct ids in ``[0, N)``, ``owned_order`` is a permutation of ``0..n_k-1`` and
    ``num_device_owned <= n_k``: ids that would index out of bounds never leave here.
    """
    info = plan if isinstance(plan, PlanInfo) else read_plan_info(plan)
    plan_dir, meta = info.path, info.meta
    if not 0 <= k < meta.num_parts:
        raise InputError(f"the cache plan in {plan_dir} has partitions 0..{meta.num_parts - 1}, not {k}")
    arrays = {name: load_listed(plan_dir, f"part_{k}/{name}", info.raw, FIX, ("int64",), 1)
              for name in PLAN_ARRAYS}
    num_owned, num_device_owned = info.num_owned[k], info.num_device_owned[k]
    folder = plan_dir / f"part_{k}"
    order = arrays["owned_order"]
    if order.shape[0] != num_owned or not 0 <= num_device_owned <= num_owned:
        raise InputError(f"meta.json in {plan_dir} gives partition {k} {num_owned} local rows, {num_device_owned} of "
                         f"them on the device, but owned_order.npy has {order.shape[0]}; {FIX}")
    check_permutation(order, num_owned, str(folder / "owned_order.npy"), FIX, what="rows")
    cached = np.concatenate([arrays["device_ids"], arrays["host_ids"]])
    if cached.size and (cached.min() < 0 or cached.max() >= meta.num_nodes):
        raise InputError(f"the cached ids in {folder} lie outside [0, {meta.num_nodes}); {FIX}")
    cached.sort()
    if np.any(cached[1:] == cached[:-1]):
        raise InputError(f"the cached ids in {folder} repeat an id; {FIX}")
    return CachePlan(part=k, num_device_owned=num_device_owned, meta=meta, **arrays)


def load_plans(plan_dir: str | os.PathLike) -> list[CachePlan]:
    """Load the plans of every partition."""
    info = read_plan_info(plan_dir)
    return [load_plan(info, k) for k in range(info.meta.num_parts)]


@dataclass(frozen=True)
class CheckedPlan:
    """A plan that :func:`check_plan`, the one compatibility check, accepted for a partitioned
    dataset: what a feature store opens (:func:`open_plan`) without checking it again."""

    info: PlanInfo

    @property
    def path(self) -> Path:
        return self.info.path


def check_plan(info: PlanInfo, data, request: PlanRequest | None = None) -> CheckedPlan:
    """The one compatibility check of a cache plan: ``info`` as a :class:`CheckedPlan`, or
    :class:`InputError` (one sentence) unless it was built for the partitioned dataset ``data``
    (a :class:`~salientpp.partition.PartitionedDataset`) and serves ``request`` (``None``: any
    workload, as a loader's cache serves any loader of its graph).

    A plan serves the sampler kinds of the distribution it was built for
    (``SamplerKind.distribution``): node-wise and bulk node-wise sampling draw the same batches in
    distribution, so a plan of one serves the other; a LADIES plan serves LADIES only (its fanouts
    are layer sizes). A plan scored for link prediction (edge seeds) serves link training only,
    and the other way round. A request with options (the plan at the default location) must
    match every field of :class:`PlanOptions`. The message says how to build a fitting plan: into
    another directory for a plan the user chose, else in the place of the one found, once it is
    removed (an existing plan directory is never overwritten). A plan of another partitioning is
    blamed only once ``data`` passed :meth:`~salientpp.partition.PartitionedDataset.check_graph`
    (a corrupt partition book or renumbering is the partitioned directory's sentence).
    """
    part_dir, plan_dir, planned = data.path, info.path, info.meta.training

    def rebuild(option: str) -> str:
        if request.options is None:
            return f"build a fitting plan with `salientpp analyze {part_dir} {option} ... --out DIR` and use that"
        return f"remove {plan_dir} and build a fitting plan with `salientpp analyze {part_dir} {option} ...`"

    if partition_identity(data.meta) != info.meta.partition_id:
        data.check_graph()  # a corrupt book or renumbering is the partitioned directory's fault, not the plan's
        raise InputError(f"{plan_dir} was built for another partitioning than {part_dir} (the checksums of its "
                         "rowptr, col, offsets and orig_id are not those the plan recorded); build a plan for it "
                         f"with `salientpp analyze {part_dir} ... --out DIR`")
    if request is None:
        return CheckedPlan(info)
    wanted = request.workload
    if planned.sampler.distribution != wanted.sampler.distribution:
        raise InputError(f"{plan_dir} was built for the {planned.sampler.value} sampler but training uses "
                         f"{wanted.sampler.value}; {rebuild('--sampler ' + wanted.sampler.value)}")
    if (planned.edges is None) != (wanted.edges is None):
        planned_task, task = ("node", "link") if planned.edges is None else ("link", "node")
        raise InputError(f"{plan_dir} was built for {planned_task} seeds but training uses {task} seeds; "
                         f"{rebuild('--task ' + task)}")
    if wanted.fanouts != planned.fanouts:
        raise InputError(f"{plan_dir} was built for fanouts {fanouts_text(planned)} but training uses "
                         f"{fanouts_text(wanted)}; {rebuild('--fanouts ' + shlex.quote(fanouts_text(wanted)))}")
    if wanted.batch_size != planned.batch_size:
        raise InputError(f"{plan_dir} was built for batch size {planned.batch_size} but training uses "
                         f"{wanted.batch_size}; {rebuild(f'--batch-size {wanted.batch_size}')}")
    if request.options is not None:
        if info.meta.workloads[1:] != request.workloads[1:]:
            raise InputError(f"{plan_dir} was built for {served(info.meta.workloads)} but this run asks for a plan of "
                             f"{served(request.workloads)}; train with --plan {plan_dir} to use that plan as it is, or "
                             "remove it so that this run builds the plan of its options")
        for f in fields(request.options):
            theirs, ours = getattr(info.meta.options, f.name), getattr(request.options, f.name)
            if theirs != ours:
                shown_theirs, shown_ours = ((theirs.to_json(), ours.to_json()) if isinstance(ours, Budget)
                                            else (theirs, ours))
                raise InputError(f"{plan_dir} was built with {f.name.replace('_', ' ')} {shown_theirs} but this run "
                                 f"asks for {shown_ours}; train with --plan {plan_dir} to use that plan as it is, or "
                                 "remove it so that this run builds the plan of its options")
    return CheckedPlan(info)


def served(workloads: Sequence[Workload]) -> str:
    """What a plan's ``workloads`` serve, in words: ``training only``, or ``training and
    evaluation with fanouts 20,20 and batch size 1024 over valid,test, 0.5 passes per epoch``."""
    others = [f"evaluation with fanouts {fanouts_text(w)} and batch size {w.batch_size} over {','.join(w.splits)}, "
              f"{shown_option(w.weight)} passes per epoch" for w in workloads[1:]]
    return " and ".join(["training", *others]) if others else "training only"


def open_plan(plan: CheckedPlan | PlanInfo | str | os.PathLike, data) -> CheckedPlan:
    """``plan`` checked for the partitioned dataset ``data`` (any workload): a plan already
    checked as it is, a :class:`PlanInfo` or a plan directory read and checked once here."""
    if isinstance(plan, CheckedPlan):
        return plan
    return check_plan(plan if isinstance(plan, PlanInfo) else read_plan_info(plan), data)


def predicted_rows(ctx: PolicyContext, plans: Sequence[CachePlan]) -> tuple[np.ndarray, np.ndarray]:
    """Analytic remote feature rows per epoch of each partition, float64 ``[K]`` without and with
    each plan's cache (a type without features fetches none). With the cache, the sum runs over
    the remote rows the plan leaves uncached, not the difference of two sums: never negative, and
    exactly 0 when the plan caches every remote row (``--replication 1``)."""
    expected = ctx.expected_accesses()
    node_bytes = node_row_bytes(ctx.dataset)
    no_cache, with_cache = [], []
    for p in plans:
        remote = np.zeros(expected.shape[0], dtype=bool)
        remote[cacheable_remote(ctx, p.part, node_bytes)] = True
        no_cache.append(expected[remote, p.part].sum())
        remote[p.device_ids] = remote[p.host_ids] = False
        with_cache.append(expected[remote, p.part].sum())
    return np.array(no_cache), np.array(with_cache)


def describe(plans: Sequence[CachePlan], node_bytes: np.ndarray) -> str:
    """A short text table of the plans (rows and bytes per tier); ``node_bytes`` (:func:`node_row_bytes`)
    gives each row's bytes."""
    meta = plans[0].meta
    lines = [f"policy {meta.options.policy}, fanouts {fanouts_text(meta.training)}, batch size "
             f"{meta.training.batch_size}, {json.dumps(meta.options.budget.to_json())}, row {meta.row_bytes} bytes",
             f"{'part':>4} {'owned':>10} {'dev owned':>10} {'dev cache':>10} {'host cache':>10} {'cache MiB':>10}"]
    for p in plans:
        mib = int(node_bytes[p.device_ids].sum() + node_bytes[p.host_ids].sum()) / 2**20
        lines.append(f"{p.part:>4} {p.owned_order.size:>10} {p.num_device_owned:>10} {p.device_ids.size:>10} "
                     f"{p.host_ids.size:>10} {mib:>10.1f}")
    return "\n".join(lines)
