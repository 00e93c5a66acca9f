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


class Logged:
    """A stage that logs ``(stage, step)`` when it runs."""

    def __init__(self, stage: Stage, log: list):
        self.stage, self.log = stage, log

    def __call__(self, item: InFlight) -> InFlight:
        self.log.append((self.stage.value, item.step))
        return item


@pytest.mark.parametrize("stages", [2, 4])
def test_with_as_many_records_in_flight_as_stages_every_tick_hands_one_over(stages):
    """The chain stays full: once filled, a record leaves after every tick, and each record's
    last stage runs in the tick after its second-to-last (so a collective the one starts has a
    whole model step to finish before the other waits for it)."""
    log: list = []
    chain = [Logged(stage, log) for stage in (Stage.COUNTS, Stage.IDS, Stage.ROWS, Stage.ASSEMBLE)[-stages:]]
    records = 12
    for item in Pipeline(Source(records), chain, stages):
        log.append(("model", item.step))
    assert [step for name, step in log if name == "model"] == list(range(records))
    last, before_last = chain[-1].stage.value, chain[-2].stage.value
    for step in range(1, records):  # after the first, a model step lies between the two
        assert log.index((before_last, step)) < log.index(("model", step - 1)) < log.index((last, step)), log
