"""The models: SAGE, GAT, GIN and GCN applied layer by layer to sampled MFGs (the first three
are PyG's convolutions; GCN is :class:`MeanGCNConv`), the typed models R-SAGE, R-GCN and R-GAT
(:mod:`salientpp.models.typed`), a user's model by its factory, and how the trainer calls any
of them (:class:`SeedForward`).

Layer i reads the MFG ``mfgs[i]`` (model order: ``mfgs[0]`` is the input layer): its sources
are the first ``num_src`` rows of the current hidden state and its destinations the first
``num_dst`` (destinations are a prefix of sources), edges ``edge_index[0]`` source-local to
``edge_index[1]`` destination-local, so each layer is ``conv((h, h[:num_dst]), edge_index)``.

SAGE, GIN and GCN aggregate through the MFG's CSR (``rowptr`` and ``edge_index[0]``) with
:func:`salientpp.models.ops.aggregate_with_root` and apply the convolution's own weights, which
computes what the PyG convolution computes without its ``[E, F]`` message tensor; ReLU and
dropout are one pass (:func:`salientpp.models.ops.dropout`). An MFG without ``rowptr`` goes
through PyG.

PyG writes the ``propagate`` (and ``edge_updater``) code it generates for each convolution class
to a file in the temporary directory, once per class and process, and never removes it:
:func:`no_pyg_tempfiles` and :func:`remove_pyg_tempfiles` do, and :class:`MFGModel` uses them.

**Models by name** (:func:`build_model`): a built-in one (:data:`BUILT_IN_MODELS`; the typed ones
built from the graph's schema), or a user's factory ``PKG.MODULE:FACTORY``,
called as ``factory(in_dim, hidden, out_dim, num_layers)``, which returns an ``nn.Module``. A
model declares how the trainer calls it with its attribute ``salientpp_input``
(:class:`ModelInput`); without one it is called the PyG way:

* ``forward(x, edge_index)`` (default, :attr:`ModelInput.EDGE_INDEX`): ``x`` ``[num_nodes,
  in_dim]`` of the batch, the hop-ordered edges of :attr:`salientpp.Batch.edge_index`; returns
  ``[num_nodes, out_dim]`` (or at least the seeds' rows first).
* :attr:`ModelInput.EDGE_INDEX_HOPS`: the same, with the batch's ``num_sampled_nodes`` and
  ``num_sampled_edges`` as keywords, for ``torch_geometric.utils.trim_to_layer``.
* :attr:`ModelInput.MFGS`: ``forward(x, mfgs)``, one message-flow graph per layer (as the
  built-in models); returns the seeds' ``[batch_size, out_dim]``.

On a typed graph (several node types and relations) the features differ in width per type, so a
model takes them per type, ``x_dict`` (type name -> ``[n_t, F_t]``), in one of the typed forms:

* :attr:`ModelInput.EDGE_INDEX_DICT` (the default on a typed graph): PyG's heterogeneous
  convention, ``forward(x_dict, edge_index_dict)`` as a ``to_hetero`` or ``HeteroConv`` model
  takes it (:attr:`salientpp.Batch.edge_index_dict`); returns a dict type -> rows (or the target
  type's rows), whose first ``batch_size`` rows of the target type are the seeds'.
* :attr:`ModelInput.EDGE_INDEX_DICT_HOPS`: the same with ``num_sampled_nodes_dict`` and
  ``num_sampled_edges_dict``, for ``trim_to_layer``.
* :attr:`ModelInput.TYPED_MFGS`: ``forward(x_dict, mfgs, node_type, n_id)`` (as the built-in
  ``rsage``, ``rgcn`` and ``rgat``, :mod:`salientpp.models.typed`); returns the seeds' rows.

A homogeneous graph is a typed one with one type, so the typed forms run on it too
(``x_dict = {"node": x}``); the homogeneous forms do not run on a typed graph.
"""
from __future__ import annotations

import atexit
import enum
import functools
import importlib
import inspect
import linecache
import os
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch
from torch import nn

