"""Joining the process group: one rank per partition, gloo on CPU, NCCL on CUDA.

The rank and world come from the environment that :func:`salientpp.distributed.launch` or ``torchrun``
set (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``). Every
collective of the group times out after ``timeout_s``, so a dead peer turns into an error, not
a hang. The rendezvous store stays reachable through :attr:`DistContext.store`, where the ranks
post where they are (:mod:`salientpp.distributed.health`).
"""
from __future__ import annotations

import hashlib
import os
import re
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any
from datetime import timedelta

import torch
import torch.distributed as dist

from ..errors import InputError
from .host_memory import keep_freed_memory
from .threads import local_world_size

ENV_KEYS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
RESTART_ENV = "SALIENTPP_RESTART_COUNT"


@dataclass(frozen=True)
class DistContext:
    """Where this process stands in the job.

    Attributes:
        rank, world_size: this process's rank and the number of ranks (= partitions).
        local_rank: index among the ranks of this machine (selects the CUDA device).
        device: where the model and the device tiers of the feature store live.
        comm_device: where tensors handed to collectives must live (CPU for gloo, the GPU for NCCL).
        backend: ``"gloo"`` or ``"nccl"``; ``None`` for a single process without a group.
        exchange_group: a second group for the feature exchange, so its all-to-alls never
            interleave with DDP's all-reduces in one sequence of collectives.
        count_group: the group of the exchange's counts, which must reach the host as split sizes:
            with NCCL a gloo group, so they travel through host memory and no device-to-host
            copy waits for the GPU; with gloo the exchange group.
        store: the rendezvous key-value store (a ``PrefixStore`` for salientpp's own keys).
        timeout_s: the timeout of every collective and store wait.
        attempt: how many times the job has been restarted (0 on the first run).
    """

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    comm_device: torch.device
    backend: str | None
    exchange_group: Any = None
    count_group: Any = None
    store: Any = None
    timeout_s: float = 120.0
    attempt: int = 0

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def env_is_distributed() -> bool:
    """True when a launcher (ours or torchrun) has set the rendezvous variables."""
    return all(key in os.environ for key in ENV_KEYS)


def restart_count() -> int:
    """How many times this job has been restarted: torchrun's ``TORCHELASTIC_RESTART_COUNT`` or
    the local launcher's ``SALIENTPP_RESTART_COUNT`` (0 when neither is set)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or os.environ.get(RESTART_ENV) or 0)


def _join_start(store, rank: int, world: int, timeout_s: float) -> tuple[str, int]:
    """Agree with every rank of this start of the job on a store prefix of its own, and on how
    many times the job was restarted before it.

    torchrun's agents keep one store across restarts, so keys of an earlier start (the dead ranks'
    addresses) must not be read by this one. ``TORCHELASTIC_RESTART_COUNT`` cannot name the start:
    it counts the restarts of this machine's agent only, and an agent whose workers were still
    healthy restarts them without counting when another machine's agent comes back to the
    rendezvous, so two ranks of one start can see different counts. Instead each rank posts a
    fresh random token, and the ranks read all tokens until every rank's view agrees (a rank's own
    entry in its view is always fresh, so agreeing views hold only fresh tokens). The restart
    count is the largest any rank sees or, in torchrun's lasting store, the number of earlier starts.
    """
    hello = [f"salientpp-start/hello/{r}" for r in range(world)]
    views = [f"salientpp-start/view/{r}" for r in range(world)]
    store.set(hello[rank], uuid.uuid4().hex)
    deadline = time.monotonic() + timeout_s
    while True:
        if store.check(hello):
            view = ",".join(store.get(key).decode() for key in hello)
            store.set(views[rank], view)
            if store.check(views) and all(store.get(key).decode() == view for key in views):
                break
        if time.monotonic() > deadline:
            raise InputError(f"rank {rank} waited {timeout_s:g} s at the rendezvous for the other ranks of this "
                             "start of the job; start every rank (or raise --timeout)")
        time.sleep(0.05)
    prefix = "start-" + hashlib.sha256(view.encode()).hexdigest()[:16]
    counts = [f"{prefix}/restarts/{r}" for r in range(world)]
    store.set(counts[rank], str(restart_count()))
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        if rank == 0:
            store.set(f"{prefix}/earlier-starts", str(int(store.add("salientpp-start/starts", 1)) - 1))
        counts.append(f"{prefix}/earlier-starts")
    store.wait(counts, timedelta(seconds=timeout_s))
    return prefix, max(int(store.get(key)) for key in counts)


def resolve_device(device: str, local_rank: int) -> torch.device:
    """``"cpu"`` or ``"cuda"`` -> the torch device of this rank; InputError when CUDA is absent."""
    if device == "cpu":
        return torch.device("cpu")
    if device == "cuda":
        if not torch.cuda.is_available():
            raise InputError("--device cuda was asked for but torch sees no CUDA GPU; use --device cpu")
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    raise InputError(f"unknown device {device!r}; choose cpu or cuda")


def _default_backend(dev: torch.device, local_rank: int) -> str:
    """NCCL for CUDA, unless this machine runs more ranks than it has GPUs: NCCL cannot put two
    ranks on one GPU, so the ranks then exchange over gloo (and local rank 0 says so)."""
    if dev.type != "cuda":
        return "gloo"
    local_ranks, gpus = local_world_size(), torch.cuda.device_count()
    if local_ranks <= gpus:
        return "nccl"
    if local_rank == 0:
        print(f"salientpp: {local_ranks} ranks share {gpus} GPU{'s' if gpus > 1 else ''} on this machine; NCCL cannot "
              "put two ranks on one GPU, so the ranks exchange over gloo", file=sys.stderr, flush=True)
    return "gloo"


def rendezvous_error(rank: int, world: int, timeout_s: float, cause: str) -> InputError:
    """The sentence for a rendezvous that failed with ``cause``. Rank 0 hosts the store: when it
    times out, the other ranks did not all arrive (its address was fine); another rank that
    times out could not reach rank 0's address."""
    address = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    joined = re.search(r"(\d+)/(\d+) clients joined", cause)
    if joined:
        return InputError(f"only {joined.group(1)} of {world} ranks reached the rendezvous at {address} within "
                          f"{timeout_s:.0f} s; start all {world} ranks (WORLD_SIZE={world}) or raise --timeout")
    return InputError(f"rank {rank} could not reach the rendezvous at {address} within {timeout_s:.0f} s "
                      f"({cause.splitlines()[0] if cause else 'no reason given'}); check MASTER_ADDR and "
                      "MASTER_PORT, and that rank 0 was started")


