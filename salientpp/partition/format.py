"""The partitioned directory: renumbered global topology, partition book, per-partition data.

Layout (``.npy`` arrays + ``meta.json``; partition k owns the new ids ``[offsets[k], offsets[k+1])``)::

    meta.json            kind, num_parts, counts, method, seed, quality report, files
    rowptr.npy, col.npy  int64 global CSR in the new numbering (replicated on every rank)
    offsets.npy          int64 [K + 1] the partition book
    orig_id.npy          int64 [N]  original id of each new id (new -> old)
    part_<k>/x.npy       float32|float16 [n_k, F] features of the owned ids, in id order
    part_<k>/y.npy       labels of the owned ids, as in the dataset: int64 [n_k] (-1 = unlabelled)
                         or float32 / bool [n_k, T] multi-label targets (NaN = unknown)
    part_<k>/train_idx.npy, valid_idx.npy, test_idx.npy
                         int64 sorted NEW global ids of the owned split nodes
    part_<k>/train_edges.npy, valid_edges.npy, test_edges.npy
                         optional (datasets with held-out edges): int64 [2, E_k] the split's edges
                         whose SOURCE partition k owns, NEW global ids, sorted by source then destination;
                         edges of the relation meta.json's link_relation names (src__name__dst)

A typed graph (:mod:`salientpp.data.schema`) is renumbered partition-major and type-minor:
partition k's nodes of type t hold the new ids ``[type_offsets[k*T + t], type_offsets[k*T + t + 1])``
(:class:`~salientpp.partition.book.PartitionBook`). Its directory adds::

    type_offsets.npy     int64 [K * T + 1] the blocks of every (partition, node type)
    edge_rel.npy         int8  [nnz] relation of each entry of col.npy; each row grouped by
                         relation (ascending), sorted by new id within a group
    part_<k>/x_<t>.npy   float32|float16 [n_kt, F_t] features of partition k's nodes of type t, in
                         id order, for every type t (its position in the schema) other than the
                         target that has features; a type without features has no file

and ``x``, ``y`` and the splits concern the target type: row i of ``part_<k>/x.npy`` and
``y.npy`` is partition k's i-th node of the target type. meta.json records the schema
(:meth:`~salientpp.data.schema.GraphSchema.to_meta`: ``node_types``, ``relations``,
``target_type``); a directory without it is homogeneous.

``meta.json["files"]`` maps each relative path without ``.npy`` (``"part_0/x"``) to its dtype,
shape and checksum. ``meta.json`` also gives ``label_kind`` ("multiclass" | "multilabel";
absent in directories written before multi-label labels: multiclass), ``label_dtype`` and
``num_classes`` (multiclass) or ``num_tasks`` (multilabel).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..data.csr import check_csr
from ..data.format import (FILE_FORMATS, LABEL_KINDS, MULTICLASS, MULTICLASS_DTYPE, MULTILABEL, MULTILABEL_DTYPES,
                           SPLIT_FILES, check_ids, check_label_array, check_permutation, entry_relations,
                           first_nonfinite_row)
from ..errors import InputError, counted, shown
from ..io import atomic_output_dir, load_listed, meta_count, read_meta, save_array, write_meta
from ..data.links import EDGE_SPLITS, check_edge_array, recorded_relation
from ..data.schema import GraphSchema, Relation, Typed
from .book import PartitionBook

KIND = "salientpp-partitioned"
PART_ARRAYS = ("x", "y") + SPLIT_FILES
GRAPH_ARRAYS = ("rowptr", "col", "offsets", "orig_id")
# (allowed dtypes, number of dimensions) of each array; per-partition arrays as in a dataset.
GRAPH_FORMAT = (("int64",), 1)
FIX = "re-partition the dataset"
# The arrays only a typed graph's directory has, with their (dtypes, number of dimensions): the
# blocks of every (partition, node type) and the relation of every entry of col.
TYPED_FORMATS = {"type_offsets": GRAPH_FORMAT, "edge_rel": (("int8",), 1)}


def feature_file(node_type: int) -> str:
    """The name (in ``part_<k>/``, without ``.npy``) of the features of the node type at position
    ``node_type`` of the schema, for a type other than the target: ``x_<node_type>`` (a position,
    never the type's name, which may hold any character)."""
    return f"x_{node_type}"


@dataclass
class PartData:
    """What partition k stores: its feature and label rows and its split nodes.

    Attributes:
        x: ``[n_k, F]`` rows of the owned ids, row i is global id ``offsets[k] + i``.
        y: int64 ``[n_k]`` class ids or float32/bool ``[n_k, T]`` targets, rows as in ``x``.
        train_idx, valid_idx, test_idx: int64 sorted new global ids owned by k.
        train_edges, valid_edges, test_edges: int64 ``[2, E_k]`` held-out edges of link
            prediction whose sources k owns (new ids, sorted by source then destination), or
            ``None`` when the dataset has none.
        features: a typed graph's features of its other node types that have them, by type name:
            float32/float16 ``[n_kt, F_t]``, row i is the id ``book.block(k, t)[0] + i``. For a
            typed graph ``x`` and ``y`` hold the target type's rows (row i: the id
            ``book.block(k, target)[0] + i``).
    """

    x: np.ndarray
    y: np.ndarray
    train_idx: np.ndarray
    valid_idx: np.ndarray
    test_idx: np.ndarray
    train_edges: np.ndarray | None = None
    valid_edges: np.ndarray | None = None
    test_edges: np.ndarray | None = None
    features: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class PartitionedDataset(Typed):
    """A partitioned dataset; per-partition arrays are memory-mapped on first access.

    Attributes:
        path: the directory; meta: its meta.json.
        rowptr: int64 ``[N + 1]``; col: int64 ``[nnz]``: the global CSR (new numbering).
        book: the partition book (offsets int64 ``[K + 1]``; a typed graph's also has the
            ``type_offsets`` int64 ``[K * T + 1]`` of every (partition, node type)).
        orig_id: int64 ``[N]`` original id of each new id.
        verify: :meth:`part` compares each partition's files with their checksums on first load.
        check: :meth:`part` runs :meth:`check_part` on first load.
        schema: the node types and relations; ``None`` (a homogeneous directory): the
            homogeneous schema of N nodes.
        edge_rel: int8 ``[nnz]`` the relation of each entry of ``col``: ``edge_rel.npy``
            (memory-mapped), or on a homogeneous graph, which has no such file, relation 0 as a
            constant view (:func:`~salientpp.data.format.entry_relations`: stride 0, no memory).
    """

    path: Path
    meta: dict[str, Any]
    rowptr: np.ndarray
    col: np.ndarray
    book: PartitionBook
    orig_id: np.ndarray
    verify: bool = True
    check: bool = True
    schema: GraphSchema | None = None
    edge_rel: np.ndarray | None = None
    _parts: dict[int, PartData] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.edge_rel = entry_relations(self.edge_rel, self.schema, self.col.shape[0])

    @property
    def feature_types(self) -> list[int]:
        """The positions of the node types other than the target that have features (a
        ``part_0/x_<t>`` file), ascending; empty for a homogeneous graph."""
        files = self.meta["files"]
        return [t for t in range(self.schema.num_types)
                if t != self.schema.target_index and f"part_0/{feature_file(t)}" in files]

    def feature_width(self, node_type: int) -> int:
        """F_t, the features of the node type at position ``node_type`` (the target's:
        :attr:`num_features`; a type without features: 0), from meta.json."""
        if node_type == self.schema.target_index:
            return self.num_features
        if node_type not in self.feature_types:
            return 0
        name = f"part_0/{feature_file(node_type)}"
        try:
            return int(self.meta["files"][name]["shape"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            raise InputError(f"meta.json in {self.path} does not give the shape of {name}.npy; {FIX}") from None

    @property
    def num_parts(self) -> int:
        return self.book.num_parts

    @property
    def num_nodes(self) -> int:
        return self.book.num_nodes

    @property
    def sampler_args(self) -> dict:
        """What :func:`~salientpp.sampling.make_sampler` needs of this graph beside its CSR: a typed
        graph's ``edge_rel``, ``schema`` and ``type_of`` (the partitioned ids' types,
        ``book.type_of``); nothing for a homogeneous graph, which the samplers draw on their one-relation
        fast path (its constant ``edge_rel`` would be copied into a contiguous tensor there)."""
        if not self.is_typed:
            return {}
        return {"edge_rel": np.asarray(self.edge_rel), "schema": self.schema, "type_of": self.book.type_of}

    @property
    def num_features(self) -> int:
        return int(self.meta["num_features"])

    @property
    def label_kind(self) -> str:
        """``"multiclass"`` (int64 ``[n_k]`` labels) or ``"multilabel"`` (float32/bool ``[n_k, T]``)."""
        return self.meta.get("label_kind", MULTICLASS)

    @property
    def label_dtype(self) -> np.dtype:
        """dtype of every ``part_<k>/y.npy``: int64, float32 or bool."""
        return np.dtype(self.meta.get("label_dtype", MULTICLASS_DTYPE))

    @property
    def num_classes(self) -> int:
        """Number of classes of multi-class labels; a ``ValueError`` for multi-label ones (use
        :attr:`num_tasks` or :attr:`num_outputs`)."""
        if self.label_kind != MULTICLASS:
            raise ValueError("num_classes is defined for multi-class labels only; these are multi-label targets, "
                             "use num_tasks or num_outputs")
        return int(self.meta["num_classes"])

    @property
    def num_tasks(self) -> int:
        """T, the targets per node of multi-label labels; a ``ValueError`` for multi-class ones."""
        if self.label_kind != MULTILABEL:
            raise ValueError("num_tasks is defined for multi-label targets only; these are multi-class labels, "
                             "use num_classes or num_outputs")
        return int(self.meta["num_tasks"])

    @property
    def num_outputs(self) -> int:
        """Outputs a model needs: :attr:`num_classes` (multi-class) or :attr:`num_tasks` (multi-label)."""
        return self.num_classes if self.label_kind == MULTICLASS else self.num_tasks

    @property
    def feature_dtype(self) -> np.dtype:
        return np.dtype(self.meta["feature_dtype"])

    @property
    def has_link_split(self) -> bool:
        """Whether the partitions hold held-out edges (``part_<k>/train_edges`` and the others)."""
        return any(f"part_0/{name}" in self.meta["files"] for name in EDGE_SPLITS)  # part() refuses a missing one

    def require_link_split(self) -> None:
        """Refuse (InputError) link prediction on partitions without held-out edges."""
        if not self.has_link_split:
            raise InputError(f"--task link needs held-out edges, which {self.path} lacks; prepare the dataset with "
                             "`salientpp prepare SOURCE OUT --link-split 0.85,0.05,0.10` and partition it again")

    @property
    def link_relation(self) -> Relation:
        """The relation of the held-out edges (meta.json's ``link_relation``; the graph's only
        relation in a directory that names none): their sources are of its ``src`` type, their
        destinations of its ``dst`` type."""
        return recorded_relation(self.meta, self.schema, f"meta.json in {self.path}")

    def degree(self) -> np.ndarray:
        return np.diff(self.rowptr)

    def split_size(self, split: str, edges: bool = False) -> int:
        """The ids (``edges``: the held-out edges) of ``split`` in all partitions together, from
        the shapes meta.json lists: no partition is read, so every rank knows it without a
        collective (each partition's file is checked against its shape when it is loaded)."""
        name = f"{split}_edges" if edges else f"{split}_idx"
        try:
            return sum(int(self.meta["files"][f"part_{k}/{name}"]["shape"][-1]) for k in range(self.num_parts))
        except (KeyError, IndexError, TypeError, ValueError):
            raise InputError(f"meta.json in {self.path} does not list the shape of every part's {name}; "
                             "re-partition the dataset") from None

    def part(self, k: int) -> PartData:
        """Partition ``k``'s arrays, memory-mapped, verified and checked on first access (as
        ``verify`` and ``check`` say); raises :class:`InputError` on a corrupt partition."""
        if not 0 <= k < self.num_parts:
            raise InputError(f"partition {k} does not exist; {self.path} has partitions 0..{self.num_parts - 1}")
        if k not in self._parts:
            names = PART_ARRAYS + (EDGE_SPLITS if self.has_link_split else ())
            part = PartData(**{name: load_listed(self.path, f"part_{k}/{name}", self.meta, FIX, *FILE_FORMATS[name],
                                                 verify=self.verify) for name in names},
                            features={self.schema.node_types[t]: load_listed(
                                self.path, f"part_{k}/{feature_file(t)}", self.meta, FIX, *FILE_FORMATS["x"],
                                verify=self.verify) for t in self.feature_types})
            if self.check:
                self._check_part(k, part)
            self._parts[k] = part
        return self._parts[k]

    def train_idx(self) -> np.ndarray:
        """int64 all training ids (new numbering), partition by partition."""
        return np.concatenate([self.part(k).train_idx for k in range(self.num_parts)])

    def check_graph(self) -> None:
        """Raise :class:`InputError` unless the replicated topology is sound.

        ``rowptr`` (int64 ``[N + 1]``) and ``col`` (int64 ``[nnz]``) must form a CSR over N
        nodes (:func:`check_csr`: starts at 0, never decreases, ends at nnz, every id in
        ``[0, N)``) and ``orig_id`` (int64 ``[N]``) a permutation of ``0..N-1``; a typed graph's
        ``edge_rel`` must have one entry per entry of ``col``. The partition book was checked
        against N by :func:`load_partitioned`, which also runs this method (``check=True``).
        Cost: one pass over ``col`` and ``orig_id``, 2N bytes of temporaries.
        """
        n = self.num_nodes
        check_csr(self.rowptr, self.col, n, where=f"the partitioned directory {self.path}", fix=FIX)
        if self.edge_rel.shape != self.col.shape:
            raise InputError(f"edge_rel.npy in {self.path} has {counted(self.edge_rel.shape[0], 'entry', 'entries')}, "
                             f"not one per entry of col.npy ({self.col.shape[0]}); {FIX}")
        orig_id = self.orig_id
        if orig_id.shape[0] != n:
            raise InputError(f"orig_id.npy in {self.path} has {counted(orig_id.shape[0], 'entry', 'entries')}, not "
                             f"one per node ({n}); {FIX}")
        check_permutation(orig_id, n, f"orig_id.npy in {self.path}", FIX)

    def check_part(self, k: int) -> None:
        """Raise :class:`InputError` unless partition ``k``'s arrays are sound.

        With ``n_k = offsets[k + 1] - offsets[k]``: ``x`` is ``[n_k, F]`` of the feature dtype
        and F of meta.json and holds no NaN or infinity (the message names the first bad row by
        its global id); ``y`` is int64 ``[n_k]`` with values in ``[-1, num_classes)``, or (multi-label)
        ``[n_k, num_tasks]`` of meta.json's label dtype, float32 targets being 0, 1 or NaN; the
        train/valid/test ids are int64, sorted without duplicates, owned by ``k`` (inside
        ``[offsets[k], offsets[k + 1])``) and labelled; held-out edges, when the directory has
        them, are int64 ``[2, E_k]`` of ids in ``[0, N)`` without self loops, their sources owned
        by ``k``. An empty training split is accepted (the trainer decides about it). For a typed
        graph ``n_k`` counts partition k's nodes of the target type (``book.block(k, target)``)
        and every ``part_<k>/x_<t>`` holds a finite row per node of its block of type t and the
        width of ``part_0/x_<t>``. Cost: one pass over the features in 32 MiB chunks and over
        ``y``, the splits and the edges. Free when :meth:`part` already checked ``k`` (``check=True``).
        """
        part = self.part(k)
        if not self.check:
            self._check_part(k, part)

    def check_parts(self) -> None:
        """:meth:`check_part` of every partition: for commands that use all of them, so a corrupt
        partition fails before the work starts rather than midway."""
        for k in range(self.num_parts):
            self.check_part(k)

    def _owns(self, k: int, node_type: int) -> str:
        """"partition k owns N ids" (of the type, for a typed graph), for the messages."""
        start, stop = self.book.block(k, node_type)
        of_type = f" of the type {shown(self.schema.node_types[node_type])}" if self.is_typed else ""
        return f"partition {k} owns {counted(stop - start, 'id')}{of_type}"

    def _check_features(self, k: int, name: str, x: np.ndarray, node_type: int, dtype: np.dtype | None) -> None:
        """:class:`InputError` unless ``x`` (``part_<k>/<name>.npy``) has a row per id of partition
        ``k``'s block of ``node_type``, the width meta.json gives the type (and ``dtype`` when
        given), and finite values."""
        start, stop = self.book.block(k, node_type)
        path = self.path / f"part_{k}" / f"{name}.npy"
        width = self.feature_width(node_type)
        if x.shape != (stop - start, width) or (dtype is not None and x.dtype != dtype):
            raise InputError(f"{path} is {x.dtype} {list(x.shape)} but {self._owns(k, node_type)} and meta.json "
                             f"gives {counted(width, f'{x.dtype if dtype is None else dtype} feature')}; {FIX}")
        bad_row = first_nonfinite_row(x)
        if bad_row >= 0:
            raise InputError(f"{path} holds NaN or infinite features in the row of global id {start + bad_row} "
                             f"(partition {k}); clean the features, re-create the dataset and re-partition it")

    def _check_part(self, k: int, part: PartData) -> None:
        target = self.schema.target_index
        start, stop = self.book.block(k, target)
        folder = self.path / f"part_{k}"
        self._check_features(k, "x", part.x, target, self.feature_dtype)
        for t in self.feature_types:
            self._check_features(k, feature_file(t), part.features[self.schema.node_types[t]], t, None)
        if part.y.shape[:1] != (stop - start,):
            raise InputError(f"{folder / 'y.npy'} has shape {list(part.y.shape)} but {self._owns(k, target)}; {FIX}")
        multiclass = self.label_kind == MULTICLASS
        check_label_array(part.y, stop - start, str(folder / "y.npy"), FIX,
                          num_classes=self.num_classes if multiclass else None,
                          num_tasks=None if multiclass else self.num_tasks, kind=self.label_kind,
                          dtype=str(self.label_dtype), first_id=start)
        for name in SPLIT_FILES:
            check_ids(getattr(part, name), part.y, start, stop, str(folder / f"{name}.npy"), FIX,
                      strictly_increasing=True)
        if self.has_link_split:
            self._check_edges(k, part)

    def _check_edges(self, k: int, part: PartData) -> None:
        """:class:`InputError` unless partition ``k``'s held-out edges join nodes of the types of
        their relation and have sources it owns."""
        folder, relation = self.path / f"part_{k}", self.link_relation
        for name in EDGE_SPLITS:
            edges = getattr(part, name)
            check_edge_array(edges, self.num_nodes, str(folder / f"{name}.npy"), FIX)
            outside = np.asarray(self.book.owner(edges[0])) != k
            if outside.any():
                raise InputError(f"{folder / f'{name}.npy'} holds edge source {int(edges[0, outside.argmax()])}, "
                                 f"which partition {k} does not own; {FIX}")
            for side, node_type in enumerate((relation.src, relation.dst)):
                wrong = np.asarray(self.book.type_of(edges[side])) != self.schema.type_index(node_type)
                if wrong.any():
                    raise InputError(f"{folder / f'{name}.npy'} holds the node {int(edges[side, wrong.argmax()])} in "
                                     f"row {side}, which is not of the type {shown(node_type)} of the relation "
                                     f"{shown(str(relation))}; {FIX}")


def save_partitioned(out_dir: str | os.PathLike, rowptr: np.ndarray, col: np.ndarray, offsets: np.ndarray,
                     orig_id: np.ndarray, parts: list[PartData], meta: dict[str, Any]) -> Path:
    """Write a partitioned directory atomically. ``meta`` holds the descriptive entries
    (:func:`~salientpp.data.format.label_meta`'s label entries, method, seed, quality, source...);
    counts and files are filled in here. Homogeneous graphs only: a typed graph's directory is
    written by :func:`~salientpp.partition.partitioner.partition_dataset`."""
    if len(parts) != offsets.shape[0] - 1:
        raise ValueError("one PartData per partition is required")
    if any(part.features for part in parts):
        raise ValueError("save_partitioned writes homogeneous graphs; write a typed graph with partition_dataset")
    with atomic_output_dir(out_dir) as tmp:
        files = {name: save_array(tmp, name, arr) for name, arr in
                 (("rowptr", rowptr), ("col", col), ("offsets", offsets), ("orig_id", orig_id))}
        for k, part in enumerate(parts):
            (tmp / f"part_{k}").mkdir()
            for name in PART_ARRAYS + EDGE_SPLITS:
                if getattr(part, name) is not None:
                    files[f"part_{k}/{name}"] = save_array(tmp / f"part_{k}", name, getattr(part, name))
        write_partitioned_meta(tmp, meta, files)
    return Path(out_dir)


def write_partitioned_meta(directory: Path, meta: dict[str, Any], files: dict[str, dict[str, Any]]) -> None:
    """Write meta.json of a partitioned directory whose arrays ``files`` lists (meta.json
    entries by name): ``meta``'s descriptive entries plus the kind, version and the counts,
    read off the entries of ``offsets``, ``rowptr``, ``col`` and ``part_0/x``."""
    write_meta(directory, {
        **meta,
        "kind": KIND,
        "salientpp_version": __version__,
        "num_parts": files["offsets"]["shape"][0] - 1,
        "num_nodes": files["rowptr"]["shape"][0] - 1,
        "num_edges": files["col"]["shape"][0],
        "num_features": files["part_0/x"]["shape"][1],
        "feature_dtype": files["part_0/x"]["dtype"],
        "files": files,
    })


def _check_type_offsets(path: Path, schema: GraphSchema, offsets: np.ndarray, type_offsets: np.ndarray) -> None:
    """:class:`InputError` unless ``type_offsets`` (int64) holds the ``K * T + 1`` rising
    boundaries of every (partition, node type) block, agrees with ``offsets`` (int64 ``[K + 1]``)
    on the partitions and gives every type as many nodes as the schema."""
    num_parts, num_types = offsets.shape[0] - 1, schema.num_types
    sizes = np.diff(type_offsets)
    if (type_offsets.shape[0] != num_parts * num_types + 1 or np.any(sizes < 0)
            or not np.array_equal(type_offsets[::num_types], offsets)
            or not np.array_equal(sizes.reshape(num_parts, num_types).sum(axis=0), schema.num_nodes)):
        raise InputError(f"type_offsets.npy in {path} does not split the {counted(num_parts, 'partition')} of "
                         f"offsets.npy into blocks of the {counted(num_types, 'node type')} of meta.json; {FIX}")


def _check_book(path: Path, meta: dict[str, Any], book: PartitionBook, target: int) -> None:
    """:class:`InputError` unless each partition k owns as many ids of the target type (the
    position ``target``; every id for a homogeneous graph) in ``book`` as meta.json lists rows of
    ``part_<k>/x.npy``: read off meta.json, no partition is read. A partition whose entry lacks a
    shape is left to :meth:`PartitionedDataset.part`."""
    bounds = "offsets.npy" if book.type_offsets is None else "type_offsets.npy"
    for k in range(book.num_parts):
        start, stop = book.block(k, target)
        try:
            rows = meta["files"][f"part_{k}/x"]["shape"][0]
        except (KeyError, IndexError, TypeError):
            continue
        if rows != stop - start:
            raise InputError(f"the partitioned directory {path} is corrupt: {bounds} gives partition {k} "
                             f"{counted(stop - start, 'id')} but part_{k}/x.npy holds {counted(rows, 'row')}; {FIX}")


def load_partitioned(path: str | os.PathLike, verify: bool = True, check: bool = True) -> PartitionedDataset:
    """Memory-map a partitioned directory written by :func:`save_partitioned` or
    :func:`~salientpp.partition.partitioner.partition_dataset` (typed or homogeneous).

    Args:
        verify: compare every file with its checksum in meta.json (one sha256 pass): the
            topology now, partition k's files when :meth:`PartitionedDataset.part` first loads
            them. Pass ``False`` only when this process already verified the same directory.
        check: run :meth:`PartitionedDataset.check_graph` now and
            :meth:`PartitionedDataset.check_part` as each partition is first loaded.

    Raises :class:`InputError` with one sentence naming the file at fault and the fix.
    """
    path = Path(path)
    meta = read_meta(path, KIND)
    arrays = {name: load_listed(path, name, meta, FIX, *GRAPH_FORMAT, verify=verify) for name in GRAPH_ARRAYS}
    rowptr, col, offsets = arrays["rowptr"], arrays["col"], np.asarray(arrays["offsets"])
    if (offsets.shape[0] < 2 or offsets[0] != 0 or offsets[-1] != rowptr.shape[0] - 1
            or np.any(offsets[1:] < offsets[:-1])):
        raise InputError(f"offsets.npy in {path} is not a partition book of the {counted(rowptr.shape[0] - 1, 'node')} "
                         f"(it must rise from 0 to N); {FIX}")
    for key, value in (("num_parts", offsets.shape[0] - 1), ("num_nodes", rowptr.shape[0] - 1),
                       ("num_edges", col.shape[0])):
        if meta.get(key) != value:
            raise InputError(f"meta.json in {path} says {key} is {shown(meta.get(key))} but the arrays hold {value}; "
                             f"{FIX}")
    schema = GraphSchema.from_meta(meta, rowptr.shape[0] - 1, f"meta.json in {path}")
    typed_arrays = {}
    if not schema.is_homogeneous:
        typed_arrays = {name: load_listed(path, name, meta, FIX, *TYPED_FORMATS[name], verify=verify)
                        for name in TYPED_FORMATS}
        typed_arrays["type_offsets"] = np.asarray(typed_arrays["type_offsets"])  # small: in memory, as offsets
        _check_type_offsets(path, schema, offsets, typed_arrays["type_offsets"])
    book = PartitionBook(offsets, typed_arrays.get("type_offsets"))
    _check_book(path, meta, book, schema.target_index)
    kind = meta.get("label_kind", MULTICLASS)
    if kind not in LABEL_KINDS:
        raise InputError(f"meta.json in {path} gives the label kind as {shown(kind)}, not {MULTICLASS} or "
                         f"{MULTILABEL}; {FIX}")
    dtypes = (MULTICLASS_DTYPE,) if kind == MULTICLASS else MULTILABEL_DTYPES
    if meta.get("label_dtype", MULTICLASS_DTYPE) not in dtypes:
        raise InputError(f"meta.json in {path} gives the label dtype of its {kind} labels as "
                         f"{shown(meta.get('label_dtype'))}, not {' or '.join(dtypes)}; {FIX}")
    for key in ("num_features", "num_classes" if kind == MULTICLASS else "num_tasks"):
        meta_count(meta, key, f"meta.json in {path}", FIX)
    if meta.get("feature_dtype") not in FILE_FORMATS["x"][0]:
        raise InputError(f"meta.json in {path} gives the feature dtype as {shown(meta.get('feature_dtype'))}, "
                         f"not float32 or float16; {FIX}")
    dataset = PartitionedDataset(path=path, meta=meta, rowptr=rowptr, col=col, book=book, orig_id=arrays["orig_id"],
                                 verify=verify, check=check, schema=schema, edge_rel=typed_arrays.get("edge_rel"))
    if check:
        dataset.check_graph()
    return dataset
