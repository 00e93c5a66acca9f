"""The processes of a job: starting local ranks (:func:`launch`, like ``torchrun --standalone``)
and each rank joining the process group (:func:`init_distributed`): one rank per partition, gloo
on CPU, NCCL on CUDA.

**Joining.** The rank and world come from the environment that :func:`launch` or ``torchrun``
set (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``). Every
collective of the group times out after ``timeout_s``, so a dead peer turns into an error, not
a hang. The rendezvous store stays reachable through :attr:`DistContext.rendezvous_store`, where the ranks
post where they are (:mod:`salientpp.distributed.health`).

**Launching.** Each rank is a process forked by a fork server that has loaded torch and PyG
once (:func:`rank_start_context`), with the launcher's environment, and joins a loopback-only
process group. The parent watches them: when one raises, dies or stays stopped (SIGSTOP)
past the collective timeout, the others are terminated at once and the parent raises, so a
failure on one rank never leaves the rest waiting in a collective. The ranks also die with the
parent: the fork server ends with it and the kernel sends its ranks SIGKILL then
(``PR_SET_PDEATHSIG``, armed in both), and a watchdog thread checks the parent too, so a
launcher killed by ``scancel``, ``docker stop`` or the OOM killer leaves no rank running, a
stopped one included. A parent stopped by SIGTERM or Ctrl-C terminates its ranks itself; a rank
runs multiprocessing's exit finalizers on SIGTERM, so its named semaphores leave with it. At its
exit the parent reaps the fork server, so the ranks' CPU time and memory count among its
children's (``/usr/bin/time``).
"""
from __future__ import annotations

import atexit
import ctypes
import hashlib
import multiprocessing as mp
import numbers
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing import util as mp_util
from multiprocessing.connection import wait
from typing import Any, Callable, Mapping

import torch
import torch.distributed as dist

from .._env import CPP_LOG, OMP_WAIT, quiet_broken_pipe, set_defaults
from ..errors import InputError, check_int, shown
from ..io import pid_alive
from ..host import ThreadBudget, local_world_size
from .host_memory import keep_freed_memory
from .network import EmulatedLink, Network

ENV_KEYS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
RESTART_ENV = "SALIENTPP_RESTART_COUNT"
# Seconds before a stuck collective or rendezvous fails: of init_distributed and `train --timeout`.
DEFAULT_TIMEOUT_S = 300.0
# The shortest and the longest timeout: torch's collectives keep it in whole milliseconds (a
# shorter one becomes 0), and a longer one is no timeout.
MIN_TIMEOUT_S, MAX_TIMEOUT_S = 0.001, 10**6


def check_timeout(value: float, what: str = "timeout_s") -> float:
    """``value`` as a float when it is a number of seconds (not a bool) in
    [:data:`MIN_TIMEOUT_S`, :data:`MAX_TIMEOUT_S`], else :class:`InputError` naming ``what``
    (``"--timeout"``): the one rule of a collective's timeout."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not MIN_TIMEOUT_S <= value <= MAX_TIMEOUT_S:
        raise InputError(f"{what} must be a number of seconds from {MIN_TIMEOUT_S} (torch counts whole milliseconds) "
                         f"to {MAX_TIMEOUT_S:,}, got {value!r}; pass e.g. {DEFAULT_TIMEOUT_S:g}, the default")
    return float(value)


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
        rendezvous_store: the rendezvous key-value store (a ``PrefixStore`` for salientpp's own
            keys), not the feature store.
        timeout_s: the timeout of every collective and store wait.
        threads: this rank's thread budget (:class:`~salientpp.host.ThreadBudget`), from which
            the loaders take their defaults: sampler threads, their priority, pipeline depth.
        attempt: how many times the job has been restarted (0 on the first run).
        link: this rank's emulated network link (:mod:`salientpp.distributed.network`), which
            every row exchange of the rank shares; ``None``: the exchange runs at loopback speed.
        agree_rounds: how many times this process has run each topic's
            :func:`~salientpp.distributed.health.agree` check (the n-th check of a topic meets
            under keys of its own).
    """

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    comm_device: torch.device
    backend: str | None
    exchange_group: Any = None
    count_group: Any = None
    rendezvous_store: Any = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    attempt: int = 0
    threads: ThreadBudget | None = field(default=None, compare=False)
    link: EmulatedLink | None = field(default=None, compare=False, repr=False)
    agree_rounds: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def env_is_distributed() -> bool:
    """True when a launcher (ours or torchrun) has set the rendezvous variables; :class:`InputError`
    when only some are set (``RANK`` and ``WORLD_SIZE`` without ``MASTER_ADDR``), which would
    otherwise train alone without a word."""
    given = [key for key in ENV_KEYS if key in os.environ]
    if given and len(given) < len(ENV_KEYS):
        missing = [key for key in ENV_KEYS if key not in os.environ]
        raise InputError(f"{' and '.join(given)} {'is' if len(given) == 1 else 'are'} set but {' and '.join(missing)} "
                         f"{'is' if len(missing) == 1 else 'are'} not, so this process cannot join a job; set every "
                         f"one of {', '.join(ENV_KEYS)} (torchrun does), or none to train alone")
    if not given:
        return False
    world = _rendezvous_int("WORLD_SIZE", 1, 2**31 - 1)
    _rendezvous_int("RANK", 0, world - 1)
    if "LOCAL_RANK" in os.environ:
        _rendezvous_int("LOCAL_RANK", 0, world - 1)
    _rendezvous_int("MASTER_PORT", 1, 65535)
    return True


