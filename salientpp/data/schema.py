"""The schema of a graph: its node types and relations (PyG's node and edge types).

A homogeneous graph is a typed graph with one node type and one relation
(:func:`GraphSchema.homogeneous`), so every layer reads one schema and handles both.

Node ids are global: node type ``t`` holds the contiguous ids ``[offsets[t], offsets[t + 1])``
of the dataset (:attr:`GraphSchema.offsets`), in the order of :attr:`GraphSchema.node_types`.

A relation is PyG's edge type ``(src, name, dst)``: an edge ``u -> v`` of it has ``u`` of type
``src`` and ``v`` of type ``dst``, and it carries messages from ``u`` to ``v``, so a sampled
``v`` draws its neighbours of that relation among its in-neighbours. Every relation has a
reverse (:attr:`GraphSchema.reverse`): the relation ``(dst, rev_name, src)`` holding the same
edges the other way, or the relation itself when it joins a type to itself and its edges are
symmetric (``("paper", "cites", "paper")`` made undirected, like PyG's ``ToUndirected``), or a
relation given as its reverse (:func:`given_reverses`). The
topology is therefore one symmetric CSR over the global ids (the homogenised graph), whose entries
carry the relation they belong to (the dataset format, :mod:`salientpp.data.format`).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError, shown

# The node type and the relation of a homogeneous graph.
HOMOGENEOUS_TYPE = "node"
HOMOGENEOUS_RELATION = (HOMOGENEOUS_TYPE, "to", HOMOGENEOUS_TYPE)
# Relations are numbered in an int8 array per CSR entry (edge_rel.npy).
MAX_RELATIONS = 127
# How a relation is written in one string (flags, file names, PyG's to_hetero names).
RELATION_SEPARATOR = "__"
# The prefix of a reverse relation's name that the importers add (PyG's ToUndirected's).
REVERSE_PREFIX = "rev_"


@dataclass(frozen=True)
class Relation:
    """PyG's edge type ``(src, name, dst)``: edges from nodes of type ``src`` to nodes of type ``dst``."""

    src: str
    name: str
    dst: str

    @property
    def key(self) -> tuple[str, str, str]:
        """The triple, as PyG's ``HeteroData`` keys an edge type."""
        return (self.src, self.name, self.dst)

    def __str__(self) -> str:
        return RELATION_SEPARATOR.join(self.key)

    @classmethod
    def parse(cls, text: Any) -> Relation:
        """The relation written ``"src__name__dst"`` (as :meth:`__str__` writes it);
        :class:`InputError` when ``text`` is not a string of three such parts."""
        parts = text.split(RELATION_SEPARATOR) if isinstance(text, str) else []
        if len(parts) != 3:
            raise InputError(f"{shown(text)} is not a relation written src{RELATION_SEPARATOR}name"
                             f"{RELATION_SEPARATOR}dst; give it as its three names joined by "
                             f"{RELATION_SEPARATOR!r}, or its name alone")
        return cls(*parts)

    def reversed(self) -> Relation:
        """The reverse the importers add: ``(dst, rev_name, src)``, or this relation itself when it
        joins a type to itself (its edges are made symmetric)."""
        if self.src == self.dst:
            return self
        return Relation(self.dst, REVERSE_PREFIX + self.name, self.src)

    def named_reverse_of(self) -> Relation | None:
        """The relation this one is named the reverse of: ``(dst, NAME, src)`` for a relation
        named ``rev_NAME`` (PyG's ``ToUndirected``'s naming, within one type too), else ``None``."""
        if not self.name.startswith(REVERSE_PREFIX):
            return None
        return Relation(self.dst, self.name[len(REVERSE_PREFIX):], self.src)


def check_name(name: str, what: str) -> None:
    """Raise :class:`InputError` unless the node type or relation name ``name`` (``what`` says
    which) can be written in ``src__name__dst`` and read back: it must not hold ``__`` nor begin
    or end with ``_`` (``"paper_"`` then ``"__cites"`` would read as ``"paper"``, ``"_cites"``)."""
    sep, underscore = RELATION_SEPARATOR, RELATION_SEPARATOR[0]
    if sep in name:
        wrong = f"holds {sep!r}"
    elif name.startswith(underscore) or name.endswith(underscore):
        wrong = f"begins or ends with {underscore!r}"
    else:
        return
    fixed = underscore.join(part for part in name.split(underscore) if part) or "x"
    raise InputError(f"the {what} name {shown(name)} {wrong}, so a relation written src{sep}name{sep}dst (as "
                     f"--fanouts and the model's layers write it) would not read back; rename it, e.g. to "
                     f"{shown(fixed)}")


