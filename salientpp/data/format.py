"""The dataset directory: a symmetric CSR graph with features, labels and a split.

Layout (all arrays are plain ``.npy`` files, memory-mapped on load; nothing is pickled)::

    rowptr.npy     int64   [N + 1]   CSR row pointers of the symmetric graph
    col.npy        int64   [nnz]     neighbours, sorted per row, no duplicates
    x.npy          float32 | float16 [N, F]
    y.npy          int64   [N]       class id, -1 = unlabelled
    train_idx.npy  int64   [n_train]
    valid_idx.npy  int64   [n_valid]
    test_idx.npy   int64   [n_test]
    input_id.npy   int64   [N]       optional: the id of each node in the input, ascending (written
                                     when ``prepare`` compacted the sparse ids of an edge list)
    meta.json      kind, counts, dtypes, source, one entry (dtype, shape, checksum) per file
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..errors import InputError
from ..io import atomic_output_dir, load_listed, read_meta, save_array, write_meta
from .csr import check_csr

KIND = "salientpp-dataset"
SPLITS = ("train_idx", "valid_idx", "test_idx")
FEATURE_DTYPES = (np.float32, np.float16)
# (allowed dtypes, number of dimensions) of each array of a dataset directory.
FILE_FORMATS = {"rowptr": (("int64",), 1), "col": (("int64",), 1), "x": (("float32", "float16"), 2),
                "y": (("int64",), 1), **{name: (("int64",), 1) for name in SPLITS}, "input_id": (("int64",), 1)}
_FINITE_CHUNK_BYTES = 1 << 25


def first_nonfinite_row(x: np.ndarray) -> int:
    """Index of the first row of ``x`` (float ``[n, F]``) holding a NaN or an infinity, or -1.

    Reads ``x`` once in chunks of about 32 MiB, so a memory-mapped 100M-row array needs no
    full-size temporary.
    """
    rows = max(1, _FINITE_CHUNK_BYTES // max(1, x.shape[1] * x.itemsize))
    for start in range(0, x.shape[0], rows):
        finite = np.isfinite(x[start:start + rows]).all(axis=1)
        if not finite.all():
            return start + int(finite.argmin())
    return -1


def check_ids(ids: np.ndarray, y: np.ndarray, start: int, stop: int, where: str, fix: str,
              strictly_increasing: bool = False) -> None:
    """Raise :class:`InputError` unless ``ids`` is a 1-D int64 array of labelled node ids in
    ``[start, stop)``.

    Args:
        y: int64 ``[stop - start]`` labels of the ids ``start..stop-1`` (-1 = unlabelled).
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
    unlabelled = y[ids - start] < 0
    if unlabelled.any():
        raise InputError(f"{where} holds unlabelled nodes (label -1) such as {ids[unlabelled.argmax()]}; {fix}")


