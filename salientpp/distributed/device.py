"""Where a batch's device work is queued, how the compute stream waits for it, and the one
kernel it queues: the row gather.

The assembly stage queues the host-to-device copies of a batch (row origins, received rows,
MFGs, labels) and the one gather kernel that writes ``x[n_id]`` on a *side stream*, then records
an event. The loader makes the compute stream wait for that event before it hands the batch on,
so the host never blocks on the device and the copies of batch ``i + 1`` overlap the model step
of batch ``i``.

That choreography is written against :class:`DeviceOps`, a small interface:

* ``empty(shape, dtype)``: a buffer that work on the side stream fills;
* ``upload(t)``: ``t`` on the device, copied on the side stream (from pinned memory, so that the
  host does not wait);
* ``download(t)``: ``t`` on the host (a batch drawn on the GPU: its seeds and CSR offsets), copied
  on the side stream, so the host waits for that stream only, never for the model step;
* ``launch(fn)``: ``fn(stream)`` queues device work (a kernel) on the side stream;
* ``receive(pending)``: the side stream waits for a collective's result;
* ``record()``: an :class:`Event` after everything queued so far;
* ``wait(event)``: the compute stream waits for it;
* ``hand_over(tensors)``: tensors made on the side stream are used by the compute stream.

:class:`HostOps` does each thing at once on the CPU, so the same stage code runs in the CPU
tests; :class:`CudaOps` queues it on a CUDA side stream.

**The row gather** (:func:`gather_rows`): one launch that writes feature rows from several tables
by position. The fused assembly of a batch is one gather with four sources: owned rows (device
tier, then host tier), rows received from peers, the device cache tier and the host cache tier
(three on CPU runs, where the sampler threads already wrote the owned rows). Serving peers'
requests is one source without positions. On CUDA the kernel (``csrc/gather.cu``) reads device
memory and pinned host memory alike; on the CPU the extension's reference twin
(``csrc/gather_ops.cpp``) does the same indexing and checks every index.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch

from .._ext import extension
from ..host import local_world_size


class Event:
    """A point in the side stream's work; complete on the CPU (``handle`` is a CUDA event on CUDA)."""

    def __init__(self, handle: Any = None):
        self.handle = handle


