"""Fault injection: make a rank die, raise or stall at a chosen stage of a chosen step.

The tests of the failure paths (and anyone checking a deployment) set ``SALIENTPP_FAULT``::

    SALIENTPP_FAULT="kill@train:rank=1,epoch=1,step=3"      # SIGKILL rank 1 before step 3's forward
    SALIENTPP_FAULT="raise@rows:rank=0,step=2"              # an exception in the all-to-all of rows
    SALIENTPP_FAULT="delay@ids:rank=1,step=2,seconds=30"    # a 30 s stall, then carry on

Several faults are separated by ``;``. A field left out matches anything (``step`` left out:
every step). ``attempt`` (default 0) is the restart the fault fires in, so a job restarted after
an injected kill does not meet the same kill again. Stages are those of :data:`STAGES`.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Callable

from ..errors import InputError
from .health import Position, Stage

ENV = "SALIENTPP_FAULT"
ACTIONS = ("kill", "raise", "delay")
# Where a rank can be stopped: start-up, the pipeline's stages, the model step, a checkpoint,
# an evaluation pass.
STAGES = tuple(stage.value for stage in Stage)


class InjectedFault(RuntimeError):
    """The exception a ``raise`` fault throws."""


@dataclass(frozen=True)
class Fault:
    """One fault: ``action`` at ``stage`` where rank, epoch and step match (``None`` matches any)."""

    action: str
    stage: str
    rank: int | None = None
    epoch: int | None = None
    step: int | None = None
    attempt: int = 0
    seconds: float = 0.0

    def matches(self, position: Position) -> bool:
        """Whether it fires at this position: its stage, epoch and step, outside an evaluation
        pass (the rank and attempt are chosen by :class:`FaultInjector`, which keeps only the
        faults of its own)."""
        return (position.stage == self.stage and not position.evaluation
                and all(want is None or want == got for want, got in ((self.epoch, position.epoch),
                                                                      (self.step, position.step))))


def parse_faults(text: str) -> tuple[Fault, ...]:
    """``"kill@train:rank=1,step=3; delay@ids:seconds=5"`` -> faults; InputError on a bad spec."""
    faults = []
    for spec in filter(None, (part.strip() for part in text.split(";"))):
        head, _, fields = spec.partition(":")
        action, _, stage = head.partition("@")
        if action not in ACTIONS or stage not in STAGES:
            raise InputError(f"{ENV} entry {spec!r} must look like ACTION@STAGE:key=value,... with ACTION one of "
                             f"{', '.join(ACTIONS)} and STAGE one of {', '.join(STAGES)}")
        values: dict[str, float] = {}
        for item in filter(None, (f.strip() for f in fields.split(","))):
            key, _, value = item.partition("=")
            if key not in ("rank", "epoch", "step", "attempt", "seconds"):
                raise InputError(f"{ENV} entry {spec!r} has an unknown field {key!r}; "
                                 "use rank, epoch, step, attempt or seconds")
            try:
                values[key] = float(value) if key == "seconds" else int(value)
            except ValueError:
                raise InputError(f"{ENV} entry {spec!r}: {key} must be a number, got {value!r}") from None
        faults.append(Fault(action, stage, **values))
    return tuple(faults)


class FaultInjector:
    """Fires the faults meant for one rank in one attempt; a fault fires at most once."""

    def __init__(self, faults: tuple[Fault, ...], rank: int, attempt: int):
        self.pending = [f for f in faults if f.rank in (None, rank) and f.attempt == attempt]
        self.rank = rank

    def __call__(self, position: Position, publish: Callable[[], None] = lambda: None) -> None:
        """Fire the first pending fault that matches ``position``; a kill calls ``publish`` (the
        rank's :meth:`~salientpp.distributed.health.Health.publish`) first, so its peers' reports
        name the stage it was killed in, not the one its publishing thread posted last."""
        for fault in self.pending:
            if fault.matches(position):
                if fault.step is not None:
                    self.pending.remove(fault)
                self._fire(fault, position.epoch, position.step, publish)
                return

    def _fire(self, fault: Fault, epoch: int, step: int, publish: Callable[[], None]) -> None:
        where = f"{fault.stage} of epoch {epoch}, step {step} on rank {self.rank}"
        if fault.action == "kill":
            publish()
            os.kill(os.getpid(), signal.SIGKILL)
        elif fault.action == "raise":
            raise InjectedFault(f"injected fault at {where}")
        else:
            time.sleep(fault.seconds)


def injector_from_env(rank: int, attempt: int) -> FaultInjector | None:
    """The injector for this rank from ``SALIENTPP_FAULT``, or ``None`` when it is unset or empty."""
    faults = parse_faults(os.environ.get(ENV, ""))
    return FaultInjector(faults, rank, attempt) if faults else None
