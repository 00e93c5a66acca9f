"""``median_seconds``: the median of the timed calls, the warm-up call left out, on the clock asked for."""
from __future__ import annotations

import time

from salientpp.timing import median_seconds


def test_median_seconds_leaves_out_the_warm_up_and_reads_the_given_clock():
    durations = iter([100.0, 3.0, 1.0, 2.0])  # the first call is the warm-up
    now = [0.0]

    def run():
        now[0] += next(durations)

    assert median_seconds(run, 3, clock=lambda: now[0]) == 2.0


def test_median_seconds_reads_wall_time_by_default():
    assert median_seconds(lambda: time.sleep(0.02), 2) >= 0.02
