"""The samplers a loader can use, by name (``--sampler nodewise|bulk|ladies``), and the one rule
of a valid fanout list (:func:`check_fanouts`)."""
from __future__ import annotations

import enum
from typing import Sequence

from ..errors import InputError, check_choice
from ..parsing import number_list


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


def check_fanouts(fanouts: Sequence[int], kind: SamplerKind = SamplerKind.NODEWISE, layers: int | None = None,
                  what: str = "fanouts") -> tuple[int, ...]:
    """The one rule of a valid fanout list, returned as a tuple of ints: one integer per hop,
    ``fanouts[0]`` at the seeds, each a positive number of neighbours or -1 (all of them);
    LADIES draws ``fanouts[h]`` nodes per layer, so -1 is node-wise only; with ``layers``,
    exactly one per model layer. :class:`InputError` names ``what`` otherwise."""
    try:
        values = tuple(int(f) for f in fanouts)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be integers like 15,10,5, got {fanouts!r}; pass one integer per hop") from None
    if not values:
        raise InputError("the fanout list is empty; pass one integer per hop, e.g. --fanouts 15,10,5")
    bad = [f for f in values if f < 1 and f != -1]
    if bad:
        raise InputError(f"fanout {bad[0]} is invalid; all {what} must be positive integers or -1 (all neighbours)")
    if kind is SamplerKind.LADIES and any(f < 1 for f in values):
        raise InputError(f"LADIES samples a number of nodes per layer, so every entry of --fanouts must be >= 1 "
                         f"(got {','.join(map(str, values))}); pass layer sizes such as 512,512")
    if layers is not None and len(values) != layers:
        raise InputError(f"{what} gives {len(values)} hops but the model has {layers} layers; "
                         f"pass one fanout per layer")
    return values


def parse_fanouts(text: str, kind: SamplerKind = SamplerKind.NODEWISE) -> tuple[int, ...]:
    """``"15,10,5"`` -> ``(15, 10, 5)``, checked by :func:`check_fanouts`."""
    return check_fanouts(number_list(text, int, "fanouts", "15,10,5"), kind)
