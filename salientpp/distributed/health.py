"""Knowing where every rank is, so that a failure names the rank and the stage.

Each rank keeps its position (stage, epoch, step, time) in memory as it enters a stage, and a
daemon thread publishes it to the rendezvous store every :func:`publish_period` (a quarter of the
collective timeout, at most :data:`PUBLISH_S`), so a batch costs the store nothing. When a
collective fails on a rank (a peer died, raised or stalled past the timeout), the rank publishes
its own position, reads its peers' and raises a :class:`StageError` that says where it stopped
and which peer is behind: a stalled peer's thread keeps publishing the stage it is stuck in, and
a peer that died shows the last position its thread published, at most one period old.
:func:`agree` compares facts every rank must share (options, versions, data, cache plans) once
at start-up, instead of letting a mismatch hang a collective later.
"""
from __future__ import annotations

import json
import re
import threading
import time
import weakref
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any, Callable

from ..errors import InputError, shown
from .group import DistContext

# Seconds a failing rank waits for the store's answer to where its peers are (at most the timeout).
PEER_READ_S = 5.0
# The longest time between two publications of a rank's position, and the shortest (a tiny
# --timeout must not turn the publishing thread into a busy loop).
PUBLISH_S, MIN_PUBLISH_S = 2.0, 0.05
PUBLISHER_THREAD = "salientpp-health"


def publish_period(timeout_s: float) -> float:
    """Seconds between two publications of a rank's position: a quarter of the collective
    timeout ``timeout_s`` within [:data:`MIN_PUBLISH_S`, :data:`PUBLISH_S`]. A peer fails a
    timeout after it began to wait for this rank, so by then this rank has published the stage
    it is stuck in (the peer reads for up to :data:`PEER_READ_S` more)."""
    return min(PUBLISH_S, max(MIN_PUBLISH_S, timeout_s / 4))


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
    """This rank's position, published to the store on a timer, and the fault injector called at
    each stage.

    Entering a stage writes the position in memory only. With a store and peers, a daemon thread
    (:data:`PUBLISHER_THREAD`) publishes it every :func:`publish_period` of the context's timeout
    when it changed; :meth:`publish` publishes it now, and :meth:`failure` does before reading the
    peers'. :meth:`close` stops the thread (it also ends once the :class:`Health` is collected).

    Args:
        ctx: the process group context (its ``rendezvous_store`` is ``None`` on a single process).
        inject: called on entering a stage with the new :class:`Position` and :meth:`publish`
            (fault injection: an injected kill publishes first, so the peers read the stage it
            killed the rank in).
    """

    def __init__(self, ctx: DistContext, inject: Callable[[Position, Callable[[], None]], None] | None = None):
        self.ctx = ctx
        self.inject = inject
        self.position = Position(Stage.STARTUP.value, time=time.time())
        self._published: Position | None = None
        self._publishing = threading.Lock()  # one publication at a time, so an older never overwrites a newer
        self._stop = threading.Event()
        self._publisher: threading.Thread | None = None
        if ctx.rendezvous_store is not None and ctx.world_size > 1:
            self._publisher = threading.Thread(target=_publish_until_stopped, name=PUBLISHER_THREAD, daemon=True,
                                               args=(weakref.ref(self), self._stop, publish_period(ctx.timeout_s)))
            self._publisher.start()

    def enter(self, stage: Stage, epoch: int = -1, step: int = -1, evaluation: bool = False) -> None:
        """Note that this rank enters ``stage`` of ``epoch``/``step`` (of an evaluation pass when
        ``evaluation``): in memory, no store traffic; and run the fault injector there."""
        self.position = Position(Stage(stage).value, epoch, step, time.time(), evaluation)
        if self.inject is not None:
            self.inject(self.position, self.publish)

    def publish(self) -> None:
        """Post this rank's position to the store now, unless it is already there (nothing on a
        single process). Raises what the store raises when it is unreachable."""
        store = self.ctx.rendezvous_store
        if store is None:
            return
        with self._publishing:
            position = self.position
            if position is not self._published:
                store.set(f"position/{self.ctx.rank}", json.dumps(asdict(position)))
                self._published = position

    def close(self) -> None:
        """Stop publishing: end the thread and wait for it, for at most :data:`PUBLISH_S` (a
        publication to a store that stopped answering is left to the daemon thread)."""
        self._stop.set()
        if self._publisher is not None:
            self._publisher.join(PUBLISH_S)
            self._publisher = None

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
                self.publish()  # for the peers that fail after this rank
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


def _publish_until_stopped(health_ref: "weakref.ref[Health]", stop: threading.Event, period_s: float) -> None:
    """The publishing thread: publish every ``period_s`` until ``stop`` is set, the
    :class:`Health` is collected or the store fails (the group is gone: nobody reads it any more)."""
    while not stop.wait(period_s):
        health = health_ref()
        if health is None:
            return
        try:
            health.publish()
        except Exception:  # noqa: BLE001 - the store is gone; a failure report says so, not this thread
            return
        del health  # hold no reference while waiting, so the Health can be collected


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
