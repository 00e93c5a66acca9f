"""Interop with PyTorch Geometric: a ``torch_geometric.data.Data`` or ``HeteroData`` graph as a :class:`Dataset`.

``torch_geometric`` itself is not imported: any object with the attributes of a ``Data`` works.
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..errors import InputError, shown
from .convert import as_features, as_labels, as_split, check_feature_dtype, checked
from .csr import build_csr, build_typed_csr
from .format import Dataset, labelled, with_link_split
from .links import check_link_split, link_relation
from .schema import HOMOGENEOUS_RELATION, HOMOGENEOUS_TYPE, RELATION_SEPARATOR, GraphSchema, Relation

# The attributes a Data must have, with the end of the sentence that says how to give them.
_REQUIRED = (
    ("edge_index", "edge_index; give it the edges as an int [2, E] tensor (the ToSparseTensor transform moves them "
                   "into adj_t, so leave that transform out)"),
    ("x", "node features (x); give it an [N, F] tensor with F >= 1 (to train on a learned embedding alone, give "
          "it one constant column and train with --embedding-dim D --no-features)"),
    ("y", "labels (y); give it one class id or one row of multi-label targets per node"),
)
# (keyword argument, PyG mask attribute) of each split.
_SPLITS = (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask"))


def _numpy(value: Any, what: str) -> np.ndarray:
    """A numpy view of a CPU tensor (a copy only for a tensor on another device, or of a float
    type numpy lacks: bfloat16 and the float8 types become float32, exactly, and go on like any
    other float type), or ``value`` as an array; ``what`` names it in messages."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_meta:
            raise InputError(f"{what} is a tensor on the meta device, which holds no values; give a tensor with "
                             "values, e.g. on the CPU")
        if value.layout != torch.strided:
            raise InputError(f"{what} is a sparse tensor ({value.layout}); pass a dense one, e.g. {what}.to_dense()")
        value = value.detach().cpu()
        if value.dtype.is_floating_point and value.dtype not in (torch.float16, torch.float32, torch.float64):
            value = value.float()
        try:
            return value.numpy()
        except TypeError:  # a type numpy has no counterpart of, such as complex32
            raise InputError(f"{what} has the dtype {value.dtype}, which numpy cannot hold; convert it, e.g. "
                             f"{what}.float()") from None
    if type(value).__name__ == "SparseTensor":
        raise InputError(f"{what} is a torch_sparse SparseTensor; pass a dense tensor, e.g. {what}.to_dense()")
    array = np.asarray(value)
    if array.dtype == object:
        raise InputError(f"{what} is not a numeric array (got {type(value).__name__}); pass a tensor")
    return array


def _is_hetero(data: Any) -> bool:
    try:
        from torch_geometric.data import HeteroData
    except ImportError:
        return False
    return isinstance(data, HeteroData)


