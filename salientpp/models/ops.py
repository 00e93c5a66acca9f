"""The model step's kernels as autograd functions: aggregation over an MFG's CSR and a fused
ReLU + dropout with a counter-based mask.

On CPU tensors they call the extension (``csrc/model_ops.cpp``), and on CUDA tensors its CUDA
twins (``csrc/model_kernels.cu``, on the current stream) when the extension was built with CUDA
(:func:`runs_kernels`); elsewhere they fall back to torch's own operations with the same results
in distribution. Measured against the alternatives
with ``salientpp bench step`` (docs/training-performance.md, "The model step on CPU").

* :func:`aggregate` ``(x, rowptr, col, mean, dtype)``: ``out[d] = mean/sum of x[col[e]]`` over
  the edges ``rowptr[d]:rowptr[d+1]`` of destination ``d``. It reads each source row in place: no
  ``[E, F]`` message tensor is built (PyG's scatter path gathers one), float16 features are read
  into float32 sums without a float32 copy of them, and its gradient is only computed when ``x``
  needs one (never for the input features).
* :func:`dropout` ``(x, p, training, relu)``: ``relu(x) * keep / (1 - p)``. The keep mask of each
  call is a function of a 63-bit seed drawn from torch's default generator and of the element's
  index, so ``torch.manual_seed`` (and a checkpoint's RNG state) determines it as it does torch's
  dropout, and the backward pass recomputes it instead of storing it.
"""
from __future__ import annotations

import warnings

import torch

from .._ext import extension

# Draws a dropout call's seed: [0, 2^63), the range torch.randint takes.
_SEED_RANGE = 2**63 - 1


class _Aggregate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, rowptr: torch.Tensor, col: torch.Tensor, mean: bool) -> torch.Tensor:
        ctx.save_for_backward(rowptr, col)
        ctx.num_src, ctx.mean = x.shape[0], mean
        return extension().csr_aggregate(rowptr, col, x, mean, widen=False, stream=_stream(x))

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        rowptr, col = ctx.saved_tensors
        grad = extension().csr_aggregate_backward(rowptr, col, grad_out, ctx.num_src, ctx.mean, stream=_stream(grad_out))
        return grad, None, None, None


class _AggregateWithRoot(torch.autograd.Function):
    """:class:`_Aggregate` that also returns a copy of the root rows ``x[:num_dst]``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, rowptr: torch.Tensor, col: torch.Tensor, mean: bool):
        return _Aggregate.forward(ctx, x, rowptr, col, mean), x[:rowptr.shape[0] - 1].clone()

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor, grad_root: torch.Tensor):  # unused outputs get zeros
        grad = _Aggregate.backward(ctx, grad_out)[0]
        grad[:grad_root.shape[0]] += grad_root
        return grad, None, None, None


def aggregate_reference(x: torch.Tensor, rowptr: torch.Tensor, col: torch.Tensor, mean: bool) -> torch.Tensor:
    """:func:`aggregate` with torch's ``index_add_`` (any device; the ground truth of the tests)."""
    num_dst = rowptr.shape[0] - 1
    degree = rowptr[1:] - rowptr[:-1]
    # output_size: the edge count is known on the host, so a GPU does not have to report it back.
    dst = torch.repeat_interleave(torch.arange(num_dst, device=x.device), degree, output_size=col.shape[0])
    out = torch.zeros((num_dst, x.shape[1]), dtype=x.dtype, device=x.device).index_add_(0, dst, x[col])
    return out / degree.clamp(min=1).unsqueeze(1).to(x.dtype) if mean else out


def runs_kernels(device: torch.device) -> bool:
    """Whether the extension's kernels run on ``device``: the CPU's always, CUDA's when the
    extension was built with CUDA (where torch has it)."""
    return device.type == "cpu" or (device.type == "cuda" and bool(extension().with_cuda))


def _stream(t: torch.Tensor) -> int:
    """The current CUDA stream of ``t``'s device as the kernels take it (0 for a CPU tensor)."""
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0


