"""Start K local ranks (like ``torchrun --standalone``) and make them fail together.

Each rank is a fresh (spawned) process that joins a loopback-only process group. The parent
watches them: when one raises or dies, the others are terminated at once and the parent raises,
so a failure on one rank never leaves the rest waiting in a collective. The ranks also die with
the parent: the kernel sends them SIGKILL when it dies (``PR_SET_PDEATHSIG``; a watchdog thread
where that is unavailable), so a launcher killed by ``scancel``, ``docker stop`` or the OOM killer
leaves no rank running. A parent stopped by SIGTERM or Ctrl-C terminates its ranks itself.
"""
from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import socket
import threading
import time
import traceback
from multiprocessing.connection import wait
from typing import Any, Callable

from ..errors import InputError
from .._env import CPP_LOG, OMP_WAIT, set_defaults
from .threads import ThreadBudget

# Seconds a terminated rank gets to exit before it is killed.
_GRACE_S = 5.0
# After a first failure, seconds to wait for the other ranks' reports: a peer of the failing
# rank often fails too ("connection closed"), and the report raised first is the cause.
_REPORT_S = 2.0
# prctl(2) option: the signal this process gets when its parent dies (Linux).
_PR_SET_PDEATHSIG = 1
# Seconds between two looks at the parent where the kernel cannot signal its death.
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
    """Make this process end when ``parent_pid``, its parent, ends.

    On Linux the kernel sends SIGKILL at the parent's death (``PR_SET_PDEATHSIG``); elsewhere a
    daemon thread checks the parent every half second. A parent that died before this call (the
    process was already re-parented) ends this process at once.
    """
    try:
        armed = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        armed = False
    if os.getppid() != parent_pid:
        os._exit(1)
    if not armed:
        def watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(_WATCHDOG_S)
            os._exit(1)
        threading.Thread(target=watch, name="salientpp-parent-watchdog", daemon=True).start()


def _worker(fn: Callable[..., Any], args: tuple, rank: int, world: int, port: int, env: dict[str, str], conn,
            parent_pid: int) -> None:
    die_with_parent(parent_pid)
    os.environ.update(env)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # The default thread budget of one of `world` local ranks; `fn` may apply its own (training
    # applies one with the --threads and --torch-threads overrides).
    ThreadBudget.for_rank(world).apply()
    try:
        result = fn(*args)
    except BaseException as exc:  # everything must reach the parent, which stops the other ranks
        kind = "input" if isinstance(exc, InputError) else "error"
        message = f"{type(exc).__name__}: {exc}" if kind == "error" else str(exc)
        conn.send((kind, message, traceback.format_exc(), time.time()))
        conn.close()
        os._exit(1)
    conn.send(("ok", result, "", time.time()))
    conn.close()


def _stop(procs: list[mp.Process]) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + _GRACE_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def _death(exitcode: int | None) -> str:
    """Why a rank's process ended without a result, from its exit code."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"the process was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            pass
    return f"the process died with exit code {exitcode}"


def launch(fn: Callable[..., Any], args: tuple = (), nprocs: int = 1, timeout_s: float | None = None,
           env: dict[str, str] | None = None) -> list[Any]:
    """Run ``fn(*args)`` on ``nprocs`` local ranks and return their results, rank order.

    ``fn`` and ``args`` must be picklable (a module-level function). Every rank sees ``env``,
    ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1`` and a
    free ``MASTER_PORT``, so :func:`salientpp.distributed.init_distributed` joins the group, and
    starts with the default :class:`~salientpp.distributed.threads.ThreadBudget` of one of
    ``nprocs`` local ranks applied. Raises :class:`InputError` when a rank raised one (same
    sentence), :class:`WorkerError` when a rank raised anything else, died, or the job ran past
    ``timeout_s``; the other ranks are terminated first.
    """
    if nprocs < 1:
        raise InputError(f"the number of processes must be at least 1, got {nprocs}")
    ctx = mp.get_context("spawn")
    port = free_port()
    procs, conns = [], []
    unset = set_defaults(CPP_LOG, OMP_WAIT)  # the ranks inherit them; this process gets its own back
    try:
        for rank in range(nprocs):
            parent_conn, child_conn = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_worker, name=f"salientpp-rank{rank}", daemon=True,
                            args=(fn, args, rank, nprocs, port, env or {}, child_conn, os.getpid()))
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
    try:
        while pending:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                if not failures:
                    failures.append((1, time.time(), WorkerError(min(pending), f"the job ran past its "
                                                                               f"{timeout_s:.0f} s time limit")))
                break
            ready = wait([conns[r] for r in pending] + [procs[r].sentinel for r in pending], remaining)
            for rank in sorted(pending):
                reported = 1
                if conns[rank] in ready or conns[rank].poll():
                    try:
                        kind, value, details, when = conns[rank].recv()
                    except EOFError:  # it died before it could report
                        procs[rank].join(_GRACE_S)
                        kind, value, details, when = "error", _death(procs[rank].exitcode), "", time.time()
                        reported = 0
                elif procs[rank].sentinel in ready:
                    procs[rank].join(_GRACE_S)
                    kind, value, details = "error", _death(procs[rank].exitcode), ""
                    when, reported = time.time(), 0
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
        _stop(procs)
        raise
    _stop(procs)
    if failures:
        failures.sort(key=lambda f: f[:2])
        first = failures[0][2]
        if isinstance(first, WorkerError):
            first.others = [(e.rank, e.message) for _, _, e in failures[1:] if isinstance(e, WorkerError)]
        raise first
    return [results[r] for r in range(nprocs)]
