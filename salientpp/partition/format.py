"""The partitioned directory: renumbered global topology, partition book, per-partition data.

Layout (``.npy`` arrays + ``meta.json``; partition k owns the new ids ``[offsets[k], offsets[k+1])``)::

    meta.json            kind, num_parts, counts, method, seed, quality report, files
    rowptr.npy, col.npy  int64 global CSR in the new numbering (replicated on every rank)
    offsets.npy          int64 [K + 1] the partition book
    orig_id.npy          int64 [N]  original id of each new id (new -> old)
    part_<k>/x.npy       float32|float16 [n_k, F] features of the owned ids, in id order
    part_<k>/y.npy       int64 [n_k] labels of the owned ids (-1 = unlabelled)
    part_<k>/train_idx.npy, valid_idx.npy, test_idx.npy
                         int64 sorted NEW global ids of the owned split nodes

``meta.json["files"]`` maps each relative path without ``.npy`` (``"part_0/x"``) to its dtype,
shape and checksum.
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
from .book import PartitionBook

KIND = "salientpp-partitioned"
PART_ARRAYS = ("x", "y", "train_idx", "valid_idx", "test_idx")


@dataclass
class PartData:
    """What partition k stores: its feature and label rows and its split nodes.

    Attributes:
        x: ``[n_k, F]`` rows of the owned ids, row i is global id ``offsets[k] + i``.
        y: int64 ``[n_k]``.
        train_idx, valid_idx, test_idx: int64 sorted new global ids owned by k.
    """

    x: np.ndarray
    y: np.ndarray
    train_idx: np.ndarray
    valid_idx: np.ndarray
    test_idx: np.ndarray


@dataclass
class PartitionedDataset:
    """A partitioned dataset; per-partition arrays are memory-mapped on first access."""

    path: Path
    meta: dict[str, Any]
    rowptr: np.ndarray
    col: np.ndarray
    book: PartitionBook
    orig_id: np.ndarray
    verify: bool = False
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
    def num_classes(self) -> int:
        return int(self.meta["num_classes"])

    @property
    def feature_dtype(self) -> np.dtype:
        return np.dtype(self.meta["feature_dtype"])

    def degree(self) -> np.ndarray:
        return np.diff(self.rowptr)

    def part(self, k: int) -> PartData:
        if not 0 <= k < self.num_parts:
            raise InputError(f"partition {k} does not exist; {self.path} has partitions 0..{self.num_parts - 1}")
        if k not in self._parts:
            files = self.meta["files"]
            arrays = {}
            for name in PART_ARRAYS:
                key = f"part_{k}/{name}"
                if key not in files:
                    raise InputError(f"meta.json in {self.path} does not list {key}.npy; re-partition")
                arrays[name] = load_array(self.path / f"part_{k}", name, files[key], verify=self.verify)
            self._parts[k] = PartData(**arrays)
        return self._parts[k]

    def train_idx(self) -> np.ndarray:
        """int64 all training ids (new numbering), partition by partition."""
        return np.concatenate([self.part(k).train_idx for k in range(self.num_parts)])


def save_partitioned(out_dir: str | os.PathLike, rowptr: np.ndarray, col: np.ndarray, offsets: np.ndarray,
                     orig_id: np.ndarray, parts: list[PartData], meta: dict[str, Any]) -> Path:
    """Write a partitioned directory atomically. ``meta`` holds the descriptive entries
    (num_classes, method, seed, quality, source...); counts and files are filled in here."""
    if len(parts) != offsets.shape[0] - 1:
        raise ValueError("one PartData per partition is required")
    with atomic_output_dir(out_dir) as tmp:
        files = {name: save_array(tmp, name, arr) for name, arr in
                 (("rowptr", rowptr), ("col", col), ("offsets", offsets), ("orig_id", orig_id))}
        for k, part in enumerate(parts):
            (tmp / f"part_{k}").mkdir()
            for name in PART_ARRAYS:
                files[f"part_{k}/{name}"] = save_array(tmp / f"part_{k}", name, getattr(part, name))
        write_meta(tmp, {
            **meta,
            "kind": KIND,
            "salientpp_version": __version__,
            "num_parts": int(offsets.shape[0] - 1),
            "num_nodes": int(rowptr.shape[0] - 1),
            "num_edges": int(col.shape[0]),
            "num_features": int(parts[0].x.shape[1]),
            "feature_dtype": str(parts[0].x.dtype),
            "files": files,
        })
    return Path(out_dir)


def load_partitioned(path: str | os.PathLike, verify: bool = False) -> PartitionedDataset:
    """Memory-map a partitioned directory written by :func:`save_partitioned`."""
    path = Path(path)
    meta = read_meta(path, KIND)
    files = meta.get("files", {})
    arrays = {}
    for name in ("rowptr", "col", "offsets", "orig_id"):
        if name not in files:
            raise InputError(f"meta.json in {path} does not list {name}.npy; re-partition")
        arrays[name] = load_array(path, name, files[name], verify=verify)
    offsets = np.asarray(arrays["offsets"])
    if offsets[0] != 0 or offsets[-1] != arrays["rowptr"].shape[0] - 1 or np.any(np.diff(offsets) < 0):
        raise InputError(f"offsets.npy in {path} is not a valid partition book; re-partition")
    return PartitionedDataset(path=path, meta=meta, rowptr=arrays["rowptr"], col=arrays["col"],
                              book=PartitionBook(offsets), orig_id=arrays["orig_id"], verify=verify)