def _edge_set(edge_index: Any, drop_loops: bool, reversed_: bool) -> np.ndarray | None:
    """The distinct edges ``(u, v)`` of ``edge_index`` (int ``[2, E]``), or ``(v, u)`` when
    ``reversed_``, as sorted rows of 16 bytes (two int64), without ``(v, v)`` when ``drop_loops``;
    ``None`` when it is not an integer ``[2, E]`` array (refused later, where its edges are read)."""
    edges = np.asarray(edge_index)
    if edges.ndim != 2 or edges.shape[0] != 2 or not np.issubdtype(edges.dtype, np.integer):
        return None
    if drop_loops:
        edges = edges[:, edges[0] != edges[1]]
    rows = np.ascontiguousarray((edges[::-1] if reversed_ else edges).T, dtype=np.int64)
    return np.unique(rows.view(np.dtype((np.void, 16))).ravel())


def given_reverses(relations: Sequence[Relation], edges: Sequence[Any] | None = None,
                   keep_self_loops: bool = False) -> dict[Relation, Relation]:
    """Which of ``relations`` are given as the reverse of another: ``{reverse: relation}``.

    A relation ``B`` is the reverse of ``A`` when it is named so (``rev_NAME`` of ``NAME``
    joining the same types the other way: :meth:`Relation.named_reverse_of`) or, with
    ``edges``, when its distinct edges are exactly ``A``'s reversed, whatever its name (the
    first such ``A`` in order; a relation within one type too); self-loops are left out of the
    comparison unless ``keep_self_loops``. A relation is paired once. The one rule for both: a
    reverse must hold exactly its relation's edges reversed, so a relation named ``rev_NAME``
    whose edges are not is refused (:class:`InputError` naming the pair), and a relation that
    shares only some reversed edges with another, under another name, is a relation of its own.

    Args:
        relations: the given relations, in order.
        edges: per relation, its int ``[2, E]`` edges (``src`` ids, ``dst`` ids, each counted
            within its type); without them, reverses are recognised by name alone.
    """
    sets: dict[tuple[int, bool], np.ndarray | None] = {}

    def same(a: int, b: int) -> bool | None:
        """Whether relation ``b``'s edges are exactly ``a``'s reversed (None: not comparable)."""
        drop = relations[a].src == relations[a].dst and not keep_self_loops
        for i, flipped in ((a, False), (b, True)):
            if (i, flipped) not in sets:
                sets[i, flipped] = _edge_set(edges[i], drop, flipped)
        left, right = sets[a, False], sets[b, True]
        if left is None or right is None:
            return None
        return left.shape == right.shape and bool(np.all(left == right))

    index = {r: i for i, r in enumerate(relations)}
    reverses: dict[Relation, Relation] = {}
    for b, relation in enumerate(relations):
        a = index.get(relation.named_reverse_of())
        paired = set(reverses) | set(reverses.values())
        if a is None or relations[a] in paired or relation in paired:
            continue
        if edges is not None and same(a, b) is False:
            given, other = (shown(str(relations[i])) for i in (b, a))
            raise InputError(f"the relation {given} is named as the reverse of {other} but its edges are not "
                             f"exactly those of {other} reversed, so they cannot be merged with them; give it "
                             f"{other}'s edges reversed (as PyG's ToUndirected does), or rename it if it is a "
                             "relation of its own")
        reverses[relation] = relations[a]
    if edges is not None:
        for a, relation in enumerate(relations):
            paired = set(reverses) | set(reverses.values())
            if relation in paired:
                continue
            for b in range(a + 1, len(relations)):
                other = relations[b]
                if other not in paired and (other.src, other.dst) == (relation.dst, relation.src) and same(a, b):
                    reverses[other] = relation
                    break
    return reverses