def from_pyg(data: Any, *, target: str | None = None, train: Any = None, valid: Any = None, test: Any = None,
             feature_dtype: str = "float32", keep_self_loops: bool = False, source: str | None = None,
             target_edge: str | tuple[str, str, str] | None = None,
             link_split: tuple[float, float, float] | None = None, seed: int = 0) -> Dataset:
    """A validated :class:`Dataset` from a ``torch_geometric.data.Data`` or ``HeteroData``.

    The graph is built as ``salientpp prepare npz:...`` builds it (the same helpers): edges are
    symmetrised, sorted, deduplicated and self-loops dropped (unless ``keep_self_loops``), the
    features converted to ``feature_dtype``, and the result goes through the same checks (no
    feature columns, NaN/Inf features, split ids out of range, repeated, unlabelled or shared by
    two splits, an empty training split: one sentence each, as :class:`InputError`).

    A ``HeteroData`` becomes a typed dataset (:mod:`salientpp.data.schema`): its node types in
    its order, each holding ``num_nodes`` global ids after the previous types'; one relation per
    edge type, each with its reverse (:meth:`GraphSchema.with_reverses`: an edge type given as
    another's reverse, named ``rev_NAME`` as PyG's ``ToUndirected`` names it or holding exactly
    its edges reversed under any name, is paired with it and adds no entries, and one named
    ``rev_NAME`` that does not hold exactly those edges is refused; a relation joining a type to
    itself and given without a reverse is made symmetric); the CSR of
    :func:`~salientpp.data.csr.build_typed_csr`. ``x``, ``y`` and the splits are the ``target``
    type's, the ``x`` of every other type that has one goes to :attr:`Dataset.features`.

    Args:
        data: a ``Data`` with ``edge_index`` (int ``[2, E]``), ``x`` (``[N, F]``, N = number of
            nodes; any real dtype, bfloat16 included), ``y`` (integer ``[N]`` or ``[N, 1]`` class
            ids, -1 or NaN = unlabelled; or ``[N, T]`` multi-label targets: float 0/1 with NaN =
            unknown, bool, or integer 0/1) and, for each split not given as an argument, a
            boolean mask attribute (``train_mask``, ``val_mask``, ``test_mask``, ``[N]``). Or a
            ``HeteroData`` whose ``target`` type has these attributes (N: its node count), whose
            every edge type has an ``edge_index`` (ids counted from 0 within each type), and
            whose other types have ``x`` (``[n_t, F_t]``, widths may differ) or ``num_nodes``
            (a type without features; an int, equal to the rows of ``x`` where both are given,
            in a ``Data`` too). Tensors on another device are copied to the CPU; CPU
            tensors are read without a copy, so the dataset may share memory with ``data``
            (``x`` already of ``feature_dtype``, int64 ``y``, the CSR never).
        target: the node type that carries the labels and splits: required for a ``HeteroData``,
            refused for a ``Data``.
        train, valid, test: the splits, each an integer tensor/array of node ids (of the target
            type, counted from 0) or a boolean ``[N]`` mask; they take precedence over the mask
            attributes.
        feature_dtype: ``"float32"`` or ``"float16"`` (every type's features).
        keep_self_loops: keep ``(v, v)`` edges.
        source: ``Dataset.source`` (meta.json's ``source``); default ``"pyg:<class name>"``.
        link_split: ``(train, valid, test)`` fractions of the edges of ``target_edge`` to hold out for
            link prediction (``salientpp prepare --link-split``'s: :func:`~salientpp.data.links.split_edges`,
            seeded by ``seed``): validation and test edges leave the graph together with their
            reverses (PyG's ``RandomLinkSplit(edge_types=..., rev_edge_types=...)``). With it,
            ``y`` and the node splits may be left out (link prediction reads neither): every
            node of the target type is then of class 0, and the training split holds the
            labelled ones; and ``target`` may be left out: the destination type of
            ``target_edge`` when it has features, else its source type.
        target_edge: the relation whose edges ``link_split`` holds out (an edge type such as
            ``("user", "rates", "movie")``, ``"user__rates__movie"``, or a name no other relation
            has): required for a ``HeteroData`` of several edge types, a ``Data``'s one relation by
            default; refused without ``link_split``.

    Raises :class:`InputError` with one sentence on anything :func:`salientpp.data.importers.load_source`
    would refuse, and for a missing attribute, a sparse or meta-device tensor, a ``num_nodes``
    that is not an integer or disagrees with the rows of ``x``, labels without one row per
    feature row, a split given neither way, a ``target`` missing or unknown (``HeteroData``) or
    given (``Data``), an edge id outside the count of its type, a type or relation name that
    does not read back from ``src__name__dst`` (:func:`~salientpp.data.schema.check_name`), or
    an edge type named ``rev_NAME`` that is not exactly ``NAME``'s edges reversed.
    """
    kind = type(data).__name__
    check_feature_dtype(feature_dtype)
    if target_edge is not None and link_split is None:
        raise InputError("target_edge= names the relation of link_split=, which is not given; pass link_split=(0.85, "
                         "0.05, 0.10) or drop target_edge=")
    linked = link_split is not None
    graph = _Graph(data, kind, target, keep_self_loops, linked, target_edge)
    schema = graph.schema
    start, stop = schema.target_range
    target_prefix = graph.prefix(schema.target)
    given_y = getattr(graph.target_store, "y", None)
    y = (np.zeros(stop - start, dtype=np.int64) if given_y is None and linked
         else _numpy(given_y, f"{target_prefix}.y"))
    if y.ndim >= 1 and y.shape[0] != stop - start:  # before the splits, which would be blamed for x's rows
        raise InputError(f"{target_prefix}.y has {y.shape[0]} rows but {target_prefix}.x has {stop - start}; give "
                         "one row of each per node")
    splits = {}
    for (argument, mask), given in zip(_SPLITS, (train, valid, test)):
        value = given if given is not None else getattr(graph.target_store, mask, None)
        what = argument if given is not None else f"{target_prefix}.{mask}"
        if value is None and linked:  # the node splits of a link dataset: every labelled node trains
            value = labelled(as_labels(y, stop - start, f"{target_prefix}.y")) if argument == "train" else \
                np.zeros(0, dtype=np.int64)
        if value is None:
            raise InputError(f"the {argument} split is missing: pass {argument}=<node ids or boolean mask> or give "
                             f"the {graph.what(schema.target)} a boolean {mask} attribute")
        array = _numpy(value, what)
        if array.dtype == np.bool_ and array.ndim == 2:
            raise InputError(f"the boolean mask {what} has shape {list(array.shape)}, several splits (one per column); "
                             f"pass one column, e.g. from_pyg(data, {argument}={what}[:, 0], ...)")
        ids = as_split(array, stop - start, what)
        if graph.hetero and ids.shape[0] and (ids.min() < 0 or ids.max() >= stop - start):  # named as given
            raise InputError(f"{what} holds ids outside [0, {stop - start}) of the {shown(schema.target)} nodes, such "
                             f"as {ids[(ids < 0) | (ids >= stop - start)][0]}; give ids of target nodes counted from 0")
        splits[argument] = ids + start
    x_dict = {t: as_features(x, schema.num_nodes[schema.type_index(t)], f"{graph.prefix(t)}.x")
              for t, x in graph.x_dict.items()}
    y = as_labels(y, stop - start, f"{target_prefix}.y")
    rowptr, col, edge_rel = graph.csr()
    dataset = Dataset(rowptr=rowptr, col=col, x=x_dict.pop(schema.target), y=y, train_idx=splits["train"],
                      valid_idx=splits["valid"], test_idx=splits["test"], source=source or f"pyg:{kind}",
                      schema=schema, edge_rel=edge_rel, features=x_dict)
    if linked:
        fractions = check_link_split(link_split, "link_split=")
        dataset = with_link_split(dataset, graph.link_relation, fractions, seed)
    return checked(dataset, feature_dtype)


