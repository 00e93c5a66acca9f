"""A multilevel partitioner whose memory is bounded by a budget, not by the number of edges.

METIS copies the whole graph and keeps about 100 bytes per directed edge. This partitioner
never holds the fine graph's ``col`` in memory: it reads it in chunks of rows (from the file,
when ``col`` is a memory map of a whole ``.npy`` file) and keeps only per-vertex arrays, one
chunk and coarse graphs small enough for the budget.

1. **Coarsen** by size-constrained label propagation: every vertex joins the cluster of its
   neighbours it is most connected to, unless that cluster would outgrow a size limit (the sum
   of the vertex's balance weights, each normalised by its total), in a few streaming rounds.
   Contracting the clusters gives a weighted graph (vertex weights summed per constraint, edge
   weights summed per cluster pair); repeat until it has at most ``target_edges`` edges.
2. **Partition** the coarsest graph with METIS, balancing every constraint. When label
   propagation stops shrinking the graph before it fits, METIS gets only its heaviest edges.
3. **Uncoarsen**: project the parts to the next finer level and refine there with streaming
   rounds of greedy moves: a vertex moves to the part it has most edges to when that gains
   cut edges and keeps every constraint of the destination within ``1 + imbalance`` of its
   mean. A repair round first moves vertices out of parts over that bound when METIS left one.

Memory model (bytes; N vertices, E directed edges, C constraints, budget B): the fine level
holds ``rowptr`` and 5 int64 per-vertex arrays (clusters, their sizes, scratch, coarse ids,
parts) plus the ``[N, C]`` weights, ``8 (C + 6) N``. Everything else is held to B: one chunk of
at most ``M = B / 384`` edges costs ``48 M`` (an eighth of B); the coarse levels (int64 col and
edge weights, ``16`` bytes per edge; at most ``B / 128`` cluster pairs, ``B / 64`` directed
edges, are kept while a level is merged: beyond that only the heaviest) and METIS on a
coarsest graph of at most ``B / 232`` edges (about 100 bytes per edge and 400 per vertex)
share the rest. :func:`memory_model` gives that sum;
``tests/test_multilevel.py`` measures it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numba
import numpy as np

from ..data.csr import CsrChunk, csr_chunks
from ..hashing import GOLDEN, splitmix64
from .metis import METIS_BYTES_PER_EDGE, METIS_BYTES_PER_NODE, part_graph_kway
from .quality import sum_rows

# bytes one chunk holds per edge: col, edge weights, the pair keys and weights of contraction
# and their sort order, and the merge of those pairs into the level's (see the module docstring)
CHUNK_BYTES_PER_EDGE = 48


@dataclass(frozen=True)
class MultilevelOptions:
    """How the multilevel partitioner spends its budget.

    Attributes:
        memory_budget: bytes for one chunk (an eighth), the coarse levels and METIS on the
            coarsest; the per-vertex arrays of the fine level come on top (:func:`memory_model`).
        imbalance: allowed excess of every constraint over its mean part weight (0.03: 3%).
        clusters_per_part: the coarsening size limit keeps every cluster below
            ``1 / (K * clusters_per_part)`` of every constraint's total, so the coarsest graph
            keeps enough vertices per part for METIS to balance.
        coarsening_rounds: label propagation rounds per level.
        refinement_rounds: greedy refinement rounds per level.
        seed: METIS's seed and the tie-breaking of both kinds of rounds.
    """

    memory_budget: int = 1 << 30
    imbalance: float = 0.03
    clusters_per_part: int = 64
    coarsening_rounds: int = 4
    refinement_rounds: int = 4
    seed: int = 0

    def chunk_edges(self) -> int:
        """Edges one chunk may hold: an eighth of the budget."""
        return max(1 << 12, self.memory_budget // (8 * CHUNK_BYTES_PER_EDGE))

    def target_edges(self) -> int:
        """Edges of a graph METIS may be given: half of the budget."""
        return max(1 << 12, self.memory_budget // (2 * (METIS_BYTES_PER_EDGE + 16)))


def vertex_bytes(num_nodes: int, num_constraints: int) -> int:
    """Bytes of the fine level's per-vertex arrays: ``rowptr``, clusters, their sizes, scratch,
    coarse ids and parts (int64 each) and the ``[N, C]`` weights."""
    return 8 * (num_constraints + 6) * num_nodes


def held_bytes(num_nodes: int, num_edges: int, options: MultilevelOptions) -> int:
    """Bytes held besides :func:`vertex_bytes`: one chunk and, at most the rest of the budget,
    the coarse levels and METIS (less on a graph METIS could take whole)."""
    chunk = CHUNK_BYTES_PER_EDGE * min(num_edges, options.chunk_edges())
    coarse = min(options.memory_budget - options.memory_budget // 8,
                 METIS_BYTES_PER_EDGE * num_edges + METIS_BYTES_PER_NODE * num_nodes)
    return chunk + coarse


def memory_model(num_nodes: int, num_edges: int, num_constraints: int, options: MultilevelOptions) -> int:
    """Upper bound of the bytes the partitioner holds on a graph of ``num_nodes`` vertices and
    ``num_edges`` directed edges (see the module docstring)."""
    return vertex_bytes(num_nodes, num_constraints) + held_bytes(num_nodes, num_edges, options)


# ---- graphs and their chunks --------------------------------------------------------------------

@dataclass(frozen=True)
class Level:
    """One level of the hierarchy: a symmetric weighted graph.

    Attributes:
        rowptr: int64 ``[n + 1]`` (in memory).
        col: int64 ``[m]``, in memory or a memory map of a whole ``.npy`` file, read in chunks.
        edge_weight: int64 ``[m]`` or ``None`` (every edge weighs 1).
        vertex_weight: int64 ``[n, C]`` balance weights.
    """

    rowptr: np.ndarray
    col: np.ndarray
    edge_weight: np.ndarray | None
    vertex_weight: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.rowptr.shape[0] - 1)

    @property
    def num_edges(self) -> int:
        return int(self.rowptr[-1])

    def chunks(self, max_edges: int) -> Iterator[tuple[CsrChunk, np.ndarray]]:
        """:func:`~salientpp.data.csr.csr_chunks` of the graph, each with int64 ``[M]`` its edges' weights."""
        for chunk in csr_chunks(self.rowptr, self.col, max_edges):
            m = chunk.col.shape[0]
            yield chunk, (np.ones(m, dtype=np.int64) if self.edge_weight is None
                          else np.asarray(self.edge_weight[chunk.first_edge:chunk.first_edge + m]))


