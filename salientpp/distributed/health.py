"""Knowing where every rank is, so that a failure names the rank and the stage.

Each rank posts its position (stage, epoch, step, time) to the rendezvous store as it enters a
stage. When a collective fails on a rank (a peer died, raised or stalled past the timeout), the
rank reads its peers' positions and raises a :class:`StageError` that says where it stopped and
which peer is behind. :func:`agree` compares facts every rank must share (options, versions,
data, cache plans) once at start-up, instead of letting a mismatch hang a collective later.
"""
from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any, Callable

from ..errors import InputError, shown
from .group import DistContext

# Seconds a failing rank waits for the store's answer to where its peers are (at most the timeout).
PEER_READ_S = 5.0


class Stage(str, Enum):
    """Where a rank can be: start-up, the pipeline's stages, the model step, a checkpoint,
    evaluation, and rank 0 writing an epoch's metrics. The values are what rank positions,
    stage times and fault specs (``SALIENTPP_FAULT``) name."""

    STARTUP = "startup"
    SAMPLE = "sample"
    COUNTS = "counts"
    IDS = "ids"
    ROWS = "rows"
    ASSEMBLE = "assemble"
    TRAIN = "train"
    CHECKPOINT = "checkpoint"
    EVAL = "eval"
    REPORT = "report"

    def __str__(self) -> str:
        return self.value


# What a rank is doing in each stage, for messages.
STAGE_TEXT = {
    Stage.STARTUP: "start-up", Stage.SAMPLE: "sampling", Stage.COUNTS: "all-to-all of row counts",
    Stage.IDS: "all-to-all of row ids", Stage.ROWS: "all-to-all of feature rows", Stage.ASSEMBLE: "feature assembly",
    Stage.TRAIN: "forward/backward and gradient all-reduce", Stage.CHECKPOINT: "checkpoint",
    Stage.EVAL: "evaluation", Stage.REPORT: "writing the epoch's metrics",
}


class StageError(RuntimeError):
    """A rank stopped: ``rank`` is the one raising, ``stage`` where it was."""

    def __init__(self, message: str, rank: int, stage: str):
        super().__init__(message)
        self.rank = rank
        self.stage = stage


@dataclass(frozen=True)
class Position:
    """Where a rank was last: a :class:`Stage` (its value), the epoch and step (-1: none), when,
    and whether the stage runs inside an evaluation pass (the pipeline stages of an evaluation
    loader; the stage ``eval`` itself marks the start of the pass)."""

    stage: str
    epoch: int = -1
    step: int = -1
    time: float = 0.0
    evaluation: bool = False

    def describe(self) -> str:
        text = STAGE_TEXT.get(Stage(self.stage), self.stage) + (" (evaluation)" if self.evaluation else "")
        if self.step >= 0:
            return f"the {text} of epoch {self.epoch}, step {self.step}"
        return f"the {text}" + (f" of epoch {self.epoch}" if self.epoch >= 0 else "")


