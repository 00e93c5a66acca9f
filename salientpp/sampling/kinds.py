"""The sampler kinds a loader can use, by name (``--sampler nodewise|bulk|ladies``), with each
kind's rules as data (:class:`SamplerKind`), and the one rule of a valid fanout list
(:func:`check_fanouts`), of a typed graph's fanout table (:func:`check_fanout_table`) and of the
replace flag (:func:`check_replace`).

A kind is known once its module calls :func:`register_sampler` with its :class:`SamplerKind` and
the function that builds its sampler; :func:`check_sampler` finds it by name and
:func:`make_sampler` builds it. Code outside a sampler's own module reads a kind's rules and never
compares it with a specific kind. This module imports no other sampler module.

Adding a sampler kind takes:

1. a module ``salientpp/sampling/NAME.py`` with a subclass of
   :class:`~salientpp.sampling.sampler.BaseSampler` (``_sample`` draws one batch; the default
   ``start_epoch`` draws an epoch's batches one at a time in a background thread, so override it
   only to draw them otherwise; its constructor checks ``fanouts`` and ``replace`` with
   :func:`check_fanouts` and :func:`check_replace`), its ``SamplerKind("NAME", ...)`` and
   ``register_sampler(kind, build)``, where ``build(rowptr, col, fanouts, *, replace,
   minibatches_per_bulk, device)`` returns the sampler;
2. one line in ``salientpp/sampling/__init__.py`` importing that module before ``SAMPLERS`` is
   made, so that ``--sampler NAME`` is offered by every command.

Nothing else changes when its ``distribution`` is one the cache already models (``"nodewise"``
or ``"ladies"``): it then shares their cache plans and VIP recurrence. A new distribution also
needs its VIP model in ``salientpp/cache/vip.py`` (``VIP_MODELS``); until then the VIP analysis
(the ``vip`` cache policy, ``bench vip``) refuses the kind in one sentence.
"""
from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import InputError
from ..parsing import number_list


@dataclass(frozen=True)
class SamplerKind:
    """How a minibatch's message-flow graphs are drawn: a kind's name and its rules.

    The built-in kinds:

    * ``NODEWISE``: the C++ thread-pool sampler (:class:`~salientpp.sampling.NeighborSampler`),
      one batch at a time: every reached node draws ``f_h`` distinct neighbours.
    * ``BULK``: the same distribution, drawn for many minibatches at once with sparse-matrix
      operations (:class:`~salientpp.sampling.BulkSampler` ``method="nodewise"``).
    * ``LADIES``: layer-wise importance sampling (:class:`~salientpp.sampling.BulkSampler`
      ``method="ladies"``): ``fanouts[h]`` nodes per layer, MFGs with edge weights.

    Attributes:
        value: the name ``--sampler`` takes.
        title: how messages name it (``"LADIES"``).
        distribution: what its batches are drawn from; kinds of the same distribution share
            cache plans and the VIP recurrence (``"nodewise"``: node-wise and bulk; ``"ladies"``).
        default_vip_method: the VIP estimate used unless one is chosen (``salientpp.cache.vip``).
        draws_in_bulk: it draws several minibatches at once, so ``--bulk-size`` applies.
        weighted: its MFGs carry edge weights that a model must use.
        layer_sizes: its fanouts are nodes per layer, so each must be >= 1 (no -1, "all").
        always_replaces: it always draws with replacement, so a replace flag is refused.
    """

    NODEWISE: ClassVar[SamplerKind]
    BULK: ClassVar[SamplerKind]
    LADIES: ClassVar[SamplerKind]

    value: str
    title: str
    distribution: str
    default_vip_method: str = "exact"
    draws_in_bulk: bool = False
    weighted: bool = False
    layer_sizes: bool = False
    always_replaces: bool = False


SamplerKind.NODEWISE = SamplerKind("nodewise", "node-wise", "nodewise")
SamplerKind.BULK = SamplerKind("bulk", "bulk node-wise", "nodewise", draws_in_bulk=True)
# LADIES's plain VIP recurrence over-estimates by 4-12% from hop 2 on (``bench vip``, docs/cache.md).
SamplerKind.LADIES = SamplerKind("ladies", "LADIES", "ladies", default_vip_method="cavity", draws_in_bulk=True,
                                 weighted=True, layer_sizes=True, always_replaces=True)

# The kind ``--sampler`` defaults to; default cache plan names leave it out.
DEFAULT_SAMPLER = SamplerKind.NODEWISE

# Minibatches a bulk sampler draws at once by default (the batches themselves do not depend on it).
MINIBATCHES_PER_BULK = 8

# ``build(rowptr, col, fanouts, *, replace, minibatches_per_bulk, device)`` -> the kind's sampler.
Build = Callable[..., Any]

_REGISTERED: dict[str, tuple[SamplerKind, Build]] = {}  # by name, in the order registered


def register_sampler(kind: SamplerKind, build: Build) -> SamplerKind:
    """Makes ``kind`` known by its name, built by ``build``; returns ``kind``. A name is
    registered once (``ValueError`` otherwise: two modules claim it)."""
    if kind.value in _REGISTERED:
        raise ValueError(f"the sampler kind {kind.value!r} is registered already")
    _REGISTERED[kind.value] = (kind, build)
    return kind


def sampler_names() -> tuple[str, ...]:
    """The names of the registered kinds, in the order registered."""
    return tuple(_REGISTERED)