class DeviceOps(ABC):
    """The side stream of one loader (see the module docstring). ``device`` is where batches go."""

    def __init__(self, device: torch.device):
        self.device = device

    @abstractmethod
    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor: ...

    @abstractmethod
    def upload(self, t: torch.Tensor) -> torch.Tensor: ...

    @abstractmethod
    def launch(self, fn: Callable[[int], None]) -> None: ...

    @abstractmethod
    def receive(self, pending: Any) -> torch.Tensor: ...

    @abstractmethod
    def record(self) -> Event: ...

    @abstractmethod
    def wait(self, event: Event) -> None: ...

    def download(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` on the host (the host waits for the copy)."""
        return t.cpu()

    def hand_over(self, tensors: Iterable[torch.Tensor]) -> None:
        """Nothing to do where memory is not reused per stream."""


class HostOps(DeviceOps):
    """Everything at once, on the CPU: uploads are the tensors themselves, events are complete."""

    def __init__(self):
        super().__init__(torch.device("cpu"))

    def empty(self, shape, dtype):
        return torch.empty(shape, dtype=dtype)

    def upload(self, t):
        return t

    def launch(self, fn):
        fn(0)

    def receive(self, pending):
        return pending.wait()

    def record(self):
        return Event()

    def wait(self, event):
        pass


class CudaOps(DeviceOps):
    """Copies and kernels on a side stream of ``device``; the compute stream is the stream that
    was current when the ops were made (the one the model runs on)."""

    def __init__(self, device: torch.device):
        super().__init__(device)
        self.compute = torch.cuda.current_stream(device)
        self.side = torch.cuda.Stream(device)

    def empty(self, shape, dtype):
        with torch.cuda.stream(self.side):  # allocated for the side stream, which writes it
            return torch.empty(shape, dtype=dtype, device=self.device)

    def upload(self, t):
        if t.device == self.device:
            return t
        if not t.is_pinned():  # from pageable memory the copy would wait for the stream
            t = t.pin_memory()
        with torch.cuda.stream(self.side):
            return t.to(self.device, non_blocking=True)

    def launch(self, fn):
        with torch.cuda.stream(self.side):
            fn(self.side.cuda_stream)

    def download(self, t):
        with torch.cuda.stream(self.side):  # not the compute stream: the host would wait for the step
            return t.cpu()

    def receive(self, pending):
        with torch.cuda.stream(self.side):  # an NCCL result: the side stream waits, the host does not
            value = pending.wait()
        if value.is_cuda:  # made on the compute stream, read on the side stream
            value.record_stream(self.side)
        return value

    def record(self):
        event = torch.cuda.Event()
        event.record(self.side)
        return Event(event)

    def wait(self, event):
        self.compute.wait_event(event.handle)

    def hand_over(self, tensors):
        for t in tensors:
            if t.is_cuda:
                t.record_stream(self.compute)


# The share of a GPU's free memory (at start-up, divided among the ranks that share the GPU) that a
# rank's feature rows on the device (owned rows and the cache's device tier) may take; the rest is
# left to the model, the batches in flight and the allocator's slack.
DEVICE_ROWS_SHARE = 0.5


def device_row_budget(device: torch.device) -> int | None:
    """The bytes a rank's feature rows may take on ``device``: ``None`` (no limit) on the CPU; on
    a GPU :data:`DEVICE_ROWS_SHARE` of its free memory, divided among the local ranks that share
    it (``ceil(local ranks / GPUs)``)."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    sharing = -(-local_world_size() // max(1, torch.cuda.device_count()))
    return int(free * DEVICE_ROWS_SHARE) // sharing


def device_ops(device: torch.device) -> DeviceOps:
    """The ops for batches going to ``device``: a CUDA side stream, or the CPU's immediate ops."""
    return CudaOps(device) if device.type == "cuda" else HostOps()


# ---- the row gather ------------------------------------------------------------------------------

@dataclass(frozen=True)
class RowSource:
    """Rows ``cat([low, high])[idx]`` written at rows ``pos`` of the output.

    Attributes:
        low: ``[r0, F]`` rows ``0 .. r0 - 1`` (a device tier).
        high: ``[r1, F]`` rows ``r0 .. r0 + r1 - 1`` (a host tier, pinned on CUDA), or ``None``.
        idx: int64 ``[n]`` rows to take, or ``None``: all rows in order.
        pos: int64 ``[n]`` output rows to write, or ``None``: ``0 .. n - 1``.
    """

    low: torch.Tensor
    idx: torch.Tensor | None = None
    pos: torch.Tensor | None = None
    high: torch.Tensor | None = None

    def as_args(self) -> tuple:
        return self.low, self.high, self.idx, self.pos


def gather_rows(out: torch.Tensor, sources: list[RowSource], stream: int | None = None) -> torch.Tensor:
    """Writes every source's rows into ``out`` (``[rows, F]``, contiguous) and returns it.

    On CUDA the kernel is queued on ``stream`` (a ``cudaStream_t`` as an integer; default: the
    current stream of ``out``'s device) and the indices are trusted; on the CPU they are checked.
    """
    if stream is None:
        stream = torch.cuda.current_stream(out.device).cuda_stream if out.is_cuda else 0
    extension().gather_rows(out, [s.as_args() for s in sources], stream)
    return out


def gather_rows_reference(out: torch.Tensor, sources: list[RowSource]) -> torch.Tensor:
    """What :func:`gather_rows` writes, with torch indexing (for tests and the self-check)."""
    for s in sources:
        table = s.low if s.high is None else torch.cat([s.low, s.high.to(s.low.device)])
        rows = table if s.idx is None else table[s.idx]
        if s.pos is None:
            out[:rows.shape[0]] = rows
        else:
            out[s.pos] = rows
    return out
