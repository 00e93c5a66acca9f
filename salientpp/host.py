"""What this machine gives a process, and how a rank shares it: its cores and its memory, read
from the affinity mask, ``/proc/meminfo`` and the cgroup limits (v1 and v2), and the thread
budget of a rank (:class:`ThreadBudget`). Each command's memory model (:mod:`salientpp.resources`)
reads the machine through this module only.

**The thread budget.** Every rank runs two kinds of CPU threads: torch's intra-op threads (the
model's forward and backward, the feature assembly) and the C++ sampler threads of its loaders.
:class:`ThreadBudget` divides the cores this process may use (:func:`usable_cores`: the affinity
mask, capped by the cgroup CPU quota) among the local ranks, and within a rank between the two
kinds, so that the ranks of one machine never run more busy threads than it has cores.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import InputError, check_int, counted
from .options import Needs, not_applicable

KiB = 2**10
MiB = 2**20
GiB = 2**30

# A cgroup limit at or above this is "no limit" (v1 reports 2**63 - 4096).
_NO_LIMIT = 1 << 60

# Where the machine is read (tests point them at a temporary directory).
MEMINFO = Path("/proc/meminfo")
PROC_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# cgroup v2: "QUOTA PERIOD" or "max PERIOD" (microseconds per period).
CPU_MAX = "cpu.max"
# cgroup v1: the quota (-1: none) and the period, in microseconds.
CFS_QUOTA, CFS_PERIOD = "cpu.cfs_quota_us", "cpu.cfs_period_us"
# The environment variable torchrun and salientpp's launcher set to the number of ranks on this machine.
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"


def format_bytes(size: int) -> str:
    """``"1 byte"``, ``"1,000 bytes"`` below 1 KiB (exact), ``"1.5 KiB"`` below 1 MiB, ``"512 MiB"``
    below 1 GiB, ``"13.4 GiB"`` below 1 TiB, ``"4.0 TiB"``, ``"3,072.0 TiB"`` from there: a size
    that is not 0 never reads as 0."""
    if size >= 1024 * GiB:
        return f"{size / (1024 * GiB):,.1f} TiB"
    if size >= GiB:
        return f"{size / GiB:.1f} GiB"
    if size >= MiB:
        return f"{size / MiB:.0f} MiB"
    return f"{size / KiB:.1f} KiB" if size >= KiB else counted(size, "byte", spec=",")



# ---- memory --------------------------------------------------------------------------------------

def available_memory() -> int:
    """Bytes this process may still allocate: the smaller of the kernel's ``MemAvailable`` and
    the headroom of its memory cgroup (cgroup v2 ``memory.max`` or v1 ``memory.limit_in_bytes``,
    minus the usage without the inactive file cache the kernel reclaims first); a cgroup without
    a limit does not count. Without /proc/meminfo, the free physical pages."""
    available = _meminfo_available()
    headroom = _cgroup_headroom()
    return available if headroom is None else min(available, headroom)


def _meminfo_available() -> int:
    try:
        with open(MEMINFO) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the value is in kB
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _read_int(path: Path) -> int | None:
    """The integer in a cgroup file, or ``None`` when absent, unreadable or ``max``."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _stat_value(path: Path, key: str) -> int:
    """``key``'s value in a cgroup ``memory.stat`` file (0 when absent)."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def cgroup_dirs(controller: str, v2_file: str, v1_file: str, proc_cgroup: Path | None = None,
                cgroup_root: Path | None = None) -> list[tuple[Path, int]]:
    """``(directory, version)`` of each cgroup of this process that can hold ``controller``'s
    limits, in the order ``proc_cgroup`` (default :data:`PROC_CGROUP`) lists them: the v2 cgroup
    (its limit file is ``v2_file``) and the v1 hierarchy that has ``controller`` (``v1_file``), mounted under
    ``cgroup_root`` (default :data:`CGROUP_ROOT`) as ``controller`` or as the hierarchy's
    controller list (``cpu,cpuacct``). A directory whose limit file is missing falls back to the
    hierarchy's root (inside a container the namespace root is the container's cgroup)."""
    proc_cgroup = PROC_CGROUP if proc_cgroup is None else proc_cgroup
    cgroup_root = CGROUP_ROOT if cgroup_root is None else cgroup_root
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    found = []
    for line in lines:
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        relative = path.strip().lstrip("/")
        if number == "0" and controllers == "":
            mounts, limit_file, version = [cgroup_root], v2_file, 2
        elif controller in controllers.split(","):
            mounts, limit_file, version = [cgroup_root / controller, cgroup_root / controllers], v1_file, 1
        else:
            continue
        root = next((mount for mount in mounts if mount.is_dir()), mounts[0])
        found.append((root / relative if (root / relative / limit_file).exists() else root, version))
    return found


def _cgroup_dirs() -> list[tuple[Path, str, str, str]]:
    """``(directory, limit file, usage file, inactive-file key)`` of this process's memory cgroups
    (v2 and v1, :func:`cgroup_dirs`)."""
    files = {2: ("memory.max", "memory.current", "inactive_file"),
             1: ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")}
    return [(directory, *files[version])
            for directory, version in cgroup_dirs("memory", files[2][0], files[1][0])]


def _cgroup_headroom() -> int | None:
    """Limit minus working-set usage of the tightest memory cgroup, or ``None`` without a limit."""
    headrooms = []
    for directory, limit_file, usage_file, inactive_key in _cgroup_dirs():
        limit = _read_int(directory / limit_file)
        if limit is None or limit >= _NO_LIMIT:
            continue
        usage = _read_int(directory / usage_file) or 0
        working_set = max(0, usage - _stat_value(directory / "memory.stat", inactive_key))
        headrooms.append(max(0, limit - working_set))
    return min(headrooms) if headrooms else None


def memory_budget(limit: int | None) -> tuple[int, str]:
    """``(bytes, where that number comes from)``: ``limit`` when given and smaller than
    :func:`available_memory` (``"--memory-limit"``), else the available memory."""
    available = available_memory()
    if limit is not None and limit <= available:
        return limit, "--memory-limit"
    return available, "available memory"


# ---- cores ---------------------------------------------------------------------------------------

def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _quota_cores(directory: Path, version: int) -> int | None:
    """``ceil(quota / period)`` of the CPU quota in a cgroup directory, or ``None`` without one
    (no file, ``max``, a v1 quota of -1, or text that is not a quota)."""
    try:
        if version == 2:
            text = _read(directory / CPU_MAX)
            if text is None:
                return None
            quota, period = (text.split() + [""])[:2]
            if quota == "max":
                return None
            quota_us, period_us = int(quota), int(period)
        else:
            quota_text, period_text = _read(directory / CFS_QUOTA), _read(directory / CFS_PERIOD)
            if quota_text is None or period_text is None:
                return None
            quota_us, period_us = int(quota_text), int(period_text)
    except ValueError:
        return None
    if quota_us <= 0 or period_us <= 0:
        return None
    return max(1, math.ceil(quota_us / period_us))


def cgroup_cpu_limit() -> int | None:
    """The cores the CPU quota of this process's cgroups allows (the tightest quota of its
    cgroup and the cgroups above it, rounded up, at least 1), or ``None`` without a quota."""
    limits = []
    for directory, version in cgroup_dirs("cpu", CPU_MAX, CFS_QUOTA):
        for d in [directory, *(p for p in directory.parents if p.is_relative_to(CGROUP_ROOT))]:
            cores = _quota_cores(d, version)
            if cores is not None:
                limits.append(cores)
    return min(limits) if limits else None


def usable_cores() -> tuple[int, str]:
    """``(cores, where that number comes from)``: the cores in this process's affinity mask
    (``"affinity mask"``; ``"CPU count"`` where there is none), or the cgroup CPU quota when it
    allows fewer (``"cgroup CPU quota"``)."""
    try:
        cores, source = len(os.sched_getaffinity(0)), "affinity mask"
    except (AttributeError, OSError):  # not Linux
        cores, source = os.cpu_count() or 1, "CPU count"
    limit = cgroup_cpu_limit()
    if limit is not None and limit < cores:
        return limit, "cgroup CPU quota"
    return max(1, cores), source


def local_world_size() -> int:
    """The number of ranks on this machine: ``LOCAL_WORLD_SIZE`` as torchrun and
    :func:`~salientpp.distributed.group.launch` set it, 1 when it is absent or not a positive integer."""
    try:
        return max(1, int(os.environ.get(LOCAL_WORLD_SIZE, "1")))
    except ValueError:
        return 1


# ---- the thread budget of a rank -----------------------------------------------------------------

# Per-rank cores per default sampler thread on the CPU: the samplers only fill the time the
# training thread waits, so a few of them keep up with the model (docs/training.md, "Threads").
CORES_PER_SAMPLER = 8
# Per-rank cores per default torch thread on a GPU: the model runs on the device, so its host
# threads only plan and launch, and the other cores sample (docs/training.md, "Threads").
CORES_PER_GPU_TORCH_THREAD = 4
# Why the default pipeline is off on the CPU (the start-up line says it).
PIPELINE_OFF = "the torch threads take every core"
# Batches in flight when the pipeline has a core or a GPU to overlap (ThreadBudget.pipeline_depth).
PIPELINE_DEPTH = 4
# What a fetch thread applies with: it overlaps the fetch stages with the model step, which a
# pipeline of depth 1 does not do (of a pipeline's depth).
PIPELINED = Needs("--pipeline-depth 2 or more (a fetch thread overlaps the fetch stages with the model step)",
                  lambda pipeline_depth: pipeline_depth > 1, instead="use --pipeline-depth 2 or more")


def sampler_read_ahead(pipeline_depth: int, sampler_threads: int) -> int:
    """The most batches a loader's sampler threads sample ahead of its pipeline: the pipeline's
    depth, and with a pipeline (depth above 1) at least one batch per sampler thread, since a
    thread samples one batch at a time. Below that, threads sit idle: on an H100 with 12 sampler
    threads and depth 4, a 1-part epoch of half of ``products`` waited 0.55 s of its 1.19 s for
    batches that four threads sampled at 43 ms each (docs/gpu.md). Without a pipeline the batches
    are sampled one at a time, so that the stages of a batch run one after another."""
    return pipeline_depth if pipeline_depth == 1 else max(pipeline_depth, sampler_threads)


def check_fetch_thread(requested: object) -> bool | None:
    """``requested`` when it is True, False or None (the default), the only values a loader's or
    a config's ``fetch_thread`` takes; else :class:`InputError` in one sentence: a string such as
    ``"off"`` is truthy and would turn the thread on (``--fetch-thread on|off`` is converted by
    :class:`~salientpp.train.config.TrainConfig`'s option)."""
    if requested is not None and not isinstance(requested, bool):
        raise InputError(f"fetch_thread must be True, False or None (the default), got {requested!r}; pass a bool "
                         "(on the command line, --fetch-thread on or off)")
    return requested


@dataclass(frozen=True)
class ThreadBudget:
    """The CPU threads of one rank.

    The rule (:meth:`for_rank`): each of the ``local_ranks`` ranks of a machine gets
    ``c = max(1, usable // local_ranks)`` cores, ``usable`` from :func:`usable_cores`. On the CPU
    it runs ``c`` torch intra-op threads and ``max(1, c // 8)`` C++ sampler threads; on a GPU,
    where the model's work is on the device, ``t = max(1, c // 4)`` torch threads and
    ``max(1, c - t)`` sampler threads. The sampler threads
    run at low priority (5 nice steps below the rank, a third of its threads' weight): they fill
    the time the training thread waits for a collective, and take at most a quarter of a core it
    wants. A loader whose next batch a starved sampler thread has not finished samples it on the
    consuming thread instead of waiting, so the ranks never wait for a sampler. ``torch_threads`` and
    ``sampler_threads`` given to :meth:`for_rank` (``--torch-threads``, ``--sampler-threads``) are used as
    they are. Only when both are given and together fit in ``c`` (``torch_threads +
    sampler_threads <= c``) does every thread have a core of its own; the samplers then run at
    normal priority (:attr:`low_priority_sampler` is False).

    Attributes:
        cores: the cores this process may use (all local ranks together).
        local_ranks: ranks on this machine that share them.
        torch_threads: torch intra-op threads of this rank.
        sampler_threads: C++ sampler threads of each of this rank's loaders.
        source: where ``cores`` comes from (``"affinity mask"``, ``"cgroup CPU quota"``).
        torch_threads_given, sampler_threads_given: whether the counts were overrides.
        gpu: whether the rank's model runs on a GPU (the defaults above and the pipeline's depth).
    """

    cores: int
    local_ranks: int
    torch_threads: int
    sampler_threads: int
    source: str
    torch_threads_given: bool = False
    sampler_threads_given: bool = False
    gpu: bool = False

    @classmethod
    def for_rank(cls, local_ranks: int, torch_threads: int | None = None,
                 sampler_threads: int | None = None, device: str | torch.device = "cpu") -> "ThreadBudget":
        """The budget of one of ``local_ranks`` ranks on this machine whose models run on
        ``device``; ``torch_threads`` and ``sampler_threads`` (positive integers) override the
        defaults."""
        check_int(local_ranks, "the number of local ranks")
        for what, value in (("the number of torch threads", torch_threads),
                            ("the number of sampler threads", sampler_threads)):
            if value is not None:
                check_int(value, what)
        cores, source = usable_cores()
        per_rank = max(1, cores // local_ranks)
        gpu = torch.device(device).type != "cpu"
        if gpu:
            default_torch = max(1, per_rank // CORES_PER_GPU_TORCH_THREAD)
            default_sampler = max(1, per_rank - default_torch)
        else:
            default_torch, default_sampler = per_rank, max(1, per_rank // CORES_PER_SAMPLER)
        return cls(cores, local_ranks,
                   default_torch if torch_threads is None else torch_threads,
                   default_sampler if sampler_threads is None else sampler_threads,
                   source, torch_threads is not None, sampler_threads is not None, gpu)

    @property
    def cores_per_rank(self) -> int:
        """``max(1, cores // local_ranks)``."""
        return max(1, self.cores // self.local_ranks)

    @property
    def spare_cores(self) -> bool:
        """Whether this rank's torch threads leave some of its cores free (``--torch-threads``
        below :attr:`cores_per_rank`)."""
        return self.torch_threads < self.cores_per_rank

    def pipeline_depth(self, requested: int | None = None) -> int:
        """The batches a rank's pipeline keeps in flight: ``requested`` when given, else
        :data:`PIPELINE_DEPTH` when the model runs on a GPU (:attr:`gpu`) or the torch threads leave
        :attr:`spare cores <spare_cores>`, else 1 (the stages of each batch one after another).
        On the CPU the pipeline overlaps CPU work with CPU work, so without a free core its
        sampler and exchange threads only take cores from the model's threads: on 2 cores,
        depth 4 took 0.97-1.07x the serial epoch on ``products`` with 4 ranks, 1.05x with 2
        ranks, and 1.06-1.23x with 1 rank of 2 torch threads on ``small``
        (docs/training-performance.md)."""
        if requested is not None:
            return requested
        return PIPELINE_DEPTH if self.gpu or self.spare_cores else 1

    def fetch_thread(self, pipeline_depth: int, requested: bool | None = None) -> bool:
        """Whether a loader runs its pipeline's fetch stages on a thread of their own
        (:class:`~salientpp.loader.pipeline.FetchThread`): ``requested`` when given, else when the
        model runs on a GPU and the pipeline overlaps (``pipeline_depth`` above 1). On a GPU the
        training thread is the bottleneck: it launches the step's kernels, and inline the fetch
        stages' host work (0.85 ms a batch on an H100) adds to every step (docs/gpu.md). On the
        CPU the stages run inline, where the pipeline's figures were measured. A fetch thread
        overlaps, so it needs a pipeline: :class:`InputError` for ``requested`` True at depth 1,
        and for a ``requested`` that is not a bool or None (:func:`check_fetch_thread`)."""
        requested = check_fetch_thread(requested)
        if requested and not PIPELINED.holds(pipeline_depth):
            raise not_applicable("--fetch-thread on", PIPELINED)
        return (self.gpu and PIPELINED.holds(pipeline_depth)) if requested is None else requested

    @property
    def low_priority_sampler(self) -> bool:
        """Whether the sampler threads run at low priority: unless both counts were given and
        fit in this rank's cores together."""
        return not (self.torch_threads_given and self.sampler_threads_given
                    and self.torch_threads + self.sampler_threads <= self.cores_per_rank)

    def describe(self, samples: bool = True, pipeline_depth: int | None = None, fetch_thread: bool | None = None) -> str:
        """The start-up line, e.g. ``threads: 2 cores (affinity mask) for 2 local ranks: 1 torch
        intra-op thread and 1 low-priority sampler thread per rank; pipeline off: the torch
        threads take every core (--pipeline-depth sets it)``, with the :meth:`pipeline_depth` of
        ``pipeline_depth`` (the requested one; ``None``: the default) and whether the
        :meth:`fetch_thread` of ``fetch_thread`` (likewise) runs the fetch stages; without the
        sampler threads and the pipeline when the run ``samples`` nothing (full-graph training)."""
        torch_part = counted(self.torch_threads, "torch intra-op thread")
        if self.torch_threads_given:
            torch_part += " (set by --torch-threads)"
        head = f"threads: {counted(self.cores, 'core')} ({self.source}) for {counted(self.local_ranks, 'local rank')}: "
        if not samples:
            return f"{head}{torch_part} per rank"
        priority = "low-priority" if self.low_priority_sampler else "normal-priority"
        sampler_part = counted(self.sampler_threads, f"{priority} sampler thread")
        if self.sampler_threads_given:
            sampler_part += " (set by --sampler-threads)"
        depth = self.pipeline_depth(pipeline_depth)
        if pipeline_depth is not None:
            pipeline = f"pipeline depth {depth} (as given)"
        elif depth == 1:
            pipeline = f"pipeline off: {PIPELINE_OFF} (--pipeline-depth sets it)"
        else:
            pipeline = f"pipeline depth {depth}"
        if self.fetch_thread(depth, fetch_thread):
            pipeline += ", fetch stages on a thread of their own"
        return f"{head}{torch_part} and {sampler_part} per rank; {pipeline}"

    def apply(self) -> None:
        """Set torch's intra-op threads to :attr:`torch_threads` and its inter-op threads to 1
        (the latter only before this process's first parallel work: torch refuses it later)."""
        torch.set_num_threads(self.torch_threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # parallel work has started, or it was set before
            pass