def _env_int(name: str, low: int, high: int, default: str | None = None) -> int | None:
    """The environment variable ``name`` (``default`` when unset or empty) as an integer in
    ``[low, high]``, or ``None`` when it is not one."""
    value = (os.environ.get(name) or default or "").strip()
    number = int(value) if value.lstrip("-").isdigit() and value.isascii() and len(value) < 20 else None
    return number if number is not None and low <= number <= high else None


def _rendezvous_int(name: str, low: int, high: int) -> int:
    """A rendezvous variable as :func:`_env_int` reads it, else :class:`InputError` at once (a rank
    that cannot exist would otherwise wait the whole timeout for its peers)."""
    number = _env_int(name, low, high)
    if number is None:
        raise InputError(f"{name} is {shown(repr(os.environ[name]))}, not an integer in [{low}, {high}], so this "
                         f"process cannot join a job; set the rendezvous variables as torchrun does (RANK in "
                         f"[0, WORLD_SIZE)), or unset them to train alone")
    return number


def check_socket_interface(env: Mapping[str, str] = os.environ) -> None:
    """``GLOO_SOCKET_IFNAME`` of ``env``, when set, must name network interfaces of this machine
    (one, or several separated by commas, as gloo reads it), else :class:`InputError` at once:
    gloo would fail in every rank with its own C++ message."""
    value = env.get("GLOO_SOCKET_IFNAME")
    if not value:
        return
    present = [name for _, name in socket.if_nameindex()]
    missing = [name for name in value.split(",") if name and name not in present]
    if missing:
        raise InputError(f"GLOO_SOCKET_IFNAME is {shown(repr(value))}, but this machine has no network interface "
                         f"{shown(repr(missing[0]))}; set it to one of {', '.join(present)}, or unset it")


def is_first_rank() -> bool:
    """Whether this process is rank 0 of its job (``RANK``), or alone: the process that writes a
    run's outputs and holds their locks."""
    return not env_is_distributed() or int(os.environ["RANK"]) == 0


# Set by torchrun in every worker it starts.
TORCHRUN_ENV = "TORCHELASTIC_RUN_ID"


def is_torchrun_worker() -> bool:
    """Whether torchrun started this process: its run id and the rendezvous variables are set."""
    return TORCHRUN_ENV in os.environ and env_is_distributed()


def may_be_a_restart() -> bool:
    """Whether this process may continue an earlier attempt of its job, as far as it can tell
    alone: the launcher counted a restart, or it is a torchrun worker, whose agent does not
    always count one (only the ranks together know: ``DistContext.attempt``)."""
    return restart_count() > 0 or is_torchrun_worker()


