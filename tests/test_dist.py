"""Launcher failure semantics and the all-to-all row exchange (gloo, loopback, CPU)."""
from __future__ import annotations

import multiprocessing
import os
import sys
import time
from multiprocessing import resource_tracker
from multiprocessing.synchronize import sem_unlink

import numpy as np
import pytest
import torch
import torch.distributed as dist

from salientpp.distributed import FeatureStore, RowExchange, WorkerError, init_distributed, launch, shutdown_distributed
from salientpp.errors import InputError
from salientpp.partition import PartitionBook


def _fail_on_rank_one(kind: str) -> int:
    ctx = init_distributed("cpu", timeout_s=60)
    if ctx.rank == 1:
        if kind == "input":
            raise InputError("bad option on rank one")
        raise RuntimeError("boom")
    # Rank 0 waits in a collective that rank 1 never joins: only the launcher can end it.
    dist.barrier()
    shutdown_distributed(ctx)
    return ctx.rank


def test_failing_rank_stops_every_rank_quickly():
    start = time.monotonic()
    with pytest.raises(WorkerError, match="rank 1 failed: RuntimeError: boom") as info:
        launch(_fail_on_rank_one, ("error",), nprocs=2)
    # The collective timeout is 60 s; the launcher must not wait for it.
    assert time.monotonic() - start < 45
    assert "Traceback" in info.value.details


def test_input_error_on_a_rank_reaches_the_caller_as_input_error():
    with pytest.raises(InputError, match="bad option on rank one"):
        launch(_fail_on_rank_one, ("input",), nprocs=2)


_HELD = []  # the semaphores of this process (a rank), kept until it exits


def _hold_a_semaphore(fail: bool) -> str:
    """Create a named semaphore as tqdm creates its lock in a rank that shows a progress bar
    (registered with the launcher's resource tracker; the rank's exit unlinks and unregisters
    it), and make that exit take a second first, so the launcher has the report long before the
    rank ends. Return (or, when ``fail``, raise) the semaphore's name."""
    lock = multiprocessing.RLock()
    _HELD.append(lock)
    multiprocessing.util.Finalize(None, time.sleep, (1.0,), exitpriority=10)  # runs before the unlink
    if fail:
        raise RuntimeError(lock._semlock.name)
    return lock._semlock.name


def _unlinked(name: str) -> bool:
    """Whether the named semaphore is gone; one left behind is removed here (and from the resource
    tracker, which would warn of a leak when this process ends)."""
    try:
        sem_unlink(name)
    except FileNotFoundError:
        return True
    resource_tracker.unregister(name, "semaphore")
    return False


def test_ranks_that_finished_end_on_their_own_and_leave_no_semaphore_to_the_resource_tracker():
    """A SIGTERM of a rank still in its exit (after its report) left tqdm's lock to the resource
    tracker's 'There appear to be 1 leaked semaphore objects' warning at the end of every run."""
    names = launch(_hold_a_semaphore, (False,), nprocs=2)
    assert all(name.startswith("/mp-") for name in names), names
    assert [_unlinked(name) for name in names] == [True, True]


def test_a_rank_that_failed_ends_through_its_exit_and_leaves_no_semaphore():
    with pytest.raises(WorkerError, match="rank 0 failed: RuntimeError: /mp-") as info:
        launch(_hold_a_semaphore, (True,), nprocs=1)
    assert _unlinked(info.value.message.split()[-1])


def _exit_on_rank_one(code) -> int:
    if int(os.environ["RANK"]) == 1:
        sys.exit(code)
    return 7


@pytest.mark.parametrize("code", [0, None])
def test_a_rank_that_calls_sys_exit_0_ends_cleanly_with_no_result(code):
    assert launch(_exit_on_rank_one, (code,), nprocs=2) == [7, None]


