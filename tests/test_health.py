"""A rank's position costs the rendezvous store nothing per batch: it is kept in memory and
published by a thread on a timer, on failure or when asked, and a peer's failure report still
names the stage a stuck rank is in."""
from __future__ import annotations

import dataclasses
import shutil
import threading
import time
from collections import Counter

import pytest
import torch

import salientpp
from salientpp.distributed import DistContext, init_distributed, launch
from salientpp.distributed.health import (MIN_PUBLISH_S, PUBLISH_S, PUBLISHER_THREAD, Health, Stage,
                                         publish_period)
from salientpp.train import TrainConfig

from trainers import rank_trainer

STEADY_FROM = 2  # the intervals before (start-up, the first batch, the first model step) are warm-up


class CountingStore:
    """A store that counts the calls of every method of the store it wraps, per calling thread's
    name (its publishing thread is :data:`PUBLISHER_THREAD`)."""

    def __init__(self, store):
        self.store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name):
        method = getattr(self.store, name)

        def counted(*args, **kwargs):
            self.calls[threading.current_thread().name] += 1
            return method(*args, **kwargs)
        return counted


def _store_calls_of_each_step(part_dir: str) -> list[Counter]:
    """In a rank: one epoch of the default built-in trainer (but for the batch size) on a counting
    store. Element ``i`` counts the store calls, per thread name, from the model step of batch
    ``i - 1`` to that of batch ``i`` (element 0: from the epoch's start; the last: to its end)."""
    ctx = init_distributed("cpu", timeout_s=120)
    store = CountingStore(ctx.rendezvous_store)
    trainer = rank_trainer(TrainConfig(part_dir, batch_size=16, progress=False),
                           dataclasses.replace(ctx, rendezvous_store=store))
    steps, forward = [], trainer.forward

    def step_then_forward(batch):  # each model step starts the next interval
        steps.append(Counter(store.calls))
        return forward(batch)

    trainer.forward = step_then_forward
    trainer.train_epoch(0)
    steps.append(Counter(store.calls))
    trainer.finish()
    trainer.health.close()
    salientpp.shutdown_distributed(ctx)
    return [after - before for before, after in zip([Counter()] + steps, steps)]


def test_steady_batches_of_a_training_epoch_make_no_store_calls(tiny_partitions, tmp_path):
    # The publishing thread's calls are left out: they follow the clock (one per period at most),
    # not the batches, and the test counts what a batch costs.
    part_dir = tmp_path / "p2"  # the default run writes its cache plan into the partitioned directory
    shutil.copytree(tiny_partitions[0] / "p2", part_dir)
    for rank, steps in enumerate(launch(_store_calls_of_each_step, (str(part_dir),), nprocs=2)):
        steady = steps[STEADY_FROM:-1]
        assert len(steady) >= 2, f"rank {rank} ran {len(steps) - 1} steps, too few to reach a steady one"
        per_batch = [{name: n for name, n in calls.items() if name != PUBLISHER_THREAD} for calls in steady]
        assert per_batch == [{}] * len(steady), f"rank {rank}: store calls per batch {per_batch}"


def _pair(timeout_s: float) -> list[Health]:
    store, cpu = torch.distributed.HashStore(), torch.device("cpu")
    return [Health(DistContext(r, 2, r, cpu, cpu, "gloo", rendezvous_store=CountingStore(store), timeout_s=timeout_s))
            for r in range(2)]


def test_entering_a_stage_touches_no_store_and_the_thread_publishes_the_latest_position():
    healths = _pair(timeout_s=0.4)
    try:
        store = healths[1].ctx.rendezvous_store
        for step in range(50):
            for stage in (Stage.SAMPLE, Stage.ROWS, Stage.TRAIN):
                healths[1].enter(stage, 0, step)
        assert set(store.calls) <= {PUBLISHER_THREAD}
        time.sleep(3 * publish_period(0.4))
        assert healths[0].peers()[1] == healths[1].position  # the last one entered, published on the timer
    finally:
        for health in healths:
            health.close()


def test_a_stuck_rank_is_named_in_its_peers_failure_report():
    healths = _pair(timeout_s=0.4)
    try:
        healths[1].enter(Stage.IDS, 2, 7)  # and stays there, as a stalled rank does
        healths[0].enter(Stage.IDS, 2, 7)
        time.sleep(2 * publish_period(0.4))  # less than the timeout its peer waits before failing
        message = str(healths[0].failure(RuntimeError("timed out")))
    finally:
        for health in healths:
            health.close()
    assert "rank 0 stopped in the all-to-all of row ids of epoch 2, step 7" in message
    assert "rank 1 was last in the all-to-all of row ids of epoch 2, step 7" in message


def test_a_failing_rank_publishes_its_position_for_the_peers_that_fail_after_it():
    healths = _pair(timeout_s=1000.0)  # a period far longer than the test: only the failure publishes
    try:
        healths[1].enter(Stage.ROWS, 0, 3)
        healths[1].failure(RuntimeError("boom"))
        assert healths[0].peers()[1] == healths[1].position
    finally:
        for health in healths:
            health.close()


def _publishers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == PUBLISHER_THREAD}


def test_closing_ends_the_publishing_thread():
    before = _publishers()
    healths = _pair(timeout_s=0.4)
    started = _publishers() - before
    assert len(started) == 2 and all(t.daemon for t in started)  # one per rank; never holds the process
    for health in healths:
        health.close()
    assert not any(t.is_alive() for t in started)


def test_a_single_process_starts_no_publishing_thread():
    before = _publishers()
    Health(DistContext(0, 1, 0, torch.device("cpu"), torch.device("cpu"), None, timeout_s=1.0)).close()
    assert _publishers() == before


@pytest.mark.parametrize("timeout_s", [0.001, 4.0, 60.0, 1e6])
def test_positions_are_published_well_within_the_timeout_and_never_in_a_busy_loop(timeout_s):
    period = publish_period(timeout_s)
    assert MIN_PUBLISH_S <= period <= PUBLISH_S
    assert period <= timeout_s / 4 or period == MIN_PUBLISH_S