from ..errors import InputError, shown
from ..sampling import MFG
from .ops import aggregate_with_root, dropout, weighted_aggregate
from .typed import TYPED_MODELS, TypedBlock, TypedInput, TypedMFGModel, TypedStructure, check_architecture, seed_rows

# The built-in models of homogeneous graphs (they train full-graph), and every built-in model.
MODELS = ("sage", "gat", "gin", "gcn")
BUILT_IN_MODELS = MODELS + TYPED_MODELS

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


class MeanGCNConv(nn.Module):
    """GCN's layer with the row (random-walk) normalisation of the graph with self loops:
    ``out[v] = W (x[v] + sum_{u in N(v)} x[u]) / (deg(v) + 1) + b``, that is ``D~^-1 A~ X W``
    (DGL's ``GraphConv(norm="right")``; Kipf and Welling's symmetric ``D~^-1/2 A~ D~^-1/2``
    would need the degrees of the sources, which a sampled MFG does not carry). ``deg(v)`` is the
    number of edges into ``v`` in the MFG: all of them in full-graph training and layer-wise
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


@functools.cache
def _pyg_convs() -> tuple[type, type, type]:
    """PyG's ``(GATConv, GINConv, SAGEConv)``, imported on the first call. PyG loads in about 3 s
    (torch._dynamo with it): only the code that builds or runs its convolutions imports it, so
    that the command line starts without it, and a batch does not run the import statement again."""
    from torch_geometric.nn import GATConv, GINConv, SAGEConv
    return GATConv, GINConv, SAGEConv


def _conv(model: str, in_dim: int, out_dim: int, last: bool, heads: int) -> nn.Module:
    GATConv, GINConv, SAGEConv = _pyg_convs()
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


def _csr_conv(conv: nn.Module, h: torch.Tensor, mfg: MFG, dtype: torch.dtype) -> torch.Tensor | None:
    """``conv((h, h[:num_dst]), edge_index)`` for a SAGE (mean) or GIN (sum) convolution as the
    built-in models configure them, aggregated over ``mfg.rowptr`` into ``dtype`` (the
    convolution's; 16-bit input features are read in place); ``None`` for any other convolution
    or an MFG without ``rowptr``. An MFG with ``edge_weight`` (LADIES) replaces SAGE's
    neighbour mean by the weighted sum, its unbiased estimate."""
    rowptr = getattr(mfg, "rowptr", None)
    if rowptr is None:
        return None
    _, GINConv, SAGEConv = _pyg_convs()
    col = mfg.edge_index[0]
    weight = getattr(mfg, "edge_weight", None)
    if isinstance(conv, SAGEConv) and str(conv.aggr) == "mean" and conv.root_weight and not (
            conv.project or conv.normalize):
        if weight is None:
            mean, x_dst = aggregate_with_root(h, rowptr, col, mean=True, dtype=dtype)
        else:  # the destinations are the first sources
            h = h.to(dtype)
            mean, x_dst = weighted_aggregate(h, rowptr, col, weight), h[:mfg.num_dst]
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


class ModelInput(str, enum.Enum):
    """How the trainer calls a model on a :class:`~salientpp.loader.dist_loader.Batch`. A model declares
    it as its class (or instance) attribute ``salientpp_input``; a model that declares nothing is
    called the PyG way: :attr:`EDGE_INDEX` on a homogeneous graph, :attr:`EDGE_INDEX_DICT` on a
    typed one (:func:`model_input`).

    * ``EDGE_INDEX``: ``model(x, batch.edge_index)``, returning ``[num_nodes, out_dim]`` (the
      seeds' rows first).
    * ``EDGE_INDEX_HOPS``: the same with the keywords ``num_sampled_nodes`` and
      ``num_sampled_edges``, for ``torch_geometric.utils.trim_to_layer``.
    * ``MFGS``: ``model(x, batch.mfgs)``, one message-flow graph per layer, returning the seeds'
      ``[batch_size, out_dim]`` (the built-in models).
    * ``EDGE_INDEX_DICT``: ``model(batch.x_dict, batch.edge_index_dict)`` (PyG's ``to_hetero`` and
      ``HeteroConv`` models), returning a dict node type -> rows, or the target type's rows; the
      target's first ``batch_size`` rows are the seeds'.
    * ``EDGE_INDEX_DICT_HOPS``: the same with the keywords ``num_sampled_nodes_dict`` and
      ``num_sampled_edges_dict``, for ``trim_to_layer``.
    * ``TYPED_MFGS``: ``model(batch.x_dict, batch.mfgs, batch.node_type, batch.n_id)``, returning
      the seeds' ``[batch_size, out_dim]`` (the built-in typed models).
    """

    EDGE_INDEX = "edge_index"
    EDGE_INDEX_HOPS = "edge_index+hops"
    MFGS = "mfgs"
    EDGE_INDEX_DICT = "x_dict+edge_index_dict"
    EDGE_INDEX_DICT_HOPS = "x_dict+edge_index_dict+hops"
    TYPED_MFGS = "x_dict+mfgs"

    @property
    def typed(self) -> bool:
        """Whether the model takes the features per node type (``x_dict``): the typed forms."""
        return self in _TYPED_INPUTS

    @property
    def call(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``(positional, keywords)``: the batch attributes the model is called with, in order."""
        return _CALLS[self]


_TYPED_INPUTS = (ModelInput.EDGE_INDEX_DICT, ModelInput.EDGE_INDEX_DICT_HOPS, ModelInput.TYPED_MFGS)
_CALLS = {
    ModelInput.EDGE_INDEX: (("x", "edge_index"), ()),
    ModelInput.EDGE_INDEX_HOPS: (("x", "edge_index"), ("num_sampled_nodes", "num_sampled_edges")),
    ModelInput.MFGS: (("x", "mfgs"), ()),
    ModelInput.EDGE_INDEX_DICT: (("x_dict", "edge_index_dict"), ()),
    ModelInput.EDGE_INDEX_DICT_HOPS: (("x_dict", "edge_index_dict"), ("num_sampled_nodes_dict",
                                                                      "num_sampled_edges_dict")),
    ModelInput.TYPED_MFGS: (("x_dict", "mfgs", "node_type", "n_id"), ()),
}


class MFGModel(nn.Module):
    """A stack of ``num_layers`` convolutions with ReLU and dropout between them.

    ``forward(x, mfgs)``: ``x`` ``[mfgs[0].num_src, in_dim]`` features of the batch nodes in
    ``n_id`` order; returns ``[mfgs[-1].num_dst, out_dim]`` logits of the seeds. ``x`` may be
    float16 or bfloat16 features as stored: each layer computes in its parameters' dtype, and
    SAGE, GIN and GCN read 16-bit rows in place as they aggregate them, converting only the
    ``num_dst`` root rows (the others convert ``x`` first).
    """

    salientpp_input = ModelInput.MFGS

    def __init__(self, model: str, in_dim: int, hidden: int, out_dim: int, num_layers: int,
                 dropout: float = 0.5, heads: int = 4):
        super().__init__()
        check_architecture(model, MODELS, "model", num_layers, hidden, heads)
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        with no_pyg_tempfiles():
            self.convs = nn.ModuleList(_conv(model, dims[i], dims[i + 1], i == num_layers - 1, heads)
                                       for i in range(num_layers))
        self.dropout = float(dropout)
        self.model = model

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def layer_inputs(self, rows: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Layer-wise inference's input rows of each node type (:meth:`whole_graph_layer`'s of layer
        0), as :meth:`~salientpp.models.typed.TypedMFGModel.layer_inputs` gives them: the one
        type's features ``[x]``, as they are (each layer converts what it reads)."""
        return list(rows)

    def whole_graph_layer(self, i: int, h: Sequence[torch.Tensor],
                          blocks: Iterable[TypedBlock]) -> Iterator[list[torch.Tensor]]:
        """Layer ``i`` over chunks of the whole graph, as layer-wise inference runs every built-in
        model (:meth:`~salientpp.models.typed.TypedMFGModel.whole_graph_layer`): ``h = [table]``
        ``[n, d_i]`` rows of the one type, each block a chunk's destinations (its ``dst_rows``)
        and their edges (one relation, ``col`` rows of ``table``). Yields ``[out]`` per block,
        ``[num_dst, d_{i+1}]``: :meth:`layer` over the MFG whose sources are the destinations'
        rows, then one row per edge."""
        (table,) = h
        for block in blocks:
            (relation,), dst = block.relations, block.dst_rows[0]
            c, e = int(dst.shape[0]), int(relation.col.shape[0])
            edge_index = torch.stack([torch.arange(c, c + e, device=dst.device), relation.dst])
            yield [self.layer(i, table[torch.cat([dst, relation.col])], MFG(c + e, c, edge_index, relation.rowptr))]

    def layer(self, i: int, h: torch.Tensor, mfg: MFG) -> torch.Tensor:
        """Layer ``i`` alone: ``h`` ``[num_src, d_i]`` source rows (destinations first) ->
        ``[mfg.num_dst, d_{i+1}]``, with ReLU and dropout after every layer but the last."""
        out = self.convolve(i, h, mfg)
        return dropout(out, self.dropout, self.training, relu=True) if i < self.num_layers - 1 else out

    def convolve(self, i: int, h: torch.Tensor, mfg: MFG) -> torch.Tensor:
        """Layer ``i``'s convolution without the ReLU and dropout that follow it (:meth:`layer`)."""
        conv = self.convs[i]
        dtype = next(conv.parameters()).dtype
        if getattr(mfg, "edge_weight", None) is not None:
            check_reads_edge_weights(self, "weighted")
        out = _csr_conv(conv, h, mfg, dtype)
        if out is None:
            h = h.to(dtype)
            out = conv((h, h[:mfg.num_dst]), mfg.edge_index)
        return out

    def forward(self, x: torch.Tensor, mfgs: Sequence[MFG]) -> torch.Tensor:
        if len(mfgs) != self.num_layers:
            raise ValueError(f"{len(mfgs)} MFGs for {self.num_layers} layers")
        h = x
        for i, mfg in enumerate(mfgs):
            h = self.layer(i, h, mfg)
        return h


# ---- models by name, and how the trainer calls them ----------------------------------------------

def _factory(spec: str) -> Callable[..., nn.Module]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"unknown model {spec!r}; choose one of {', '.join(BUILT_IN_MODELS)} or give a factory as "
                         "PKG.MODULE:FUNCTION")
    if module_name.startswith("."):
        raise InputError(f"--model {spec} names a relative module; give its full name, PKG.MODULE:FUNCTION")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"cannot import {module_name!r} for --model {spec} ({exc}); put the module on "
                         "PYTHONPATH or in the working directory") from None
    except SyntaxError as exc:
        raise InputError(f"the module {module_name!r} of --model {spec} is not valid Python ({exc.msg} at "
                         f"{exc.filename}, line {exc.lineno}); fix it") from None
    except (Exception, SystemExit) as exc:  # the module's own code failed while it was imported
        raise InputError(f"importing {module_name!r} for --model {spec} raised {type(exc).__name__}: "
                         f"{shown(str(exc))}; fix the module") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise InputError(f"{module_name} has no function {attr!r} for --model {spec}; define "
                         f"{attr}(in_dim, hidden, out_dim, num_layers) -> torch.nn.Module there")
    return factory


