"""SAGE, GAT, GIN and GCN, applied layer by layer to sampled MFGs (the first three are PyG's
convolutions; GCN is :class:`MeanGCNConv`).

Layer i reads the MFG ``mfgs[i]`` (model order: ``mfgs[0]`` is the input layer): its sources
are the first ``num_src`` rows of the current hidden state and its destinations the first
``num_dst`` (destinations are a prefix of sources), edges ``edge_index[0]`` source-local to
``edge_index[1]`` destination-local, so each layer is ``conv((h, h[:num_dst]), edge_index)``.

SAGE, GIN and GCN aggregate through the MFG's CSR (``rowptr`` and ``edge_index[0]``) with
:func:`salientpp.models.ops.aggregate_with_root` and apply the convolution's own weights, which
computes what the PyG convolution computes without its ``[E, F]`` message tensor; ReLU and
dropout are one pass (:func:`salientpp.models.ops.dropout`). A block without ``rowptr`` goes
through PyG.

PyG writes the ``propagate`` (and ``edge_updater``) code it generates for each convolution class
to a file in the temporary directory, once per class and process, and never removes it:
:func:`no_pyg_tempfiles` and :func:`remove_pyg_tempfiles` do, and :class:`MFGModel` uses them.
"""
from __future__ import annotations

import atexit
import linecache
import os
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Protocol, Sequence

import torch
from torch import nn
from torch_geometric.nn import GATConv, GINConv, SAGEConv

from ..errors import InputError
from .ops import aggregate_with_root, dropout, weighted_aggregate

MODELS = ("sage", "gat", "gin", "gcn")

# The modules PyG generates from its jinja templates (torch_geometric.template.module_from_template)
# are named ``<conv module>_<conv class>_propagate`` or ``..._edge_updater`` and loaded from
# ``tempfile.NamedTemporaryFile(prefix=f"{name}_", suffix=".py")``: ``<tmp>/<name>_XXXXXXXX.py``.
_GENERATED_SUFFIXES = ("_propagate", "_edge_updater")
_RANDOM_CHARS = 8  # tempfile's random part of a name


def _generated_file(name: str, module: object) -> str | None:
    """The temporary source file of ``module`` when PyG generated it in this process and the file
    is still there, else ``None``."""
    path = getattr(module, "__file__", None)
    if not name.endswith(_GENERATED_SUFFIXES) or not isinstance(path, str):
        return None
    base = os.path.basename(path)
    if not (base.startswith(name + "_") and base.endswith(".py")
            and len(base) == len(name) + 1 + _RANDOM_CHARS + len(".py")):
        return None
    if os.path.realpath(os.path.dirname(path)) != os.path.realpath(tempfile.gettempdir()):
        return None
    return path if os.path.isfile(path) else None


def remove_pyg_tempfiles() -> list[str]:
    """Delete the ``*_propagate_*.py`` / ``*_edge_updater_*.py`` files that PyG wrote to the
    temporary directory for the modules it generated in this process; return their paths.

    Safe at any time and idempotent: the generated modules are already imported (PyG caches
    them in ``sys.modules`` and never reads the file again), and their source is kept in
    :mod:`linecache`, so tracebacks, :func:`inspect.getsource` and ``torch.jit.script`` still
    see it. Only files of modules in this process's ``sys.modules`` whose names follow PyG's
    pattern are touched, never another process's.
    """
    removed = []
    for name, module in list(sys.modules.items()):
        path = _generated_file(name, module)
        if path is None:
            continue
        lines = linecache.getlines(path)
        if lines:  # keep the source for tracebacks and inspect after the file is gone
            linecache.cache[path] = (sum(map(len, lines)), None, lines, path)
        try:
            os.unlink(path)
        except OSError:
            continue
        removed.append(path)
    return removed


@contextmanager
def no_pyg_tempfiles() -> Iterator[None]:
    """Build PyG convolutions (``MessagePassing`` subclasses: PyG's own or a user's) inside this
    block: the source files PyG writes to the temporary directory are removed when it ends
    (see :func:`remove_pyg_tempfiles`), also when the block raises."""
    try:
        yield
    finally:
        remove_pyg_tempfiles()


