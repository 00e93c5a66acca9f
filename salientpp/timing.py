"""Timing a callable: the one helper the benchmarks and the full-graph calibration share."""
from __future__ import annotations

import statistics
import time
from typing import Callable


def median_seconds(run: Callable[[], None], repeats: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """Median of ``clock`` seconds over ``repeats`` calls of ``run``, after one warm-up call.

    ``clock`` is ``time.perf_counter`` for wall time, or ``time.process_time`` for the CPU
    seconds of the whole process (every thread), which do not grow when other jobs share the cores.
    """
    run()
    times = []
    for _ in range(repeats):
        start = clock()
        run()
        times.append(clock() - start)
    return statistics.median(times)
