"""Lay a partitioned dataset out from an assignment, in passes over bounded chunks.

Given the partition of every vertex, this renumbers the graph (partition k becomes the id range
``[offsets[k], offsets[k + 1])``, inside it each node type one block, original order kept inside a
block: :func:`~salientpp.partition.reorder.renumber_by_part`), sorts every row again (a typed
graph's within each relation's group, its ``edge_rel`` moving with the rows), splits the features
of every node type and the labels by partition and measures the partitioning's quality. Each large
array is read once in chunks (:func:`~salientpp.io.read_rows`) and written piece by piece into a
:class:`Target`: :class:`MemoryTarget` for in-memory results, :class:`DirectoryTarget` for the
files of a partitioned directory. Inside a chunk of original rows, the rows of one partition are
consecutive in the new numbering, so every chunk writes at most K pieces per array.

Memory: the per-vertex arrays (partition, both permutations, the new ``rowptr``, the quality's
marks: 5 int64 per vertex, plus the ``[N, C]`` weights) and one chunk.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numba
import numpy as np

from ..data.csr import csr_chunks
from ..data.format import Dataset
from ..io import NpyWriter, read_rows, row_chunks, save_array
from .format import feature_file
from .quality import PartitionQuality, measure_quality, sum_rows
from .reorder import Renumbering, renumber_by_part

# edges per chunk of the pass over ``col`` (8 M: 64 MiB read, 64 MiB written)
CHUNK_EDGES = 1 << 23
# bytes per chunk of the passes over features and labels
CHUNK_BYTES = 1 << 26


class RowSink(Protocol):
    """Where one array goes: rows written at their position, in any order."""

    def write(self, first_row: int, rows: np.ndarray) -> None: ...


class Target(Protocol):
    """Where the arrays of a partitioned dataset go, by name (``"col"``, ``"part_0/x"``)."""

    def array(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> RowSink:
        """A sink for the array ``name`` of the given dtype and shape; every row gets written."""

    def put(self, name: str, array: np.ndarray) -> None:
        """Store the whole array ``name``."""

    def read(self, name: str) -> np.ndarray:
        """The array ``name`` once written (a memory map for a directory)."""


class _ArraySink:
    def __init__(self, array: np.ndarray):
        self.array = array

    def write(self, first_row: int, rows: np.ndarray) -> None:
        self.array[first_row:first_row + rows.shape[0]] = rows


@dataclass
class MemoryTarget:
    """Arrays kept in memory, by name."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    def array(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> RowSink:
        self.arrays[name] = np.empty(shape, dtype=dtype)
        return _ArraySink(self.arrays[name])

    def put(self, name: str, array: np.ndarray) -> None:
        self.arrays[name] = array

    def read(self, name: str) -> np.ndarray:
        return self.arrays[name]


