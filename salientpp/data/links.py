"""Held-out edges for link prediction: split a graph's edges into training, validation and test edges.

A split holds each undirected edge ``{u, v}`` (``u != v``) at most once, as int64 ``[2, E]``
(row 0 the source, row 1 the destination). Validation and test edges are removed from the graph
in both directions, so message passing never sees them; training edges stay in the graph (they
are both message-passing edges and supervision targets, as in PyG's ``RandomLinkSplit`` default).
With fractions summing to less than 1, the remaining edges stay in the graph for message passing
but are no training targets. Each edge is oriented by a fair coin, so the edges a partition owns
(by source) follow its nodes' degrees instead of favouring low ids.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError, counted
from ..parsing import number_list

EDGE_SPLITS = ("train_edges", "valid_edges", "test_edges")


@dataclass(frozen=True)
class LinkSplit:
    """The edges of each split, int64 ``[2, E_s]`` (dataset node ids)."""

    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray

    def arrays(self) -> dict[str, np.ndarray]:
        """``{"train_edges": ..., "valid_edges": ..., "test_edges": ...}``."""
        return dict(zip(EDGE_SPLITS, (self.train, self.valid, self.test)))

    def counts(self) -> str:
        """``"TRAIN/VALID/TEST"`` edge counts, for summaries."""
        return "/".join(f"{a.shape[1]:,}" for a in (self.train, self.valid, self.test))


def parse_link_split(text: str) -> tuple[float, float, float]:
    """``"0.85,0.05,0.10"`` -> three fractions in [0, 1] summing to at most 1, the training one
    above 0 (:class:`InputError` otherwise). Validation and test may both be 0 (``1,0,0``: every
    edge a training edge, e.g. a final model; training then evaluates nothing and says so)."""
    values = number_list(text, float, "--link-split", "0.85,0.05,0.10")
    if len(values) != 3:
        raise InputError(f"--link-split needs three fractions TRAIN,VALID,TEST such as 0.85,0.05,0.10, got {text!r}")
    if any(not 0 <= v <= 1 for v in values):
        raise InputError(f"--link-split fractions must lie in [0, 1], got {text!r}")
    if sum(values) > 1 + 1e-9:
        raise InputError(f"--link-split fractions sum to {sum(values):g}, more than 1; give fractions of the edges "
                         "that sum to at most 1, such as 0.85,0.05,0.10")
    if values[0] == 0:
        raise InputError(f"--link-split {text} keeps no training edges, so link prediction would have nothing to "
                         "train on; give a TRAIN fraction above 0, such as 0.85,0.05,0.10")
    return values[0], values[1], values[2]


def undirected_edges(rowptr: np.ndarray, col: np.ndarray) -> np.ndarray:
    """int64 ``[2, M]`` each undirected edge of a symmetric CSR once, as ``(u, v)`` with ``u < v``
    (self loops left out), in CSR order."""
    src = np.repeat(np.arange(rowptr.shape[0] - 1, dtype=np.int64), np.diff(rowptr))
    keep = src < col
    return np.stack([src[keep], np.asarray(col)[keep]])


def edge_positions(rowptr: np.ndarray, col: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """int64 ``[E]``: the index in ``col`` of each edge ``(u, v)`` of ``edges`` (int64 ``[2, E]``,
    ids in ``[0, N)``), or -1 where the CSR lacks it.

    A binary search inside each edge's source row (rows are sorted), vectorised over the edges
    still searching: about ``E * log2(degree)`` reads of ``col`` and no temporary of the graph's
    size, so it suits a memory-mapped CSR.
    """
    src, dst = edges[0], edges[1]
    lo, end = np.asarray(rowptr[src]), np.asarray(rowptr[src + 1])
    hi = end.copy()
    todo = np.flatnonzero(lo < hi)
    while todo.shape[0]:  # lower bound of dst in col[lo:hi]
        low, high = lo[todo], hi[todo]
        mid = (low + high) // 2
        less = col[mid] < dst[todo]
        low, high = np.where(less, mid + 1, low), np.where(less, high, mid)
        lo[todo], hi[todo] = low, high
        todo = todo[low < high]
    found = lo < end
    found[found] = col[lo[found]] == dst[found]
    return np.where(found, lo, -1)


def _orient(edges: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``edges`` ``[2, E]`` with each column reversed by a fair coin."""
    flip = rng.random(edges.shape[1]) < 0.5
    return np.where(flip, edges[::-1], edges)