def check_sampler(name: str | SamplerKind) -> SamplerKind:
    """The registered kind ``name`` (a name or a kind), or :class:`InputError` naming the choices."""
    key = name.value if isinstance(name, SamplerKind) else name
    if key not in _REGISTERED:
        raise InputError(f"unknown sampler {key!r}; choose one of {', '.join(_REGISTERED)}")
    return _REGISTERED[key][0]


def make_sampler(rowptr, col, fanouts: Sequence[int], kind: str | SamplerKind = DEFAULT_SAMPLER,
                 replace: bool = False, minibatches_per_bulk: int = MINIBATCHES_PER_BULK, device: str = "cpu"):
    """The sampler of ``kind`` over the CSR ``rowptr``, ``col`` (a
    :class:`~salientpp.sampling.sampler.BaseSampler`), built by the function its module registered:
    for the built-in kinds a :class:`~salientpp.sampling.NeighborSampler` (CPU) or a
    :class:`~salientpp.sampling.BulkSampler` running on ``device``."""
    kind = check_sampler(kind)
    build = _REGISTERED[kind.value][1]
    return build(rowptr, col, list(fanouts), replace=replace, minibatches_per_bulk=minibatches_per_bulk, device=device)


# The largest fanout: the C++ samplers count neighbours in 32 bits (-1 takes them all).
MAX_FANOUT = 2**31 - 1


def check_fanouts(fanouts: Sequence[int], kind: SamplerKind = SamplerKind.NODEWISE, layers: int | None = None,
                  what: str = "fanouts") -> tuple[int, ...]:
    """The one rule of a valid fanout list, returned as a tuple of ints: one integer per hop,
    ``fanouts[0]`` at the seeds, each a positive number of neighbours or -1 (all of them); a kind
    whose fanouts are layer sizes (``kind.layer_sizes``, LADIES) draws ``fanouts[h]`` nodes per
    layer, so each is >= 1; with ``layers``, exactly one per layer. :class:`InputError` names
    ``what`` otherwise (the flag the list was given with, ``"--eval-fanouts"``, or the parameter):
    a bool or a float such as 5.5 is not an integer (``int`` would round it)."""
    items = tuple(fanouts) if isinstance(fanouts, Iterable) and not isinstance(fanouts, str) else None
    if items is None or not all(isinstance(f, numbers.Integral) and not isinstance(f, bool) for f in items):
        raise InputError(f"{what} must be integers like 15,10,5, got {fanouts!r}; pass one integer per hop")
    values = tuple(int(f) for f in items)
    if not values:
        raise InputError(f"{what} is empty; pass one integer per hop, e.g. 15,10,5")
    if kind.layer_sizes and any(f < 1 for f in values):
        raise InputError(f"{kind.title} samples a number of nodes per layer, so every entry of {what} must be >= 1 "
                         f"(got {','.join(map(str, values))}); pass layer sizes such as 512,512")
    bad = [f for f in values if (f < 1 and f != -1) or f > MAX_FANOUT]
    if bad:
        raise InputError(f"fanout {bad[0]} is invalid; every entry of {what} must be an integer in [1, 2^31 - 1] "
                         "or -1 (all neighbours)")
    if layers is not None and len(values) != layers:
        raise InputError(f"{what} gives {len(values)} hops but {layers} layers are sampled; "
                         "pass one fanout per layer")
    return values


def check_fanout_table(table, num_relations: int, what: str = "fanouts") -> np.ndarray:
    """The one rule of a typed graph's fanout table, returned as int64 ``[L, R]``: row ``h`` holds
    hop h's fanout of each of the ``R = num_relations`` relations (``table[0]`` at the seeds), each
    a number of in-neighbours of that relation that a sampled node draws, 0 (none) or -1 (all of
    them), as PyG's ``num_neighbors`` per edge type. :class:`InputError` naming ``what`` otherwise."""
    try:
        array = np.asarray(table)
        got = f"shape {list(array.shape)}"
    except ValueError:
        array, got = np.empty(0), "rows of different lengths"
    if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] != num_relations:
        raise InputError(f"{what} of a typed graph must be an int64 [L, R] table, one row per hop and one column per "
                         f"relation (R = {num_relations}), got {got}; give one fanout per relation and hop")
    if not np.issubdtype(array.dtype, np.integer):
        raise InputError(f"{what} must hold integers, got dtype {array.dtype}; pass whole numbers of neighbours")
    bad = array[(array < -1) | (array > MAX_FANOUT)]
    if bad.size:
        raise InputError(f"fanout {bad[0]} is invalid; every entry of {what} must be an integer in [0, 2^31 - 1] "
                         "or -1 (all neighbours)")
    return array.astype(np.int64, copy=False)


def check_replace(replace: bool, kind: SamplerKind) -> bool:
    """The one rule of the replace flag: ``replace`` as a bool, or :class:`InputError` when the
    kind always draws with replacement (``kind.always_replaces``, LADIES), where the flag is
    a mistake."""
    if replace and kind.always_replaces:
        raise InputError(f"{kind.title} always draws its nodes with replacement; drop --replace")
    return bool(replace)


def parse_fanouts(text: str, kind: SamplerKind = SamplerKind.NODEWISE, what: str = "--fanouts") -> tuple[int, ...]:
    """``"15,10,5"`` -> ``(15, 10, 5)``, checked by :func:`check_fanouts`; an error names ``what``,
    the flag ``text`` was given with (``"--eval-fanouts"``)."""
    return check_fanouts(number_list(text, int, what, "15,10,5"), kind, what=what)
