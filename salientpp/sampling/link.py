"""Link-prediction seeds: a batch of positive edges, its negatives, and the node seeds they span.

The edges are those of one relation (:class:`~salientpp.data.schema.Relation`), from nodes of its
source type to nodes of its destination type (a homogeneous graph's: every node, both ends).
Two ways to draw ``r`` negatives per positive edge, with replacement, each end uniform over the
nodes of its type (:class:`LinkEnds`; a homogeneous graph's: all N nodes):

* :attr:`NegativeSampling.UNIFORM` (PyG's "binary"): ``r`` random pairs ``(u', v')`` per
  positive, both ends uniform and independent;
* :attr:`NegativeSampling.PER_SOURCE` (PyG's "triplet", OGB's ranking protocol): for each
  positive ``(s, d)``, ``r`` pairs ``(s, v')`` with ``v'`` uniform.

Training's negatives are not filtered against true edges: with ``m`` edges among ``N_s N_d`` pairs a
negative is an edge with probability ``m / (N_s N_d)`` (2e-4 on Cora), as PyG's loaders draw them.
Evaluation's are (:class:`KnownPairs`, PyG's ``RandomLinkSplit`` and the recommendation papers'
"items the user has not rated"): on a dense rating graph a known edge would otherwise be scored as a
negative often (MovieLens 100k: 9.7% of the 100 per-source negatives of a held-out rating were the
user's training ratings).
The batch's node seeds are the distinct endpoints of its positives and negatives; the node-wise
samplers then sample them exactly as they sample the seeds of node classification.
"""
from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..data.schema import GraphSchema, Relation
from ..errors import InputError, check_choice, check_int


# What a loader's seeds are, and what ``--task`` trains: nodes (node classification) or edges
# (link prediction, over the held-out edges of `salientpp prepare --link-split`).
NODE, LINK = "node", "link"
TASKS = (NODE, LINK)
# Negatives per positive edge unless chosen (train, analyze, simulate --num-negatives; the link loaders).
NUM_NEGATIVES = 1


class NegativeSampling(str, enum.Enum):
    """How negatives are drawn (module docstring)."""

    UNIFORM = "uniform"  # r pairs (u', v') per positive, both ends uniform over the N nodes
    PER_SOURCE = "per-source"  # r pairs (s, v') per positive (s, d), v' uniform over the N nodes


def check_negative_sampling(value) -> NegativeSampling:
    """``value`` as a :class:`NegativeSampling`; :class:`InputError` naming the choices."""
    return check_choice(NegativeSampling, value, "negative sampling")


def check_num_negatives(value) -> int:
    """``value`` (negatives per positive edge) as an int >= 1; :class:`InputError` otherwise."""
    return check_int(value, "the number of negatives per edge (--num-negatives)")


def link_batch_bound(num_positives: int, num_negatives: int, mode: NegativeSampling | str) -> tuple[int, int]:
    """``(seed nodes, pairs)`` of a batch of :func:`draw_link_seeds`: at most ``2 P + e P r``
    distinct endpoints (``e`` = 2 new endpoints per uniform negative, 1 per per-source negative,
    which shares its positive's source) and exactly ``P (1 + r)`` scored pairs."""
    endpoints = 1 if NegativeSampling(mode) is NegativeSampling.PER_SOURCE else 2
    return num_positives * (2 + endpoints * num_negatives), num_positives * (1 + num_negatives)


@dataclass(frozen=True)
class NodePool:
    """The ids an end of a negative is drawn from, uniformly: the union of the blocks
    ``[starts[i], stops[i])`` (int64 ``[B]`` each, disjoint, ascending), such as one node type's
    block in every partition."""

    starts: np.ndarray
    stops: np.ndarray

    @classmethod
    def of_type(cls, blocks: np.ndarray, num_types: int, node_type: int) -> NodePool:
        """The nodes of type ``node_type`` (an index) of a numbering in ``K * T + 1`` rising
        ``blocks`` (:attr:`~salientpp.partition.book.PartitionBook.blocks`: partition ``k``'s nodes
        of type ``t`` are ``[blocks[k T + t], blocks[k T + t + 1])``; one partition's:
        :attr:`GraphSchema.offsets`)."""
        blocks = np.asarray(blocks, dtype=np.int64)
        first = np.arange(node_type, blocks.shape[0] - 1, num_types)
        return cls(blocks[first], blocks[first + 1])

    @property
    def size(self) -> int:
        """The ids in the pool."""
        return int((self.stops - self.starts).sum())

    def draw(self, count: int, generator: torch.Generator) -> torch.Tensor:
        """int64 ``[count]`` ids drawn uniformly from the pool with replacement (one
        ``torch.randint`` over ``[0, size)``, mapped onto the blocks in order: over a pool of the
        one block ``[0, N)``, exactly ``torch.randint(0, N)``)."""
        u = torch.randint(0, self.size, (count,), generator=generator, dtype=torch.int64)
        sizes = torch.from_numpy(self.stops - self.starts)
        ends = torch.cumsum(sizes, 0)
        block = torch.searchsorted(ends, u, right=True)
        return u - (ends - sizes)[block] + torch.from_numpy(self.starts)[block]

    def contains(self, ids: np.ndarray) -> np.ndarray:
        """bool ``[n]``: which of ``ids`` (int ``[n]``) lie in the pool."""
        block = np.searchsorted(self.starts, ids, side="right") - 1
        inside = block >= 0
        inside[inside] = ids[inside] < self.stops[block[inside]]
        return inside


# Rounds in which draw_link_seeds draws again the negatives that are known pairs; a source with
# (almost) every destination known may keep one after them.
REDRAWS = 64