def restart_count() -> int:
    """How many times this job has been restarted: torchrun's ``TORCHELASTIC_RESTART_COUNT`` in a
    torchrun worker, the local launcher's ``SALIENTPP_RESTART_COUNT`` in a rank it started, and 0
    in a process that is no rank of a job (``salientpp train`` itself, a lone rank): a variable
    left in the environment of a fresh run is not a restart."""
    if not env_is_distributed():
        return 0
    name = "TORCHELASTIC_RESTART_COUNT" if TORCHRUN_ENV in os.environ else RESTART_ENV
    count = _env_int(name, 0, 2**31 - 1, default="0")
    if count is None:
        raise InputError(f"{name} is {shown(repr(os.environ[name]))}, not a restart count (a launcher sets it to a "
                         "non-negative integer); unset it")
    return count


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


def init_distributed(device: str = "cpu", timeout_s: float = DEFAULT_TIMEOUT_S, backend: str | None = None,
                     reuse_freed_memory: bool = True, network: Network | None = None,
                     threads: ThreadBudget | None = None) -> DistContext:
    """Join the process group described by the environment, or run alone without one.

    ``backend`` defaults to NCCL for ``device="cuda"`` and gloo otherwise; gloo also works with
    CUDA models (rows then cross through CPU memory). ``reuse_freed_memory`` makes this
    process's host allocator keep freed blocks for the next step instead of returning them to
    the system (:mod:`salientpp.distributed.host_memory`; glibc only), before any of the
    group's threads start. ``network`` emulates a cluster network for the rank's row exchanges
    (:mod:`salientpp.distributed.network`; nothing to emulate on a single process). ``threads``
    is the rank's thread budget the loaders take their defaults from; ``None``: the default
    budget of one of this machine's ``LOCAL_WORLD_SIZE`` ranks on ``device``, the one
    ``salientpp train`` gives a rank without thread options (it is not applied here: torch keeps
    its own thread count unless the caller applies it, ``threads.apply()``).
    """
    timeout_s = check_timeout(timeout_s)
    if reuse_freed_memory:
        keep_freed_memory()
    attempt = restart_count()
    if not env_is_distributed():
        dev = resolve_device(device, 0)
        return DistContext(0, 1, 0, dev, torch.device("cpu"), None, timeout_s=timeout_s, attempt=attempt,
                           threads=threads or ThreadBudget.for_rank(local_world_size(), device=dev))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    dev = resolve_device(device, local_rank)
    backend = backend or _default_backend(dev, local_rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    timeout = timedelta(seconds=timeout_s)
    if dist.is_initialized():
        raise RuntimeError("init_distributed was called twice in one process; call shutdown_distributed first")
    check_socket_interface()
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
    return DistContext(rank, world, local_rank, dev, comm, backend, exchange_group, count_group,
                       dist.PrefixStore("salientpp", store), timeout_s, attempt,
                       threads or ThreadBudget.for_rank(local_world_size(), device=dev),
                       None if network is None else EmulatedLink(network))


def shutdown_distributed(ctx: DistContext | None = None) -> None:
    """Leave the process group, if this process joined one (``ctx``, when given, says whether it
    did: a single-process context has nothing to leave)."""
    if (ctx is None or ctx.distributed) and dist.is_initialized():
        dist.destroy_process_group()


# ---- launching local ranks -----------------------------------------------------------------------

# Seconds a terminated rank gets to exit before it is killed.
_GRACE_S = 5.0
# After a first failure, seconds to wait for the other ranks' reports: a peer of the failing
# rank often fails too ("connection closed"), and the report raised first is the cause.
_REPORT_S = 2.0
# prctl(2) option: the signal this process gets when its parent dies (Linux).
_PR_SET_PDEATHSIG = 1
# Seconds between two looks at what no signal reports: a rank's parent, where the kernel cannot
# signal its death; whether a rank is stopped.
_WATCHDOG_S = 0.5


class WorkerError(RuntimeError):
    """A rank raised or died; ``rank`` is the first one that failed, ``details`` its traceback,
    ``others`` the ``(rank, message)`` reports of ranks that failed after it (most often because
    of it: they name the stage where they lost it)."""

    def __init__(self, rank: int, message: str, details: str = ""):
        super().__init__(f"rank {rank} failed: {message}")
        self.rank = rank
        self.message = message
        self.details = details
        self.others: list[tuple[int, str]] = []


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def die_with_parent(parent_pid: int) -> None:
    """Make this process end when ``parent_pid`` ends: its parent, or (a rank started by the fork
    server, :func:`launch`) the launcher that asked for it.

    On Linux the kernel sends SIGKILL at the death of the process's parent (``PR_SET_PDEATHSIG``;
    the fork server itself ends with the launcher); a daemon thread checks ``parent_pid`` every
    half second where that is not the parent, or the kernel cannot arm it. A ``parent_pid`` that
    died before this call ends this process at once.
    """
    try:
        armed = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        armed = False
    if not pid_alive(parent_pid) or (os.getppid() == 1 and parent_pid != 1):
        os._exit(1)
    if not armed or os.getppid() != parent_pid:
        def watch() -> None:
            while pid_alive(parent_pid) and os.getppid() != 1:
                time.sleep(_WATCHDOG_S)
            os._exit(1)
        threading.Thread(target=watch, name="salientpp-parent-watchdog", daemon=True).start()


class _LauncherFd:
    """A file descriptor of the launcher (its stdout or stderr as they are at launch, which a
    test's capture may have redirected), handed to a rank whatever process forks it: pickled
    while the rank is started, it arrives in the rank as that rank's own copy (an ``int``)."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        return _LauncherFd._received, (mp.reduction.DupFd(self.fd),)

    @staticmethod
    def _received(dup) -> int:
        return dup.detach()


def _worker(fn: Callable[..., Any], args: tuple, rank: int, world: int, port: int, env: dict[str, str], conn,
            parent_pid: int, stdio: tuple[int, int]) -> None:
    die_with_parent(parent_pid)
    signal.signal(signal.SIGTERM, _end_on_sigterm)
    for fd, target in zip(stdio, (1, 2)):  # the launcher's stdout and stderr, not the fork server's
        os.dup2(fd, target)
        os.close(fd)
    quiet_broken_pipe()
    os.environ.clear()  # the launcher's environment, not the fork server's
    os.environ.update(env)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # The default thread budget of one of `world` local ranks; `fn` may apply its own (training
    # applies one with the --sampler-threads and --torch-threads overrides).
    ThreadBudget.for_rank(world).apply()
    try:
        report = ("ok", fn(*args), "")
    except BaseException as exc:  # everything must reach the parent, which stops the other ranks
        report = _report_of(exc)
    try:
        conn.send((*report, time.time()))
    except OSError:  # the launcher is gone (SIGKILLed): nobody to tell, and nothing to print
        os._exit(1)
    conn.close()
    if report[0] != "ok":
        # Through multiprocessing's exit, as a rank that returned: its finalizers unlink the
        # rank's named semaphores (tqdm's lock) and tell the resource tracker (os._exit would not).
        sys.exit(1)


def _end_on_sigterm(signum: int, frame) -> None:
    """How a rank ends on SIGTERM (from its launcher, when a peer failed or the launcher itself was
    stopped): killed by it, as by default, but after multiprocessing's exit finalizers, which the
    default skips: they unlink the rank's named semaphores (tqdm's lock, numba's thread-launch
    lock, made while rank 0 builds a cache plan) and tell the resource tracker, which would
    otherwise warn of them as leaked when the launcher exits."""
    mp_util._run_finalizers(0)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _report_of(exc: BaseException) -> tuple[str, Any, str]:
    """The report ``(kind, value, details)`` of a rank whose function raised ``exc`` (called
    while it is handled): ``sys.exit()`` or ``sys.exit(0)`` is a clean exit with the result
    ``None``, as under torchrun; :class:`InputError` its sentence; anything else (a non-zero
    ``SystemExit`` included) an error ``"Type: message"``. Details: the traceback, if any."""
    if isinstance(exc, SystemExit) and exc.code in (None, 0):
        return "ok", None, ""
    if isinstance(exc, InputError):
        return "input", str(exc), traceback.format_exc()
    return "error", f"{type(exc).__name__}: {exc}", traceback.format_exc()


def _stop(procs: list[mp.Process], working: set[int]) -> None:
    """End every rank: those in ``working`` (no report yet: a peer failed, the job ran past its
    time limit, or the launcher itself is stopped) are terminated at once; the others have
    reported and leave on their own, so their exit runs to the end (a SIGTERM there would leave
    their semaphores to the resource tracker's "leaked semaphore" warning). A rank still alive
    :data:`_GRACE_S` seconds later is killed (SIGKILL, which ends a stopped process too)."""
    for rank in working:
        if procs[rank].is_alive():
            procs[rank].terminate()
            _signal(procs[rank].pid, signal.SIGCONT)  # a stopped process acts on no SIGTERM until continued
    deadline = time.monotonic() + _GRACE_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def _signal(pid: int | None, signum: int) -> None:
    """Send ``signum`` to ``pid``, unless that process has already ended."""
    if pid is not None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def _stopped_s(pid: int | None, since: dict[int, float]) -> float:
    """How long the process ``pid`` has been stopped (SIGSTOP, Ctrl-Z, a debugger's breakpoint),
    as far as the calls that track it in ``since`` (pid -> when first seen stopped) saw; 0 while
    it runs, and where Linux's ``/proc`` does not say."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        state = ""
    if state not in ("T", "t"):
        since.pop(pid, None)
        return 0.0
    now = time.monotonic()
    return now - since.setdefault(pid, now)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _server_end(pid: int | None) -> str | None:
    """How the fork server ``pid`` (a child of this process) ended, without reaping it: ``"was
    killed by SIGKILL"``, ``"exited with code 1"``, or ``None`` while it runs. Its ranks' sentinels
    close as it dies, a moment before the kernel marks it ended: this waits up to a second."""
    if pid is None:
        return None
    deadline = time.monotonic() + 1.0
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped already, or not this process's child
            return None
        if info is not None:
            if info.si_code == os.CLD_EXITED:
                return f"exited with code {info.si_status}"
            return f"was killed by {_signal_name(info.si_status)}"
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


# The exit code multiprocessing gives a rank whose fork server ended before the rank's own.
_SERVER_GONE = 255


def _death(exitcode: int | None, server_pid: int | None = None) -> str:
    """Why a rank's process ended without a result, from its exit code and, when it was started
    by the fork server ``server_pid``, how that server ended."""
    if exitcode is not None and exitcode < 0:
        return f"the process was killed by {_signal_name(-exitcode)}"
    server = _server_end(server_pid) if exitcode == _SERVER_GONE else None
    if server is not None:
        return (f"the fork server that starts the ranks {server}, and its ranks died with it (a SIGKILL "
                "is most often the out-of-memory killer: see dmesg); run the command again, which starts a new one")
    return f"the process died with exit code {exitcode}"


# Modules a local rank starts with already loaded: the fork server that starts the ranks of this
# process loads them once, so each rank saves their import (about 3 s of torch and 3 s of PyG
# per rank on this project's 2-core machine, where two ranks import them at once in 14 s; then
# 0.3-0.5 s of salientpp's training modules and numba, which `salientpp train`'s ranks run: the
# server imports them by name, this package does not).
# First the module that makes the server end with this process (salientpp.distributed.rank_server).
RANK_PRELOAD = ("salientpp.distributed.rank_server", "torch", "torch_geometric", "salientpp.train.run")
# Environment variables that libraries read when they load (OpenMP's, torch's and numba's), which
# a rank of the fork server holds as they were when the server loaded them.
_LOAD_TIME_ENV = re.compile(r"(OMP|GOMP|KMP|MKL|OPENBLAS|TORCH|PYTORCH|CUDA|NCCL|LD|NUMBA)_")
_server_env: dict[str, str] | None = None


def rank_start_context():
    """The multiprocessing context that starts local ranks: a fork server that has imported
    :data:`RANK_PRELOAD` with this process's current load-time environment (OpenMP's wait
    policy, torch's log level, ...; restarted when that environment changed since it started),
    or, where the server cannot be restarted, a fresh interpreter per rank (``spawn``). Never
    ``fork``: this process may hold OpenMP and numba thread pools, which a fork would break."""
    global _server_env
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    if server is None or not hasattr(server, "_stop"):
        return mp.get_context("spawn")
    wanted = {k: v for k, v in os.environ.items() if _LOAD_TIME_ENV.match(k)}
    if server._forkserver_pid is not None and wanted != _server_env:
        server._stop()
    _server_env = wanted
    _short_socket_dir()
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(RANK_PRELOAD))
    return ctx


# The longest path a Unix socket may have (Linux's sun_path: 108 bytes, its final NUL included).
_SOCKET_PATH_MAX = 107
# What multiprocessing adds to the temporary directory for the fork server's socket.
_SOCKET_NAME = "/pymp-xxxxxxxx/listener-xxxxxxxx"
# Short directories for that socket when TMPDIR's path is too long for it, in order.
_SHORT_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


def _short_socket_dir() -> None:
    """Make multiprocessing put the fork server's socket in a directory whose path is short
    enough for a Unix socket: its own under ``TMPDIR`` when that is short enough, else one under
    the first writable of :data:`_SHORT_DIRS`; :class:`InputError` when none is."""
    from multiprocessing import process

    config = process.current_process()._config
    made = config.get("tempdir")
    base = os.path.dirname(made) if made else tempfile.gettempdir()
    if len(os.fsencode(base + _SOCKET_NAME)) <= _SOCKET_PATH_MAX:
        return
    for short in _SHORT_DIRS:
        try:
            tempdir = tempfile.mkdtemp(prefix="pymp-", dir=short)
        except OSError:
            continue
        mp_util.Finalize(None, mp_util._remove_temp_dir, args=(shutil.rmtree, tempdir), exitpriority=-100)
        config["tempdir"] = tempdir
        return
    limit = _SOCKET_PATH_MAX - len(_SOCKET_NAME)
    raise InputError(f"the temporary directory {shown(base)} is {len(os.fsencode(base))} bytes long, too long "
                     f"for the socket through which local ranks start, and none of {', '.join(_SHORT_DIRS)} is "
                     f"writable; set TMPDIR to a writable directory of at most {limit} bytes")


def _server_pid() -> int | None:
    """The process id of the fork server this process started, ``None`` while none runs."""
    from multiprocessing import forkserver

    return getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)