@dataclass
class DirectoryTarget:
    """``.npy`` files under ``root`` (``part_<k>/`` folders made as needed); ``files`` collects
    their meta.json entries (dtype, shape, checksum) once :meth:`close` has run."""

    root: Path
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    _open: dict[str, NpyWriter] = field(default_factory=dict)

    def _path(self, name: str) -> Path:
        path = self.root / f"{name}.npy"
        path.parent.mkdir(exist_ok=True)
        return path

    def array(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> RowSink:
        self._open[name] = NpyWriter(self._path(name), dtype, shape)
        return self._open[name]

    def put(self, name: str, array: np.ndarray) -> None:
        self._path(name)
        self.files[name] = save_array(self.root, name, array)

    def read(self, name: str) -> np.ndarray:
        self.close()
        return np.load(self._path(name), mmap_mode="r")

    def close(self) -> None:
        """Finish every open file (checksums included)."""
        for name, writer in self._open.items():
            self.files[name] = writer.close()
        self._open.clear()


@numba.njit(cache=True)
def _renumber_rows(rowptr, col, rel, order, new_id, out_rowptr, out, out_rel):
    """Rows ``order[i]`` of the chunk, neighbours renumbered and sorted, one after another into
    ``out`` at ``out_rowptr[i]``. A typed chunk (``rel``, int8 relation per entry, not empty)
    keeps each row's entries grouped by relation: its relations go to ``out_rel`` in the row's
    order and only each run of one relation is sorted."""
    typed = rel.shape[0] > 0
    for i in range(order.shape[0]):
        row = order[i]
        begin, end = out_rowptr[i], out_rowptr[i + 1]
        for t in range(rowptr[row + 1] - rowptr[row]):
            out[begin + t] = new_id[col[rowptr[row] + t]]
        if not typed:
            out[begin:end].sort()
            continue
        for t in range(end - begin):
            out_rel[begin + t] = rel[rowptr[row] + t]
        run = begin
        while run < end:
            stop = run + 1
            while stop < end and out_rel[stop] == out_rel[run]:
                stop += 1
            out[run:stop].sort()
            run = stop


def _runs(new_ids: np.ndarray, part: np.ndarray | None = None) -> np.ndarray:
    """int64 boundaries of the runs of consecutive values in ascending ``new_ids`` (that stay in
    one partition when ``part``, int64 partition of each, is given): run r is
    ``new_ids[b[r]:b[r + 1]]``."""
    step = np.diff(new_ids) != 1
    if part is not None:
        step |= np.diff(part) != 0
    breaks = np.flatnonzero(step) + 1
    return np.concatenate([[0], breaks, [new_ids.shape[0]]]).astype(np.int64)


def _write_col(rowptr: np.ndarray, col: np.ndarray, edge_rel: np.ndarray | None, renumbering: Renumbering,
               new_rowptr: np.ndarray, sink: RowSink, rel_sink: RowSink | None) -> None:
    """Every row of the graph, renumbered and sorted, at its new place in ``sink``; with
    ``edge_rel`` (int8 ``[nnz]``, rows grouped by relation), sorted within each relation's group
    and the rows' relations at the same places in ``rel_sink``."""
    new_id = renumbering.new_id
    no_relations = np.empty(0, dtype=np.int8)
    for chunk in csr_chunks(rowptr, col, CHUNK_EDGES):
        rows = chunk.rowptr.shape[0] - 1
        ids = new_id[chunk.start:chunk.start + rows]
        order = np.argsort(ids, kind="stable")
        degree = np.diff(chunk.rowptr)[order]
        out_rowptr = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(degree, out=out_rowptr[1:])
        out = np.empty(out_rowptr[-1], dtype=np.int64)
        rel = no_relations if edge_rel is None else read_rows(edge_rel, chunk.first_edge,
                                                              chunk.first_edge + chunk.col.shape[0])
        out_rel = np.empty(out.shape[0] if edge_rel is not None else 0, dtype=np.int8)
        _renumber_rows(chunk.rowptr, chunk.col, rel, order, new_id, out_rowptr, out, out_rel)
        bounds = _runs(ids[order])
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            first = int(new_rowptr[ids[order[lo]]])
            sink.write(first, out[out_rowptr[lo]:out_rowptr[hi]])
            if rel_sink is not None:
                rel_sink.write(first, out_rel[out_rowptr[lo]:out_rowptr[hi]])


def _write_rows(array: np.ndarray, name: str, renumbering: Renumbering, target: Target, node_type: int = 0,
                first_id: int = 0) -> None:
    """``part_<k>/<name>``: the rows of ``array`` (``[n_t, ...]``, row i is the original id
    ``first_id + i``, all of the type ``node_type``) that partition k owns, in the new order:
    row j of partition k's file is the new id ``type_offsets[k * T + node_type] + j``."""
    new_id, offsets = renumbering.new_id, renumbering.offsets
    num_parts, num_types = offsets.shape[0] - 1, renumbering.num_types
    starts = renumbering.type_offsets[node_type:-1:num_types]
    stops = renumbering.type_offsets[node_type + 1::num_types]
    sinks = [target.array(f"part_{k}/{name}", array.dtype, (int(stops[k] - starts[k]),) + array.shape[1:])
             for k in range(num_parts)]
    row_bytes = int(np.prod(array.shape[1:], dtype=np.int64)) * array.itemsize
    for lo, hi in row_chunks(array.shape[0], row_bytes, CHUNK_BYTES):
        rows = read_rows(array, lo, hi)
        ids = new_id[first_id + lo:first_id + hi]
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        part = np.searchsorted(offsets, sorted_ids, side="right") - 1
        bounds = _runs(sorted_ids, part)
        for a, b in zip(bounds[:-1], bounds[1:]):
            k = int(part[a])
            sinks[k].write(int(sorted_ids[a] - starts[k]), rows[order[a:b]])


def feature_types(dataset: Dataset) -> list[int]:
    """The indices of the node types other than the target that have features, ascending."""
    return sorted(dataset.schema.type_index(name) for name in dataset.features)


def _split_by_part(ids: np.ndarray, new_id: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
    """Sorted new ids of ``ids`` (original ids), one array per partition."""
    renumbered = np.sort(new_id[ids])
    bounds = np.searchsorted(renumbered, offsets)
    return [renumbered[bounds[k]:bounds[k + 1]] for k in range(offsets.shape[0] - 1)]


def _edges_by_part(edges: np.ndarray, new_id: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
    """Edges (original ids, int64 ``[2, E]``) in new ids, sorted by source then destination, one
    array per partition: those whose source it owns."""
    renumbered = new_id[edges]
    renumbered = renumbered[:, np.lexsort((renumbered[1], renumbered[0]))]
    bounds = np.searchsorted(renumbered[0], offsets)
    return [np.ascontiguousarray(renumbered[:, bounds[k]:bounds[k + 1]]) for k in range(offsets.shape[0] - 1)]


def assemble(dataset: Dataset, parts_of: np.ndarray, num_parts: int, weights: np.ndarray, names: tuple[str, ...],
             target: Target) -> tuple[Renumbering, PartitionQuality]:
    """Write the partitioned layout of ``dataset`` into ``target``.

    Args:
        dataset: its arrays may be memory maps.
        parts_of: int64 ``[N]`` partition of every original id.
        weights: integer ``[N, C]`` balance weights (original order) named by ``names``.
        target: receives ``rowptr``, ``col``, ``offsets``, ``orig_id`` and ``part_<k>/<name>``
            for the features, labels, splits and held-out edges; for a typed graph also
            ``edge_rel``, ``type_offsets`` and ``part_<k>/x_<t>`` for the features of every other
            node type t that has them (:func:`~salientpp.partition.format.feature_file`).

    Returns:
        The renumbering and the quality report.
    """
    schema = dataset.schema
    renumbering = renumber_by_part(parts_of, num_parts, schema.offsets)
    orig_id, new_id, offsets = renumbering.orig_id, renumbering.new_id, renumbering.offsets
    new_rowptr = np.zeros(dataset.num_nodes + 1, dtype=np.int64)
    np.cumsum(np.diff(dataset.rowptr)[orig_id], out=new_rowptr[1:])
    target.put("rowptr", new_rowptr)
    target.put("offsets", offsets)
    target.put("orig_id", orig_id)
    typed = dataset.is_typed
    if typed:
        target.put("type_offsets", renumbering.type_offsets)
    _write_col(dataset.rowptr, dataset.col, dataset.edge_rel if typed else None, renumbering, new_rowptr,
               target.array("col", np.int64, (dataset.num_edges,)),
               target.array("edge_rel", np.int8, (dataset.num_edges,)) if typed else None)
    quality = measure_quality(new_rowptr, target.read("col"), offsets, sum_rows(parts_of, weights, num_parts), names)
    first, t = schema.target_range[0], schema.target_index
    _write_rows(dataset.x, "x", renumbering, target, t, first)
    _write_rows(dataset.y, "y", renumbering, target, t, first)
    for t in feature_types(dataset):
        _write_rows(dataset.features[schema.node_types[t]], feature_file(t), renumbering, target, t,
                    int(schema.offsets[t]))
    for name in ("train_idx", "valid_idx", "test_idx"):
        for k, ids in enumerate(_split_by_part(getattr(dataset, name), new_id, offsets)):
            target.put(f"part_{k}/{name}", ids)
    if dataset.has_link_split:
        for name, edges in dataset.link_split.arrays().items():
            for k, part_edges in enumerate(_edges_by_part(edges, new_id, offsets)):
                target.put(f"part_{k}/{name}", part_edges)
    return renumbering, quality