def check_model(spec: str, typed: bool = False) -> str:
    """Check a ``--model`` value before any rank starts (a user factory is imported); returns it.
    On a typed graph (``typed``) a built-in model that reads one node type is refused."""
    if typed and spec in MODELS:
        raise InputError(f"the built-in {spec} model reads one node type; on a typed graph use --model "
                         f"{' or '.join(TYPED_MODELS)}")
    if spec not in BUILT_IN_MODELS:
        _factory(spec)
    return spec


def build_model(spec: str, in_dim: int, hidden: int, out_dim: int, num_layers: int, dropout: float = 0.5,
                inputs: TypedInput | None = None, structure: TypedStructure = TypedStructure()) -> nn.Module:
    """The model ``spec`` names (see the module docstring); PyG's generated files are removed.

    ``inputs``: the graph's schema and the width of each type's input rows, which the built-in
    typed models (:data:`~salientpp.models.typed.TYPED_MODELS`) are built from; not given: a
    homogeneous graph's of ``in_dim`` features (:meth:`~salientpp.models.typed.TypedInput.homogeneous`).
    A user's factory still gets ``in_dim`` (the target type's width) and is checked against the
    graph's kind of input (:func:`model_input`). ``structure``: a built-in typed model's
    (:class:`~salientpp.models.typed.TypedStructure`), refused away from the default for any other.
    """
    inputs = inputs or TypedInput.homogeneous(in_dim)
    several = not inputs.schema.is_homogeneous  # several node types or relations
    structure.check(spec)
    if spec in MODELS:
        check_model(spec, typed=several)
        return MFGModel(spec, in_dim, hidden, out_dim, num_layers, dropout)
    if spec in TYPED_MODELS:
        return TypedMFGModel(spec, inputs, hidden, out_dim, num_layers, dropout, structure=structure)
    with no_pyg_tempfiles():
        model = _factory(spec)(in_dim, hidden, out_dim, num_layers)
    if not isinstance(model, nn.Module):
        raise InputError(f"the model factory {spec} returned {type(model).__name__}, not a torch.nn.Module")
    model_input(model, typed=several)
    return model


