"""One launch that writes feature rows from several tables by position (the extension's row gather).

The fused assembly of a batch is one :func:`gather_rows` with four sources: owned rows (device
tier, then host tier), rows received from peers, the device cache tier and the host cache tier
(three on CPU runs, where the sampler threads already wrote the owned rows).
Serving peers' requests is one source without positions. On CUDA the kernel (``csrc/gather.cu``)
reads device memory and pinned host memory alike; on the CPU the extension's reference twin
(``csrc/gather_ops.cpp``) does the same indexing and checks every index.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._ext import extension


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