@pytest.mark.parametrize("code, shown", [(3, "3"), ("the data is gone", "the data is gone")])
def test_a_rank_that_calls_sys_exit_with_another_code_fails_in_one_line(code, shown):
    with pytest.raises(WorkerError) as info:
        launch(_exit_on_rank_one, (code,), nprocs=2)
    assert str(info.value) == f"rank 1 failed: SystemExit: {shown}" and info.value.others == []


def _loaded_and_numba_threads(module: str) -> tuple[bool, int]:
    """Whether ``module`` was loaded when the rank started (this test module does not import it),
    and the thread count numba read when it was loaded."""
    loaded = module in sys.modules
    import numba

    return loaded, numba.config.NUMBA_NUM_THREADS


def test_launched_ranks_start_with_the_training_modules_and_numba_loaded_as_the_environment_says(monkeypatch):
    """The fork server imports `salientpp train`'s rank modules once (0.3-0.5 s a rank saves); numba
    reads NUMBA_* when it loads, so the server starts again when they change."""
    import numba

    threads = numba.config.NUMBA_NUM_THREADS
    assert launch(_loaded_and_numba_threads, ("salientpp.train.run",), nprocs=1) == [(True, threads)]
    monkeypatch.setenv("NUMBA_NUM_THREADS", str(threads + 1))
    assert launch(_loaded_and_numba_threads, ("salientpp.train.run",), nprocs=1) == [(True, threads + 1)]


def _exchange_worker(num_nodes: int, num_features: int, seed: int) -> bool:
    """Each rank owns a slice of a global feature matrix, caches some remote rows, and fetches
    random remote ids; everything must equal the global matrix."""
    ctx = init_distributed("cpu", timeout_s=60)
    rng = np.random.default_rng(seed)  # same on every rank: the global data
    x = rng.standard_normal((num_nodes, num_features)).astype(np.float32)
    cuts = np.sort(rng.choice(np.arange(1, num_nodes), ctx.world_size - 1, replace=False))
    book = PartitionBook(np.concatenate([[0], cuts, [num_nodes]]).astype(np.int64))
    lo, hi = book.offsets[ctx.rank], book.offsets[ctx.rank + 1]
    local_rng = np.random.default_rng(seed + 1 + ctx.rank)
    order = local_rng.permutation(hi - lo)
    remote = np.setdiff1d(np.arange(num_nodes), np.arange(lo, hi))
    cached = local_rng.choice(remote, remote.size // 3, replace=False)
    slot = np.full(num_nodes, -1, dtype=np.int64)
    slot[cached] = local_rng.permutation(cached.size)
    store = FeatureStore(ctx, book, x[lo:hi], order, num_device_owned=(hi - lo) // 2, cache_slot=slot,
                         num_device_slots=cached.size // 2)
    exchange = RowExchange(ctx, store.serve, num_features, torch.float32)
    store.fill_cache(exchange)
    ok = bool(torch.equal(torch.cat([store.cache_device[0], store.cache_host[0]])[torch.from_numpy(slot[cached])],
                          torch.from_numpy(x[cached])))
    ok &= exchange.stats.received == 0  # filling the cache is not counted as epoch traffic
    for _ in range(3):
        want = np.sort(local_rng.choice(remote, min(remote.size, 50), replace=False))
        counts = torch.from_numpy(np.bincount(book.owner(want), minlength=ctx.world_size))
        rows = exchange.fetch(torch.from_numpy(want), counts).view(-1, num_features)
        ok &= bool(torch.equal(rows, torch.from_numpy(x[want])))
    totals = torch.tensor([exchange.stats.sent, exchange.stats.received], dtype=torch.int64)
    dist.all_reduce(totals)
    ok &= int(totals[0]) == int(totals[1]) > 0  # every row sent is received by someone
    shutdown_distributed(ctx)
    return ok


def test_exchange_and_cache_fill_return_exact_rows():
    # Two ranks here; tests/test_feature_store.py runs the same path on four through the pipeline.
    assert all(launch(_exchange_worker, (97, 5, 2), nprocs=2))
