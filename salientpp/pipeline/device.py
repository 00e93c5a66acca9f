"""Where a batch's device work is queued, and how the compute stream waits for it.

The assembly stage queues the host-to-device copies of a batch (fetch plan, received rows,
MFGs, labels) and the one gather kernel that writes ``x[n_id]`` on a *side stream*, then records
an event. The loader makes the compute stream wait for that event before it hands the batch on,
so the host never blocks on the device and the copies of batch ``i + 1`` overlap the model step
of batch ``i``.

That choreography is written against :class:`DeviceOps`, a small interface:

* ``empty(shape, dtype)``: a buffer that work on the side stream fills;
* ``upload(t)``: ``t`` on the device, copied on the side stream (from pinned memory, so that the
  host does not wait);
* ``launch(fn)``: ``fn(stream)`` queues device work (a kernel) on the side stream;
* ``receive(pending)``: the side stream waits for a collective's result;
* ``record()``: an :class:`Event` after everything queued so far;
* ``wait(event)``: the compute stream waits for it;
* ``hand_over(tensors)``: tensors made on the side stream are used by the compute stream.

:class:`HostOps` does each thing at once on the CPU, so the same stage code runs in the CPU
tests; :class:`CudaOps` queues it on a CUDA side stream.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Iterable

import torch


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


def device_ops(device: torch.device) -> DeviceOps:
    """The ops for batches going to ``device``: a CUDA side stream, or the CPU's immediate ops."""
    return CudaOps(device) if device.type == "cuda" else HostOps()
