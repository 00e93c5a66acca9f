"""The samplers a loader can use, by name (``--sampler nodewise|bulk|ladies``)."""
from __future__ import annotations

import enum

from ..errors import InputError, check_choice


class SamplerKind(str, enum.Enum):
    """How a minibatch's message-flow graphs are drawn.

    * ``NODEWISE``: the C++ thread-pool sampler (:class:`~salientpp.sampling.NeighborSampler`),
      one batch at a time: every reached node draws ``f_h`` distinct neighbours.
    * ``BULK``: the same distribution, drawn for many minibatches at once with sparse-matrix
      operations (:class:`~salientpp.sampling.BulkSampler` ``method="nodewise"``).
    * ``LADIES``: layer-wise importance sampling (:class:`~salientpp.sampling.BulkSampler`
      ``method="ladies"``): ``fanouts[h]`` nodes per layer, MFGs with edge weights.
    """

    NODEWISE = "nodewise"
    BULK = "bulk"
    LADIES = "ladies"

    @property
    def is_bulk(self) -> bool:
        """Whether :class:`~salientpp.sampling.BulkSampler` draws it."""
        return self is not SamplerKind.NODEWISE

    @property
    def weighted(self) -> bool:
        """Whether its MFGs carry edge weights that a model must use."""
        return self is SamplerKind.LADIES


SAMPLERS = tuple(kind.value for kind in SamplerKind)

# Minibatches a bulk sampler draws at once by default (the batches themselves do not depend on it).
MINIBATCHES_PER_BULK = 8


def check_sampler(name: str | SamplerKind) -> SamplerKind:
    """``name`` as a :class:`SamplerKind`, or :class:`InputError` naming the choices."""
    return check_choice(SamplerKind, name, "sampler")


def check_layer_sizes(kind: SamplerKind, fanouts: tuple[int, ...]) -> tuple[int, ...]:
    """LADIES draws ``fanouts[h]`` nodes per layer: each must be >= 1 (``-1``, all, is node-wise only)."""
    if kind is SamplerKind.LADIES and any(f < 1 for f in fanouts):
        raise InputError(f"LADIES samples a number of nodes per layer, so every entry of --fanouts must be >= 1 "
                         f"(got {','.join(map(str, fanouts))}); pass layer sizes such as 512,512")
    return fanouts


def make_sampler(rowptr, col, fanouts, kind: SamplerKind = SamplerKind.NODEWISE, replace: bool = False,
                 minibatches_per_bulk: int = MINIBATCHES_PER_BULK, device: str = "cpu"):
    """The sampler of ``kind`` over the CSR ``rowptr``, ``col``: a
    :class:`~salientpp.sampling.NeighborSampler` (CPU), or a :class:`~salientpp.sampling.BulkSampler`
    running on ``device``."""
    from .bulk import BulkSampler
    from .sampler import NeighborSampler

    kind = check_sampler(kind)
    if kind is SamplerKind.NODEWISE:
        return NeighborSampler(rowptr, col, list(fanouts), replace=replace)
    method = "ladies" if kind is SamplerKind.LADIES else "nodewise"
    return BulkSampler(rowptr, col, list(fanouts), method=method, minibatches_per_bulk=minibatches_per_bulk,
                       replace=replace, device=device)