# ---- kernels ------------------------------------------------------------------------------------

@numba.njit(cache=True, inline="always")
def _mix(seed, a, b):
    """A 64-bit hash of three integers (splitmix64 finaliser), for tie-breaking."""
    return splitmix64(np.uint64(seed) * GOLDEN + np.uint64(a) * np.uint64(0xBF58476D1CE4E5B9)
                      + np.uint64(b) * np.uint64(0x94D049BB133111EB))


@numba.njit(cache=True)
def _cluster_rows(start, rowptr, col, weight, vertex_weight, scale, limit, labels, size, acc, touched, seed):
    """One label propagation sweep over a chunk; returns the number of vertices that moved."""
    moved = 0
    num_constraints = vertex_weight.shape[1]
    for i in range(rowptr.shape[0] - 1):
        v = start + i
        own = labels[v]
        count = 0
        for e in range(rowptr[i], rowptr[i + 1]):
            u = col[e]
            if u == v:
                continue
            c = labels[u]
            if acc[c] == 0:
                touched[count] = c
                count += 1
            acc[c] += weight[e]
        own_size = 0.0
        for k in range(num_constraints):
            own_size += vertex_weight[v, k] * scale[k]
        best, best_w, best_tie = own, acc[own], np.uint64(0)
        for t in range(count):
            c = touched[t]
            w = acc[c]
            acc[c] = 0
            if c == own or w < best_w or size[c] + own_size > limit:
                continue
            tie = _mix(seed, v, c)
            if w > best_w or best == own or tie > best_tie:
                best, best_w, best_tie = c, w, tie
        acc[own] = 0
        if best != own and best_w > acc[own]:
            size[own] -= own_size
            size[best] += own_size
            labels[v] = best
            moved += 1
    return moved