def model_input(model: nn.Module, typed: bool = False) -> ModelInput:
    """How ``model`` (unwrapped from DDP) is called on the batches of a homogeneous graph, or of a
    typed one when ``typed``: its declared ``salientpp_input``, else PyG's way for that graph
    (:attr:`ModelInput.EDGE_INDEX`, or :attr:`ModelInput.EDGE_INDEX_DICT` when typed).
    :class:`InputError` for a declaration that is none of them, a homogeneous form on a typed
    graph, or a ``forward`` that cannot take the arguments of its form."""
    declared = getattr(model, "salientpp_input", ModelInput.EDGE_INDEX_DICT if typed else ModelInput.EDGE_INDEX)
    try:
        kind = ModelInput(declared)
    except ValueError:
        raise InputError(f"{type(model).__name__}.salientpp_input is {declared!r}; declare one of "
                         f"{', '.join(repr(k.value) for k in ModelInput)} (salientpp.models.ModelInput), or leave it "
                         "out for forward(x, edge_index)") from None
    if typed and not kind.typed:
        raise InputError(f"the model {type(model).__name__} takes {kind.value!r} input, which a typed graph does not "
                         "have (its features differ per node type); declare salientpp_input = "
                         f"{ModelInput.EDGE_INDEX_DICT.value!r} for forward(x_dict, edge_index_dict), or use --model "
                         f"{' or '.join(TYPED_MODELS)}")
    positional, keywords = kind.call
    try:
        inspect.signature(model.forward).bind(*[None] * len(positional), **dict.fromkeys(keywords))
    except TypeError:
        call = ", ".join([*positional, *(f"{k}=..." for k in keywords)])
        raise InputError(f"{type(model).__name__}.forward cannot be called as forward({call}), as its salientpp_input "
                         f"{kind.value!r} says; change the forward or the declaration") from None
    return kind


