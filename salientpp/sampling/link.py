"""Link-prediction seeds: a batch of positive edges, its negatives, and the node seeds they span.

Two ways to draw ``r`` negatives per positive edge, uniform over all N nodes, with replacement:

* :attr:`NegativeSampling.UNIFORM` (PyG's "binary"): ``r`` random pairs ``(u', v')`` per
  positive, both ends uniform and independent;
* :attr:`NegativeSampling.PER_SOURCE` (PyG's "triplet", OGB's ranking protocol): for each
  positive ``(s, d)``, ``r`` pairs ``(s, v')`` with ``v'`` uniform.

Negatives are not filtered against true edges: with ``m`` edges among ``N^2`` pairs a negative is
an edge with probability ``m / N^2`` (2e-4 on Cora), and OGB's evaluation does not filter either.
The batch's node seeds are the distinct endpoints of its positives and negatives; the node-wise
samplers then sample them exactly as they sample the seeds of node classification.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import torch

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


def draw_link_seeds(positives: torch.Tensor, num_nodes: int, num_negatives: int, mode: NegativeSampling | str,
                    generator: torch.Generator) -> LinkSeeds:
    """The :class:`LinkSeeds` of ``positives`` with ``num_negatives`` negatives each.

    Args:
        positives: int64 ``[2, P]`` global ids (P may be 0: an empty :class:`LinkSeeds`).
        num_nodes: N; negative endpoints are uniform over ``[0, N)``.
        num_negatives: r >= 1; mode: :class:`NegativeSampling` (or its value).
        generator: the only source of randomness: the same state gives the same negatives.
    """
    r, mode = check_num_negatives(num_negatives), check_negative_sampling(mode)
    if positives.ndim != 2 or positives.shape[0] != 2 or positives.dtype != torch.int64:
        raise InputError(f"positives must be an int64 [2, P] edge tensor, got {positives.dtype} "
                         f"{list(positives.shape)}")
    p = int(positives.shape[1])
    if mode is NegativeSampling.PER_SOURCE:
        source = positives[0].repeat_interleave(r)
        target = torch.randint(0, num_nodes, (p * r,), generator=generator, dtype=torch.int64)
        negatives = torch.stack([source, target])
    else:
        negatives = torch.randint(0, num_nodes, (2, p * r), generator=generator, dtype=torch.int64)
    pairs = torch.cat([positives, negatives], dim=1)
    nodes, inverse = torch.unique(pairs.reshape(-1), return_inverse=True)
    label = torch.cat([torch.ones(p, dtype=torch.float32), torch.zeros(p * r, dtype=torch.float32)])
    return LinkSeeds(nodes, inverse.view(2, -1), label, p)