@numba.njit(cache=True)
def _coarse_pairs(start, rowptr, col, weight, coarse_id, num_coarse, keys, weights):
    """Write ``coarse(u) * num_coarse + coarse(v)`` and the weight of every chunk edge from a
    cluster to a larger-numbered one (the other direction is counted from the other row);
    returns how many."""
    count = 0
    for i in range(rowptr.shape[0] - 1):
        cu = coarse_id[start + i]
        for e in range(rowptr[i], rowptr[i + 1]):
            cv = coarse_id[col[e]]
            if cu < cv:
                keys[count] = cu * num_coarse + cv
                weights[count] = weight[e]
                count += 1
    return count


@numba.njit(cache=True)
def _reduce_sorted(keys, weights):
    """Sum the weights of equal keys of a sorted array in place; returns the distinct count."""
    out = -1
    for i in range(keys.shape[0]):
        if out >= 0 and keys[out] == keys[i]:
            weights[out] += weights[i]
        else:
            out += 1
            keys[out] = keys[i]
            weights[out] = weights[i]
    return out + 1


@numba.njit(cache=True)
def _refine_rows(start, rowptr, col, weight, vertex_weight, parts, part_weight, bound, conn, touched,
                 seed, repair):
    """One greedy sweep over a chunk; returns the number of vertices moved.

    Default: move a vertex to the part it has most edge weight to when that strictly gains and
    the destination stays within ``bound`` in every constraint. ``repair``: move vertices out of
    parts over ``bound`` to the best-connected part with room, even at a loss.
    """
    moved = 0
    num_constraints = vertex_weight.shape[1]
    for i in range(rowptr.shape[0] - 1):
        v = start + i
        own = parts[v]
        if repair:
            over = False
            for k in range(num_constraints):
                if vertex_weight[v, k] > 0 and part_weight[own, k] > bound[k]:
                    over = True
            if not over:
                continue
        count = 0
        for e in range(rowptr[i], rowptr[i + 1]):
            p = parts[col[e]]
            if conn[p] == 0:
                touched[count] = p
                count += 1
            conn[p] += weight[e]
        own_conn = conn[own]
        best, best_gain, best_tie = own, np.int64(0), np.uint64(0)
        if repair:  # any part with room is a candidate, even one without edges to v
            best_gain = np.iinfo(np.int64).min
            for p in range(part_weight.shape[0]):
                if conn[p] == 0 and p != own:
                    touched[count] = p
                    count += 1
        for t in range(count):
            p = touched[t]
            gain = conn[p] - own_conn
            conn[p] = 0
            if p == own or gain < best_gain or (not repair and gain == 0):
                continue
            fits = True
            for k in range(num_constraints):
                if part_weight[p, k] + vertex_weight[v, k] > bound[k] and vertex_weight[v, k] > 0:
                    fits = False
            if not fits:
                continue
            tie = _mix(seed, v, p)
            if gain > best_gain or best == own or tie > best_tie:
                best, best_gain, best_tie = p, gain, tie
        conn[own] = 0
        if best != own:
            for k in range(num_constraints):
                part_weight[own, k] -= vertex_weight[v, k]
                part_weight[best, k] += vertex_weight[v, k]
            parts[v] = best
            moved += 1
    return moved


# ---- the three phases ---------------------------------------------------------------------------

def _max_degree(level: Level) -> int:
    return int(np.diff(level.rowptr).max()) if level.num_nodes else 0


def cluster(level: Level, num_parts: int, options: MultilevelOptions, seed: int) -> np.ndarray:
    """int64 ``[n]`` cluster label of each vertex (a vertex id of the cluster), by
    size-constrained label propagation in ``options.coarsening_rounds`` streaming rounds."""
    n = level.num_nodes
    totals = level.vertex_weight.sum(axis=0)
    scale = np.where(totals > 0, 1.0 / np.maximum(totals, 1), 0.0)
    limit = 1.0 / (num_parts * options.clusters_per_part)
    size = np.zeros(n)
    for column in range(scale.shape[0]):  # one [n] temporary at a time
        size += level.vertex_weight[:, column] * scale[column]
    labels = np.arange(n, dtype=np.int64)
    acc = np.zeros(n, dtype=np.int64)
    touched = np.empty(_max_degree(level), dtype=np.int64)
    for round_ in range(options.coarsening_rounds):
        moved = 0
        for chunk, weight in level.chunks(options.chunk_edges()):
            moved += _cluster_rows(chunk.start, chunk.rowptr, chunk.col, weight, level.vertex_weight, scale,
                                   limit, labels, size, acc, touched, seed * 1000 + round_)
        if moved < 0.01 * n:
            break
    return labels


