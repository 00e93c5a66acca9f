"""The dataset directory: a symmetric CSR graph with features, labels and a split.

Layout (all arrays are plain ``.npy`` files, memory-mapped on load; nothing is pickled)::

    rowptr.npy     int64   [N + 1]   CSR row pointers of the symmetric graph
    col.npy        int64   [nnz]     neighbours, sorted per row, no duplicates
    x.npy          float32 | float16 [N, F]
    y.npy          int64   [N]       class id, -1 = unlabelled
    train_idx.npy  int64   [n_train]
    valid_idx.npy  int64   [n_valid]
    test_idx.npy   int64   [n_test]
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
from ..io import atomic_output_dir, load_array, read_meta, save_array, write_meta
from .csr import check_csr

KIND = "salientpp-dataset"
SPLITS = ("train_idx", "valid_idx", "test_idx")
FEATURE_DTYPES = (np.float32, np.float16)


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

    def validate(self) -> None:
        """Raise :class:`InputError` on any inconsistency a user can cause."""
        n = self.num_nodes
        if n < 1:
            raise InputError("the graph has no nodes; check the input")
        check_csr(self.rowptr, self.col, n)
        if self.x.ndim != 2 or self.x.shape[0] != n:
            raise InputError(f"features must have shape [N={n}, F], got {list(self.x.shape)}; "
                             "pass one feature row per node")
        if self.x.dtype not in FEATURE_DTYPES:
            raise InputError(f"features must be float32 or float16, got {self.x.dtype}; convert them with astype")
        if not np.isfinite(self.x).all():
            raise InputError("features contain NaN or infinite values; clean or impute them first")
        if self.y.ndim != 1 or self.y.shape[0] != n:
            raise InputError(f"labels must have shape [N={n}], got {list(self.y.shape)}; "
                             "pass one label per node (-1 for unlabelled)")
        if self.y.dtype != np.int64:
            raise InputError(f"labels must be int64, got {self.y.dtype}; convert them with astype(np.int64)")
        if n and self.y.min() < -1:
            raise InputError("labels must be class ids >= 0 or -1 for unlabelled; found smaller values")
        for name in SPLITS:
            idx = getattr(self, name)
            if idx.ndim != 1 or idx.dtype != np.int64:
                raise InputError(f"{name} must be a 1-D int64 array, got {idx.dtype} {list(idx.shape)}")
            if idx.shape[0] and (idx.min() < 0 or idx.max() >= n):
                raise InputError(f"{name} holds node ids outside [0, {n}); fix the split")
            if idx.shape[0] and (self.y[idx] < 0).any():
                raise InputError(f"{name} holds unlabelled nodes (label -1); every split node needs a label")
        if self.train_idx.shape[0] == 0:
            raise InputError("the training split is empty; give at least one training node")


def save_dataset(dataset: Dataset, out_dir: str | os.PathLike) -> Path:
    """Validate ``dataset`` and write it to ``out_dir`` atomically; return the path."""
    dataset.validate()
    with atomic_output_dir(out_dir) as tmp:
        files = {name: save_array(tmp, name, np.asarray(getattr(dataset, name)))
                 for name in ("rowptr", "col", "x", "y") + SPLITS}
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


def load_dataset(path: str | os.PathLike, verify: bool = False, validate: bool = False) -> Dataset:
    """Memory-map a dataset directory written by :func:`save_dataset`.

    Args:
        verify: recompute every file's checksum (reads all bytes once).
        validate: run :meth:`Dataset.validate` (a full pass over the arrays).
    """
    meta = read_meta(path, KIND)
    files = meta.get("files", {})
    arrays = {}
    for name in ("rowptr", "col", "x", "y") + SPLITS:
        if name not in files:
            raise InputError(f"meta.json in {path} does not list {name}.npy; re-create the directory")
        arrays[name] = load_array(Path(path), name, files[name], verify=verify)
    reserved = {"kind", "salientpp_version", "source", "files", "num_nodes", "num_edges", "num_features",
                "num_classes", "feature_dtype", "num_train", "num_valid", "num_test"}
    dataset = Dataset(**arrays, source=meta.get("source", "unknown"),
                      extra_meta={k: v for k, v in meta.items() if k not in reserved})
    if meta.get("num_nodes") != dataset.num_nodes or meta.get("num_edges") != dataset.num_edges:
        raise InputError(f"meta.json in {path} disagrees with the arrays on the number of nodes or edges; "
                         "re-create the directory")
    if validate:
        dataset.validate()
    return dataset
