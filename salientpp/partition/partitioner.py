"""Partition a dataset: assign vertices to parts, renumber, split features, report quality.

The balance constraints are those of SALIENT++: every partition should get the same number of
training, validation and other vertices and the same total degree, so that every rank has as
many minibatches and as much sampling work as the others. A typed graph is partitioned as one
graph (its symmetric CSR, whatever the relations), with one more constraint per node type other
than the target, so that every partition also gets its share of each type's nodes.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..data.format import Dataset, label_meta
from ..data.links import EDGE_SPLITS, LINK_RELATION_KEY
from ..data.schema import GraphSchema
from ..errors import InputError, check_int, counted
from ..io import atomic_output_dir, check_output_dir
from .assemble import DirectoryTarget, MemoryTarget, assemble, feature_types
from .format import PART_ARRAYS, PartData, feature_file, write_partitioned_meta
from .metis import EmptyPartitions, part_graph_kway
from .multilevel import MultilevelOptions, multilevel_partition
from .quality import PartitionQuality
from .reorder import Renumbering

# The balance constraints of a homogeneous graph; constraint_names gives a typed graph's.
CONSTRAINTS = ("train", "valid", "other", "degree")
RANDOM = "random"
METHODS = ("metis", "multilevel", RANDOM)
# Stages of Partitioning.timings and PartitionReport.timings.
ASSIGN, LAY_OUT, WRITE = "assign", "lay out", "write"


def constraint_names(schema: GraphSchema) -> tuple[str, ...]:
    """The balance constraints of a graph of ``schema``: :data:`CONSTRAINTS` (train, valid,
    other, degree) for a homogeneous graph; a typed graph adds ``"TYPE nodes"`` for each node type
    other than the target, in the schema's order, before ``degree`` (train, valid and other
    count the target type's nodes, which together they balance)."""
    others = tuple(f"{name} nodes" for name in schema.node_types if name != schema.target)
    return CONSTRAINTS[:3] + others + CONSTRAINTS[3:]


def balance_weights(dataset: Dataset) -> np.ndarray:
    """int64 ``[N, C]`` vertex weights, one column per :func:`constraint_names`: is-train,
    is-valid, is-other (a target node in neither), one is-of-type column per non-target type,
    degree (C = 4 for a homogeneous graph)."""
    schema = dataset.schema
    names = constraint_names(schema)
    weights = np.zeros((dataset.num_nodes, len(names)), dtype=np.int64)
    weights[dataset.train_idx, 0] = 1
    weights[dataset.valid_idx, 1] = 1
    start, stop = schema.target_range
    weights[start:stop, 2] = (weights[start:stop, 0] == 0) & (weights[start:stop, 1] == 0)
    offsets = schema.offsets
    others = (t for t in range(schema.num_types) if t != schema.target_index)
    for column, t in enumerate(others, start=3):
        weights[offsets[t]:offsets[t + 1], column] = 1
    weights[:, -1] = dataset.degree()
    return weights


def check_options(num_nodes: int, num_parts: int, method: str, seed: int) -> None:
    """Raise :class:`InputError` on an impossible number of parts, method or seed."""
    if method not in METHODS:
        raise InputError(f"unknown partitioning method {method!r}; choose one of {', '.join(METHODS)}")
    check_int(num_parts, "the number of parts")
    if num_parts > num_nodes:
        raise InputError(f"cannot split {counted(num_nodes, 'node')} into {counted(num_parts, 'part')}; use at most "
                         f"{counted(num_nodes, 'part')}")
    if not 0 <= seed < 2**31:
        raise InputError(f"the seed must lie in [0, 2^31), got {seed}")


