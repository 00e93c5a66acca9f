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

from ..errors import InputError
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
        return "/".join(f"{a.shape[1]:,}" for a in (self.train, self.valid, self.test))


def parse_link_split(text: str) -> tuple[float, float, float]:
    """``"0.85,0.05,0.10"`` -> three fractions in [0, 1] summing to at most 1 (:class:`InputError` otherwise)."""
    values = number_list(text, float, "--link-split", "0.85,0.05,0.10")
    if len(values) != 3:
        raise InputError(f"--link-split needs three fractions TRAIN,VALID,TEST such as 0.85,0.05,0.10, got {text!r}")
    if any(not 0 <= v <= 1 for v in values):
        raise InputError(f"--link-split fractions must lie in [0, 1], got {text!r}")
    if sum(values) > 1 + 1e-9:
        raise InputError(f"--link-split fractions sum to {sum(values):g}, more than 1; give fractions of the edges "
                         "that sum to at most 1, such as 0.85,0.05,0.10")
    return values[0], values[1], values[2]


def undirected_edges(rowptr: np.ndarray, col: np.ndarray) -> np.ndarray:
    """int64 ``[2, M]`` each undirected edge of a symmetric CSR once, as ``(u, v)`` with ``u < v``."""
    src = np.repeat(np.arange(rowptr.shape[0] - 1, dtype=np.int64), np.diff(rowptr))
    keep = src < col
    return np.stack([src[keep], np.asarray(col)[keep]])


def _from_edges(num_nodes: int, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The symmetric CSR (sorted rows) of undirected ``edges`` ``[2, M]`` (``u < v``)."""
    src = np.concatenate([edges[0], edges[1]])
    dst = np.concatenate([edges[1], edges[0]])
    order = np.lexsort((dst, src))
    rowptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=num_nodes), out=rowptr[1:])
    return rowptr, dst[order].astype(np.int64)


def _orient(edges: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    flip = rng.random(edges.shape[1]) < 0.5
    return np.where(flip, edges[::-1], edges)


def split_edges(rowptr: np.ndarray, col: np.ndarray, fractions: tuple[float, float, float], seed: int = 0
                ) -> tuple[np.ndarray, np.ndarray, LinkSplit]:
    """Hold out edges of a symmetric CSR: ``(rowptr, col, split)`` of the graph without the
    validation and test edges, and the three splits (module docstring). The edges are drawn by a
    uniform permutation seeded by ``seed``; split sizes are ``floor(fraction * M)`` of the M
    undirected edges."""
    edges = undirected_edges(rowptr, col)
    m = edges.shape[1]
    rng = np.random.default_rng(seed)
    order = rng.permutation(m)
    n_train, n_valid, n_test = (int(f * m) for f in fractions)
    if sum(fractions) > 1 - 1e-9:  # every edge has a split: rounding leaves none out of training
        n_train = m - n_valid - n_test
    valid = order[:n_valid]
    test = order[n_valid:n_valid + n_test]
    rest = order[n_valid + n_test:]
    train = rest[:n_train]
    kept = np.sort(rest)
    new_rowptr, new_col = _from_edges(rowptr.shape[0] - 1, edges[:, kept])
    split = LinkSplit(*(_orient(edges[:, np.sort(ids)], rng) for ids in (train, valid, test)))
    return new_rowptr, new_col, split


def _pair_keys(edges: np.ndarray, num_nodes: int) -> np.ndarray:
    """int64 key ``min * N + max`` of each edge, the same for both directions."""
    low, high = np.minimum(edges[0], edges[1]), np.maximum(edges[0], edges[1])
    return low.astype(np.int64) * num_nodes + high


def remove_edges(rowptr: np.ndarray, col: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The symmetric CSR without ``edges`` (int64 ``[2, E]``) in either direction."""
    n = rowptr.shape[0] - 1
    kept = undirected_edges(rowptr, col)
    drop = np.isin(_pair_keys(kept, n), _pair_keys(edges, n))
    return _from_edges(n, kept[:, ~drop])


def check_edge_array(edges: np.ndarray, num_nodes: int, where: str, fix: str) -> None:
    """:class:`InputError` unless ``edges`` is int64 ``[2, E]`` of ids in ``[0, num_nodes)`` without self loops."""
    if edges.ndim != 2 or edges.shape[0] != 2 or edges.dtype != np.int64:
        raise InputError(f"{where} must be an int64 [2, E] edge array, got {edges.dtype} {list(edges.shape)}; {fix}")
    if edges.shape[1] and (edges.min() < 0 or edges.max() >= num_nodes):
        raise InputError(f"{where} holds node ids outside [0, {num_nodes}); {fix}")
    loops = edges[0] == edges[1]
    if loops.any():
        raise InputError(f"{where} holds a self loop ({int(edges[0, loops.argmax()])}, "
                         f"{int(edges[0, loops.argmax()])}); {fix}")


def check_held_out(rowptr: np.ndarray, col: np.ndarray, split: LinkSplit, where: str, fix: str) -> None:
    """:class:`InputError` unless the validation and test edges are absent from the CSR (both
    directions) and the training edges are in it."""
    n = rowptr.shape[0] - 1
    graph = _pair_keys(undirected_edges(rowptr, col), n)  # sorted: rows ascend, columns ascend within a row
    for name, edges, inside in (("valid_edges", split.valid, False), ("test_edges", split.test, False),
                                ("train_edges", split.train, True)):
        found = np.isin(_pair_keys(edges, n), graph)
        wrong = found != inside
        if wrong.any():
            u, v = (int(x) for x in edges[:, wrong.argmax()])
            what = "is missing from the graph" if inside else "is still in the graph, so message passing would see it"
            raise InputError(f"{name} of {where}: edge ({u}, {v}) {what}; {fix}")