def contract(level: Level, labels: np.ndarray, options: MultilevelOptions) -> tuple[Level, np.ndarray]:
    """The coarse graph of ``labels`` and int64 ``[n]`` the coarse id of every vertex.

    Every edge between two clusters is counted once, from the row of its smaller-numbered
    cluster, as a key ``cu * clusters + cv`` (``cu < cv``); keys are merged as the chunks come.
    When more than ``memory_budget / 128`` distinct pairs are held, only that many of the
    heaviest are kept (pairs seen later start again from their later weight): the coarse graph
    then holds the heaviest connections, and the finer levels' refinement sees every edge.
    """
    clusters = np.unique(labels)
    coarse_id = np.searchsorted(clusters, labels)
    num_coarse = int(clusters.shape[0])
    del clusters
    vertex_weight = sum_rows(coarse_id, level.vertex_weight, num_coarse)
    keys = np.empty(0, dtype=np.int64)
    weights = np.empty(0, dtype=np.int64)
    pending_keys, pending_weights, pending = [], [], 0
    allowed = max(1, options.memory_budget // 128)

    def merge():
        nonlocal keys, weights, pending_keys, pending_weights, pending
        keys = np.concatenate([keys, *pending_keys])
        weights = np.concatenate([weights, *pending_weights])
        pending_keys, pending_weights, pending = [], [], 0
        order = np.argsort(keys, kind="stable")
        keys, weights = keys[order], weights[order]
        del order
        distinct = _reduce_sorted(keys, weights)
        keys, weights = keys[:distinct].copy(), weights[:distinct].copy()
        if distinct > allowed:
            keep = _heaviest(weights, allowed)
            keys, weights = keys[keep], weights[keep]

    for chunk, weight in level.chunks(options.chunk_edges()):
        chunk_keys = np.empty(chunk.col.shape[0], dtype=np.int64)
        chunk_weights = np.empty(chunk.col.shape[0], dtype=np.int64)
        count = _coarse_pairs(chunk.start, chunk.rowptr, chunk.col, weight, coarse_id, num_coarse,
                              chunk_keys, chunk_weights)
        order = np.argsort(chunk_keys[:count], kind="stable")
        chunk_keys, chunk_weights = chunk_keys[:count][order], chunk_weights[:count][order]
        distinct = _reduce_sorted(chunk_keys, chunk_weights)
        pending_keys.append(chunk_keys[:distinct].copy())
        pending_weights.append(chunk_weights[:distinct].copy())
        pending += distinct
        if pending > max(keys.shape[0], options.chunk_edges()):
            merge()
    merge()
    # both directions, sorted by row then column
    rows, cols = keys // num_coarse, keys % num_coarse
    del keys
    rows, cols = np.concatenate([rows, cols]), np.concatenate([cols, rows])
    order = np.lexsort((cols, rows))
    rowptr = np.zeros(num_coarse + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=num_coarse), out=rowptr[1:])
    return Level(rowptr, cols[order], np.concatenate([weights, weights])[order], vertex_weight), coarse_id


def _heaviest(weights: np.ndarray, count: int) -> np.ndarray:
    """bool mask of the weights above the ``count``-th largest (at most ``count`` of them)."""
    return weights > np.partition(weights, weights.shape[0] - count)[weights.shape[0] - count]