def assign_parts(dataset: Dataset, num_parts: int, method: str = "metis", seed: int = 0,
                 weights: np.ndarray | None = None, memory_budget: int | None = None) -> np.ndarray:
    """int64 ``[N]`` partition of each vertex (original ids).

    ``metis``: multi-constraint METIS minimising the edge cut, balancing every column of
    ``weights`` (default :func:`balance_weights`; all-zero columns are left out). A typed graph's
    CSR is partitioned as it is, its relations ignored: two nodes joined by several relations are
    joined by as many entries, which count as a heavier edge.
    ``multilevel``: the same objective and constraints within ``memory_budget`` bytes
    (default :class:`~salientpp.partition.multilevel.MultilevelOptions`'s), reading ``col`` in
    chunks (:mod:`salientpp.partition.multilevel`).
    ``random``: a uniformly random assignment with part sizes differing by at most one.
    All are deterministic for a seed.
    """
    check_options(dataset.num_nodes, num_parts, method, seed)
    if method == RANDOM:
        parts = np.empty(dataset.num_nodes, dtype=np.int64)
        parts[np.random.default_rng(seed).permutation(dataset.num_nodes)] = (
            np.arange(dataset.num_nodes, dtype=np.int64) % num_parts)
        return parts
    if weights is None:
        weights = balance_weights(dataset)
    nonzero = weights.sum(axis=0) > 0
    used = weights if nonzero.all() else weights[:, nonzero]
    if method == "multilevel":
        options = MultilevelOptions(seed=seed) if memory_budget is None else MultilevelOptions(
            memory_budget=memory_budget, seed=seed)
        return multilevel_partition(dataset.rowptr, dataset.col, used, num_parts, options)
    parts, _ = part_graph_kway(dataset.rowptr, dataset.col, used, num_parts, seed=seed)
    return parts


@dataclass
class Partitioning:
    """A partitioned dataset in memory, in the new numbering.

    Attributes:
        rowptr: int64 ``[N + 1]``; col: int64 ``[nnz]`` global CSR in the new numbering.
        renumbering: ``orig_id`` (new -> old), ``new_id`` (old -> new) and the partition book
            ``offsets`` (``type_offsets``: the blocks of every partition and node type).
        parts: one :class:`PartData` per partition (features, labels, split ids in the new numbering;
            a typed graph's features of its other node types).
        quality: the quality report.
        method, seed: how the vertices were assigned (``"random"`` after a fallback).
        timings: seconds spent per stage (assign, lay out).
        fallback: ``None``, or why the random method stood in for the one asked for
            (:func:`assign_or_fall_back`).
        edge_rel: int8 ``[nnz]`` the relation of each entry of ``col`` (rows grouped by relation,
            sorted within a group), or ``None`` for a homogeneous graph.
    """

    rowptr: np.ndarray
    col: np.ndarray
    renumbering: Renumbering
    parts: list[PartData]
    quality: PartitionQuality
    method: str
    seed: int
    timings: dict[str, float] = field(default_factory=dict)
    fallback: str | None = None
    edge_rel: np.ndarray | None = None


@dataclass(frozen=True)
class PartitionReport:
    """What :func:`partition_dataset` reports: the quality (also in meta.json), the seconds per
    stage (assign, write), the method that assigned the vertices and, when the random method
    stood in for the one asked for, why (:func:`assign_or_fall_back`; meta.json's ``fallback``)."""

    quality: PartitionQuality
    timings: dict[str, float]
    method: str
    fallback: str | None = None


class _Clock:
    """Seconds per stage, each from the end of the previous one."""

    def __init__(self):
        self.timings: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.timings[stage], self._last = now - self._last, now


def assign_or_fall_back(dataset: Dataset, num_parts: int, method: str, seed: int, weights: np.ndarray,
                        memory_budget: int | None) -> tuple[np.ndarray, str | None]:
    """:func:`assign_parts`, or, when METIS leaves a part empty (``metis`` and ``multilevel``:
    :class:`~salientpp.partition.metis.EmptyPartitions`, e.g. a graph of 50 vertices with one
    validation vertex), the random method with the same seed, which never leaves a part empty
    (K <= N). Returns int64 ``[N]`` the partition of every vertex, and ``None`` or the note that
    says why the random method stood in."""
    try:
        return assign_parts(dataset, num_parts, method, seed, weights, memory_budget), None
    except EmptyPartitions as exc:
        note = (f"{exc.reason} with --method {method} on this graph of {counted(dataset.num_nodes, 'node')}, so the "
                f"random method assigned the vertices instead (part sizes within one vertex of each other, a larger "
                f"edge cut)")
        return assign_parts(dataset, num_parts, RANDOM, seed), note


