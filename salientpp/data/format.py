"""The dataset directory: a symmetric CSR graph with features, labels and a split.

Layout (all arrays are plain ``.npy`` files, memory-mapped on load; nothing is pickled)::

    rowptr.npy     int64   [N + 1]   CSR row pointers of the symmetric graph
    col.npy        int64   [nnz]     neighbours, sorted per row, no duplicates
    x.npy          float32 | float16 [N, F]
    y.npy          int64   [N]       multi-class: class id, -1 = unlabelled
               or float32 [N, T] multi-label / binary: 0 or 1 per target, NaN = unknown target
               or bool    [N, T] multi-label / binary: every target known
    train_idx.npy  int64   [n_train]
    valid_idx.npy  int64   [n_valid]
    test_idx.npy   int64   [n_test]
    input_id.npy   int64   [N]       optional: the id of each node in the input, ascending (written
                                     when ``prepare`` compacted the sparse ids of an edge list)
    train_edges.npy, valid_edges.npy, test_edges.npy
                   int64   [2, E_s]  optional, all three or none: held-out edges of link prediction
                                     (:mod:`salientpp.data.links`) of the relation meta.json's
                                     link_relation names (src__name__dst); valid and test edges are
                                     not in the CSR, nor are their reverses
    meta.json      kind, counts, dtypes, source, one entry (dtype, shape, checksum) per file;
                   label_kind ("multiclass" | "multilabel"), label_dtype, and num_classes
                   (multiclass: every class id lies in [-1, num_classes)) or num_tasks (multilabel)

A typed graph (:mod:`salientpp.data.schema`: node types with contiguous global id ranges,
relations, a target type) adds::

    edge_rel.npy   int8    [nnz]     the relation of each CSR entry; rows grouped by relation
    x_T.npy        float32 | float16 [n_T, F_T]  the features of the node type at position T of
                                     node_types, for each type other than the target that has
                                     features (named by position: a type's name may hold any character)
    meta.json      node_types (name, num_nodes, and num_features for a type with features),
                   relations (src, name, dst, reverse), target_type (GraphSchema.to_meta)

and then x.npy, y.npy and the splits concern the target type: row i of x and y is the node
target_range[0] + i, the splits hold global ids of target nodes, num_features is x's width. A
homogeneous graph writes none of these (its meta.json has no schema: it is
GraphSchema.homogeneous), so its directory is the one written before typed graphs.

A node is *labelled* when it has a class (``y >= 0``) or at least one known target (a row that
is not all NaN; every bool row). Split ids must be labelled.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..errors import InputError, counted, shown
from ..io import atomic_output_dir, load_listed, meta_count, read_meta, read_rows, row_chunks, save_array, write_meta
from .csr import check_csr
from .links import (EDGE_SPLITS, LINK_RELATION_KEY, LinkSplit, check_edge_array, check_endpoint_types,
                    check_held_out, recorded_relation, split_edges)
from .schema import GraphSchema, Relation, Typed

KIND = "salientpp-dataset"
# The seed sets of a dataset, and the files that hold their node ids.
SPLITS = ("train", "valid", "test")
SPLIT_FILES = tuple(f"{split}_idx" for split in SPLITS)
FEATURE_DTYPES = (np.float32, np.float16)
# Label kinds (meta.json "label_kind"): int64 [N] class ids, or float32/bool [N, T] targets.
MULTICLASS = "multiclass"
MULTILABEL = "multilabel"
LABEL_KINDS = (MULTICLASS, MULTILABEL)
MULTICLASS_DTYPE = "int64"
MULTILABEL_DTYPES = ("float32", "bool")
# (allowed dtypes, number of dimensions) of each array of a dataset directory; None: y's number of
# dimensions follows its dtype (int64 1-D, float32/bool 2-D), checked by check_label_array.
FILE_FORMATS = {"rowptr": (("int64",), 1), "col": (("int64",), 1), "x": (("float32", "float16"), 2),
                "y": ((MULTICLASS_DTYPE,) + MULTILABEL_DTYPES, None), **{name: (("int64",), 1) for name in SPLIT_FILES},
                "input_id": (("int64",), 1), **{name: (("int64",), 2) for name in EDGE_SPLITS},
                "edge_rel": (("int8",), 1)}
# meta.json's entries of a typed graph's schema (GraphSchema.to_meta), absent from a homogeneous one.
SCHEMA_KEYS = ("node_types", "relations", "target_type")
_FINITE_CHUNK_BYTES = 1 << 25


def first_nonfinite_row(x: np.ndarray) -> int:
    """Index of the first row of ``x`` (float ``[n, F]``) holding a NaN or an infinity, or -1.

    Reads ``x`` once in chunks of about 32 MiB (:func:`~salientpp.io.read_rows`), so a
    memory-mapped 100M-row array needs no full-size temporary and leaves no pages resident.
    """
    for start, stop in row_chunks(x.shape[0], x.shape[1] * x.itemsize, _FINITE_CHUNK_BYTES):
        finite = np.isfinite(read_rows(x, start, stop)).all(axis=1)
        if not finite.all():
            return start + int(finite.argmin())
    return -1


# How to give features of no columns: the target's (x), and another node type's.
NO_COLUMNS_FIX = ("pass features with F >= 1 (a graph without features: one constant column, then train with "
                  "--embedding-dim D --no-features)")
NO_TYPE_FEATURES_FIX = "leave the type out of the features (a node type without features is absent from them)"


def check_features(x: np.ndarray, n: int, where: str, rows: str = "node",
                   no_columns: str = NO_COLUMNS_FIX) -> None:
    """Raise :class:`InputError` unless ``x`` holds float32 or float16 features ``[n, F]``,
    ``F >= 1``, every value finite (:func:`first_nonfinite_row`). ``where`` names the features,
    ``rows`` what a row is (``"node"``, ``"author node"``: a bad row is named by its position
    among them, its id within its type), ``no_columns`` how to repair features without columns."""
    if x.ndim != 2 or x.shape[0] != n:
        raise InputError(f"{where} must have shape [N={n}, F], got {list(x.shape)}; pass one feature row per {rows}")
    if x.dtype not in FEATURE_DTYPES:
        raise InputError(f"{where} must be float32 or float16, got {x.dtype}; convert them with astype")
    if x.shape[1] == 0:
        raise InputError(f"{where} have no columns (shape {list(x.shape)}); at least one feature column is needed; "
                         f"{no_columns}")
    bad_row = first_nonfinite_row(x)
    if bad_row >= 0:
        raise InputError(f"{where} contain NaN or infinite values (first in the row of {rows} {bad_row}); "
                         "clean or impute them first")


def _first_class_outside(y: np.ndarray, num_classes: int | None) -> int:
    """Index of the first class id of int64 ``y`` ``[n]`` below -1 or, when ``num_classes`` is
    given, not below it; -1 when there is none. Reads ``y`` once in chunks of about 32 MiB
    (:func:`~salientpp.io.read_rows`), so a memory-mapped ``y`` leaves no pages resident."""
    for start, stop in row_chunks(y.shape[0], y.itemsize, _FINITE_CHUNK_BYTES):
        chunk = read_rows(y, start, stop)
        outside = chunk < -1 if num_classes is None else (chunk < -1) | (chunk >= num_classes)
        if outside.any():
            return start + int(outside.argmax())
    return -1


def class_count(y: np.ndarray) -> int:
    """Largest class id + 1 of the int64 class ids ``y`` ``[n]`` (0 when no node is labelled),
    read in chunks of about 32 MiB as :func:`_first_class_outside` reads them."""
    largest = -1
    for start, stop in row_chunks(y.shape[0], y.itemsize, _FINITE_CHUNK_BYTES):
        largest = max(largest, int(read_rows(y, start, stop).max()))
    return largest + 1


def check_ids(ids: np.ndarray, y: np.ndarray, start: int, stop: int, where: str, fix: str,
              strictly_increasing: bool = False) -> None:
    """Raise :class:`InputError` unless ``ids`` is a 1-D int64 array of labelled node ids in
    ``[start, stop)``.

    Args:
        y: labels of the ids ``start..stop-1``: int64 ``[stop - start]`` (-1 = unlabelled) or
            float32/bool ``[stop - start, T]`` (a row of NaN only = unlabelled); see :func:`labelled`.
        where: names the array in the message; fix: how to repair it.
        strictly_increasing: also require sorted ids without duplicates.
    """
    if ids.ndim != 1 or ids.dtype != np.int64:
        raise InputError(f"{where} must be a 1-D int64 array, got {ids.dtype} {list(ids.shape)}; {fix}")
    if not ids.shape[0]:
        return
    if strictly_increasing:
        unsorted = ids[1:] <= ids[:-1]
        if unsorted.any():
            i = int(unsorted.argmax())
            raise InputError(f"{where} is not sorted without duplicates (id {ids[i + 1]} follows {ids[i]}); {fix}")
    outside = (ids < start) | (ids >= stop)
    if outside.any():
        raise InputError(f"{where} holds node ids outside [{start}, {stop}) such as {ids[outside.argmax()]}; {fix}")
    unlabelled = ~labelled(y[ids - start])
    if unlabelled.any():
        what = "label -1" if y.ndim == 1 else "every target NaN"
        raise InputError(f"{where} holds unlabelled nodes ({what}) such as {ids[unlabelled.argmax()]}; {fix}")


def label_kind(y: np.ndarray) -> str:
    """:data:`MULTICLASS` for 1-D labels (int64 class ids), :data:`MULTILABEL` for 2-D ones
    (float32/bool ``[N, T]`` targets). Looks at the shape only; :func:`check_label_array`
    checks the rest."""
    return MULTICLASS if y.ndim == 1 else MULTILABEL


def labelled(y: np.ndarray) -> np.ndarray:
    """bool ``[n]``: which rows of the labels ``y`` are labelled.

    int64 ``[n]``: ``y >= 0``; float32 ``[n, T]``: at least one target is not NaN; bool
    ``[n, T]``: every row.
    """
    if y.ndim == 1:
        return np.asarray(y) >= 0
    if y.dtype == np.bool_:
        return np.ones(y.shape[0], dtype=bool)
    return ~np.isnan(y).all(axis=1)


def label_meta(y: np.ndarray, num_classes: int | None = None) -> dict[str, Any]:
    """The meta.json entries that describe labels ``y`` (checked by :func:`check_label_array`):
    ``label_kind``, ``label_dtype`` and ``num_classes`` (multi-class: ``num_classes`` when
    given, else the largest class id + 1) or ``num_tasks`` (multi-label: T)."""
    if y.ndim == 1:
        return {"label_kind": MULTICLASS, "label_dtype": str(y.dtype),
                "num_classes": class_count(y) if num_classes is None else int(num_classes)}
    return {"label_kind": MULTILABEL, "label_dtype": str(y.dtype), "num_tasks": int(y.shape[1])}


def _first_bad_target(y: np.ndarray) -> int:
    """Index of the first row of float ``y`` ``[n, T]`` holding a value other than 0, 1 or NaN,
    or -1. Reads ``y`` once in chunks of about 32 MiB."""
    for start, stop in row_chunks(y.shape[0], y.shape[1] * y.itemsize, _FINITE_CHUNK_BYTES):
        chunk = read_rows(y, start, stop)
        good = ((chunk == 0) | (chunk == 1) | np.isnan(chunk)).all(axis=1)
        if not good.all():
            return start + int(good.argmin())
    return -1


def check_label_array(y: np.ndarray, n: int, where: str, fix: str, num_classes: int | None = None,
                      num_tasks: int | None = None, kind: str | None = None, dtype: str | None = None,
                      first_id: int = 0) -> None:
    """Raise :class:`InputError` unless ``y`` holds valid labels for ``n`` nodes.

    Valid labels are int64 ``[n]`` class ids >= -1 (-1 = unlabelled), below ``num_classes`` when
    it is given (the message names the first id outside and its node); or float32 ``[n, T]``
    targets of 0, 1 or NaN (an unknown target), or bool ``[n, T]``, with ``T >= 1`` and
    ``T == num_tasks`` when it is given.

    Args:
        where: names the labels in the message (e.g. ``"the labels (y) of DATASET"``).
        fix: how to repair them, the end of every message.
        kind, dtype: the label kind and dtype that meta.json promises, when it does.
        first_id: global id of row 0, to name a bad row.

    Cost: one pass over ``y`` in 32 MiB chunks.
    """
    shape = list(y.shape)
    if y.ndim == 1 or (y.ndim != 2 and y.dtype == np.int64):
        if y.ndim != 1 or y.shape[0] != n:
            raise InputError(f"{where} must have shape [N={n}] (class ids) or [N={n}, T] (multi-label targets), got "
                             f"{shape}; pass one label per node (-1 for unlabelled)")
        if y.dtype != np.int64:
            raise InputError(f"{where} are {y.dtype} {shape} but one-dimensional labels must be int64 class ids "
                             "(-1 = unlabelled); convert them with astype(np.int64), or give multi-label targets as "
                             "float32 or bool [N, T]")
    elif y.ndim != 2 or y.shape[0] != n or y.shape[1] < 1:
        raise InputError(f"{where} must have shape [N={n}] (class ids) or [N={n}, T] with T >= 1 (multi-label "
                         f"targets), got {shape}; pass one label or one row of targets per node")
    elif str(y.dtype) not in MULTILABEL_DTYPES:
        raise InputError(f"{where} are {y.dtype} {shape} but multi-label targets must be float32 (0, 1, NaN = "
                         "unknown) or bool; convert them with astype(np.float32) or astype(bool)")
    actual = label_kind(y)
    if kind is not None and kind != actual:
        raise InputError(f"{where} are {actual} labels ({y.dtype} {shape}) but meta.json says {kind}; {fix}")
    if dtype is not None and dtype != str(y.dtype):
        raise InputError(f"{where} are {y.dtype} but meta.json says the labels are {dtype}; {fix}")
    if actual == MULTICLASS:
        bad = _first_class_outside(y, num_classes)
        if bad < 0:
            return
        value = int(y[bad])
        if num_classes is None:
            raise InputError(f"{where} must be class ids >= 0 or -1 for unlabelled, but node {first_id + bad} has "
                             f"{value}; {fix}")
        raise InputError(f"{where} holds labels outside [-1, {num_classes}) for num_classes {num_classes}, such as "
                         f"{value} at node {first_id + bad}; {fix}")
    if num_tasks is not None and y.shape[1] != num_tasks:
        raise InputError(f"{where} have {counted(y.shape[1], 'target')} per node but meta.json gives num_tasks "
                         f"{num_tasks}; {fix}")
    if y.dtype != np.bool_:
        bad = _first_bad_target(y)
        if bad >= 0:
            row = np.asarray(y[bad])
            value = row[~((row == 0) | (row == 1) | np.isnan(row))][0]
            raise InputError(f"{where} hold the target value {value} in the row of node {first_id + bad}, but "
                             f"multi-label targets must be 0, 1 or NaN (unknown); {fix}")


def check_unique(ids: np.ndarray, where: str) -> None:
    """Raise :class:`InputError` when the 1-D ``ids`` hold a value more than once (``where``
    names the array). One O(n) pass when the ids are sorted, a sorted copy otherwise."""
    if ids.shape[0] < 2 or bool(np.all(ids[1:] > ids[:-1])):
        return
    ordered = np.sort(ids)
    repeated = ordered[1:] == ordered[:-1]
    if repeated.any():
        count = int(repeated.sum())
        raise InputError(f"{where} holds node {ordered[1:][repeated][0]} more than once "
                         f"({counted(count, 'repeated entry', 'repeated entries')}); a node may appear once per "
                         "split, so drop the repeats (e.g. with numpy.unique)")


def check_disjoint_splits(splits: dict[str, np.ndarray], num_nodes: int, where: str) -> None:
    """Raise :class:`InputError` when two of the splits (name -> ids in ``[0, num_nodes)``, each
    without repeats) share a node: one sentence naming both splits, how many ids and an example."""
    owner = np.zeros(num_nodes, dtype=np.int8)
    names = list(splits)
    for i, name in enumerate(names, start=1):
        ids = splits[name]
        taken = owner[ids]
        clash = taken != 0
        if clash.any():
            other = names[int(taken[clash.argmax()]) - 1]
            shared = ids[clash]
            raise InputError(f"the {other} and {name} splits of {where} share {counted(shared.shape[0], 'node id')} "
                             f"such as {shared[0]}; a node may be in one split only, so remove the shared ids from all "
                             "but one split")
        owner[ids] = i


def check_permutation(values: np.ndarray, n: int, where: str, fix: str, what: str = "ids") -> None:
    """Raise :class:`InputError` unless the int64 ``[n]`` array ``values`` holds every one of
    ``0..n-1`` once. ``where`` names the array in the message, ``what`` its entries."""
    if n and (values.min() < 0 or values.max() >= n):
        raise InputError(f"{where} holds {what} outside [0, {n}); {fix}")
    seen = np.zeros(n, dtype=bool)
    seen[values] = True
    if not seen.all():
        raise InputError(f"{where} repeats {what}, so it is not a permutation of 0..{n - 1}; {fix}")


def entry_relations(edge_rel: np.ndarray | None, schema: GraphSchema, nnz: int) -> np.ndarray | None:
    """The relation of each of a CSR's ``nnz`` entries: a typed graph's ``edge_rel`` (int8
    ``[nnz]``; ``None`` when not given, which :meth:`Dataset.validate` refuses); on a homogeneous
    graph relation 0 as a constant view (int8 ``[nnz]``, stride 0: no memory), whatever was given
    (a copy of the dataset with another CSR gets its own; it is never read or written)."""
    return np.broadcast_to(np.int8(0), (nnz,)) if schema.is_homogeneous else edge_rel


@dataclass
class Dataset(Typed):
    """A graph dataset in memory (arrays may be read-only memory maps).

    Attributes:
        rowptr: int64 ``[N + 1]``; col: int64 ``[nnz]`` (symmetric CSR, sorted rows).
        x: float32 or float16 ``[N, F]`` node features.
        y: labels, int64 ``[N]`` class ids (-1 = unlabelled; multi-class), or float32 ``[N, T]``
            targets of 0, 1 or NaN (unknown) or bool ``[N, T]`` (multi-label / binary).
        train_idx, valid_idx, test_idx: int64 node ids of each split (labelled nodes only).
        source: where the data came from (for meta.json).
        extra_meta: further meta.json entries (e.g. generator parameters).
        input_id: optional int64 ``[N]``, ascending: the id each node had in the input (an edge
            list whose sparse ids were compacted to ``0..N-1``); ``None`` when the ids are the input's.
        link_split: the held-out edges of link prediction (:class:`~salientpp.data.links.LinkSplit`:
            int64 ``[2, E_s]`` train, valid and test edges), or ``None``; the validation and test edges
            are absent from the CSR (both directions), the training edges are in it.
        declared_classes: multi-class labels only: the number of classes the dataset declares
            (meta.json's ``num_classes``, or ``prepare --num-classes``), which every class id must
            lie below; ``None``: the largest class id + 1.
        schema: the node types and relations (:class:`~salientpp.data.schema.GraphSchema`);
            ``None`` is the homogeneous schema of ``N`` nodes, which every graph without types has.
            ``x``, ``y`` and the splits concern the schema's target type: row ``i`` of ``x`` and
            ``y`` is the node ``target_range[0] + i``, and the splits hold global ids in
            ``target_range`` (for a homogeneous graph: every node, from 0).
        edge_rel: int8 ``[nnz]``, the relation of each CSR entry (entry ``u`` of row ``v`` is an edge
            ``u -> v``; rows grouped by relation, :func:`~salientpp.data.csr.build_typed_csr`); on a
            homogeneous graph relation 0 as a constant view (:func:`entry_relations`: no memory, and
            no ``edge_rel.npy``).
        features: the features of the node types other than the target, by type name: float32 or
            float16 ``[n_t, F_t]`` (widths may differ); a type without features is absent.
    """

    rowptr: np.ndarray
    col: np.ndarray
    x: np.ndarray
    y: np.ndarray
    train_idx: np.ndarray
    valid_idx: np.ndarray
    test_idx: np.ndarray
    source: str = "unknown"
    extra_meta: dict[str, Any] = field(default_factory=dict)
    input_id: np.ndarray | None = None
    link_split: LinkSplit | None = None
    declared_classes: int | None = None
    schema: GraphSchema | None = None
    edge_rel: np.ndarray | None = None
    features: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.edge_rel = entry_relations(self.edge_rel, self.schema, self.col.shape[0])

    @property
    def x_dict(self) -> dict[str, np.ndarray]:
        """The features of every node type that has them, by type name (PyG's ``x_dict``)."""
        return {self.schema.target: self.x, **self.features}

    @property
    def has_link_split(self) -> bool:
        return self.link_split is not None

    @property
    def num_nodes(self) -> int:
        return int(self.rowptr.shape[0] - 1)

    @property
    def num_edges(self) -> int:
        """Number of directed edges (twice the number of undirected ones)."""
        return int(self.col.shape[0])

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])

    @property
    def label_kind(self) -> str:
        """:data:`MULTICLASS` (int64 ``[N]`` labels) or :data:`MULTILABEL` (``[N, T]`` targets)."""
        return label_kind(self.y)

    @property
    def num_classes(self) -> int:
        """:attr:`declared_classes`, else the largest class id + 1, of multi-class labels; a
        ``ValueError`` for multi-label ones (use :attr:`num_tasks` or :attr:`num_outputs`)."""
        if self.y.ndim != 1:
            raise ValueError("num_classes is defined for multi-class labels only; these are multi-label targets, "
                             "use num_tasks or num_outputs")
        return class_count(self.y) if self.declared_classes is None else self.declared_classes

    @property
    def num_tasks(self) -> int:
        """T, the targets per node of multi-label labels; a ``ValueError`` for multi-class ones."""
        if self.y.ndim != 2:
            raise ValueError("num_tasks is defined for multi-label targets only; these are multi-class labels, "
                             "use num_classes or num_outputs")
        return int(self.y.shape[1])

    @property
    def num_outputs(self) -> int:
        """Outputs a model needs: :attr:`num_classes` (multi-class) or :attr:`num_tasks` (multi-label)."""
        return self.num_classes if self.y.ndim == 1 else self.num_tasks

    def degree(self) -> np.ndarray:
        """int64 ``[N]`` number of neighbours of each node."""
        return np.diff(self.rowptr)

    def validate(self, where: str | None = None) -> None:
        """Raise :class:`InputError` on any inconsistency a user can cause: a malformed CSR, ids
        out of range, wrong shapes or dtypes, no feature columns, NaN/Inf features, labels that
        are neither int64 ``[N]`` class ids (below :attr:`declared_classes` when it is set) nor
        float32 (0/1/NaN) or bool ``[N, T]`` targets, unlabelled or repeated split nodes, an
        empty training split, a malformed ``input_id``, held-out edges that are malformed, out of
        range, self loops, still in the CSR (validation, test) or missing from it (training).
        A typed graph also: node types that do not count N nodes, ``edge_rel`` missing or
        malformed (:func:`~salientpp.data.csr.check_csr`: a relation out of range, joining the
        wrong types, rows not grouped by relation), ``x``, ``y`` without one row per target node,
        split ids outside the target's range, ``features`` keyed by the target or an unknown
        type, or with rows that ``x`` could not hold (``[n_t, F_t >= 1]`` float32/float16,
        finite), and held-out edges of a relation the schema lacks or whose ends are not of the
        relation's types. One
        pass over every array (features and labels in 32 MiB chunks; an unsorted split is sorted
        once; a binary search in the CSR per held-out edge and direction).

        Args:
            where: names the dataset in the messages (default: its ``source``).
        """
        name = where or self.source
        n = self.num_nodes
        if n < 1:
            raise InputError(f"{name} has no nodes; check the input")
        schema = self.schema
        if schema.total_nodes != n:
            raise InputError(f"the node types of {name} count {schema.total_nodes} nodes but its graph has {n}; give "
                             "every node one type")
        check_csr(self.rowptr, self.col, n, where=name, schema=schema, edge_rel=self.edge_rel)
        start, stop = schema.target_range
        rows = "node" if not self.is_typed else f"{shown(schema.target)} node"
        check_features(self.x, stop - start, f"the features (x) of {name}", rows)
        for type_name, x in self.features.items():
            others = [t for t in schema.node_types if t != schema.target]
            if type_name not in others:
                raise InputError(f"the features of {name} are keyed by {shown(type_name)}, which is not a node type "
                                 f"other than the target {shown(schema.target)} (x holds the target's features); key "
                                 f"them by the names of the other types ({', '.join(map(shown, others)) or 'none'})")
            t = schema.type_index(type_name)
            check_features(x, schema.num_nodes[t], f"the features of the {shown(type_name)} "
                           f"nodes of {name}", f"{shown(type_name)} node", NO_TYPE_FEATURES_FIX)
        check_label_array(self.y, stop - start, f"the labels (y) of {name}", "fix the labels",
                          num_classes=self.declared_classes, first_id=start)
        for split in SPLIT_FILES:
            check_ids(getattr(self, split), self.y, start, stop, f"{split} of {name}", "fix the split")
            check_unique(getattr(self, split), f"{split} of {name}")
        if self.train_idx.shape[0] == 0:
            raise InputError(f"the training split of {name} is empty; give at least one training node")
        if self.input_id is not None:
            ids = self.input_id
            if ids.ndim != 1 or ids.dtype != np.int64 or ids.shape[0] != n:
                raise InputError(f"input_id of {name} must be int64 [N={n}], got {ids.dtype} {list(ids.shape)}; "
                                 "re-create the dataset")
            if n and (ids[0] < 0 or not bool(np.all(ids[1:] > ids[:-1]))):
                raise InputError(f"input_id of {name} must hold distinct non-negative ids in ascending order; "
                                 "re-create the dataset")
        if self.link_split is not None:
            fix = "re-create the dataset with prepare --link-split (or fix the held-out edges of its input)"
            for split_name, edges in self.link_split.arrays().items():
                check_edge_array(edges, n, f"{split_name} of {name}", fix)
            check_endpoint_types(self.link_split, schema, name, fix)
            check_held_out(self.rowptr, self.col, self.edge_rel, schema, self.link_split, name, fix)