def _relation_ends(target_edge: str | tuple[str, str, str], edge_types: Any) -> tuple[str, ...]:
    """``(dst, src)`` of the edge type ``target_edge`` names (a triple, ``"src__name__dst"``, or a
    name one edge type has), or ``()`` when it names none (refused later, naming the relations)."""
    for key in edge_types:
        if target_edge in (key, key[1], RELATION_SEPARATOR.join(key)):
            return key[2], key[0]
    return ()


class _Graph:
    """The stores of a ``Data`` (one node type, :data:`~salientpp.data.schema.HOMOGENEOUS_TYPE`,
    and one relation) or a ``HeteroData``, with the schema they give (the reverses among them
    recognised in their edges, self-loops counted as ``keep_self_loops`` keeps them), their
    features as numpy arrays (``x_dict``: type name -> ``[n_t, F_t]``, the target's always
    present) and their edges (``edge_index``: edge type -> int ``[2, E]``, ids counted within
    their types)."""

    def __init__(self, data: Any, kind: str, target: str | None, keep_self_loops: bool, linked: bool,
                 target_edge: str | tuple[str, str, str] | None):
        self.kind = kind
        self.hetero = kind == "HeteroData" or _is_hetero(data)
        if not self.hetero:
            if target is not None:
                raise InputError(f"target={shown(target)} applies to a HeteroData but this is a {kind} of one node "
                                 "type; drop target=")
            target = HOMOGENEOUS_TYPE
            self.nodes = {target: data}
            self.edges = {HOMOGENEOUS_RELATION: data}
        else:
            self.nodes = {t: data[t] for t in data.node_types}
            self.edges = {tuple(e): data[e] for e in data.edge_types}
            if target is None and linked and target_edge is not None:  # an end of the relation with features
                ends = _relation_ends(target_edge, self.edges)
                target = next((t for t in ends if getattr(self.nodes.get(t), "x", None) is not None), None)
            if target is None or target not in self.nodes:
                given = "no target=" if target is None else f"the unknown target={shown(target)}"
                raise InputError(f"from_pyg of a HeteroData got {given}; pass target=TYPE, the node type that carries "
                                 f"the labels and splits, one of {', '.join(map(shown, self.nodes)) or 'none'}")
        self.target_store = self.nodes[target]
        for attribute, message in _REQUIRED:
            if attribute == "y" and linked:  # a link dataset's labels are optional (from_pyg)
                continue
            stores = self.edges if attribute == "edge_index" else {target: self.target_store}
            for key, store in stores.items():
                if getattr(store, attribute, None) is None:
                    raise InputError(f"the {self.what(key)} has no {message}")
        self.x_dict = {}
        for t, store in self.nodes.items():
            if getattr(store, "x", None) is not None:
                self.x_dict[t] = _numpy(store.x, f"{self.prefix(t)}.x")
        x = self.x_dict[target]
        if x.ndim != 2:
            raise InputError(f"{self.prefix(target)}.x must have shape [N, F], got {list(x.shape)}; give one feature "
                             "row per node")
        counts = [self._count(t) for t in self.nodes]
        self.edge_index = {key: _numpy(store.edge_index, f"{self.prefix(key)}.edge_index")
                           for key, store in self.edges.items()}
        self.keep_self_loops = keep_self_loops
        self.schema = GraphSchema.with_reverses(list(self.nodes), counts, self.edges, target,
                                                list(self.edge_index.values()), keep_self_loops)
        # the relation of link prediction (linked), else None: read by from_pyg only when linked
        self.link_relation: Relation | None = (link_relation(self.schema, target_edge, f"the {kind}", "target_edge=")
                                               if linked else None)

    def _count(self, node_type: str) -> int:
        """Nodes of ``node_type``: its ``num_nodes`` where it is given (an integer, equal to the
        rows of its ``x`` where it has one), else the rows of its ``x``."""
        store, where = self.nodes[node_type], self.prefix(node_type)
        rows = self.x_dict[node_type].shape[0] if node_type in self.x_dict and self.x_dict[node_type].ndim else None
        try:
            given = "num_nodes" in store  # a PyG store; reading an unset num_nodes would infer one, with a warning
        except TypeError:  # any object with the attributes of a Data
            given = True
        count = getattr(store, "num_nodes", None) if given else None
        if count is None:
            if rows is None:
                raise InputError(f"the {self.what(node_type)} has neither features (x) nor num_nodes; set "
                                 f"{where}.num_nodes")
            return int(rows)
        try:
            count = operator.index(count)
        except TypeError:
            raise InputError(f"{where}.num_nodes is {shown(count)}, not an integer; give the number of nodes as an "
                             "int") from None
        if rows is not None and rows != count:
            raise InputError(f"{where}.num_nodes is {count} but {where}.x has {rows} rows; give one feature row per "
                             "node, or num_nodes equal to the rows")
        return count

    def prefix(self, key: str | tuple[str, str, str]) -> str:
        """How a store is written in a message: ``data`` or ``data['paper']``."""
        return f"data[{key!r}]" if self.hetero else "data"

    def what(self, key: str | tuple[str, str, str]) -> str:
        """The store named in a sentence: ``Data`` or ``HeteroData's node type 'paper'``."""
        if not self.hetero:
            return self.kind
        return f"{self.kind}'s {'node' if isinstance(key, str) else 'edge'} type {shown(key)}"

    def csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``rowptr``, ``col`` and ``edge_rel`` of the graph (:func:`build_csr` and no ``edge_rel``
        when the schema is homogeneous, else :func:`build_typed_csr` over global ids)."""
        schema = self.schema
        if schema.is_homogeneous:
            (edge_index,) = self.edge_index.values()
            return (*build_csr(edge_index, schema.total_nodes, self.keep_self_loops), None)
        edges = [np.empty((2, 0), dtype=np.int64)] * schema.num_relations
        for key, edge_index in self.edge_index.items():
            r = schema.relation_index(key)
            edges[r] = schema.global_edges(schema.relations[r], edge_index, f"{self.prefix(key)}.edge_index")
        return build_typed_csr(edges, schema.reverse, schema.total_nodes, self.keep_self_loops)
