"""How good a partitioning is: edge cut, balance of every constraint, halo sizes."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numba
import numpy as np

from ..data.csr import csr_chunks
from ..errors import counted

# edges of one chunk of the pass over ``col`` (16 M: 128 MiB)
QUALITY_CHUNK_EDGES = 1 << 24


@dataclass(frozen=True)
class PartitionQuality:
    """The quality report stored in ``meta.json["quality"]``.

    Attributes:
        num_parts: K.
        num_edges: undirected edges of the graph.
        edge_cut: undirected edges whose endpoints lie in different partitions.
        cut_fraction: ``edge_cut / num_edges`` (0 for a graph without edges).
        imbalance: per constraint, ``max_k w_k / mean_k w_k - 1`` (0 = perfectly balanced).
        sizes: vertices per partition.
        halo_sizes: per partition, distinct vertices outside it adjacent to one of its vertices.
        part_weights: per constraint, the summed weight of each partition
            (``part_weights["train"]`` = training vertices per partition).
    """

    num_parts: int
    num_edges: int
    edge_cut: int
    cut_fraction: float
    imbalance: dict[str, float]
    sizes: list[int]
    halo_sizes: list[int]
    part_weights: dict[str, list[int]]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """A few lines for the terminal: cut, imbalance, then one line per partition."""
        names = list(self.part_weights)
        cut = f"{self.edge_cut:,} of {counted(self.num_edges, 'edge', spec=',')} ({100 * self.cut_fraction:.2f}%)"
        lines = [f"edge cut: {cut}",
                 "imbalance (max/mean - 1): " + ", ".join(f"{name} {100 * value:.2f}%"
                                                         for name, value in self.imbalance.items())]
        header = ["part", "nodes", *names, "halo"]
        rows = [[str(k), f"{self.sizes[k]:,}", *(f"{self.part_weights[n][k]:,}" for n in names),
                 f"{self.halo_sizes[k]:,}"] for k in range(self.num_parts)]
        widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
        for row in [header] + rows:
            lines.append("  ".join(cell.rjust(width) for cell, width in zip(row, widths)))
        return "\n".join(lines)


@numba.njit(cache=True)
def _cut_and_halo(start, rowptr, col, offsets, last_seen, halo):
    """Cut edges of rows ``[start, start + R)`` (new numbering); marks each row's remote
    neighbours in ``last_seen`` (the last partition that saw them) and counts the new ones in
    ``halo``. Chunks must come in row order: the partitions' rows are contiguous."""
    cut = 0
    k = np.searchsorted(offsets, start, side="right") - 1
    for i in range(rowptr.shape[0] - 1):
        while start + i >= offsets[k + 1]:
            k += 1
        lo, hi = offsets[k], offsets[k + 1]
        for t in range(rowptr[i], rowptr[i + 1]):
            j = col[t]
            if j < lo or j >= hi:
                cut += 1
                if last_seen[j] != k:
                    last_seen[j] = k
                    halo[k] += 1
    return cut


def imbalance(part_weights: np.ndarray) -> np.ndarray:
    """float64 ``[C]`` ``max / mean - 1`` of each column of ``part_weights`` ``[K, C]``
    (0 for a column that sums to zero)."""
    mean = part_weights.mean(axis=0)
    safe = np.where(mean > 0, mean, 1.0)
    return np.where(mean > 0, part_weights.max(axis=0) / safe - 1.0, 0.0)


@numba.njit(cache=True)
def _sum_rows(index, values, out):
    for i in range(index.shape[0]):
        for k in range(values.shape[1]):
            out[index[i], k] += values[i, k]


def sum_rows(index: np.ndarray, values: np.ndarray, num_rows: int) -> np.ndarray:
    """int64 ``[num_rows, C]``: row r sums the rows i of ``values`` (integer ``[n, C]``) with
    ``index[i] = r`` (e.g. the weights of every part, ``index`` the part of every vertex)."""
    out = np.zeros((num_rows, values.shape[1]), dtype=np.int64)
    _sum_rows(np.asarray(index, dtype=np.int64), np.asarray(values, dtype=np.int64), out)
    return out


def measure_quality(rowptr: np.ndarray, col: np.ndarray, offsets: np.ndarray, part_weights: np.ndarray,
                    names: tuple[str, ...]) -> PartitionQuality:
    """Quality of a renumbered graph whose partition k is the id range ``[offsets[k], offsets[k+1])``.

    Args:
        rowptr: int64 ``[N + 1]``; col: int64 ``[nnz]`` symmetric CSR in the new numbering
            (a memory-mapped ``col`` is read in chunks).
        offsets: int64 ``[K + 1]`` the partition book.
        part_weights: int64 ``[K, C]`` summed balance weights of every partition (:func:`sum_rows`).
        names: C constraint names.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    last_seen = np.full(rowptr.shape[0] - 1, -1, dtype=np.int64)
    halo = np.zeros(offsets.shape[0] - 1, dtype=np.int64)
    cut = 0
    for chunk in csr_chunks(rowptr, col, QUALITY_CHUNK_EDGES):
        cut += _cut_and_halo(chunk.start, chunk.rowptr, chunk.col, offsets, last_seen, halo)
    cut //= 2
    num_edges = int(col.shape[0]) // 2
    return PartitionQuality(
        num_parts=int(offsets.shape[0] - 1),
        num_edges=num_edges,
        edge_cut=int(cut),
        cut_fraction=float(cut) / num_edges if num_edges else 0.0,
        imbalance={name: float(v) for name, v in zip(names, imbalance(part_weights))},
        sizes=np.diff(offsets).tolist(),
        halo_sizes=halo.tolist(),
        part_weights={name: part_weights[:, c].tolist() for c, name in enumerate(names)},
    )