@dataclass(frozen=True)
class KnownPairs:
    """Node pairs never drawn as a negative (:class:`LinkEnds`' ``known``): ``keys`` int64
    ``[M]``, sorted and distinct, ``src * num_nodes + dst`` of each pair."""

    keys: torch.Tensor
    num_nodes: int

    @classmethod
    def of(cls, pairs: np.ndarray | torch.Tensor, num_nodes: int) -> KnownPairs:
        """The pairs ``pairs`` (int ``[2, M]`` global ids ``(src, dst)``, in any order, repeats allowed)."""
        pairs = torch.as_tensor(np.asarray(pairs), dtype=torch.int64).reshape(2, -1)
        return cls(torch.unique(pairs[0] * int(num_nodes) + pairs[1]), int(num_nodes))

    def contains(self, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """bool ``[n]``: which pairs ``(src[i], dst[i])`` (int64 ``[n]`` each) are known."""
        key = src * self.num_nodes + dst
        at = torch.searchsorted(self.keys, key).clamp_(max=max(self.keys.numel() - 1, 0))
        return self.keys[at] == key if self.keys.numel() else torch.zeros_like(key, dtype=torch.bool)

    def redraw(self, src: torch.Tensor, dst: torch.Tensor, draw_dst: Callable[[int], torch.Tensor],
               draw_src: Callable[[int], torch.Tensor] | None = None) -> None:
        """Draw again, in place, each pair ``(src[i], dst[i])`` (int64 ``[n]`` each) that is known:
        its destination by ``draw_dst(count)`` (and its source by ``draw_src(count)``, first, when
        given), up to :data:`REDRAWS` rounds."""
        for _ in range(REDRAWS):
            again = self.contains(src, dst).nonzero().view(-1)
            if not again.numel():
                return
            if draw_src is not None:
                src[again] = draw_src(again.numel())
            dst[again] = draw_dst(again.numel())


@dataclass(frozen=True)
class LinkEnds:
    """Where the two ends of a negative of ``relation``'s edges are drawn: ``sources`` (a uniform
    negative's source; its type's nodes) and ``destinations`` (every negative's destination),
    never a pair in ``known`` (None: any pair)."""

    relation: Relation
    sources: NodePool
    destinations: NodePool
    known: KnownPairs | None = None

    @classmethod
    def of(cls, schema: GraphSchema, relation: Relation, blocks: np.ndarray) -> LinkEnds:
        """The ends of ``relation`` of ``schema`` in the numbering of ``blocks`` (:meth:`NodePool.of_type`)."""
        src, dst = (NodePool.of_type(blocks, schema.num_types, schema.type_index(t)) for t in (relation.src, relation.dst))
        return cls(relation, src, dst)

    @classmethod
    def of_partitions(cls, data) -> LinkEnds:
        """The ends of the held-out edges' relation of ``data`` (a
        :class:`~salientpp.partition.format.PartitionedDataset`), in its numbering."""
        return cls.of(data.schema, data.link_relation, data.book.blocks)


@dataclass(frozen=True)
class LinkSeeds:
    """One batch of link seeds.

    Attributes:
        nodes: int64 ``[n]`` the distinct, sorted endpoints of the positives and negatives (the
            batch's node seeds).
        edge_label_index: int64 ``[2, P + Q]`` indices into ``nodes``: the P positives, then the
            Q = P r negatives (per source: positive i's ``r`` negatives, which share its source, at
            ``P + i r .. P + (i + 1) r - 1``).
        edge_label: float32 ``[P + Q]``, 1 for the positives and 0 for the negatives.
        num_positives: P.
    """

    nodes: torch.Tensor
    edge_label_index: torch.Tensor
    edge_label: torch.Tensor
    num_positives: int


def draw_link_seeds(positives: torch.Tensor, ends: LinkEnds, num_negatives: int, mode: NegativeSampling | str,
                    generator: torch.Generator) -> LinkSeeds:
    """The :class:`LinkSeeds` of ``positives`` with ``num_negatives`` negatives each.

    Args:
        positives: int64 ``[2, P]`` global ids (P may be 0: an empty :class:`LinkSeeds`), edges of
            ``ends.relation``.
        ends: the pools of the negatives' ends: destinations uniform over ``ends.destinations``,
            a uniform negative's source over ``ends.sources``.
        num_negatives: r >= 1; mode: :class:`NegativeSampling` (or its value).
        generator: the only source of randomness: the same state gives the same negatives.

    A negative that is a pair of ``ends.known`` is drawn again (its destination, and a uniform
    negative's source), up to :data:`REDRAWS` times.
    """
    r, mode = check_num_negatives(num_negatives), check_negative_sampling(mode)
    if positives.ndim != 2 or positives.shape[0] != 2 or positives.dtype != torch.int64:
        raise InputError(f"positives must be an int64 [2, P] edge tensor, got {positives.dtype} "
                         f"{list(positives.shape)}")
    p = int(positives.shape[1])
    per_source = mode is NegativeSampling.PER_SOURCE
    source = positives[0].repeat_interleave(r) if per_source else ends.sources.draw(p * r, generator)
    destination = ends.destinations.draw(p * r, generator)
    if ends.known is not None:
        ends.known.redraw(source, destination, lambda count: ends.destinations.draw(count, generator),
                          None if per_source else lambda count: ends.sources.draw(count, generator))
    negatives = torch.stack([source, destination])
    pairs = torch.cat([positives, negatives], dim=1)
    nodes, inverse = torch.unique(pairs.reshape(-1), return_inverse=True)
    label = torch.cat([torch.ones(p, dtype=torch.float32), torch.zeros(p * r, dtype=torch.float32)])
    return LinkSeeds(nodes, inverse.view(2, -1), label, p)