def with_link_split(dataset: Dataset, relation: Relation, fractions: tuple[float, float, float],
                    seed: int = 0) -> Dataset:
    """``dataset`` with held-out edges of ``relation`` (:func:`~salientpp.data.links.split_edges`
    by ``fractions``, seeded by ``seed``): its graph without the validation and test edges and
    their reverses, and the split in :attr:`Dataset.link_split`."""
    rowptr, col, edge_rel, split = split_edges(dataset.rowptr, dataset.col, dataset.edge_rel, dataset.schema,
                                               relation, fractions, seed)
    return replace(dataset, rowptr=rowptr, col=col, edge_rel=edge_rel, link_split=split)


def feature_file(schema: GraphSchema, node_type: str) -> str:
    """The name (without ``.npy``) of the file that holds the features of ``node_type``: ``x``
    for the target type, ``x_T`` for the type at position ``T`` of ``schema.node_types``
    (its position, never its name, which may hold any character)."""
    t = schema.type_index(node_type)
    return "x" if node_type == schema.target else f"x_{t}"


def save_dataset(dataset: Dataset, out_dir: str | os.PathLike) -> Path:
    """Validate ``dataset`` and write it to ``out_dir`` atomically; return the path."""
    dataset.validate()
    with atomic_output_dir(out_dir) as tmp:
        files = {name: save_array(tmp, name, np.asarray(getattr(dataset, name)))
                 for name in ("rowptr", "col", "x", "y") + SPLIT_FILES}
        if dataset.input_id is not None:
            files["input_id"] = save_array(tmp, "input_id", np.asarray(dataset.input_id))
        if not dataset.schema.is_homogeneous:  # as load_dataset reads it: a homogeneous graph has no such file
            files["edge_rel"] = save_array(tmp, "edge_rel", np.asarray(dataset.edge_rel))
        for node_type, x in dataset.features.items():
            name = feature_file(dataset.schema, node_type)
            files[name] = save_array(tmp, name, np.asarray(x))
        if dataset.link_split is not None:
            files.update({name: save_array(tmp, name, edges) for name, edges in dataset.link_split.arrays().items()})
        write_meta(tmp, dataset_meta(dataset, files))
    return Path(out_dir)


