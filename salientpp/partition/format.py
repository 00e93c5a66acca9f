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
                         whose SOURCE partition k owns, NEW global ids, sorted by source then destination

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
                           SPLIT_FILES, check_ids, check_label_array, check_permutation, first_nonfinite_row)
from ..errors import InputError, counted, shown
from ..io import atomic_output_dir, load_listed, meta_count, read_meta, save_array, write_meta
from ..data.links import EDGE_SPLITS, check_edge_array
from .book import PartitionBook

KIND = "salientpp-partitioned"
PART_ARRAYS = ("x", "y") + SPLIT_FILES
GRAPH_ARRAYS = ("rowptr", "col", "offsets", "orig_id")
# (allowed dtypes, number of dimensions) of each array; per-partition arrays as in a dataset.
GRAPH_FORMAT = (("int64",), 1)
FIX = "re-partition the dataset"


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
    """

    x: np.ndarray
    y: np.ndarray
    train_idx: np.ndarray
    valid_idx: np.ndarray
    test_idx: np.ndarray
    train_edges: np.ndarray | None = None
    valid_edges: np.ndarray | None = None
    test_edges: np.ndarray | None = None


@dataclass
class PartitionedDataset:
    """A partitioned dataset; per-partition arrays are memory-mapped on first access.

    Attributes:
        path: the directory; meta: its meta.json.
        rowptr: int64 ``[N + 1]``; col: int64 ``[nnz]``: the global CSR (new numbering).
        book: the partition book (offsets int64 ``[K + 1]``).
        orig_id: int64 ``[N]`` original id of each new id.
        verify: :meth:`part` compares each partition's files with their checksums on first load.
        check: :meth:`part` runs :meth:`check_part` on first load.
    """

    path: Path
    meta: dict[str, Any]
    rowptr: np.ndarray
    col: np.ndarray
    book: PartitionBook
    orig_id: np.ndarray
    verify: bool = True
    check: bool = True
    _parts: dict[int, PartData] = field(default_factory=dict, repr=False)

    @property
    def num_parts(self) -> int:
        return self.book.num_parts

    @property
    def num_nodes(self) -> int:
        return self.book.num_nodes

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
                                                 verify=self.verify) for name in names})
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
        ``[0, N)``) and ``orig_id`` (int64 ``[N]``) a permutation of ``0..N-1``. The partition
        book was checked against N by :func:`load_partitioned`, which also runs this method
        (``check=True``). Cost: one pass over ``col`` and ``orig_id``, 2N bytes of temporaries.
        """
        n = self.num_nodes
        check_csr(self.rowptr, self.col, n, where=f"the partitioned directory {self.path}", fix=FIX)
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
        by ``k``. An empty training split is accepted (the trainer decides about it). Cost: one
        pass over ``x`` in 32 MiB chunks and over ``y``, the splits and the edges. Free when :meth:`part` already checked ``k`` (``check=True``).
        """
        part = self.part(k)
        if not self.check:
            self._check_part(k, part)

    def check_parts(self) -> None:
        """:meth:`check_part` of every partition: for commands that use all of them, so a corrupt
        partition fails before the work starts rather than midway."""
        for k in range(self.num_parts):
            self.check_part(k)

    def _check_part(self, k: int, part: PartData) -> None:
        start, stop = (int(v) for v in self.book.offsets[k:k + 2])
        folder = self.path / f"part_{k}"
        if part.x.shape != (stop - start, self.num_features) or part.x.dtype != self.feature_dtype:
            raise InputError(f"{folder / 'x.npy'} is {part.x.dtype} {list(part.x.shape)} but partition {k} owns "
                             f"{counted(stop - start, 'id')} and meta.json gives "
                             f"{counted(self.num_features, f'{self.feature_dtype} feature')}; {FIX}")
        bad_row = first_nonfinite_row(part.x)
        if bad_row >= 0:
            raise InputError(f"{folder / 'x.npy'} holds NaN or infinite features in the row of global id "
                             f"{start + bad_row} (partition {k}); clean the features, re-create the dataset "
                             "and re-partition it")
        if part.y.shape[:1] != (stop - start,):
            raise InputError(f"{folder / 'y.npy'} has shape {list(part.y.shape)} but partition {k} owns "
                             f"{counted(stop - start, 'id')}; {FIX}")
        multiclass = self.label_kind == MULTICLASS
        check_label_array(part.y, stop - start, str(folder / "y.npy"), FIX,
                          num_classes=self.num_classes if multiclass else None,
                          num_tasks=None if multiclass else self.num_tasks, kind=self.label_kind,
                          dtype=str(self.label_dtype), first_id=start)
        for name in SPLIT_FILES:
            check_ids(getattr(part, name), part.y, start, stop, str(folder / f"{name}.npy"), FIX,
                      strictly_increasing=True)
        for name in EDGE_SPLITS if self.has_link_split else ():
            edges = getattr(part, name)
            check_edge_array(edges, self.num_nodes, str(folder / f"{name}.npy"), FIX)
            outside = (edges[0] < start) | (edges[0] >= stop)
            if outside.any():
                raise InputError(f"{folder / f'{name}.npy'} holds edge source {int(edges[0, outside.argmax()])}, "
                                 f"which partition {k} does not own; {FIX}")


def save_partitioned(out_dir: str | os.PathLike, rowptr: np.ndarray, col: np.ndarray, offsets: np.ndarray,
                     orig_id: np.ndarray, parts: list[PartData], meta: dict[str, Any]) -> Path:
    """Write a partitioned directory atomically. ``meta`` holds the descriptive entries
    (:func:`~salientpp.data.format.label_meta`'s label entries, method, seed, quality, source...);
    counts and files are filled in here."""
    if len(parts) != offsets.shape[0] - 1:
        raise ValueError("one PartData per partition is required")
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


def _check_book(path: Path, meta: dict[str, Any], offsets: np.ndarray) -> None:
    """:class:`InputError` unless each partition k owns as many ids in ``offsets`` (int64
    ``[K + 1]``) as meta.json lists rows of ``part_<k>/x.npy``: read off meta.json, no partition is
    read. A partition whose entry lacks a shape is left to :meth:`PartitionedDataset.part`."""
    for k, owned in enumerate(np.diff(offsets).tolist()):
        try:
            rows = meta["files"][f"part_{k}/x"]["shape"][0]
        except (KeyError, IndexError, TypeError):
            continue
        if rows != owned:
            raise InputError(f"the partitioned directory {path} is corrupt: offsets.npy gives partition {k} "
                             f"{counted(owned, 'id')} but part_{k}/x.npy holds {counted(rows, 'row')}; {FIX}")


def load_partitioned(path: str | os.PathLike, verify: bool = True, check: bool = True) -> PartitionedDataset:
    """Memory-map a partitioned directory written by :func:`save_partitioned`.

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
    _check_book(path, meta, offsets)
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
    dataset = PartitionedDataset(path=path, meta=meta, rowptr=rowptr, col=col, book=PartitionBook(offsets),
                                 orig_id=arrays["orig_id"], verify=verify, check=check)
    if check:
        dataset.check_graph()
    return dataset
