"""Build and check the CSR of a symmetric graph (the topology of the dataset format)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from ..errors import InputError, counted, shown
from ..io import read_rows, row_chunks
from .schema import GraphSchema


def build_csr(edge_index: np.ndarray, num_nodes: int, keep_self_loops: bool = False
              ) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric CSR from a directed or undirected edge list.

    Args:
        edge_index: int array ``[2, E]``; every edge (u, v) is added in both directions.
        num_nodes: N; ids must lie in ``[0, N)``.
        keep_self_loops: keep (v, v) edges (removed by default).

    Returns:
        ``rowptr`` int64 ``[N + 1]`` and ``col`` int64 ``[nnz]``: neighbours sorted per row,
        no duplicate edges.
    """
    edge_index = np.asarray(edge_index)
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise InputError(f"edge_index must have shape [2, E], got {list(edge_index.shape)}; transpose or reshape it")
    if not np.issubdtype(edge_index.dtype, np.integer):
        raise InputError(f"edge_index must hold integers, got dtype {edge_index.dtype}; convert the edge list to int64")
    if edge_index.shape[1] and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
        raise InputError(f"edge ids must lie in [0, {num_nodes}), found {edge_index.min()}..{edge_index.max()}; "
                         "fix the edge list or the number of nodes")
    src = edge_index[0].astype(np.int64)
    dst = edge_index[1].astype(np.int64)
    if not keep_self_loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    keys = np.concatenate([src * num_nodes + dst, dst * num_nodes + src])
    del src, dst
    keys = sorted_unique(keys)  # sorted by (row, col), no duplicates
    row = keys // num_nodes
    col = keys - row * num_nodes
    del keys
    rowptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=num_nodes), out=rowptr[1:])
    return rowptr, col.astype(np.int64, copy=False)