def split_edges(rowptr: np.ndarray, col: np.ndarray, fractions: tuple[float, float, float], seed: int = 0
                ) -> tuple[np.ndarray, np.ndarray, LinkSplit]:
    """Hold out edges of a symmetric CSR (int64 ``rowptr`` ``[N + 1]``, ``col`` ``[nnz]``, sorted rows).

    The M undirected edges (``u < v``; self loops stay in the graph and in no split) are put in
    a uniform random order seeded by ``seed`` and cut at ``round(M * train)``, ``round(M * (train
    + valid))`` and ``round(M * (train + valid + test))``: training, validation and test edges in
    turn, each split within one edge of its fraction of M, and every edge in a split when the
    fractions sum to 1. Each split is sorted by the edges' CSR order, then each edge is oriented
    by a seeded fair coin.

    Returns:
        ``(rowptr, col, split)``: the CSR without the validation and test edges (both directions),
        and the three splits.

    Raises :class:`InputError` when the training split would be empty (a graph of few edges, a
    small training fraction): link prediction has nothing to train on.
    """
    edges = undirected_edges(rowptr, col)
    m = edges.shape[1]
    rng = np.random.default_rng(seed)
    order = rng.permutation(m)
    cuts = np.minimum(np.rint(np.cumsum(fractions) * m).astype(np.int64), m)
    if cuts[0] == 0:
        raise InputError(f"a training fraction of {fractions[0]:g} of the graph's "
                         f"{counted(m, 'undirected edge', spec=',')} is no training edge; raise TRAIN of --link-split "
                         "(or use a graph with more edges)")
    train, valid, test = np.split(order, cuts)[:3]
    split = LinkSplit(*(_orient(edges[:, np.sort(ids)], rng) for ids in (train, valid, test)))
    return (*remove_edges(rowptr, col, np.concatenate([split.valid, split.test], axis=1)), split)


def remove_edges(rowptr: np.ndarray, col: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(rowptr, col)`` of the CSR without ``edges`` (int64 ``[2, E]``, ids in ``[0, N)``) in either
    direction; edges the graph lacks are ignored."""
    found = np.concatenate([edge_positions(rowptr, col, edges), edge_positions(rowptr, col, edges[::-1])])
    drop = np.unique(found[found >= 0])
    rows = np.searchsorted(rowptr, drop, side="right") - 1
    dropped = np.zeros(rowptr.shape[0], dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=rowptr.shape[0] - 1), out=dropped[1:])
    return np.asarray(rowptr) - dropped, np.delete(np.asarray(col), drop)


def check_edge_array(edges: np.ndarray, num_nodes: int, where: str, fix: str) -> None:
    """:class:`InputError` unless ``edges`` is int64 ``[2, E]`` of ids in ``[0, num_nodes)`` without self loops."""
    if edges.ndim != 2 or edges.shape[0] != 2 or edges.dtype != np.int64:
        raise InputError(f"{where} must be an int64 [2, E] edge array, got {edges.dtype} {list(edges.shape)}; {fix}")
    if edges.shape[1] and (edges.min() < 0 or edges.max() >= num_nodes):
        raise InputError(f"{where} holds node ids outside [0, {num_nodes}); {fix}")
    loops = edges[0] == edges[1]
    if loops.any():
        node = int(edges[0, loops.argmax()])
        raise InputError(f"{where} holds the self loop ({node}, {node}); {fix}")


def check_held_out(rowptr: np.ndarray, col: np.ndarray, split: LinkSplit, where: str, fix: str) -> None:
    """:class:`InputError` unless the validation and test edges are absent from the CSR in both
    directions and the training edges are in it in both. The split's ids must lie in ``[0, N)``
    (:func:`check_edge_array`). Cost: :func:`edge_positions` of every edge, both ways."""
    for name, edges, inside in (("valid_edges", split.valid, False), ("test_edges", split.test, False),
                                ("train_edges", split.train, True)):
        forward = edge_positions(rowptr, col, edges) >= 0
        backward = edge_positions(rowptr, col, edges[::-1]) >= 0
        wrong = ~(forward & backward) if inside else forward | backward
        if wrong.any():
            u, v = (int(x) for x in edges[:, wrong.argmax()])
            what = "is missing from the graph" if inside else "is still in the graph, so message passing would see it"
            raise InputError(f"{name} of {where}: edge ({u}, {v}) {what}; {fix}")