@dataclass(frozen=True)
class GraphSchema:
    """Node types, their node counts and the relations of a graph.

    Attributes:
        node_types: the type names, in the order of their id ranges.
        num_nodes: nodes of each type (``len(num_nodes) == len(node_types)``, each >= 0).
        relations: the relations, numbered by position (the values of ``edge_rel.npy``).
        reverse: int per relation, the index of its reverse (itself for a symmetric relation).
        target: the node type that carries labels and splits.
    """

    node_types: tuple[str, ...]
    num_nodes: tuple[int, ...]
    relations: tuple[Relation, ...]
    reverse: tuple[int, ...]
    target: str

    def __post_init__(self) -> None:
        self.check()

    @classmethod
    def homogeneous(cls, num_nodes: int) -> GraphSchema:
        """One node type (``"node"``) of ``num_nodes`` nodes and one symmetric relation."""
        return cls((HOMOGENEOUS_TYPE,), (int(num_nodes),), (Relation(*HOMOGENEOUS_RELATION),), (0,), HOMOGENEOUS_TYPE)

    @classmethod
    def with_reverses(cls, node_types: Sequence[str], num_nodes: Sequence[int],
                      relations: Iterable[Relation | tuple[str, str, str]], target: str,
                      edges: Sequence[Any] | None = None, keep_self_loops: bool = False) -> GraphSchema:
        """The schema of ``relations`` and their reverses: a relation given as another's reverse
        (:func:`given_reverses`, which reads ``edges`` and ``keep_self_loops``: per relation, its
        int ``[2, E]`` edges counted within their types) is that one's, listed right after it; every
        other relation gets :meth:`Relation.reversed`, listed right after it."""
        given = [r if isinstance(r, Relation) else Relation(*r) for r in relations]
        reverses_of = given_reverses(given, edges, keep_self_loops)
        reverses_of.update({a: b for b, a in reverses_of.items()})
        ordered: list[Relation] = []
        reverse: dict[Relation, Relation] = {}
        for relation in given:
            if relation in reverse:  # the reverse of an earlier relation, given explicitly
                continue
            back = reverses_of.get(relation, relation.reversed())
            reverse[relation], reverse[back] = back, relation
            ordered += [relation] if back == relation else [relation, back]
        index = {r: i for i, r in enumerate(ordered)}
        return cls(tuple(node_types), tuple(int(n) for n in num_nodes), tuple(ordered),
                   tuple(index[reverse[r]] for r in ordered), target)

    def check(self) -> None:
        """Raise :class:`InputError` unless the schema is consistent: distinct type names, one
        count per type, fewer than 2^63 nodes in all (int64 ids), names that read back from
        ``src__name__dst`` (:func:`check_name`), relations between known types without repeats,
        at most :data:`MAX_RELATIONS`, each with a reverse that joins the same types the other way,
        and a known target type."""
        types = self.node_types
        if not types:
            raise InputError("a graph needs at least one node type; name its node types")
        if len(set(types)) != len(types):
            raise InputError(f"the node types {', '.join(map(shown, types))} repeat a name; give each type one name")
        for node_type in types:
            check_name(node_type, "node type")
        if len(self.num_nodes) != len(types) or any(n < 0 for n in self.num_nodes):
            raise InputError(f"give one node count >= 0 per node type ({len(types)} types), got "
                             f"{shown(list(self.num_nodes))}")
        if self.total_nodes >= 2**63:
            raise InputError(f"the node types count {self.total_nodes} nodes in all, more than int64 ids can number "
                             "(2^63 - 1); give each type its true number of nodes")
        if not self.relations:
            raise InputError("a graph needs at least one relation; give it edges")
        if len(self.relations) > MAX_RELATIONS:
            raise InputError(f"the graph has {len(self.relations)} relations, more than the {MAX_RELATIONS} "
                             "salientpp supports; merge some relations")
        if len(set(self.relations)) != len(self.relations):
            raise InputError("a relation is listed twice; list each (src, name, dst) once")
        for relation in self.relations:
            check_name(relation.name, "relation")
            for end in (relation.src, relation.dst):
                if end not in types:
                    raise InputError(f"the relation {shown(str(relation))} joins the node type {shown(end)}, which "
                                     f"is not one of the graph's ({', '.join(map(shown, types))}); fix the relation "
                                     "or add the type")
        if len(self.reverse) != len(self.relations):
            raise InputError("give one reverse per relation")
        for i, (relation, j) in enumerate(zip(self.relations, self.reverse)):
            if not 0 <= j < len(self.relations):
                raise InputError(f"the relation {shown(str(relation))} has no reverse; add its edges the other way "
                                 f"as {shown(str(relation.reversed()))} (PyG's ToUndirected does)")
            back = self.relations[j]
            if (back.src, back.dst) != (relation.dst, relation.src) or self.reverse[j] != i:
                raise InputError(f"the reverse of the relation {shown(str(relation))} must join "
                                 f"{shown(relation.dst)} to {shown(relation.src)} and have it as its own reverse; "
                                 "fix the reverses")
        if self.target not in types:
            raise InputError(f"the target node type {shown(self.target)} is not one of the graph's "
                             f"({', '.join(map(shown, types))}); pass the type that carries the labels")

    @property
    def is_homogeneous(self) -> bool:
        """One node type and one relation."""
        return len(self.node_types) == 1 and len(self.relations) == 1

    @property
    def num_types(self) -> int:
        return len(self.node_types)

    @property
    def num_relations(self) -> int:
        return len(self.relations)

    @property
    def total_nodes(self) -> int:
        return int(sum(self.num_nodes))

    @property
    def offsets(self) -> np.ndarray:
        """int64 ``[T + 1]``: type ``t`` holds the global ids ``[offsets[t], offsets[t + 1])``."""
        offsets = np.zeros(self.num_types + 1, dtype=np.int64)
        np.cumsum(self.num_nodes, out=offsets[1:])
        return offsets

    @property
    def target_index(self) -> int:
        return self.node_types.index(self.target)

    @property
    def target_range(self) -> tuple[int, int]:
        """The global ids ``[start, stop)`` of the target type."""
        return self.range_of(self.target)

    def range_of(self, node_type: str) -> tuple[int, int]:
        """The global ids ``[start, stop)`` of the node type ``node_type`` (its name)."""
        t = self.type_index(node_type)
        return int(self.offsets[t]), int(self.offsets[t + 1])

    def type_index(self, name: str) -> int:
        """The position of the node type ``name``, or :class:`InputError`."""
        if name not in self.node_types:
            raise InputError(f"unknown node type {shown(name)}; the graph has {', '.join(map(shown, self.node_types))}")
        return self.node_types.index(name)

    @property
    def relation_ends(self) -> list[tuple[int, int]]:
        """Per relation (the schema's order), the indices of its source and destination node types."""
        return [(self.node_types.index(r.src), self.node_types.index(r.dst)) for r in self.relations]

    def relation_index(self, relation: Relation | tuple[str, str, str] | str) -> int:
        """The number of a relation given as a :class:`Relation`, a triple, ``"src__name__dst"``, or
        its name alone when no other relation has that name (as PyG accepts); :class:`InputError`
        names the graph's relations otherwise."""
        if isinstance(relation, str):
            if RELATION_SEPARATOR not in relation:
                named = [i for i, r in enumerate(self.relations) if r.name == relation]
                if len(named) == 1:
                    return named[0]
                self._unknown_relation(relation, ambiguous=bool(named))
            try:
                relation = Relation.parse(relation)
            except InputError:
                self._unknown_relation(relation, ambiguous=False)
        key = relation if isinstance(relation, Relation) else Relation(*relation)
        if key not in self.relations:
            self._unknown_relation(str(key), ambiguous=False)
        return self.relations.index(key)

    def _unknown_relation(self, given: str, ambiguous: bool) -> None:
        names = ", ".join(str(r) for r in self.relations)
        if ambiguous:
            raise InputError(f"the relation name {shown(given)} is used by several relations; name it as "
                             f"src{RELATION_SEPARATOR}name{RELATION_SEPARATOR}dst, one of {names}")
        raise InputError(f"unknown relation {shown(given)}; the graph's relations are {names}")

    def type_of(self, ids: np.ndarray) -> np.ndarray:
        """int64 ``[n]``: the node type index of each global id of ``ids`` (int ``[n]``, in range)."""
        return np.searchsorted(self.offsets, np.asarray(ids), side="right") - 1

    def global_edges(self, relation: Relation, edge_index: np.ndarray, where: str) -> np.ndarray:
        """int64 ``[2, E]``: the edges ``edge_index`` (int ``[2, E]``, row 0 the ids of ``relation.src``
        nodes, row 1 of ``relation.dst`` nodes, each counted from 0 within its type) in global ids;
        :class:`InputError` naming ``where`` when an id lies outside its type's count."""
        if edge_index.ndim != 2 or edge_index.shape[0] != 2:
            raise InputError(f"{where} must have shape [2, E], got {list(edge_index.shape)}; transpose or reshape it")
        if not np.issubdtype(edge_index.dtype, np.integer):
            raise InputError(f"{where} must hold integers, got dtype {edge_index.dtype}; convert it to int64")
        offsets = self.offsets
        out = np.empty(edge_index.shape, dtype=np.int64)
        for side, name in enumerate((relation.src, relation.dst)):
            t = self.type_index(name)
            ids = edge_index[side]
            if ids.shape[0] and (ids.min() < 0 or ids.max() >= self.num_nodes[t]):
                raise InputError(f"row {side} of {where} holds {shown(name)} ids from {ids.min()} to {ids.max()}, "
                                 f"outside [0, {self.num_nodes[t]}) of that node type; fix the edges or the type's "
                                 "number of nodes")
            np.add(ids, offsets[t], out=out[side], casting="unsafe")
        return out

    def require_homogeneous(self, command: str, where: str, fix: str = "use a homogeneous dataset") -> None:
        """Raise :class:`InputError` when the graph is typed: for the commands that read one node
        type and one relation only (``command`` names the command, ``where`` the data, ``fix``
        the way out)."""
        if not self.is_homogeneous:
            raise InputError(f"{where} is a typed graph ({self.num_types} node types, {self.num_relations} "
                             f"relations) and typed graphs are not supported by {command} yet; {fix}")

    def to_meta(self) -> dict[str, Any]:
        """The schema as meta.json entries (read back by :meth:`from_meta`)."""
        return {"node_types": [{"name": t, "num_nodes": n} for t, n in zip(self.node_types, self.num_nodes)],
                "relations": [{"src": r.src, "name": r.name, "dst": r.dst, "reverse": j}
                              for r, j in zip(self.relations, self.reverse)],
                "target_type": self.target}

    @classmethod
    def from_meta(cls, meta: dict[str, Any], num_nodes: int, where: str) -> GraphSchema:
        """The schema a meta.json records, or the homogeneous one of ``num_nodes`` nodes when it
        records none (every directory written before typed graphs); :class:`InputError` naming
        ``where`` when the entries are malformed."""
        if "node_types" not in meta:
            return cls.homogeneous(num_nodes)
        fix = "re-create the dataset directory"
        try:
            types = [(str(t["name"]), int(t["num_nodes"])) for t in meta["node_types"]]
            relations = [(Relation(str(r["src"]), str(r["name"]), str(r["dst"])), int(r["reverse"]))
                         for r in meta["relations"]]
            target = str(meta["target_type"])
        except (KeyError, TypeError, ValueError):
            raise InputError(f"the node types or relations in {where} are malformed; {fix}") from None
        try:
            schema = cls(tuple(t for t, _ in types), tuple(n for _, n in types), tuple(r for r, _ in relations),
                         tuple(j for _, j in relations), target)
        except InputError as error:
            raise InputError(f"{where} records an inconsistent schema: {error}") from None
        if schema.total_nodes != num_nodes:
            raise InputError(f"the node types in {where} count {schema.total_nodes} nodes but the graph has "
                             f"{num_nodes}; {fix}")
        return schema


class Typed:
    """What a graph with a ``schema`` field (``None``: homogeneous) and ``num_nodes`` shares: a
    dataclass base whose ``__post_init__`` fills in the homogeneous schema of ``num_nodes`` nodes."""

    schema: GraphSchema | None
    num_nodes: int

    def __post_init__(self) -> None:
        if self.schema is None:
            self.schema = GraphSchema.homogeneous(self.num_nodes)

    @property
    def is_typed(self) -> bool:
        """More than one node type or relation (:attr:`GraphSchema.is_homogeneous` is false)."""
        return not self.schema.is_homogeneous