class Health:
    """This rank's position, posted to the store, and the fault injector called at each stage.

    Args:
        ctx: the process group context (its ``rendezvous_store`` is ``None`` on a single process).
        inject: called with the new :class:`Position` on entering a stage (fault injection).
    """

    def __init__(self, ctx: DistContext, inject: Callable[[Position], None] | None = None):
        self.ctx = ctx
        self.inject = inject
        self.position = Position(Stage.STARTUP.value, time=time.time())

    def enter(self, stage: Stage, epoch: int = -1, step: int = -1, evaluation: bool = False) -> None:
        """Post that this rank enters ``stage`` of ``epoch``/``step`` (of an evaluation pass when
        ``evaluation``), and run the fault injector there."""
        self.position = Position(Stage(stage).value, epoch, step, time.time(), evaluation)
        if self.ctx.rendezvous_store is not None:
            self.ctx.rendezvous_store.set(f"position/{self.ctx.rank}", json.dumps(asdict(self.position)))
        if self.inject is not None:
            self.inject(self.position)

    def peers(self) -> dict[int, Position | None]:
        """The last posted position of every other rank (``None``: never posted). Raises
        ``RuntimeError`` when the store is unreachable."""
        out: dict[int, Position | None] = {}
        for rank in range(self.ctx.world_size):
            if rank == self.ctx.rank:
                continue
            key = f"position/{rank}"
            out[rank] = Position(**json.loads(self.ctx.rendezvous_store.get(key))) if self.ctx.rendezvous_store.check([key]) else None
        return out

    def failure(self, exc: BaseException) -> StageError:
        """The error to raise instead of ``exc``: this rank, its stage, the cause, and its peers."""
        pos, now = self.position, time.time()
        # The first line of the cause, without the "[/path/to/source.cc:123] " that gloo puts first.
        cause = re.sub(r"^\[[^\]]*:\d+\]\s*", "", (str(exc).strip().splitlines() or [""])[0])[:300]
        message = (f"rank {self.ctx.rank} stopped in {pos.describe()} after {max(now - pos.time, 0.0):.1f} s "
                   f"({type(exc).__name__}: {cause})")
        if self.ctx.rendezvous_store is not None:
            message += "; " + self._peer_report(now)
        return StageError(message, self.ctx.rank, pos.stage)

    def _peer_report(self, now: float) -> str:
        # The store lives in rank 0's process (or torchrun's agent), and a read from a stopped one
        # waits without end (torch's store applies no timeout to it), so another thread reads.
        answer: list[dict[int, Position | None] | Exception] = []

        def read() -> None:
            try:
                answer.append(self.peers())
            except Exception as exc:
                answer.append(exc)

        reader = threading.Thread(target=read, name="salientpp-peer-report", daemon=True)
        reader.start()
        wait_s = min(self.ctx.timeout_s, PEER_READ_S)
        reader.join(wait_s)
        if not answer:
            return (f"the rendezvous store did not answer within {wait_s:g} s, so rank 0 (which hosts it) has most "
                    "likely stalled")
        peers = answer[0]
        if isinstance(peers, Exception):
            return "the rendezvous store is unreachable, so rank 0 (which hosts it) has most likely died"
        if not peers:
            return "it has no peers"
        stalest = min(peers, key=lambda r: -1.0 if peers[r] is None else peers[r].time)
        parts = [f"rank {r} was last in "
                 + (p.describe() + f" {max(now - p.time, 0.0):.1f} s ago" if p else "start-up")
                 for r, p in sorted(peers.items())]
        return (f"{'; '.join(parts)} (rank {stalest} reported least recently: it has likely died or stalled; "
                f"the collective timeout is {self.ctx.timeout_s:g} s)")


def agree(ctx: DistContext, topic: str, facts: dict[str, Any]) -> None:
    """Check that every rank holds the same ``facts`` (JSON-serialisable); a collective.

    Raises :class:`InputError` naming the first fact (in the order of ``facts``) on which a rank
    differs from rank 0, with both values shortened to a line, or the ranks that did not post
    their facts within the timeout.
    """
    if ctx.rendezvous_store is None or ctx.world_size == 1:
        return
    # The ranks check a topic equally often, so the n-th check of each meets under its own keys.
    check = ctx.agree_rounds.get(topic, 0)
    ctx.agree_rounds[topic] = check + 1
    ctx.rendezvous_store.set(f"agree/{topic}/{check}/{ctx.rank}", json.dumps(facts, default=str))
    keys = [f"agree/{topic}/{check}/{r}" for r in range(ctx.world_size)]
    start = time.monotonic()
    while not ctx.rendezvous_store.check(keys):
        if time.monotonic() - start > ctx.timeout_s:
            missing = [r for r, key in enumerate(keys) if not ctx.rendezvous_store.check([key])]
            raise InputError(f"rank {ctx.rank} waited {ctx.timeout_s:g} s at the {topic} check for rank(s) "
                             f"{', '.join(map(str, missing))}; start every rank of the job (or raise --timeout)")
        time.sleep(0.05)
    reference = json.loads(ctx.rendezvous_store.get(keys[0]))
    for rank in range(1, ctx.world_size):
        theirs = json.loads(ctx.rendezvous_store.get(keys[rank]))
        for key in [*reference, *(key for key in theirs if key not in reference)]:  # rank 0's order first
            if reference.get(key) != theirs.get(key):
                raise InputError(f"rank {rank} has {key} = {shown(repr(theirs.get(key)))} but rank 0 has "
                                 f"{shown(repr(reference.get(key)))}; start every rank with the same {topic}")
