"""Link-prediction seeds: a batch of positive edges, its negatives, and the node seeds they span.

Two ways to draw ``r`` negatives per positive edge, uniform over all N nodes, with replacement:

* :attr:`NegativeSampling.UNIFORM` (PyG's "binary"): ``r`` random pairs ``(u', v')`` per
  positive, both ends uniform and independent;
* :attr:`NegativeSampling.PER_SOURCE` (PyG's "triplet", OGB's ranking protocol): for each
  positive ``(s, d)``, ``r`` pairs ``(s, v')`` with ``v'`` uniform.

Negatives are not filtered against true edges: with ``m`` edges among ``N^2`` pairs a negative is
an edge with probability ``m / N^2`` (2e-4 on Cora), and OGB's evaluation does not filter either.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import torch

from ..errors import InputError


class NegativeSampling(str, enum.Enum):
    UNIFORM = "uniform"
    PER_SOURCE = "per-source"


def check_negative_sampling(value) -> NegativeSampling:
    """``value`` as a :class:`NegativeSampling`; :class:`InputError` naming the choices."""
    try:
        return NegativeSampling(value)
    except ValueError:
        raise InputError(f"unknown negative sampling {value!r}; choose "
                         f"{' or '.join(m.value for m in NegativeSampling)}") from None


def check_num_negatives(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"num_negatives must be at least 1, got {value!r}")
    return value


@dataclass(frozen=True)
class LinkSeeds:
    """One batch of link seeds.

    Attributes:
        nodes: int64 ``[n]`` the distinct, sorted endpoints of the positives and negatives (the
            batch's node seeds).
        edge_label_index: int64 ``[2, P + Q]`` indices into ``nodes``: the P positives, then the
            Q negatives (per source: positive i's ``r`` negatives at ``P + i r .. P + (i + 1) r - 1``).
        edge_label: float32 ``[P + Q]``, 1 for the positives and 0 for the negatives.
        num_positives: P.
    """

    nodes: torch.Tensor
    edge_label_index: torch.Tensor
    edge_label: torch.Tensor
    num_positives: int


def draw_link_seeds(positives: torch.Tensor, num_nodes: int, num_negatives: int, mode: NegativeSampling,
                    generator: torch.Generator) -> LinkSeeds:
    """The :class:`LinkSeeds` of ``positives`` (int64 ``[2, P]`` global ids) with ``num_negatives``
    negatives each, drawn ``mode`` from ``generator`` over ``[0, num_nodes)``."""
    p, r = int(positives.shape[1]), int(num_negatives)
    if mode is NegativeSampling.PER_SOURCE:
        source = positives[0].repeat_interleave(r)
        target = torch.randint(0, num_nodes, (p * r,), generator=generator, dtype=torch.int64)
        negatives = torch.stack([source, target])
    else:
        negatives = torch.randint(0, num_nodes, (2, p * r), generator=generator, dtype=torch.int64)
    pairs = torch.cat([positives, negatives], dim=1)
    nodes, inverse = torch.unique(pairs.reshape(-1), return_inverse=True)
    label = torch.cat([torch.ones(p), torch.zeros(p * r)])
    return LinkSeeds(nodes, inverse.view(2, -1), label, p)