# A model built elsewhere (unpickled in a fresh process, say) regenerates the modules; this
# process removes their files at exit at the latest. A killed process cannot.
atexit.register(remove_pyg_tempfiles)


class Block(Protocol):
    """What a layer needs from an MFG (an :class:`~salientpp.sampling.MFG` also has ``rowptr``,
    int64 ``[num_dst + 1]``, the CSR of ``edge_index`` over destinations)."""

    num_dst: int
    edge_index: torch.Tensor


@dataclass(frozen=True)
class EmptyBlock:
    """An MFG with no nodes: the input of an empty training step, which still runs forward and
    backward so that the DDP all-reduce of every rank has a partner."""

    num_src: int = 0
    num_dst: int = 0
    edge_index: torch.Tensor = field(default_factory=lambda: torch.empty((2, 0), dtype=torch.int64))


class MeanGCNConv(nn.Module):
    """GCN's layer with the row (random-walk) normalisation of the graph with self loops:
    ``out[v] = W (x[v] + sum_{u in N(v)} x[u]) / (deg(v) + 1) + b``, that is ``D~^-1 A~ X W``
    (DGL's ``GraphConv(norm="right")``; Kipf and Welling's symmetric ``D~^-1/2 A~ D~^-1/2``
    would need the degrees of the sources, which a sampled MFG does not carry). ``deg(v)`` is the
    number of edges into ``v`` in the block: all of them in full-graph training and layer-wise
    inference, the sampled ones in a minibatch.

    ``forward((x_src, x_dst), edge_index)``: ``x_src`` ``[num_src, in_dim]``, ``x_dst``
    ``[num_dst, in_dim]``, ``edge_index`` int64 ``[2, E]`` (source row, destination row);
    returns ``[num_dst, out_dim]``.
    """

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim)

    def forward(self, x: tuple[torch.Tensor, torch.Tensor], edge_index: torch.Tensor) -> torch.Tensor:
        x_src, x_dst = x
        total = x_dst.index_add(0, edge_index[1], x_src[edge_index[0]])
        degree = torch.bincount(edge_index[1], minlength=x_dst.shape[0])
        return self.lin(total / (degree + 1).unsqueeze(1).to(total.dtype))


