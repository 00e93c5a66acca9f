"""The all-to-all exchange of missing feature rows: counts, then ids, then rows.

Each step is asynchronous: it returns a :class:`Pending` at once and the collective runs while
the caller does other work (gloo runs it on its own threads, NCCL on its stream). Every rank
must start the same steps in the same order; the pipeline guarantees that.

Counts always travel through host memory (the context's ``count_group``, gloo even when rows go
over NCCL): they become the split sizes of the next two all-to-alls, which torch takes as host
integers, so no step ever copies a count back from the GPU and waits for it.

With an emulated network (the context's ``link``, :mod:`salientpp.distributed.network`), every
all-to-all is booked on the rank's link when it starts, and :meth:`Pending.wait` returns only
once the link would have carried its bytes.

A typed graph's rows are the same three all-to-alls, once per batch for every node type: counts
per (owner, type) block, rows type by type in one flat buffer (a homogeneous graph is the one-type
case: counts per owner, rows ``[n, F]``).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable, Sequence

import numpy as np

import torch
import torch.distributed as dist

from .group import DistContext
from .network import EmulatedLink


class Pending:
    """A tensor that is complete once :meth:`wait` returns (``work`` is ``None`` when already
    complete), and not before ``deadline`` (``time.monotonic()``; ``None``: no emulated network)."""

    def __init__(self, value: torch.Tensor, work=None, deadline: float | None = None):
        self._value = value
        self._work = work
        self._deadline = deadline

    def wait(self) -> torch.Tensor:
        if self._work is not None:
            self._work.wait()
            self._work = None
        if self._deadline is not None:
            EmulatedLink.wait_until(self._deadline)
            self._deadline = None
        return self._value


@dataclass
class CommStats:
    """Counters of one epoch (or one evaluation pass) on one rank.

    Rows are counted per batch node: ``owned`` (this rank's partition), ``device_hits`` / ``host_hits``
    (remote rows served by the cache tiers) and ``received`` (remote rows fetched from their
    owners). ``sent`` rows are those this rank served to the others. An exchange of several node
    types (:class:`RowExchange` with per-type widths) also counts ``received_by_type``: the rows
    received of each node type (a list of T ints, in the schema's order; empty for one type).
    """

    owned: int = 0
    device_hits: int = 0
    host_hits: int = 0
    received: int = 0
    sent: int = 0
    bytes_received: int = 0
    bytes_sent: int = 0
    received_by_type: list[int] = field(default_factory=list)

    @classmethod
    def _counters(cls) -> list[str]:
        """The names of the scalar counters (every field but ``received_by_type``)."""
        return [f.name for f in fields(cls) if f.name != "received_by_type"]

    def add(self, other: "CommStats") -> None:
        for name in self._counters():
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.count_by_type(other.received_by_type)

    def count_by_type(self, received: Sequence[int]) -> None:
        """Adds ``received`` (rows of each node type) to :attr:`received_by_type`."""
        if len(received):
            mine = self.received_by_type or [0] * len(received)
            self.received_by_type = [a + int(b) for a, b in zip(mine, received)]

    @property
    def remote(self) -> int:
        """Remote batch nodes: those served by a cache tier plus those fetched."""
        return self.device_hits + self.host_hits + self.received

    def as_dict(self) -> dict[str, float]:
        remote = max(self.remote, 1)
        by_type = {"received_by_type": list(self.received_by_type)} if self.received_by_type else {}
        return {**{name: getattr(self, name) for name in self._counters()}, **by_type,
                "device_hit_rate": self.device_hits / remote, "host_hit_rate": self.host_hits / remote,
                "miss_rate": self.received / remote if self.remote else 0.0}

    def to_tensor(self) -> torch.Tensor:
        """float64 ``[7 + T]``: the scalar counters, then :attr:`received_by_type`."""
        return torch.tensor([getattr(self, name) for name in self._counters()] + list(self.received_by_type),
                            dtype=torch.float64)

    @classmethod
    def from_tensor(cls, values: torch.Tensor) -> "CommStats":
        counts = [int(v) for v in values.tolist()]
        n = len(cls._counters())
        return cls(*counts[:n], received_by_type=counts[n:])

    def summed(self, ctx: DistContext) -> "CommStats":
        """These counters summed over every rank (a collective when distributed)."""
        values = self.to_tensor()
        if ctx.distributed:
            values = values.to(ctx.comm_device)
            dist.all_reduce(values)
        return CommStats.from_tensor(values.cpu())


class RowExchange:
    """Moves feature rows between ranks with ``all_to_all_single``.

    The rows may be of several node types, each of its own width (a homogeneous graph: one type).
    Counts are then per (owner, node type) block of the partition book:
    int64 ``[K * T]``, entry ``k * T + t`` the ids of type ``t`` requested from rank ``k`` (with one
    type, per owner: ``[K]``). The ids travel grouped by owner and by type within an owner
    (ascending global ids are, the book being partition-major and type-minor), so each owner's
    reply is its rows of type 0, then of type 1, ..., in one flat buffer, which
    :func:`row_pieces` views as ``[rows, F_t]`` pieces.

    Args:
        ctx: the process group context.
        serve: ``serve(ids, counts)`` gets ids this rank owns (int64 ``[n]``, on
            ``ctx.comm_device``) grouped by requesting rank and by type within a rank (``counts``
            int64 ``[K * T]`` per block, host; one type: ``[K]``, which a server of one width may
            ignore) and returns their rows in that order on ``ctx.comm_device``: ``sum F_type(id)``
            elements, flat or of any contiguous shape that flattens to them (one type: ``[n, F]``).
        widths: ``F``, the width of every row (one type), or ``F_t`` of each node type (0: a type
            without features, whose ids are never requested).
        dtype: the dtype of every row.
    """

    def __init__(self, ctx: DistContext, serve: Callable[..., torch.Tensor], widths: int | Sequence[int],
                 dtype: torch.dtype):
        self.ctx = ctx
        self.serve = serve
        self.widths = [int(widths)] if isinstance(widths, int) else [int(w) for w in widths]
        self.dtype = dtype
        self.stats = CommStats()

    @property
    def num_types(self) -> int:
        return len(self.widths)

    def _all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_splits: list[int] | None,
                    in_splits: list[int] | None, group=None) -> Pending:
        if not self.ctx.distributed or self.ctx.world_size == 1:
            out.copy_(inp)
            return Pending(out)
        deadline = None
        if self.ctx.link is not None:  # booked when it starts, as a NIC would take it
            deadline = self.ctx.link.reserve(*self._bytes_crossing(out, inp, out_splits, in_splits))
        work = dist.all_to_all_single(out, inp, out_splits, in_splits, group=group or self.ctx.exchange_group,
                                      async_op=True)
        return Pending(out, work, deadline)

    def _bytes_crossing(self, out: torch.Tensor, inp: torch.Tensor, out_splits: list[int] | None,
                        in_splits: list[int] | None) -> tuple[int, int]:
        """``(bytes sent, bytes received)`` of an all-to-all without this rank's part for itself,
        which crosses no link."""
        k, rank = self.ctx.world_size, self.ctx.rank

        def crossing(t: torch.Tensor, splits: list[int] | None) -> int:
            row = (t[0].numel() if t.dim() > 1 and t.shape[0] else 1) * t.element_size()
            rows = int(t.shape[0]) if t.dim() else 1
            own = splits[rank] if splits is not None else rows // k
            return (rows - own) * row
        return crossing(inp, in_splits), crossing(out, out_splits)

    def counts(self, send_counts: torch.Tensor) -> Pending:
        """Start sending how many ids this rank requests from each block (int64 ``[K * T]``,
        host); the result, how many each peer requests from us, is on the host too."""
        send = send_counts.to(torch.int64)
        return self._all_to_all(torch.empty_like(send), send, None, None, self.ctx.count_group)

    def ids(self, send_ids: torch.Tensor, send_counts: torch.Tensor, recv_counts: torch.Tensor) -> Pending:
        """Start sending the requested ids (grouped by block; pinned host memory or the comm
        device); the result is the ids others request from us, on the comm device."""
        recv_counts, send_counts = self.per_peer(recv_counts), self.per_peer(send_counts)
        recv = torch.empty(int(recv_counts.sum()), dtype=torch.int64, device=self.ctx.comm_device)
        return self._all_to_all(recv, send_ids.to(self.ctx.comm_device, non_blocking=True), recv_counts.tolist(),
                                send_counts.tolist())

    def per_peer(self, counts: torch.Tensor) -> torch.Tensor:
        """int64 ``[K]`` the ids of per-block ``counts`` (int64 ``[K * T]``) per peer."""
        return counts.view(-1, self.num_types).sum(1)

    def _elements(self, counts: torch.Tensor) -> torch.Tensor:
        """int64 ``[K]`` the row elements of per-block ``counts`` per peer."""
        return (counts.view(-1, self.num_types) * torch.tensor(self.widths, dtype=torch.int64)).sum(1)

    def rows(self, requested_ids: torch.Tensor, requested_counts: torch.Tensor, send_counts: torch.Tensor) -> Pending:
        """Serve the rows others requested from us and start the exchange; the result is our
        requested rows, owner by owner in request order (type by type within an owner), flat (1-D:
        :func:`row_pieces` views it as ``[rows, F_t]`` pieces; of one width ``F``, ``.view(-1, F)``).
        ``requested_counts`` and ``send_counts`` are per block."""
        out_rows = self.serve(requested_ids, requested_counts).reshape(-1)
        sent, received = self._elements(requested_counts), self._elements(send_counts)
        recv = torch.empty(int(received.sum()), dtype=self.dtype, device=self.ctx.comm_device)
        by_type = send_counts.view(-1, self.num_types).sum(0)
        self.stats.sent += int(requested_counts.sum())
        self.stats.bytes_sent += int(sent.sum()) * recv.element_size()
        self.stats.received += int(by_type.sum())
        self.stats.bytes_received += int(received.sum()) * recv.element_size()
        if self.num_types > 1:  # the rows of each type, reported beside the total
            self.stats.count_by_type(by_type.tolist())
        return self._all_to_all(recv, out_rows, received.tolist(), sent.tolist())

    def send_back(self, rows: torch.Tensor, send_counts: torch.Tensor, requested_counts: torch.Tensor) -> Pending:
        """The reverse of :meth:`rows` for one type: send one row per id this rank requested
        (``[sum(send_counts), F]``, grouped by owner in request order, e.g. their gradients) back to
        the owners; the result is ``[sum(requested_counts), F]``, one row per id the others
        requested from us, in the order :meth:`ids` returned them."""
        recv = torch.empty((int(requested_counts.sum()), rows.shape[1]), dtype=rows.dtype,
                           device=self.ctx.comm_device)
        return self._all_to_all(recv, rows.to(self.ctx.comm_device), requested_counts.tolist(), send_counts.tolist())

    def fetch(self, ids: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """The rows of ``ids`` (int64, grouped by block, ``counts`` per block), synchronously, as :meth:`rows` gives them."""
        recv_counts = self.counts(counts).wait()
        requested = self.ids(ids, counts, recv_counts).wait()
        return self.rows(requested, recv_counts, counts).wait()


@dataclass(frozen=True)
class RowRun:
    """Consecutive rows of one node type in a buffer of rows grouped by (owner, type) block: rows
    ``[first, last)`` of the buffer, elements ``[start, stop)`` of it flattened."""

    node_type: int
    first: int
    last: int
    start: int
    stop: int


def row_runs(counts: torch.Tensor, widths: Sequence[int]) -> list[RowRun]:
    """The runs of rows of one type in a buffer of per-block ``counts`` (int64 ``[K * T]``, host;
    ``widths``: ``F_t`` of each of the T types): consecutive non-empty blocks of one type form one
    run (with one type, every row is one run)."""
    num_types, runs = len(widths), []
    row = element = 0
    for b, n in enumerate(counts.tolist()):
        if n == 0:
            continue
        t = b % num_types
        if runs and runs[-1].node_type == t:
            run = runs.pop()
            runs.append(RowRun(t, run.first, row + n, run.start, element + n * widths[t]))
        else:
            runs.append(RowRun(t, row, row + n, element, element + n * widths[t]))
        row, element = row + n, element + n * widths[t]
    return runs


def row_pieces(received: torch.Tensor, counts: torch.Tensor, widths: Sequence[int]) -> list[tuple[RowRun, torch.Tensor]]:
    """The rows a :class:`RowExchange` received for per-block ``counts`` (int64 ``[K * T]``, host)
    as ``(run, rows)`` pairs, one per :func:`row_runs` run: ``rows`` the ``[run.last - run.first,
    F_t]`` view of ``received`` holding them."""
    flat = received.reshape(-1)
    return [(run, flat[run.start:run.stop].view(-1, widths[run.node_type])) for run in row_runs(counts, widths)]


@dataclass(frozen=True)
class Halo:
    """Fixed remote ids one rank reads from their owners, and who asks this rank for what: the
    counts and ids of a :class:`RowExchange`, exchanged once, so that each later exchange moves
    rows only.

    Attributes:
        ids: int64 ``[n_h]`` remote ids, ascending (hence grouped by owner).
        counts: int64 ``[K]`` how many of ``ids`` each rank owns.
        requested: int64 ``[m]`` owned ids the other ranks need, grouped by requesting rank.
        requested_counts: int64 ``[K]`` how many of ``requested`` each rank asked for.
    """

    ids: torch.Tensor
    counts: torch.Tensor
    requested: torch.Tensor
    requested_counts: torch.Tensor

    @classmethod
    def build(cls, ctx: DistContext, ids: np.ndarray, book) -> "Halo":
        """Exchange the counts and ids of ``ids`` (int64, ascending, none owned by this rank; ``book``
        the partition book). A collective: every rank at once."""
        counts = torch.from_numpy(np.bincount(book.owner(ids), minlength=ctx.world_size).astype(np.int64))
        ids_t = torch.from_numpy(np.asarray(ids, dtype=np.int64))
        # Only counts and ids travel here; the row width of this exchange object is never used.
        ask = RowExchange(ctx, lambda ids, counts: None, 0, torch.float32)
        requested_counts = ask.counts(counts).wait().cpu()
        requested = ask.ids(ids_t, counts, requested_counts).wait().cpu()
        return cls(ids_t, counts, requested, requested_counts)