def _widens_in_place(x: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the extension can read ``x`` into ``dtype`` sums directly: 16-bit rows that need
    no gradient (input features) into float32."""
    return (runs_kernels(x.device) and not x.requires_grad and dtype == torch.float32
            and x.dtype in (torch.float16, torch.bfloat16))


def aggregate(x: torch.Tensor, rowptr: torch.Tensor, col: torch.Tensor, mean: bool = True,
              dtype: torch.dtype | None = None) -> torch.Tensor:
    """Sum or mean of source rows per destination over a CSR.

    Args:
        x: ``[num_src, F]`` float source rows (float32, float64, bfloat16 or float16).
        rowptr: int64 ``[num_dst + 1]``, the edges of destination ``d`` are ``rowptr[d]:rowptr[d+1]``.
        col: int64 ``[E]`` source index of each edge (an MFG's ``edge_index[0]``).
        mean: divide by the degree (0 rows for destinations without edges), else sum.
        dtype: the output's dtype, ``x``'s by default. float16 or bfloat16 input features (no
            gradient) are read in place into float32 sums where the kernels run: no float32 copy
            of ``x``.

    Returns:
        ``[num_dst, F]`` in ``dtype`` (sums kept in float32 for the 16-bit types).
    """
    dtype = x.dtype if dtype is None else dtype
    if _widens_in_place(x, dtype):
        return extension().csr_aggregate(rowptr, col.contiguous(), x, mean, widen=True, stream=_stream(x))
    x = x.to(dtype)
    if not runs_kernels(x.device):
        return aggregate_reference(x, rowptr, col, mean)
    return _Aggregate.apply(x, rowptr, col.contiguous(), mean)


def aggregate_with_root(x: torch.Tensor, rowptr: torch.Tensor, col: torch.Tensor, mean: bool = True,
                        dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(aggregate(x, rowptr, col, mean, dtype), x[:num_dst])``, the two inputs of a layer with a
    root term, with one gradient for ``x``.

    When ``x`` needs a gradient where the kernels run, the root rows are a copy whose gradient is added into the
    first ``num_dst`` rows of the aggregation's: autograd's gradient of a slice would be a zero
    ``[num_src, F]`` tensor that is then added to it (3% of a ``products`` training step).
    Otherwise the root rows are a view of ``x``, or of ``x`` converted to ``dtype``: only those
    ``num_dst`` rows are converted when the aggregation reads 16-bit ``x`` in place.

    Returns:
        ``[num_dst, F]`` and ``[num_dst, F]`` in ``dtype`` (``x``'s by default),
        ``num_dst = len(rowptr) - 1``.
    """
    dtype = x.dtype if dtype is None else dtype
    num_dst = rowptr.shape[0] - 1
    if _widens_in_place(x, dtype):
        return aggregate(x, rowptr, col, mean, dtype), x[:num_dst].to(dtype)
    x = x.to(dtype)
    if not runs_kernels(x.device) or not x.requires_grad:
        return aggregate(x, rowptr, col, mean), x[:num_dst]
    return _AggregateWithRoot.apply(x, rowptr, col.contiguous(), mean)


def weighted_aggregate(x: torch.Tensor, rowptr: torch.Tensor, col: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``out[d] = sum_e weight[e] * x[col[e]]`` over the edges ``rowptr[d]:rowptr[d+1]``: the
    aggregation of an MFG with ``edge_weight`` (LADIES), as a sparse CSR times dense product
    (torch's, on any device, differentiable in ``x``).

    Args:
        x: ``[num_src, F]`` float rows; rowptr: int64 ``[num_dst + 1]``; col: int64 ``[E]``;
        weight: ``[E]`` float edge weights.

    Returns:
        ``[num_dst, F]`` in ``x``'s dtype.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta")
        matrix = torch.sparse_csr_tensor(rowptr, col, weight.to(x.dtype), size=(rowptr.shape[0] - 1, x.shape[0]),
                                         check_invariants=False)
        return matrix @ x


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, seed: int, relu: bool) -> torch.Tensor:
        out = extension().dropout_forward(x, p, seed, relu, stream=_stream(x))
        ctx.save_for_backward(out if relu else torch.empty(0))
        ctx.p, ctx.seed, ctx.relu = p, seed, relu
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        (out,) = ctx.saved_tensors
        grad = extension().dropout_backward(grad_out, out, ctx.p, ctx.seed, ctx.relu, stream=_stream(grad_out))
        return grad, None, None, None


def dropout(x: torch.Tensor, p: float, training: bool = True, relu: bool = False) -> torch.Tensor:
    """``dropout(relu(x))`` when ``relu``, else ``dropout(x)``, in one pass over ``x``.

    In training, each element is kept with probability ``1 - p`` and scaled by ``1 / (1 - p)``
    (as ``torch.nn.functional.dropout``); the mask comes from the extension's counter-based
    generator where its kernels run (:func:`runs_kernels`), from torch's elsewhere. Out of
    training, or with ``p == 0``, only the ReLU applies.
    """
    if not training or p == 0:
        return torch.relu(x) if relu else x
    if not runs_kernels(x.device):
        return torch.nn.functional.dropout(torch.relu(x) if relu else x, p, True)
    seed = int(torch.randint(_SEED_RANGE, (1,)))
    return _Dropout.apply(x, float(p), seed, relu)


# SplitMix64's constants as signed int64 (torch has no uint64 arithmetic); products wrap mod 2^64.
_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)
_MIX1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_MIX2 = 0x94D049BB133111EB - (1 << 64)
_LOW32 = (1 << 32) - 1


def _shift_right(z: torch.Tensor, bits: int) -> torch.Tensor:
    """The logical right shift of int64 ``z`` (torch's ``>>`` is arithmetic)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def keyed_dropout_mask_reference(ids: torch.Tensor, width: int, p: float, seed: int) -> torch.Tensor:
    """:func:`keyed_dropout_mask` in torch operations (any device; the extension's ground truth):
    element i = ``ids[r] * width + c`` is kept when the 32-bit half ``i % 2`` of SplitMix64's
    output for counter ``i // 2`` is at least ``round(p * 2^32)``, as ``dropout_mask`` draws it."""
    index = ids.to(torch.int64).unsqueeze(1) * width + torch.arange(width, device=ids.device)
    z = (int(seed) - (1 << 64) if seed >= 1 << 63 else int(seed)) + ((index >> 1) + 1) * _GOLDEN
    z = (z ^ _shift_right(z, 30)) * _MIX1
    z = (z ^ _shift_right(z, 27)) * _MIX2
    z = z ^ _shift_right(z, 31)
    half = torch.where((index & 1).bool(), _shift_right(z, 32), z & _LOW32)
    return half >= min(_LOW32, round(p * (1 << 32)))


def keyed_dropout_mask(ids: torch.Tensor, width: int, p: float, seed: int) -> torch.Tensor:
    """bool ``[n, width]`` keep mask of rows with global keys ``ids`` (int64 ``[n]``): a function of
    ``seed``, the row's key and the column only, so every rank that computes a row drops the same
    elements of it (full-graph training recomputes remote vertices and must drop what their
    owners drop). The extension on CPU, :func:`keyed_dropout_mask_reference` elsewhere."""
    if ids.device.type != "cpu":
        return keyed_dropout_mask_reference(ids, width, p, seed)
    return extension().keyed_dropout_mask(ids.to(torch.int64), int(width), float(p), int(seed))


def keyed_relu_dropout(x: torch.Tensor, ids: torch.Tensor, p: float, seed: int, training: bool) -> torch.Tensor:
    """``dropout(relu(x))`` with the :func:`keyed_dropout_mask` of the rows' keys ``ids``.
    ``x`` ``[n, d]``, ``ids`` int64 ``[n]``; out of training, or with ``p == 0``, the ReLU alone."""
    out = torch.relu(x)
    if not training or p == 0:
        return out
    keep = keyed_dropout_mask(ids, x.shape[1], p, seed)
    return out * keep.to(x.dtype) * (1.0 / (1.0 - p))