def init_distributed(device: str = "cpu", timeout_s: float = 120.0, backend: str | None = None,
                     reuse_freed_memory: bool = True) -> DistContext:
    """Join the process group described by the environment, or run alone without one.

    ``backend`` defaults to NCCL for ``device="cuda"`` and gloo otherwise; gloo also works with
    CUDA models (rows then cross through CPU memory). ``reuse_freed_memory`` makes this
    process's host allocator keep freed blocks for the next step instead of returning them to
    the system (:mod:`salientpp.distributed.host_memory`; glibc only), before any of the
    group's threads start.
    """
    if reuse_freed_memory:
        keep_freed_memory()
    attempt = restart_count()
    if not env_is_distributed():
        dev = resolve_device(device, 0)
        return _remember(DistContext(0, 1, 0, dev, torch.device("cpu"), None, timeout_s=timeout_s,
                                     attempt=attempt))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    dev = resolve_device(device, local_rank)
    backend = backend or _default_backend(dev, local_rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    timeout = timedelta(seconds=timeout_s)
    if dist.is_initialized():
        raise RuntimeError("init_distributed was called twice in one process; call shutdown_distributed first")
    try:
        store, _, _ = next(dist.rendezvous("env://", rank, world, timeout=timeout))
    except (RuntimeError, ValueError) as exc:
        raise rendezvous_error(rank, world, timeout_s, str(exc)) from None
    prefix, attempt = _join_start(store, rank, world, timeout_s)
    store = dist.PrefixStore(prefix, store)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout,
                            **({"device_id": dev} if backend == "nccl" else {}))
    comm = dev if backend == "nccl" else torch.device("cpu")
    exchange_group = dist.new_group(backend=backend, timeout=timeout)
    count_group = dist.new_group(backend="gloo", timeout=timeout) if backend == "nccl" else exchange_group
    return _remember(DistContext(rank, world, local_rank, dev, comm, backend, exchange_group, count_group,
                                 dist.PrefixStore("salientpp", store), timeout_s, attempt))


_current: DistContext | None = None


def _remember(ctx: DistContext) -> DistContext:
    global _current
    _current = ctx
    return ctx


def current_context() -> DistContext:
    """The context :func:`init_distributed` returned last in this process; without one, a single
    process on the CPU (what ``init_distributed()`` returns outside a launcher)."""
    if _current is not None:
        return _current
    if env_is_distributed():
        raise InputError("this process was started as one rank of a job (RANK and WORLD_SIZE are set) but "
                         "salientpp.init_distributed() was not called; call it first")
    return init_distributed()


def shutdown_distributed(ctx: DistContext | None = None) -> None:
    """Leave the process group (of ``ctx``, default the current one)."""
    global _current
    ctx = _current if ctx is None else ctx
    if ctx is not None and ctx.distributed and dist.is_initialized():
        dist.destroy_process_group()
    if ctx is _current:
        _current = None