def heaviest_edges(level: Level, max_edges: int) -> Level:
    """``level`` itself when it has at most ``max_edges`` edges, else the same vertices with only
    its heaviest edges (weight above the ``max_edges``-th largest; both directions of an edge weigh
    the same, so the graph stays symmetric). METIS then spends the budget on the edges that
    matter most; refinement on the finer levels sees every edge again."""
    if level.num_edges <= max_edges:
        return level
    weight = np.asarray(level.edge_weight)
    keep = _heaviest(weight, max_edges)
    rows = np.repeat(np.arange(level.num_nodes, dtype=np.int64), np.diff(level.rowptr))[keep]
    rowptr = np.zeros_like(level.rowptr)
    np.cumsum(np.bincount(rows, minlength=level.num_nodes), out=rowptr[1:])
    return Level(rowptr, np.asarray(level.col)[keep], weight[keep], level.vertex_weight)


def balance_bound(totals: np.ndarray, num_parts: int, imbalance: float) -> np.ndarray:
    """int64 ``[C]`` the largest weight a part may have in every constraint: ``(1 + imbalance)``
    times the mean part weight, rounded down (and at least the rounded-up mean)."""
    mean = totals / num_parts
    return np.maximum(np.floor(mean * (1 + imbalance)), np.ceil(mean)).astype(np.int64)


def refine(level: Level, parts: np.ndarray, num_parts: int, options: MultilevelOptions, seed: int) -> None:
    """Improve ``parts`` (int64 ``[n]``, changed in place) by streaming greedy rounds: repair
    rounds while a part exceeds the balance bound, then gain rounds."""
    weights = sum_rows(parts, level.vertex_weight, num_parts)
    bound = balance_bound(level.vertex_weight.sum(axis=0), num_parts, options.imbalance)
    conn = np.zeros(num_parts, dtype=np.int64)
    touched = np.empty(_max_degree(level) + num_parts, dtype=np.int64)
    sweeps = [True] * options.refinement_rounds + [False] * options.refinement_rounds
    for round_, repair in enumerate(sweeps):
        if repair and (weights <= bound).all():
            continue
        moved = 0
        for chunk, weight in level.chunks(options.chunk_edges()):
            moved += _refine_rows(chunk.start, chunk.rowptr, chunk.col, weight, level.vertex_weight, parts,
                                  weights, bound, conn, touched, seed * 1000 + round_, repair)
        if not repair and moved < 0.001 * level.num_nodes:
            break


def multilevel_partition(rowptr: np.ndarray, col: np.ndarray, vertex_weights: np.ndarray, num_parts: int,
                         options: MultilevelOptions) -> np.ndarray:
    """int64 ``[N]`` part of every vertex, minimising the edge cut while balancing every column of
    ``vertex_weights`` within ``options.imbalance`` where the weights allow it.

    Args:
        rowptr: int64 ``[N + 1]``; col: int64 ``[nnz]`` symmetric CSR (a memory map of a whole
            ``.npy`` file is read in chunks, never whole).
        vertex_weights: non-negative int64 ``[N, C]``.
        num_parts: K >= 1.
        options: the budget and the rounds.
    """
    n = int(rowptr.shape[0] - 1)
    if num_parts == 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    weights = np.ascontiguousarray(vertex_weights.reshape(n, -1), dtype=np.int64)
    levels = [Level(np.asarray(rowptr, dtype=np.int64), col, None, weights)]
    maps = []
    floor = num_parts * options.clusters_per_part
    while levels[-1].num_edges > options.target_edges() and levels[-1].num_nodes > floor:
        labels = cluster(levels[-1], num_parts, options, options.seed + len(levels))
        coarse, coarse_id = contract(levels[-1], labels, options)
        del labels
        if coarse.num_nodes > 0.9 * levels[-1].num_nodes:
            break  # label propagation no longer shrinks the graph: hand this level to METIS
        levels.append(coarse)
        maps.append(coarse_id)
    coarsest = levels[-1]
    sparse = heaviest_edges(coarsest, options.target_edges())
    parts, _ = part_graph_kway(sparse.rowptr, np.asarray(sparse.col), sparse.vertex_weight, num_parts,
                               seed=options.seed, ufactor=int(1000 * options.imbalance), edge_weights=sparse.edge_weight)
    del sparse
    refine(coarsest, parts, num_parts, options, options.seed)
    for level, coarse_id in zip(reversed(levels[:-1]), reversed(maps)):
        parts = parts[coarse_id]
        refine(level, parts, num_parts, options, options.seed + level.num_nodes)
    return parts