def _assign(dataset: Dataset, num_parts: int, method: str, seed: int,
            memory_budget: int | None) -> tuple[_Clock, np.ndarray, np.ndarray, str | None]:
    """The clock after :data:`ASSIGN`, the balance weights, the partition of every vertex and
    the note of a fallback to the random method (:func:`assign_or_fall_back`) or ``None``."""
    clock = _Clock()
    weights = balance_weights(dataset)
    parts_of, fallback = assign_or_fall_back(dataset, num_parts, method, seed, weights, memory_budget)
    clock.lap(ASSIGN)
    return clock, weights, parts_of, fallback


def partition(dataset: Dataset, num_parts: int, method: str = "metis", seed: int = 0,
              memory_budget: int | None = None) -> Partitioning:
    """Assign (:func:`assign_parts`), renumber (partition k = new ids ``[offsets[k],
    offsets[k+1])``, each node type one block inside it, original order kept inside a block),
    permute the graph and slice features, labels (rows of int64 ``[N]`` class ids or of ``[N, T]``
    multi-label targets) and splits, all in memory
    (:func:`~salientpp.partition.assemble.assemble`). Falls back to the random method when METIS
    leaves a part empty (:func:`assign_or_fall_back`)."""
    clock, weights, parts_of, fallback = _assign(dataset, num_parts, method, seed, memory_budget)
    target = MemoryTarget()
    renumbering, quality = assemble(dataset, parts_of, num_parts, weights, constraint_names(dataset.schema), target)
    clock.lap(LAY_OUT)
    arrays = target.arrays
    names = PART_ARRAYS + (EDGE_SPLITS if dataset.has_link_split else ())
    schema = dataset.schema
    parts = [PartData(**{name: arrays[f"part_{k}/{name}"] for name in names},
                      features={schema.node_types[t]: arrays[f"part_{k}/{feature_file(t)}"]
                                for t in feature_types(dataset)})
             for k in range(num_parts)]
    return Partitioning(rowptr=arrays["rowptr"], col=arrays["col"], renumbering=renumbering, parts=parts,
                        quality=quality, method=RANDOM if fallback else method, seed=seed, timings=clock.timings,
                        fallback=fallback, edge_rel=arrays.get("edge_rel"))


def partition_dataset(dataset: Dataset, out_dir: str | os.PathLike, num_parts: int, method: str = "metis",
                      seed: int = 0, memory_budget: int | None = None) -> PartitionReport:
    """Partition ``dataset`` and write the partitioned directory ``out_dir`` atomically, every
    large array in chunks (:class:`~salientpp.partition.assemble.DirectoryTarget`), so besides
    the assignment only per-vertex arrays and one chunk are in memory.

    meta.json records the method that assigned the vertices, with the note of a fallback to the
    random method (:func:`assign_or_fall_back`) under ``fallback``, and the quality report,
    whose ``imbalance`` is each constraint's ``max / mean - 1`` as measured (METIS aims for 3%
    but does not guarantee it); a typed graph's also records its schema
    (:meth:`~salientpp.data.schema.GraphSchema.to_meta`).

    Raises :class:`InputError` before any work when ``out_dir`` exists or the options are
    impossible.
    """
    check_output_dir(out_dir)
    check_options(dataset.num_nodes, num_parts, method, seed)
    clock, weights, parts_of, fallback = _assign(dataset, num_parts, method, seed, memory_budget)
    used = RANDOM if fallback else method
    with atomic_output_dir(out_dir) as tmp:
        target = DirectoryTarget(Path(tmp))
        names = constraint_names(dataset.schema)
        _, quality = assemble(dataset, parts_of, num_parts, weights, names, target)
        target.close()
        write_partitioned_meta(tmp, {"source": dataset.source, **label_meta(dataset.y, dataset.declared_classes),
                                     "method": used, **({"fallback": fallback} if fallback else {}), "seed": seed,
                                     "constraints": list(names), "quality": quality.to_dict(),
                                     **(dataset.schema.to_meta() if dataset.is_typed else {}),
                                     **({} if dataset.link_split is None else
                                        {LINK_RELATION_KEY: str(dataset.link_split.relation)})}, target.files)
    clock.lap(WRITE)
    return PartitionReport(quality, clock.timings, used, fallback)