def _end_server() -> None:
    """At this process's exit, end the fork server it started, and reap it. The server has reaped
    every rank it started, so their CPU time and peak memory then count among this process's
    children (``getrusage(RUSAGE_CHILDREN)``, ``/usr/bin/time``), as those of ranks it started
    itself would. SIGKILL, which ends even a stopped server, and the ranks still alive with it."""
    pid = _server_pid()
    if pid is not None:
        _signal(pid, signal.SIGKILL)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:  # reaped already
            pass


atexit.register(_end_server)


def launch(fn: Callable[..., Any], args: tuple = (), nprocs: int = 1, timeout_s: float | None = None,
           env: dict[str, str] | None = None, stall_s: float | None = None) -> list[Any]:
    """Run ``fn(*args)`` on ``nprocs`` local ranks and return their results, rank order.

    ``fn`` and ``args`` must be picklable (a module-level function). The ranks start from a fork
    server with torch and PyG loaded (:func:`rank_start_context`). Every rank sees this process's
    environment and ``env``,
    ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1`` and a
    free ``MASTER_PORT``, so :func:`salientpp.distributed.init_distributed` joins the group, and
    starts with the default :class:`~salientpp.host.ThreadBudget` of one of
    ``nprocs`` local ranks applied. A rank whose ``fn`` calls ``sys.exit(0)`` (or ``sys.exit()``)
    ends cleanly, with the result ``None``, as under torchrun. Raises :class:`InputError` when a
    rank raised one (same sentence) or, before any rank starts, when ``GLOO_SOCKET_IFNAME`` names
    no interface of this machine (:func:`check_socket_interface`); :class:`WorkerError` when a
    rank raised anything else (a non-zero ``sys.exit`` too), died, or the job ran past
    ``timeout_s``, or a rank stayed stopped (SIGSTOP, a debugger's breakpoint) for longer than
    ``stall_s`` (the collective timeout: its peers would time out then, or wait for it without end
    where no timeout applies, as in a read of the store that a stopped rank 0 hosts); the ranks
    still at work are terminated first, a stopped one continued so that it can end. Ranks that
    reported finish their exit before this returns.
    """
    check_int(nprocs, "the number of processes")
    check_socket_interface({**os.environ, **(env or {})})  # before any rank starts, not in each of them
    port = free_port()
    procs, conns = [], []
    unset = set_defaults(CPP_LOG, OMP_WAIT)  # the ranks inherit them; this process gets its own back
    try:
        ctx = rank_start_context()
        rank_env = {**os.environ, **(env or {})}
        for rank in range(nprocs):
            parent_conn, child_conn = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_worker, name=f"salientpp-rank{rank}", daemon=True,
                            args=(fn, args, rank, nprocs, port, rank_env, child_conn, os.getpid(),
                                  (_LauncherFd(1), _LauncherFd(2))))
            p.start()
            child_conn.close()
            procs.append(p)
            conns.append(parent_conn)
    finally:
        for key in unset:
            del os.environ[key]
    results: dict[int, Any] = {}
    # (reported: 0 for a process that died without a report, else 1; when; error). A death is
    # ordered first: the parent notices it only after the fact (its time is when the parent saw
    # it), while a peer's report of the broken collective carries the time the peer raised.
    failures: list[tuple[int, float, WorkerError | InputError]] = []
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pending = set(range(nprocs))
    stopped: dict[int, float] = {}  # pid -> when it was first seen stopped
    stalled: set[int] = set()  # the ranks that failed by staying stopped: still to be terminated
    server_pid = _server_pid() if ctx.get_start_method() == "forkserver" else None
    try:
        while pending:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                if not failures:
                    failures.append((1, time.time(), WorkerError(min(pending), f"the job ran past its "
                                                                               f"{timeout_s:.0f} s time limit")))
                break
            if stall_s is not None:
                remaining = _WATCHDOG_S if remaining is None else min(remaining, _WATCHDOG_S)
            ready = wait([conns[r] for r in pending] + [procs[r].sentinel for r in pending], remaining)
            for rank in sorted(pending):
                reported = 1
                if conns[rank] in ready or conns[rank].poll():
                    try:
                        kind, value, details, when = conns[rank].recv()
                    except EOFError:  # it died before it could report
                        procs[rank].join(_GRACE_S)
                        kind, value, details, when = "error", _death(procs[rank].exitcode, server_pid), "", time.time()
                        reported = 0
                elif procs[rank].sentinel in ready:
                    procs[rank].join(_GRACE_S)
                    kind, value, details = "error", _death(procs[rank].exitcode, server_pid), ""
                    when, reported = time.time(), 0
                elif stall_s is not None and _stopped_s(procs[rank].pid, stopped) > stall_s:
                    kind, value, details = "error", (f"the process was stopped (SIGSTOP, or a debugger) for over "
                                                     f"{stall_s:g} s, the collective timeout"), ""
                    when, reported = time.time(), 0
                    stalled.add(rank)
                else:
                    continue
                pending.discard(rank)
                if kind == "ok":
                    results[rank] = value
                else:
                    error = InputError(value) if kind == "input" else WorkerError(rank, value, details)
                    failures.append((reported, when, error))
            if failures and (deadline is None or deadline > time.monotonic() + _REPORT_S):
                deadline = time.monotonic() + _REPORT_S
    except BaseException:
        _stop(procs, pending | stalled)
        raise
    _stop(procs, pending | stalled)
    if failures:
        failures.sort(key=lambda f: f[:2])
        first = failures[0][2]
        if isinstance(first, WorkerError):
            first.others = [(e.rank, e.message) for _, _, e in failures[1:] if isinstance(e, WorkerError)]
        raise first
    return [results[r] for r in range(nprocs)]