@dataclass(frozen=True)
class ExpectedOutputs:
    """What a model must return for a batch of ``n`` seeds: float ``[n, columns]``.

    Attributes:
        columns: outputs per seed; meaning: what they are, for a message (``"a score per class
            of 7"``); model: the ``--model`` value that built the model, for a message.
    """

    columns: int
    meaning: str
    model: str

    def check(self, out: torch.Tensor, seeds: int) -> None:
        """:class:`InputError` in one sentence unless ``out`` is ``[seeds, columns]``."""
        if out.dim() != 2 or tuple(out.shape) != (seeds, self.columns):
            raise InputError(f"the model {self.model} returned outputs of shape {list(out.shape)} for a batch of "
                             f"{seeds} seeds, but training needs [{seeds}, {self.columns}] ({self.meaning}); fix "
                             "the model's forward or its factory")


@dataclass
class SeedForward:
    """Calls a model on a :class:`~salientpp.loader.dist_loader.Batch` the way the model declares
    (:func:`model_input`) and returns the seeds' outputs ``[batch_size, out_dim]`` (float32).

    The model's input is ``[x || embedding(n_id)]``: the batch's features (unless ``features`` is
    false) followed by the rows of a :class:`~salientpp.embedding.DistEmbedding`, when given; a
    typed model's (:attr:`ModelInput.typed`) is the batch's ``x_dict`` with, for each type without
    features, its rows of the embedding (one that holds the featureless types, or every node
    without ``features``). A user's model gets float32 rows; a built-in model (:class:`MFGModel`,
    :class:`~salientpp.models.typed.TypedMFGModel`: ``takes_stored_features``) gets features
    without an embedding as stored, float16 included, and converts them as its first layer reads
    them. With ``expected``, every output is checked against it (:class:`ExpectedOutputs`), so a
    model of the wrong shape fails at its first batch in one sentence.
    """

    model: nn.Module
    kind: ModelInput
    embedding: Any = None
    features: bool = True
    takes_stored_features: bool = False
    expected: ExpectedOutputs | None = None

    @classmethod
    def of(cls, model: nn.Module, embedding: Any = None, features: bool = True,
           expected: ExpectedOutputs | None = None, typed: bool = False) -> "SeedForward":
        """The forward of ``model`` (DDP-wrapped or not) on the batches of a homogeneous graph, or
        of a typed one when ``typed`` (:func:`model_input`)."""
        inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
        kind = model_input(inner, typed)
        if embedding is not None and kind.typed and features and embedding.types is None:
            raise InputError(f"the model {type(inner).__name__} takes its input per node type ({kind.value!r}), which "
                             "a learnable embedding of every node beside the features does not give; embed the types "
                             "without features (DistEmbedding(..., node_types=...)), or drop the features")
        return cls(model, kind, embedding, features, isinstance(inner, (MFGModel, TypedMFGModel)), expected)

    def inputs(self, batch) -> torch.Tensor | dict[str, torch.Tensor]:
        """The model's input rows of ``batch`` (a collective with an embedding): ``[num_nodes,
        in_dim]``, or a typed model's ``x_dict``; float32, or the stored features' dtype for a
        built-in model."""
        if self.kind.typed:
            x_dict = batch.x_dict if self.features else {}
            if self.embedding is not None:
                x_dict = {**x_dict, **self._embedded_rows(batch)}
            return x_dict if self.takes_stored_features else {t: x.float() for t, x in x_dict.items()}
        if self.embedding is None:
            return batch.x if self.takes_stored_features else batch.x.float()
        rows = self.embedding(batch.n_id)
        return torch.cat([batch.x.float(), rows], dim=1) if self.features else rows

    def __call__(self, batch) -> torch.Tensor:
        positional, keywords = self.kind.call
        out = self.model(self.inputs(batch), *(getattr(batch, name) for name in positional[1:]),
                         **{name: getattr(batch, name) for name in keywords})
        if self.kind not in (ModelInput.MFGS, ModelInput.TYPED_MFGS):  # every node's rows: the seeds' come first
            out = self._seed_rows(out, batch) if isinstance(out, dict) else out[:batch.batch_size]
        if self.expected is not None:
            self.expected.check(out, batch.batch_size)
        return out

    def seed_outputs(self, batch) -> torch.Tensor | None:
        """:meth:`__call__` of a batch with seeds; ``None`` for an empty step, which still takes
        part in the embedding's exchange (a collective) when there is one."""
        if batch.batch_size:
            return self(batch)
        if self.embedding is not None:
            self.inputs(batch)  # the embedding's lookup of the batch's nodes, as a step with seeds does it
        return None

    @staticmethod
    def _seed_rows(out: dict[str, torch.Tensor], batch) -> torch.Tensor:
        """The seeds' rows, in ``n_id`` order, of a model's per-type outputs (``to_hetero``'s: node
        type name -> ``[n_t, d]``, the type's batch nodes in ``n_id`` order), whose seeds may be of
        several types (link prediction's endpoints; :func:`~salientpp.models.typed.seed_rows`)."""
        names = batch.schema.node_types
        seed_type = batch.node_type[:batch.batch_size]
        counts = torch.bincount(seed_type, minlength=len(names)).tolist()
        return seed_rows([out.get(name) for name in names], seed_type, counts)

    def _embedded_rows(self, batch) -> dict[str, torch.Tensor]:
        """The embedding's float32 ``[n_t, D]`` rows of the batch nodes of each type it holds, in
        ``n_id`` order, by type name (one lookup: a collective)."""
        types = self.embedding.types
        mask = None if types is None else torch.isin(batch.node_type, types.to(batch.node_type.device))
        rows = self.embedding(batch.n_id if mask is None else batch.n_id[mask])
        node_type = batch.node_type if mask is None else batch.node_type[mask]
        names = batch.schema.node_types
        held = list(range(len(names))) if types is None else types.tolist()
        if len(held) == 1:  # every row looked up is of the one type held: no mask
            return {names[held[0]]: rows}
        return {names[t]: rows[node_type == t] for t in held}


