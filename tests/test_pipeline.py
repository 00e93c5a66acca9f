"""The pipeline's stage times: wall seconds and the running thread's CPU seconds per stage, so
that a stage waiting for a peer reads apart from one that works."""
from __future__ import annotations

import time

import pytest

from salientpp.distributed.health import Stage
from salientpp.loader.pipeline import InFlight, Pipeline, StageTimes

WAIT_S = 0.02  # per record and stage


class Source:
    stage = Stage.SAMPLE

    def __init__(self, records: int):
        self.step, self.records = 0, records

    def __call__(self) -> InFlight | None:
        if self.step == self.records:
            return None
        self.step += 1
        return InFlight(self.step - 1, None)


class Waits:
    """Sleeps like a stage blocked on a peer's collective."""
    stage = Stage.IDS

    def __call__(self, item: InFlight) -> InFlight:
        time.sleep(WAIT_S)
        return item


class Works:
    """Spins on the CPU like a stage copying rows."""
    stage = Stage.ROWS

    def __call__(self, item: InFlight) -> InFlight:
        end = time.thread_time() + WAIT_S
        while time.thread_time() < end:
            pass
        return item


@pytest.mark.parametrize("depth", [1, 3])
def test_stage_times_tell_a_stage_that_waits_from_one_that_works(depth):
    records = 5
    times = StageTimes()
    steps = [item.step for item in Pipeline(Source(records), [Waits(), Works()], depth, times)]
    assert steps == list(range(records))
    cpu = StageTimes.cpu_key
    waits, works = Waits.stage.value, Works.stage.value  # the stage-time keys
    # Each stage ran 5 times for 20 ms of wall time (sleeping) or of CPU time (spinning).
    assert times[waits] >= records * WAIT_S and times[works] >= records * WAIT_S
    assert times[cpu(works)] >= records * WAIT_S
    # Sleeping takes microseconds of CPU; even a loaded machine leaves that far below half.
    assert times[cpu(waits)] < 0.5 * records * WAIT_S
    # CPU time of one thread never exceeds its wall time.
    for name in (Source.stage.value, waits, works):
        assert times[cpu(name)] <= times[name] + 1e-3