def dataset_meta(dataset: Dataset, files: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """meta.json of a dataset directory holding ``dataset``'s arrays, ``files`` their entries."""
    return {
        "kind": KIND,
        "salientpp_version": __version__,
        "source": dataset.source,
        "num_nodes": dataset.num_nodes,
        "num_edges": dataset.num_edges,
        "num_features": dataset.num_features,
        **label_meta(dataset.y, dataset.declared_classes),
        "feature_dtype": str(dataset.x.dtype),
        "num_train": int(dataset.train_idx.shape[0]),
        "num_valid": int(dataset.valid_idx.shape[0]),
        "num_test": int(dataset.test_idx.shape[0]),
        "files": files,
        **schema_meta(dataset),
        **({} if dataset.link_split is None else {LINK_RELATION_KEY: str(dataset.link_split.relation)}),
        **dataset.extra_meta,
    }


def schema_meta(dataset: Dataset) -> dict[str, Any]:
    """meta.json's entries of ``dataset``'s schema (:data:`SCHEMA_KEYS`,
    :meth:`GraphSchema.to_meta`, each node type with features also giving their width as
    ``num_features``); none for the homogeneous schema of every graph without types, whose
    meta.json stays as it was before typed graphs."""
    if dataset.schema == GraphSchema.homogeneous(dataset.num_nodes):
        return {}
    meta = dataset.schema.to_meta()
    widths = {name: int(x.shape[1]) for name, x in dataset.x_dict.items()}
    for entry in meta["node_types"]:
        if entry["name"] in widths:
            entry["num_features"] = widths[entry["name"]]
    return meta


def load_dataset(path: str | os.PathLike, verify: bool = True, validate: bool = True) -> Dataset:
    """Memory-map a dataset directory written by :func:`save_dataset`.

    Args:
        verify: recompute every file's checksum (reads all bytes once); pass ``False`` only
            when the same directory was verified earlier in this process.
        validate: run :meth:`Dataset.validate` (one more pass over the arrays).

    Raises :class:`InputError` naming the file at fault when the directory is corrupt, and
    (``validate``) when a class id lies outside ``[-1, num_classes)`` of meta.json, which
    a ``y.npy`` replaced together with its checksum may do.
    """
    meta = read_meta(path, KIND)
    arrays = {name: load_listed(Path(path), name, meta, "re-create the dataset directory", *FILE_FORMATS[name],
                                verify=verify)
              for name in ("rowptr", "col", "x", "y") + SPLIT_FILES}
    if "input_id" in meta["files"]:
        arrays["input_id"] = load_listed(Path(path), "input_id", meta, "re-create the dataset directory",
                                         *FILE_FORMATS["input_id"], verify=verify)
    schema = GraphSchema.from_meta(meta, int(arrays["rowptr"].shape[0]) - 1, f"meta.json in {path}")
    link_split = None
    if any(name in meta["files"] for name in EDGE_SPLITS):  # all three or none: a missing one is refused
        link_split = LinkSplit(*(load_listed(Path(path), name, meta, "re-create the dataset directory",
                                             *FILE_FORMATS[name], verify=verify) for name in EDGE_SPLITS),
                               relation=recorded_relation(meta, schema, f"the dataset directory {path}"))
    features = {}
    if not schema.is_homogeneous:
        arrays["edge_rel"] = load_listed(Path(path), "edge_rel", meta, "re-create the dataset directory",
                                         *FILE_FORMATS["edge_rel"], verify=verify)
        for node_type in schema.node_types:
            name = feature_file(schema, node_type)
            if name != "x" and name in meta["files"]:  # a type without features has no file
                features[node_type] = load_listed(Path(path), name, meta, "re-create the dataset directory",
                                                  *FILE_FORMATS["x"], verify=verify)
    reserved = {"kind", "salientpp_version", "source", "files", "num_nodes", "num_edges", "num_features",
                "num_classes", "num_tasks", "label_kind", "label_dtype", "feature_dtype", "num_train", "num_valid",
                "num_test", LINK_RELATION_KEY, *SCHEMA_KEYS}
    declared = _declared_classes(meta, path) if arrays["y"].ndim == 1 else None  # else the label kind is refused
    dataset = Dataset(**arrays, source=meta.get("source", "unknown"), link_split=link_split,
                      extra_meta={k: v for k, v in meta.items() if k not in reserved}, declared_classes=declared,
                      schema=schema, features=features)
    if meta.get("num_nodes") != dataset.num_nodes or meta.get("num_edges") != dataset.num_edges:
        raise InputError(f"meta.json in {path} disagrees with the arrays on the number of nodes or edges; "
                         "re-create the dataset directory")
    if validate:
        dataset.validate(where=f"the dataset directory {path}")
    kind = meta.get("label_kind", MULTICLASS)  # directories written before multi-label labels lack it
    if kind != dataset.label_kind:
        raise InputError(f"meta.json in {path} says the labels are {shown(kind)} but y.npy holds "
                         f"{dataset.label_kind} labels ({dataset.y.dtype} {list(dataset.y.shape)}); "
                         "re-create the dataset directory")
    return dataset


def _declared_classes(meta: dict[str, Any], path: str | os.PathLike) -> int | None:
    """meta.json's ``num_classes`` (an integer in ``[1, 2^63)``) when it says the labels are
    multi-class, ``None`` when it says multi-label; :class:`InputError` when it is missing or out
    of that range (:func:`~salientpp.io.meta_count`)."""
    if meta.get("label_kind", MULTICLASS) != MULTICLASS:
        return None
    return meta_count(meta, "num_classes", f"meta.json in {path}", "re-create the dataset directory")