def _conv(model: str, in_dim: int, out_dim: int, last: bool, heads: int) -> nn.Module:
    if model == "gcn":
        return MeanGCNConv(in_dim, out_dim)
    if model == "sage":
        return SAGEConv(in_dim, out_dim)
    if model == "gat":
        # Hidden layers concatenate heads (out_dim must split evenly); the last one averages them.
        if last:
            return GATConv(in_dim, out_dim, heads=heads, concat=False)
        return GATConv(in_dim, out_dim // heads, heads=heads)
    mlp = nn.Sequential(nn.Linear(in_dim, out_dim), nn.ReLU(), nn.Linear(out_dim, out_dim))
    return GINConv(mlp, train_eps=True)


def _csr_conv(conv: nn.Module, h: torch.Tensor, block, dtype: torch.dtype) -> torch.Tensor | None:
    """``conv((h, h[:num_dst]), edge_index)`` for a SAGE (mean) or GIN (sum) convolution as the
    built-in models configure them, aggregated over ``block.rowptr`` into ``dtype`` (the
    convolution's; 16-bit input features are read in place); ``None`` for any other convolution
    or a block without ``rowptr``. A block with ``edge_weight`` (LADIES) replaces SAGE's
    neighbour mean by the weighted sum, its unbiased estimate."""
    rowptr = getattr(block, "rowptr", None)
    if rowptr is None:
        return None
    col = block.edge_index[0]
    weight = getattr(block, "edge_weight", None)
    if isinstance(conv, SAGEConv) and str(conv.aggr) == "mean" and conv.root_weight and not (
            conv.project or conv.normalize):
        if weight is None:
            mean, x_dst = aggregate_with_root(h, rowptr, col, mean=True, dtype=dtype)
        else:  # the destinations are the first sources
            h = h.to(dtype)
            mean, x_dst = weighted_aggregate(h, rowptr, col, weight), h[:block.num_dst]
        out = conv.lin_l(mean)
        if out.dtype == x_dst.dtype == conv.lin_r.weight.dtype and conv.lin_r.bias is None:
            # the root term accumulates into the neighbour term's output: no second [num_dst,
            # out] tensor and no pass adding the two (5% of a products step on CPU)
            return out.addmm_(x_dst, conv.lin_r.weight.t())
        return out + conv.lin_r(x_dst)  # autocast: lin_l's output is bfloat16, the weights are not
    if weight is not None:
        return None
    if isinstance(conv, MeanGCNConv):
        total, x_dst = aggregate_with_root(h, rowptr, col, mean=False, dtype=dtype)
        return conv.lin((total + x_dst) / (rowptr[1:] - rowptr[:-1] + 1).unsqueeze(1).to(total.dtype))
    if isinstance(conv, GINConv) and str(conv.aggr) == "add":
        total, x_dst = aggregate_with_root(h, rowptr, col, mean=False, dtype=dtype)
        return conv.nn(total + (1 + conv.eps) * x_dst)
    return None


class MFGModel(nn.Module):
    """A stack of ``num_layers`` convolutions with ReLU and dropout between them.

    ``forward(x, mfgs)``: ``x`` ``[mfgs[0].num_src, in_dim]`` features of the batch nodes in
    ``n_id`` order; returns ``[mfgs[-1].num_dst, out_dim]`` logits of the seeds. ``x`` may be
    float16 or bfloat16 features as stored: each layer computes in its parameters' dtype, and
    SAGE, GIN and GCN read 16-bit rows in place as they aggregate them, converting only the
    ``num_dst`` root rows (the others convert ``x`` first).
    """

    def __init__(self, model: str, in_dim: int, hidden: int, out_dim: int, num_layers: int,
                 dropout: float = 0.5, heads: int = 4):
        super().__init__()
        if model not in MODELS:
            raise InputError(f"unknown model {model!r}; choose one of {', '.join(MODELS)}")
        if num_layers < 1:
            raise InputError(f"the number of layers must be at least 1, got {num_layers}")
        if model == "gat" and hidden % heads:
            raise InputError(f"GAT needs a hidden size divisible by its {heads} heads, got {hidden}")
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        with no_pyg_tempfiles():
            self.convs = nn.ModuleList(_conv(model, dims[i], dims[i + 1], i == num_layers - 1, heads)
                                       for i in range(num_layers))
        self.dropout = float(dropout)
        self.model = model

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def layer(self, i: int, h: torch.Tensor, block: Block) -> torch.Tensor:
        """Layer ``i`` alone: ``h`` ``[num_src, d_i]`` source rows (destinations first) ->
        ``[block.num_dst, d_{i+1}]``, with ReLU and dropout after every layer but the last."""
        out = self.convolve(i, h, block)
        return dropout(out, self.dropout, self.training, relu=True) if i < self.num_layers - 1 else out

    def convolve(self, i: int, h: torch.Tensor, block: Block) -> torch.Tensor:
        """Layer ``i``'s convolution without the ReLU and dropout that follow it (:meth:`layer`)."""
        conv = self.convs[i]
        dtype = next(conv.parameters()).dtype
        out = _csr_conv(conv, h, block, dtype)
        if out is None:
            if getattr(block, "edge_weight", None) is not None:
                raise InputError(f"this MFG carries LADIES edge weights, which estimate a mean aggregation; the "
                                 f"{self.model} model cannot use them, so train it with --sampler nodewise or bulk "
                                 "(or use --model sage)")
            h = h.to(dtype)
            out = conv((h, h[:block.num_dst]), block.edge_index)
        return out

    def forward(self, x: torch.Tensor, mfgs: Sequence[Block]) -> torch.Tensor:
        if len(mfgs) != self.num_layers:
            raise ValueError(f"{len(mfgs)} MFGs for {self.num_layers} layers")
        h = x
        for i, mfg in enumerate(mfgs):
            h = self.layer(i, h, mfg)
        return h