def check_unique(ids: np.ndarray, where: str) -> None:
    """Raise :class:`InputError` when the 1-D ``ids`` hold a value more than once (``where``
    names the array). One O(n) pass when the ids are sorted, a sorted copy otherwise."""
    if ids.shape[0] < 2 or bool(np.all(ids[1:] > ids[:-1])):
        return
    ordered = np.sort(ids)
    repeated = ordered[1:] == ordered[:-1]
    if repeated.any():
        count = int(repeated.sum())
        raise InputError(f"{where} holds node {ordered[1:][repeated][0]} more than once ({count} repeated "
                         f"entr{'y' if count == 1 else 'ies'}); a node may appear once per split, so drop the repeats "
                         "(e.g. with numpy.unique)")


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
            raise InputError(f"the {other} and {name} splits of {where} share {shared.shape[0]} node id(s) such as "
                             f"{shared[0]}; a node may be in one split only, so remove the shared ids from all "
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


@dataclass
class Dataset:
    """A graph dataset in memory (arrays may be read-only memory maps).

    Attributes:
        rowptr: int64 ``[N + 1]``; col: int64 ``[nnz]`` (symmetric CSR, sorted rows).
        x: float32 or float16 ``[N, F]`` node features.
        y: int64 ``[N]`` labels, -1 for unlabelled nodes.
        train_idx, valid_idx, test_idx: int64 node ids of each split.
        source: where the data came from (for meta.json).
        extra_meta: further meta.json entries (e.g. generator parameters).
        input_id: optional int64 ``[N]``, ascending: the id each node had in the input (an edge
            list whose sparse ids were compacted to ``0..N-1``); ``None`` when the ids are the input's.
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
    def num_classes(self) -> int:
        return int(self.y.max()) + 1 if self.y.shape[0] else 0

    def degree(self) -> np.ndarray:
        """int64 ``[N]`` number of neighbours of each node."""
        return np.diff(self.rowptr)

    def validate(self, where: str | None = None) -> None:
        """Raise :class:`InputError` on any inconsistency a user can cause: a malformed CSR, ids
        out of range, wrong shapes or dtypes, no feature columns, NaN/Inf features, unlabelled or
        repeated split nodes, an empty training split, a malformed ``input_id``. One pass over
        every array (features in 32 MiB chunks; an unsorted split is sorted once).

        Args:
            where: names the dataset in the messages (default: its ``source``).
        """
        name = where or self.source
        n = self.num_nodes
        if n < 1:
            raise InputError(f"{name} has no nodes; check the input")
        check_csr(self.rowptr, self.col, n, where=name)
        if self.x.ndim != 2 or self.x.shape[0] != n:
            raise InputError(f"the features (x) of {name} must have shape [N={n}, F], got {list(self.x.shape)}; "
                             "pass one feature row per node")
        if self.x.dtype not in FEATURE_DTYPES:
            raise InputError(f"the features (x) of {name} must be float32 or float16, got {self.x.dtype}; "
                             "convert them with astype")
        if self.x.shape[1] == 0:
            raise InputError(f"the features (x) of {name} have no columns (shape {list(self.x.shape)}); at least one "
                             "feature column is needed (learnable node embeddings are not supported yet), so pass "
                             "features with F >= 1")
        bad_row = first_nonfinite_row(self.x)
        if bad_row >= 0:
            raise InputError(f"the features (x) of {name} contain NaN or infinite values (first in the row of node "
                             f"{bad_row}); clean or impute them first")
        if self.y.ndim != 1 or self.y.shape[0] != n:
            raise InputError(f"the labels (y) of {name} must have shape [N={n}], got {list(self.y.shape)}; "
                             "pass one label per node (-1 for unlabelled)")
        if self.y.dtype != np.int64:
            raise InputError(f"the labels (y) of {name} must be int64, got {self.y.dtype}; convert them with "
                             "astype(np.int64)")
        if n and self.y.min() < -1:
            raise InputError(f"the labels (y) of {name} must be class ids >= 0 or -1 for unlabelled; "
                             "found smaller values")
        for split in SPLITS:
            check_ids(getattr(self, split), self.y, 0, n, f"{split} of {name}", "fix the split")
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


def save_dataset(dataset: Dataset, out_dir: str | os.PathLike) -> Path:
    """Validate ``dataset`` and write it to ``out_dir`` atomically; return the path."""
    dataset.validate()
    with atomic_output_dir(out_dir) as tmp:
        files = {name: save_array(tmp, name, np.asarray(getattr(dataset, name)))
                 for name in ("rowptr", "col", "x", "y") + SPLITS}
        if dataset.input_id is not None:
            files["input_id"] = save_array(tmp, "input_id", np.asarray(dataset.input_id))
        write_meta(tmp, {
            "kind": KIND,
            "salientpp_version": __version__,
            "source": dataset.source,
            "num_nodes": dataset.num_nodes,
            "num_edges": dataset.num_edges,
            "num_features": dataset.num_features,
            "num_classes": dataset.num_classes,
            "feature_dtype": str(dataset.x.dtype),
            "num_train": int(dataset.train_idx.shape[0]),
            "num_valid": int(dataset.valid_idx.shape[0]),
            "num_test": int(dataset.test_idx.shape[0]),
            "files": files,
            **dataset.extra_meta,
        })
    return Path(out_dir)


def load_dataset(path: str | os.PathLike, verify: bool = True, validate: bool = True) -> Dataset:
    """Memory-map a dataset directory written by :func:`save_dataset`.

    Args:
        verify: recompute every file's checksum (reads all bytes once); pass ``False`` only
            when the same directory was verified earlier in this process.
        validate: run :meth:`Dataset.validate` (one more pass over the arrays).

    Raises :class:`InputError` naming the file at fault when the directory is corrupt.
    """
    meta = read_meta(path, KIND)
    arrays = {name: load_listed(Path(path), name, meta, "re-create the dataset directory", *FILE_FORMATS[name],
                                verify=verify)
              for name in ("rowptr", "col", "x", "y") + SPLITS}
    if "input_id" in meta["files"]:
        arrays["input_id"] = load_listed(Path(path), "input_id", meta, "re-create the dataset directory",
                                         *FILE_FORMATS["input_id"], verify=verify)
    reserved = {"kind", "salientpp_version", "source", "files", "num_nodes", "num_edges", "num_features",
                "num_classes", "feature_dtype", "num_train", "num_valid", "num_test"}
    dataset = Dataset(**arrays, source=meta.get("source", "unknown"),
                      extra_meta={k: v for k, v in meta.items() if k not in reserved})
    if meta.get("num_nodes") != dataset.num_nodes or meta.get("num_edges") != dataset.num_edges:
        raise InputError(f"meta.json in {path} disagrees with the arrays on the number of nodes or edges; "
                         "re-create the dataset directory")
    if validate:
        dataset.validate(where=f"the dataset directory {path}")
    return dataset
