"""Runs records through the stages with up to ``depth`` of them in flight.

At every tick the oldest record moves first, each in-flight record moves one stage, and a new
one is drawn from the source while fewer than ``depth`` are in flight; a record that has passed
every stage is handed to the consumer. Every rank ticks the same way, so all ranks start their
collectives in the same order. ``depth=1`` runs the stages of one batch one after another
(no overlap), for comparison.
"""
from __future__ import annotations

import time
from collections import defaultdict, deque
from typing import Callable, Iterator, Sequence

from .stages import InFlight


class StageTimes(defaultdict):
    """Seconds spent in each named stage (a ``defaultdict(float)``): the wall time under the
    stage's name, and the CPU time of the thread that ran it under :meth:`cpu_key` of the name.
    Wall time minus CPU time is what the stage waited (for a peer, or for the core)."""

    def __init__(self):
        super().__init__(float)

    @staticmethod
    def cpu_key(name: str) -> str:
        """The key of a stage's CPU seconds, e.g. ``"rows_cpu"``."""
        return f"{name}_cpu"


class Pipeline:
    """``Pipeline(source, stages, depth)``: iterate to get fully processed records, in order.

    Args:
        source: called once per new record; returns an :class:`InFlight` or ``None`` when done.
        stages: callables ``InFlight -> InFlight``, each with a ``name``.
        depth: most records in flight (>= 1).
        times: where to add the wall and CPU seconds spent in each stage (``source.name`` included).
        on_stage: called as ``on_stage(name, step)`` before a stage runs on the record of
            ``step`` (the source: before it draws record ``source.step``).
    """

    def __init__(self, source: Callable[[], InFlight | None], stages: Sequence[Callable[[InFlight], InFlight]],
                 depth: int, times: StageTimes | None = None, on_stage: Callable[[str, int], None] | None = None):
        if depth < 1:
            raise ValueError("the pipeline depth must be at least 1")
        self.source = source
        self.stages = list(stages)
        self.depth = depth
        self.times = StageTimes() if times is None else times
        self.on_stage = on_stage

    def _timed(self, fn, step: int, *args):
        name = getattr(fn, "name", type(fn).__name__)
        if self.on_stage is not None:
            self.on_stage(name, step)
        start, cpu_start = time.perf_counter(), time.thread_time()
        out = fn(*args)
        self.times[name] += time.perf_counter() - start
        self.times[StageTimes.cpu_key(name)] += time.thread_time() - cpu_start
        return out

    def __iter__(self) -> Iterator[InFlight]:
        flight: deque[list] = deque()  # [record, index of its next stage]
        exhausted = False
        while flight or not exhausted:
            for entry in flight:
                entry[0] = self._timed(self.stages[entry[1]], entry[0].step, entry[0])
                entry[1] += 1
            if not exhausted and len(flight) < self.depth:
                item = self._timed(self.source, getattr(self.source, "step", -1))
                if item is None:
                    exhausted = True
                else:
                    flight.append([item, 0])
            if flight and flight[0][1] == len(self.stages):
                yield flight.popleft()[0]
            elif not flight and exhausted:
                return
