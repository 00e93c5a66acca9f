"""Partition a dataset: assign vertices to parts, renumber, split features, report quality.

The balance constraints are those of SALIENT++: every partition should get the same number of
training, validation and other vertices and the same total degree, so that every rank has as
many minibatches and as much sampling work as the others.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..data.format import Dataset, label_meta
from ..errors import InputError
from ..io import check_output_dir
from .format import PartData, save_partitioned
from .metis import part_graph_kway
from .quality import PartitionQuality, measure_quality
from .reorder import Renumbering, permute_csr, renumber_by_part

CONSTRAINTS = ("train", "valid", "other", "degree")
METHODS = ("metis", "random")


def balance_weights(dataset: Dataset) -> np.ndarray:
    """int64 ``[N, 4]`` vertex weights: is-train, is-valid, is-other (neither), degree."""
    n = dataset.num_nodes
    weights = np.zeros((n, len(CONSTRAINTS)), dtype=np.int64)
    weights[dataset.train_idx, 0] = 1
    weights[dataset.valid_idx, 1] = 1
    weights[:, 2] = (weights[:, 0] == 0) & (weights[:, 1] == 0)
    weights[:, 3] = dataset.degree()
    return weights


def check_options(num_nodes: int, num_parts: int, method: str, seed: int) -> None:
    """Raise :class:`InputError` on an impossible number of parts, method or seed."""
    if method not in METHODS:
        raise InputError(f"unknown partitioning method {method!r}; choose one of {', '.join(METHODS)}")
    if num_parts < 1:
        raise InputError(f"the number of parts must be at least 1, got {num_parts}")
    if num_parts > num_nodes:
        raise InputError(f"cannot split {num_nodes} nodes into {num_parts} parts; use at most {num_nodes} parts")
    if not 0 <= seed < 2**31:
        raise InputError(f"the seed must lie in [0, 2^31), got {seed}")


def assign_parts(dataset: Dataset, num_parts: int, method: str = "metis", seed: int = 0,
                 weights: np.ndarray | None = None) -> np.ndarray:
    """int64 ``[N]`` partition of each vertex (original ids).

    ``metis``: multi-constraint METIS minimising the edge cut, balancing every column of
    ``weights`` (default :func:`balance_weights`; all-zero columns are left out).
    ``random``: a uniformly random assignment with part sizes differing by at most one.
    Both are deterministic for a seed.
    """
    check_options(dataset.num_nodes, num_parts, method, seed)
    if method == "random":
        parts = np.empty(dataset.num_nodes, dtype=np.int64)
        parts[np.random.default_rng(seed).permutation(dataset.num_nodes)] = (
            np.arange(dataset.num_nodes, dtype=np.int64) % num_parts)
        return parts
    if weights is None:
        weights = balance_weights(dataset)
    used = weights[:, weights.sum(axis=0) > 0]
    parts, _ = part_graph_kway(dataset.rowptr, dataset.col, used, num_parts, seed=seed)
    return parts


@dataclass
class Partitioning:
    """A partitioned dataset in memory, in the new numbering.

    Attributes:
        rowptr: int64 ``[N + 1]``; col: int64 ``[nnz]`` global CSR in the new numbering.
        renumbering: ``orig_id`` (new -> old), ``new_id`` (old -> new) and the partition book ``offsets``.
        parts: one :class:`PartData` per partition (features, labels, split ids in the new numbering).
        quality: the quality report.
        method, seed: how the vertices were assigned.
        timings: seconds spent per stage (assign, renumber, quality, slice, and save when written).
    """

    rowptr: np.ndarray
    col: np.ndarray
    renumbering: Renumbering
    parts: list[PartData]
    quality: PartitionQuality
    method: str
    seed: int
    timings: dict[str, float] = field(default_factory=dict)


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


def partition(dataset: Dataset, num_parts: int, method: str = "metis", seed: int = 0) -> Partitioning:
    """Assign, renumber (partition k = new ids ``[offsets[k], offsets[k+1])``, original order
    kept inside a partition), permute the graph and slice features, labels (rows of int64 ``[N]``
    class ids or of ``[N, T]`` multi-label targets) and splits."""
    timings = {}
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[stage], clock = now - clock, now

    weights = balance_weights(dataset)
    parts_of = assign_parts(dataset, num_parts, method, seed, weights)
    lap("assign")
    renumbering = renumber_by_part(parts_of, num_parts)
    del parts_of
    orig_id, offsets = renumbering.orig_id, renumbering.offsets
    rowptr, col = permute_csr(dataset.rowptr, dataset.col, orig_id, renumbering.new_id)
    lap("renumber")
    quality = measure_quality(rowptr, col, offsets, weights[orig_id], CONSTRAINTS)
    del weights
    lap("quality")
    splits = {name: _split_by_part(getattr(dataset, name), renumbering.new_id, offsets)
              for name in ("train_idx", "valid_idx", "test_idx")}
    if dataset.has_link_split:
        splits.update({name: _edges_by_part(edges, renumbering.new_id, offsets)
                       for name, edges in dataset.link_split.arrays().items()})
    parts = []
    for k in range(num_parts):
        owned = orig_id[offsets[k]:offsets[k + 1]]
        parts.append(PartData(x=dataset.x[owned], y=np.asarray(dataset.y[owned]),
                              **{name: split[k] for name, split in splits.items()}))
    lap("slice")
    return Partitioning(rowptr=rowptr, col=col, renumbering=renumbering, parts=parts, quality=quality,
                        method=method, seed=seed, timings=timings)


def partition_dataset(dataset: Dataset, out_dir: str | os.PathLike, num_parts: int, method: str = "metis",
                      seed: int = 0) -> Partitioning:
    """Partition ``dataset`` and write the partitioned directory ``out_dir`` atomically.

    Raises :class:`InputError` before any work when ``out_dir`` exists or the options are
    impossible. Returns the in-memory result (its ``quality`` is also in ``meta.json``).
    """
    check_output_dir(out_dir)
    check_options(dataset.num_nodes, num_parts, method, seed)
    result = partition(dataset, num_parts, method, seed)
    start = time.perf_counter()
    save_partitioned(Path(out_dir), result.rowptr, result.col, result.renumbering.offsets,
                     result.renumbering.orig_id, result.parts, {
                         "source": dataset.source,
                         **label_meta(dataset.y),
                         "method": method,
                         "seed": seed,
                         "constraints": list(CONSTRAINTS),
                         "quality": result.quality.to_dict(),
                     })
    result.timings["save"] = time.perf_counter() - start
    return result