def build_typed_csr(edges: Sequence[np.ndarray], reverse: Sequence[int], num_nodes: int,
                    keep_self_loops: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The symmetric CSR of a typed graph from one edge list per relation.

    Args:
        edges: per relation r, an int array ``[2, E_r]`` of global ids: row 0 the sources ``u``,
            row 1 the destinations ``v`` of edges ``u -> v``.
        reverse: per relation, the index of its reverse (itself for a symmetric relation);
            :class:`~salientpp.data.schema.GraphSchema.reverse`.
        num_nodes: N, all node types together; ids must lie in ``[0, N)``.
        keep_self_loops: keep (v, v) edges (removed by default).

    Returns:
        ``rowptr`` int64 ``[N + 1]``, ``col`` int64 ``[nnz]`` and ``edge_rel`` int8 ``[nnz]``: row
        ``v`` lists the in-neighbours ``u`` of ``v``, grouped by relation (ascending) and sorted
        within a group, without repeats; an edge ``u -> v`` of relation r is the entry ``u`` of
        relation r in row ``v`` and the entry ``v`` of relation ``reverse[r]`` in row ``u``.
        With one relation that is its own reverse this is :func:`build_csr` plus zeros.
    """
    num_relations = len(edges)
    if len(reverse) != num_relations:
        raise InputError(f"give one reverse per relation ({num_relations} relations, {len(reverse)} reverses)")
    keys = []
    for r, edge_index in enumerate(edges):
        edge_index = np.asarray(edge_index)
        if edge_index.ndim != 2 or edge_index.shape[0] != 2:
            raise InputError(f"the edges of relation {r} must have shape [2, E], got {list(edge_index.shape)}; "
                             "transpose or reshape them")
        if not np.issubdtype(edge_index.dtype, np.integer):
            raise InputError(f"the edges of relation {r} must hold integers, got dtype {edge_index.dtype}; convert "
                             "them to int64")
        if edge_index.shape[1] and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
            raise InputError(f"edge ids of relation {r} must lie in [0, {num_nodes}), found {edge_index.min()}.."
                             f"{edge_index.max()}; fix the edge list or the number of nodes")
        src, dst = edge_index[0].astype(np.int64), edge_index[1].astype(np.int64)
        if not keep_self_loops:
            keep = src != dst
            src, dst = src[keep], dst[keep]
        keys.append(_typed_keys(dst, r, src, num_relations, num_nodes))
        keys.append(_typed_keys(src, int(reverse[r]), dst, num_relations, num_nodes))
    ordered = sorted_unique(np.concatenate(keys)) if keys else np.empty(0, dtype=np.int64)
    del keys
    row_rel, col = np.divmod(ordered, num_nodes)
    del ordered
    row, edge_rel = np.divmod(row_rel, num_relations)
    rowptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=num_nodes), out=rowptr[1:])
    return rowptr, col.astype(np.int64, copy=False), edge_rel.astype(np.int8)


def keys_fit(num_nodes: int, num_relations: int) -> bool:
    """Whether the int64 sort keys ``(row * R + relation) * N + col`` of a graph of ``N`` nodes and
    ``R`` relations (``row * N + col`` for one relation) stay below 2^63."""
    return num_nodes * num_relations * num_nodes < 2**63


def _typed_keys(row: np.ndarray, relation: int, col: np.ndarray, num_relations: int, num_nodes: int) -> np.ndarray:
    """int64 sort keys ``(row * R + relation) * N + col``; :class:`InputError` when they overflow."""
    if not keys_fit(num_nodes, num_relations):
        raise InputError(f"a graph of {num_nodes} nodes and {num_relations} relations is too large to sort in "
                         "memory; build its CSR out of core")
    return (row * num_relations + relation) * num_nodes + col


def sorted_unique(keys: np.ndarray) -> np.ndarray:
    """The distinct values of ``keys`` (sorted in place first), ascending. Not np.unique: in
    numpy 2.4 it is ~50x slower than an in-place sort plus a mask, and it needs more memory."""
    keys.sort()
    if not keys.shape[0]:
        return keys
    first = np.empty(keys.shape[0], dtype=bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    return keys[first]


def check_csr(rowptr: np.ndarray, col: np.ndarray, num_nodes: int, where: str = "the graph",
              fix: str = "re-create it", schema: GraphSchema | None = None, edge_rel: np.ndarray | None = None
              ) -> None:
    """Raise :class:`InputError` unless ``(rowptr, col)`` is a well-formed CSR over N nodes.

    Checks that ``rowptr`` is 1-D with N + 1 entries, starts at 0, never decreases and ends at
    ``len(col)``, and that ``col`` is 1-D with every id in ``[0, N)``: what the sampler and
    numpy indexing rely on. Costs one pass over ``col`` in 16 MiB chunks and an N-byte
    temporary. Sortedness and symmetry are guaranteed by :func:`build_csr` and checked by the
    tests, not here: they cost a sort of the edges. ``where`` names the graph and ``fix`` the repair in the message.

    With a ``schema`` (:class:`~salientpp.data.schema.GraphSchema` over the global ids, N nodes
    in all), ``edge_rel`` must be given when the schema is typed (not
    :attr:`~salientpp.data.schema.GraphSchema.is_homogeneous`; on a homogeneous one, if given, it
    must be int8 ``[nnz]``, its entries never read: every entry is relation 0), and then be int8 ``[nnz]`` with
    every entry a relation in ``[0, R)`` that joins the right types (the entry ``u`` of relation
    ``r`` in row ``v``: ``u`` of type ``r.src``, ``v`` of type ``r.dst``), and every row grouped
    by relation (``edge_rel`` never decreases within a row), as :func:`build_typed_csr` writes
    it: one more pass over ``col`` and ``edge_rel`` in chunks of about 16 MiB.
    """
    if rowptr.ndim != 1 or rowptr.shape[0] != num_nodes + 1:
        raise InputError(f"rowptr of {where} must have N + 1 = {counted(num_nodes + 1, 'entry', 'entries')}, has shape "
                         f"{list(rowptr.shape)}; {fix}")
    if col.ndim != 1:
        raise InputError(f"col of {where} must be 1-D, has shape {list(col.shape)}; {fix}")
    if rowptr[0] != 0 or rowptr[-1] != col.shape[0]:
        raise InputError(f"rowptr of {where} must run from 0 to len(col) = {col.shape[0]}, runs from "
                         f"{rowptr[0]} to {rowptr[-1]}; {fix}")
    decreasing = rowptr[1:] < rowptr[:-1]
    if decreasing.any():
        node = int(decreasing.argmax())
        raise InputError(f"rowptr of {where} decreases at node {node} (rowptr[{node + 1}] < rowptr[{node}]); {fix}")
    low, high = _col_range(col)
    if col.shape[0] and (low < 0 or high >= num_nodes):
        raise InputError(f"col of {where} holds ids outside [0, {num_nodes}) (from {low} to {high}); {fix}")
    if schema is None or (schema.is_homogeneous and edge_rel is None):
        return
    if edge_rel is None:
        raise InputError(f"{where} is a typed graph ({schema.num_relations} relations) without the relation of each "
                         f"entry (edge_rel, int8 [nnz]); {fix}")
    if edge_rel.ndim != 1 or edge_rel.dtype != np.int8 or edge_rel.shape[0] != col.shape[0]:
        raise InputError(f"edge_rel of {where} must be int8 [nnz={col.shape[0]}], got {edge_rel.dtype} "
                         f"{list(edge_rel.shape)}; {fix}")
    if schema.is_homogeneous:  # one relation: every entry is relation 0 (a dataset's constant view), never read
        return
    _check_relations(rowptr, col, edge_rel, schema, where, fix)


def _check_relations(rowptr: np.ndarray, col: np.ndarray, edge_rel: np.ndarray, schema: GraphSchema, where: str,
                     fix: str) -> None:
    """The relation checks of :func:`check_csr`, over chunks of entries (a row may span chunks)."""
    relations = schema.relations
    src, dst = np.array(schema.relation_ends, dtype=np.int64).reshape(-1, 2).T
    previous_row, previous_rel = -1, -1
    for lo, hi in row_chunks(col.shape[0], 4 * col.itemsize):
        rel = read_rows(edge_rel, lo, hi).astype(np.int64)
        outside = (rel < 0) | (rel >= len(relations))
        if outside.any():
            i = int(outside.argmax())
            raise InputError(f"edge_rel of {where} holds the relation {rel[i]} at entry {lo + i}, outside "
                             f"[0, {len(relations)}) of its {counted(len(relations), 'relation')}; {fix}")
        first = int(np.searchsorted(rowptr, lo, side="right")) - 1
        last = int(np.searchsorted(rowptr, hi - 1, side="right")) - 1
        bounds = np.clip(read_rows(rowptr, first, last + 2), lo, hi)
        rows = np.repeat(np.arange(first, last + 1, dtype=np.int64), np.diff(bounds))
        ends = read_rows(col, lo, hi)
        wrong = (src[rel] != schema.type_of(ends)) | (dst[rel] != schema.type_of(rows))
        if wrong.any():
            i = int(wrong.argmax())
            u_type, v_type = (schema.node_types[int(t)] for t in schema.type_of(np.array([ends[i], rows[i]])))
            raise InputError(f"the entry {ends[i]} in the row of node {rows[i]} of {where} has the relation "
                             f"{shown(str(relations[rel[i]]))} but joins a node of type {shown(u_type)} to one of type "
                             f"{shown(v_type)}; {fix}")
        falling = (rows[1:] == rows[:-1]) & (rel[1:] < rel[:-1])
        if rows[0] == previous_row and rel[0] < previous_rel:
            row, before, after = previous_row, previous_rel, rel[0]
        elif falling.any():
            i = int(falling.argmax())
            row, before, after = rows[i], rel[i], rel[i + 1]
        else:
            previous_row, previous_rel = int(rows[-1]), int(rel[-1])
            continue
        raise InputError(f"the row of node {row} of {where} is not grouped by relation (relation {after} follows "
                         f"{before}); {fix}")


def _col_range(col: np.ndarray) -> tuple[int, int]:
    """Smallest and largest id of a non-empty ``col``, read in chunks (:func:`~salientpp.io.read_rows`)."""
    low, high = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    for start, stop in row_chunks(col.shape[0], col.itemsize):
        chunk = read_rows(col, start, stop)
        low, high = min(low, int(chunk.min())), max(high, int(chunk.max()))
    return low, high


def row_edge_positions(rowptr: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions in ``col`` of the edges into ``ids`` (int64 ``[n]``), concatenated in the order of
    ``ids``, and each one's degree (int64 ``[n]``)."""
    begin = np.asarray(rowptr[ids], dtype=np.int64)
    degree = np.asarray(rowptr[ids + 1], dtype=np.int64) - begin
    start_in_out = np.cumsum(degree) - degree
    return np.repeat(begin - start_in_out, degree) + np.arange(int(degree.sum()), dtype=np.int64), degree


@dataclass(frozen=True)
class CsrChunk:
    """Rows ``[start, start + R)`` of a CSR, in memory.

    Attributes:
        start: the first row's id.
        rowptr: int64 ``[R + 1]`` offsets into ``col``, from 0.
        col: int64 ``[M]`` the rows' neighbours.
        first_edge: the position of ``col[0]`` in the whole graph's ``col``.
    """

    start: int
    rowptr: np.ndarray
    col: np.ndarray
    first_edge: int


def csr_chunks(rowptr: np.ndarray, col: np.ndarray, max_edges: int) -> Iterator[CsrChunk]:
    """Consecutive row ranges of at most ``max_edges`` edges each (a longer row is a chunk
    alone), ``col`` read with :func:`~salientpp.io.read_rows`: a memory-mapped ``col`` is never
    resident whole."""
    n = int(rowptr.shape[0] - 1)
    row = 0
    while row < n:
        end = min(n, max(row + 1, int(np.searchsorted(rowptr, rowptr[row] + max_edges, side="right")) - 1))
        lo, hi = int(rowptr[row]), int(rowptr[end])
        yield CsrChunk(row, np.asarray(rowptr[row:end + 1], dtype=np.int64) - lo, read_rows(col, lo, hi), lo)
        row = end
