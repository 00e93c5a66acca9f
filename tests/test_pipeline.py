"""The pipeline's stage times (wall seconds and the running thread's CPU seconds per stage, so
that a stage waiting for a peer reads apart from one that works), the order of its ticks, and
the fetch thread that runs the same ticks off the consumer's thread."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from salientpp.distributed.health import Stage
from salientpp.loader.pipeline import WAIT, FetchThread, InFlight, Pipeline, StageTimes

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


class Threaded(Logged):
    """A logged stage that also notes the thread it ran on."""

    def __init__(self, stage: Stage, log: list, threads: set):
        super().__init__(stage, log)
        self.threads = threads

    def __call__(self, item: InFlight) -> InFlight:
        self.threads.add(threading.current_thread().name)
        return super().__call__(item)


def _chain(log: list, threads: set) -> list:
    return [Threaded(stage, log, threads) for stage in (Stage.COUNTS, Stage.IDS, Stage.ROWS, Stage.ASSEMBLE)]


def _inline_logs(records: int, depth: int) -> list[list]:
    """The stage log of the inline pipeline at the moment the consumer gets each record."""
    log: list = []
    seen = []
    for _ in Pipeline(Source(records), _chain(log, set()), depth):
        seen.append(list(log))
    return seen


@pytest.mark.parametrize("depth", [1, 3])
def test_a_fetch_thread_runs_every_stage_off_the_consumer_one_record_ahead_of_it(depth):
    """The records, the stages and their order are those of the inline pipeline; all of it runs
    on the fetch thread; and while the consumer holds record j the thread has gone exactly as far
    as the inline pipeline goes to hand over record j + 1, however long the consumer dwells."""
    records = 9
    inline = _inline_logs(records, depth)
    log: list = []
    threads: set = set()
    steps = []
    for item in FetchThread(Pipeline(Source(records), _chain(log, threads), depth), torch.device("cpu")):
        steps.append(item.step)
        time.sleep(0.01)  # room for a thread that would run further ahead than allowed
        assert log == inline[min(item.step + 1, records - 1)], item.step
    assert steps == list(range(records))
    assert threads == {"salientpp-fetch"}
    assert not [t for t in threading.enumerate() if t.name == "salientpp-fetch"]  # joined at the end


@pytest.mark.parametrize("stop_after", [0, 3])
def test_a_consumer_that_stops_early_leaves_the_fetch_thread_exactly_one_record_further(stop_after):
    """What a rank's fetch thread runs after its loop stops depends on the step it stopped at,
    not on timing: every rank that stops there finishes the same collectives."""
    inline = _inline_logs(9, 3)
    for dwell in (0.0, 0.01):
        log: list = []
        fetch = FetchThread(Pipeline(Source(9), _chain(log, set()), 3), torch.device("cpu"))
        for item in fetch:
            time.sleep(dwell)
            if item.step == stop_after:
                break
        fetch.close()
        assert log == inline[stop_after + 1]
        assert not [t for t in threading.enumerate() if t.name == "salientpp-fetch"]


class Fails(Logged):
    def __call__(self, item: InFlight) -> InFlight:
        if item.step == 2:
            raise RuntimeError("peer gone")
        return super().__call__(item)


def test_an_error_on_the_fetch_thread_is_raised_in_the_consumer_after_the_records_before_it():
    log: list = []
    got = []
    with pytest.raises(RuntimeError, match="peer gone"):
        for item in FetchThread(Pipeline(Source(6), [Fails(Stage.ROWS, log)], 1), torch.device("cpu")):
            got.append(item.step)
    assert got == [0, 1]
    assert not [t for t in threading.enumerate() if t.name == "salientpp-fetch"]


def test_the_consumer_s_wait_for_the_fetch_thread_is_timed():
    """A stage that sleeps 20 ms per record on the fetch thread, and a consumer that does no
    work: the consumer waits about the stage's time for every record."""
    times = StageTimes()
    list(FetchThread(Pipeline(Source(5), [Waits()], 1, times), torch.device("cpu")))
    assert times[WAIT] >= 0.9 * 5 * WAIT_S
    assert times[Waits.stage.value] >= 5 * WAIT_S
