"""Held-out edges for link prediction: split the edges of one relation into training, validation and test edges.

A split is of one relation of the graph's schema (:class:`~salientpp.data.schema.Relation`: a
homogeneous graph's one relation, or a typed graph's, such as ``user__rates__movie``) and holds
each of its edges ``u -> v`` (``u != v``) at most once, as int64 ``[2, E]`` global ids (row 0 the
sources, of the relation's ``src`` type, row 1 the destinations, of its ``dst`` type; a relation
that is its own reverse, such as a homogeneous graph's, holds each undirected edge ``{u, v}``
once). Validation and test edges are removed from the graph together with their reverses (the
entries of the reverse relation: PyG's ``RandomLinkSplit(edge_types=..., rev_edge_types=...)``),
so message passing never sees them; training edges stay in the graph (they are both
message-passing edges and supervision targets, as in PyG's ``RandomLinkSplit`` default). With
fractions summing to less than 1, the remaining edges stay in the graph for message passing but
are no training targets. An edge of a symmetric relation is oriented by a fair coin, so the
edges a partition owns (by source) follow its nodes' degrees instead of favouring low ids.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError, counted, shown
from ..parsing import number_list
from .schema import GraphSchema, Relation

EDGE_SPLITS = ("train_edges", "valid_edges", "test_edges")
# meta.json's entry (dataset and partitioned directories) naming the relation of the held-out edges.
LINK_RELATION_KEY = "link_relation"


@dataclass(frozen=True)
class LinkSplit:
    """The edges of each split, int64 ``[2, E_s]`` (global node ids: row 0 of ``relation.src``'s
    type, row 1 of ``relation.dst``'s), and the relation they are edges of."""

    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    relation: Relation

    def arrays(self) -> dict[str, np.ndarray]:
        """``{"train_edges": ..., "valid_edges": ..., "test_edges": ...}``."""
        return dict(zip(EDGE_SPLITS, (self.train, self.valid, self.test)))

    def counts(self) -> str:
        """``"TRAIN/VALID/TEST"`` edge counts, for summaries."""
        return "/".join(f"{a.shape[1]:,}" for a in (self.train, self.valid, self.test))


def link_relation(schema: GraphSchema, given: str | tuple[str, str, str] | None, where: str,
                  option: str = "--link-relation") -> Relation:
    """The relation whose edges link prediction holds out: ``given`` (``"src__name__dst"``, a
    triple, or a name no other relation has: :meth:`GraphSchema.relation_index`), or, when it is
    ``None``, the graph's only relation (a homogeneous graph's). :class:`InputError` naming
    ``option`` and the graph's relations when ``given`` is missing on a graph of several
    relations, or unknown."""
    if given is None:
        if schema.num_relations == 1:
            return schema.relations[0]
        names = ", ".join(str(r) for r in schema.relations)
        raise InputError(f"{where} has {schema.num_relations} relations, so link prediction needs the one whose edges "
                         f"to hold out; name it with {option}, one of {names}")
    return schema.relations[schema.relation_index(given)]


def recorded_relation(meta: dict, schema: GraphSchema, where: str) -> Relation:
    """The relation of the held-out edges that meta.json records (:data:`LINK_RELATION_KEY`), or the
    graph's only relation when it records none (directories written before typed link prediction);
    :class:`InputError` naming ``where`` when it is unknown to the schema or missing on a graph of
    several relations."""
    given = meta.get(LINK_RELATION_KEY)
    try:
        return link_relation(schema, None if given is None else str(given), where, f"meta.json's {LINK_RELATION_KEY}")
    except InputError as error:
        raise InputError(f"{error} (re-create the dataset with prepare --link-split and partition it again)") from None


def parse_link_split(text: str) -> tuple[float, float, float]:
    """``"0.85,0.05,0.10"`` -> :func:`check_link_split` of its three numbers."""
    return check_link_split(number_list(text, float, "--link-split", "0.85,0.05,0.10"), "--link-split")


def check_link_split(values: Any, option: str) -> tuple[float, float, float]:
    """``values`` as three fractions in [0, 1] summing to at most 1, the training one above 0
    (:class:`InputError` naming ``option`` otherwise). Validation and test may both be 0 (``1,0,0``:
    every edge a training edge, e.g. a final model; training then evaluates nothing and says so)."""
    try:
        values = [float(v) for v in values]
    except (TypeError, ValueError):
        raise InputError(f"{option} needs three fractions TRAIN,VALID,TEST such as 0.85,0.05,0.10, got "
                         f"{shown(values)}") from None
    text = ",".join(f"{v:g}" for v in values)
    if len(values) != 3:
        raise InputError(f"{option} needs three fractions TRAIN,VALID,TEST such as 0.85,0.05,0.10, got {text}")
    if any(not 0 <= v <= 1 for v in values):
        raise InputError(f"{option} fractions must lie in [0, 1], got {text}")
    if sum(values) > 1 + 1e-9:
        raise InputError(f"{option} fractions sum to {sum(values):g}, more than 1; give fractions of the edges "
                         "that sum to at most 1, such as 0.85,0.05,0.10")
    if values[0] == 0:
        raise InputError(f"{option} {text} keeps no training edges, so link prediction would have nothing to "
                         "train on; give a TRAIN fraction above 0, such as 0.85,0.05,0.10")
    return values[0], values[1], values[2]


def relation_edges(rowptr: np.ndarray, col: np.ndarray, edge_rel: np.ndarray, relation: int, reverse: int
                   ) -> np.ndarray:
    """int64 ``[2, M]``: each edge ``(u, v)`` of the relation numbered ``relation`` once, in CSR order
    (self loops left out), read from the CSR (int64 ``rowptr`` ``[N + 1]``, ``col`` ``[nnz]``, int8
    ``edge_rel`` ``[nnz]``, :func:`~salientpp.data.csr.build_typed_csr`'s layout) as the entries
    ``v`` of row ``u`` of its reverse, numbered ``reverse``. A relation that is its own reverse (a
    homogeneous graph's) gives each undirected edge once, as ``u < v``."""
    src = np.repeat(np.arange(rowptr.shape[0] - 1, dtype=np.int64), np.diff(rowptr))
    col = np.asarray(col)
    keep = (np.asarray(edge_rel) == reverse) & (src < col if reverse == relation else src != col)
    return np.stack([src[keep], col[keep]])


def edge_positions(rowptr: np.ndarray, col: np.ndarray, edge_rel: np.ndarray, edges: np.ndarray,
                   relation: int) -> np.ndarray:
    """int64 ``[E]``: the index in ``col`` of the entry ``v`` of relation ``relation`` in row ``u``,
    for each ``(u, v)`` of ``edges`` (int64 ``[2, E]``, ids in ``[0, N)``), or -1 where the CSR
    lacks it (``edge_rel`` int8 ``[nnz]``: rows grouped by relation, sorted within a relation).

    A binary search over ``(relation, col)`` inside each row, vectorised over the edges still
    searching: about ``E * log2(degree)`` reads of ``col`` and ``edge_rel`` and no temporary of the
    graph's size, so it suits a memory-mapped CSR.
    """
    src, dst = edges[0], edges[1]
    lo, end = np.asarray(rowptr[src]), np.asarray(rowptr[src + 1])
    hi = end.copy()
    todo = np.flatnonzero(lo < hi)
    while todo.shape[0]:  # lower bound of (relation, dst) in (edge_rel, col)[lo:hi]
        low, high = lo[todo], hi[todo]
        mid = (low + high) // 2
        rel = edge_rel[mid]
        less = (rel < relation) | ((rel == relation) & (col[mid] < dst[todo]))
        low, high = np.where(less, mid + 1, low), np.where(less, high, mid)
        lo[todo], hi[todo] = low, high
        todo = todo[low < high]
    found = lo < end
    found[found] = (col[lo[found]] == dst[found]) & (edge_rel[lo[found]] == relation)
    return np.where(found, lo, -1)


def both_positions(rowptr: np.ndarray, col: np.ndarray, edge_rel: np.ndarray, edges: np.ndarray, relation: int,
                   reverse: int) -> tuple[np.ndarray, np.ndarray]:
    """``(forward, backward)``, int64 ``[E]`` each: the CSR entries of each edge ``(u, v)`` of
    ``edges`` of relation ``relation`` (entry ``u`` of row ``v``) and of its reverse, numbered
    ``reverse`` (entry ``v`` of row ``u``); -1 where the CSR lacks one (:func:`edge_positions`)."""
    return (edge_positions(rowptr, col, edge_rel, edges[::-1], relation),
            edge_positions(rowptr, col, edge_rel, edges, reverse))


def _orient(edges: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``edges`` ``[2, E]`` with each column reversed by a fair coin."""
    flip = rng.random(edges.shape[1]) < 0.5
    return np.where(flip, edges[::-1], edges)


def split_edges(rowptr: np.ndarray, col: np.ndarray, edge_rel: np.ndarray, schema: GraphSchema, relation: Relation,
                fractions: tuple[float, float, float], seed: int = 0
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, LinkSplit]:
    """Hold out edges of ``relation`` of a symmetric CSR (int64 ``rowptr`` ``[N + 1]``, ``col``
    ``[nnz]``, int8 ``edge_rel`` ``[nnz]``: :func:`~salientpp.data.csr.build_typed_csr`'s layout,
    a homogeneous graph's relation 0 everywhere; ``schema`` numbers the relations).

    The relation's M edges (:func:`relation_edges`; self loops stay in the graph and in no split)
    are put in a uniform random order seeded by ``seed`` and cut at ``round(M * train)``,
    ``round(M * (train + valid))`` and ``round(M * (train + valid + test))``: training, validation
    and test edges in turn, each split within one edge of its fraction of M, and every edge in a
    split when the fractions sum to 1. Each split is sorted by the edges' CSR order, then, for a
    relation that is its own reverse, each edge is oriented by a seeded fair coin.

    Returns:
        ``(rowptr, col, edge_rel, split)``: the CSR without the validation and test edges and their
        reverses, and the three splits.

    Raises :class:`InputError` when the training split would be empty (a relation of few edges, a
    small training fraction): link prediction has nothing to train on.
    """
    r = schema.relation_index(relation)
    back = schema.reverse[r]
    edges = relation_edges(rowptr, col, edge_rel, r, back)
    m = edges.shape[1]
    rng = np.random.default_rng(seed)
    order = rng.permutation(m)
    cuts = np.minimum(np.rint(np.cumsum(fractions) * m).astype(np.int64), m)
    if cuts[0] == 0:
        what = "undirected edge" if back == r else f"edge of the relation {shown(str(relation))}"
        raise InputError(f"a training fraction of {fractions[0]:g} of the graph's {counted(m, what, spec=',')} is no "
                         "training edge; raise TRAIN of --link-split (or use a graph with more edges)")
    train, valid, test = np.split(order, cuts)[:3]
    chosen = [edges[:, np.sort(ids)] for ids in (train, valid, test)]
    split = LinkSplit(*(_orient(e, rng) if back == r else e for e in chosen), relation=schema.relations[r])
    held_out = np.concatenate([split.valid, split.test], axis=1)
    return (*remove_edges(rowptr, col, edge_rel, held_out, r, back), split)


def remove_edges(rowptr: np.ndarray, col: np.ndarray, edge_rel: np.ndarray, edges: np.ndarray, relation: int,
                 reverse: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rowptr, col, edge_rel)`` of the CSR without ``edges`` (int64 ``[2, E]``, ids in ``[0, N)``)
    of the relation numbered ``relation`` and without their reverses (relation ``reverse``:
    :func:`both_positions`); edges the graph lacks are ignored."""
    found = np.concatenate(both_positions(rowptr, col, edge_rel, edges, relation, reverse))
    drop = np.unique(found[found >= 0])
    rows = np.searchsorted(rowptr, drop, side="right") - 1
    dropped = np.zeros(rowptr.shape[0], dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=rowptr.shape[0] - 1), out=dropped[1:])
    return np.asarray(rowptr) - dropped, np.delete(np.asarray(col), drop), np.delete(np.asarray(edge_rel), drop)


def check_endpoint_types(split: LinkSplit, schema: GraphSchema, where: str, fix: str) -> None:
    """:class:`InputError` unless every edge of ``split`` (ids in ``[0, N)``) joins a node of its
    relation's ``src`` type to one of its ``dst`` type (``where`` names the dataset)."""
    for name, edges in split.arrays().items():
        for side, node_type in enumerate((split.relation.src, split.relation.dst)):
            start, stop = schema.range_of(node_type)
            outside = (edges[side] < start) | (edges[side] >= stop)
            if outside.any():
                raise InputError(f"{name} of {where} holds the node {int(edges[side, outside.argmax()])} in row {side}, "
                                 f"which is not of the type {shown(node_type)} of the relation "
                                 f"{shown(str(split.relation))}; {fix}")


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


def check_held_out(rowptr: np.ndarray, col: np.ndarray, edge_rel: np.ndarray, schema: GraphSchema, split: LinkSplit,
                   where: str, fix: str) -> None:
    """:class:`InputError` unless the validation and test edges are absent from the CSR as edges of
    the split's relation and of its reverse, and the training edges are in it as both. The split's
    ids must lie in ``[0, N)`` (:func:`check_edge_array`). Cost: :func:`edge_positions` of every
    edge, both ways."""
    r = schema.relation_index(split.relation)
    for name, edges, inside in (("valid_edges", split.valid, False), ("test_edges", split.test, False),
                                ("train_edges", split.train, True)):
        forward, backward = (found >= 0 for found in both_positions(rowptr, col, edge_rel, edges, r, schema.reverse[r]))
        wrong = ~(forward & backward) if inside else forward | backward
        if wrong.any():
            u, v = (int(x) for x in edges[:, wrong.argmax()])
            what = "is missing from the graph" if inside else "is still in the graph, so message passing would see it"
            raise InputError(f"{name} of {where}: edge ({u}, {v}) {what}; {fix}")