# ---- what a model can do: decided here once, from its name or its module --------------------------

# The built-in models whose aggregation reads MFG edge weights (SAGE's mean, estimated by the weighted sum).
_WEIGHTED_MODELS = ("sage",)


def runs_layer_by_layer(model: str | nn.Module) -> bool:
    """Whether ``model`` (a ``--model`` value, or a model built from one) is made of layers the
    trainer can run one at a time over the whole graph: layer-wise inference and ``predict``'s
    exact outputs (``layer_inputs`` and ``whole_graph_layer``). Every built-in model is (:class:`MFGModel`,
    :class:`~salientpp.models.typed.TypedMFGModel`); a user's factory's is not."""
    return isinstance(model, (MFGModel, TypedMFGModel)) if isinstance(model, nn.Module) else model in BUILT_IN_MODELS


def trains_full_graph(model: str | nn.Module) -> bool:
    """Whether full-graph training (:mod:`salientpp.fullgraph`, which runs each layer's
    ``convolve`` over the owned vertices and their halo) can train ``model``: the built-in models
    of homogeneous graphs (:class:`MFGModel`, :data:`MODELS`)."""
    return isinstance(model, MFGModel) if isinstance(model, nn.Module) else model in MODELS


def check_reads_edge_weights(model: str | nn.Module, sampler: str) -> None:
    """:class:`InputError` unless ``model`` (a ``--model`` value, or a model built from one) uses
    the edge weights of the MFGs of ``sampler``, a weighted sampler (LADIES): a built-in model
    whose aggregation is a mean (SAGE), or a user's model that takes the MFGs (``salientpp_input
    = "mfgs"``) and so can read ``mfg.edge_weight``. A user's factory not yet built passes: its
    module is checked once built."""
    name = model.model if isinstance(model, (MFGModel, TypedMFGModel)) else model
    if isinstance(name, str) and name in BUILT_IN_MODELS:
        if name not in _WEIGHTED_MODELS:
            raise InputError(f"the {sampler} sampler's edge weights estimate a mean aggregation, which the "
                             f"built-in {name} model does not compute; use --model sage (or your own model "
                             "reading mfg.edge_weight), or --sampler nodewise")
    elif isinstance(model, nn.Module) and model_input(model) is not ModelInput.MFGS:
        raise InputError(f"the {sampler} sampler's MFGs carry edge weights, which the model {type(model).__name__} "
                         f"cannot see: it takes {model_input(model).value!r} input; declare salientpp_input = "
                         "'mfgs' and read mfg.edge_weight (see salientpp.models.gnn), or use --sampler nodewise")
