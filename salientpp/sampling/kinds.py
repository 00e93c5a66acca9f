"""The sampler kinds a loader can use, by name (``--sampler nodewise|bulk|ladies``), with each
kind's rules as data (:class:`SamplerKind`), and the one rule of a valid fanout list
(:func:`check_fanouts`; of a graph's fanouts in any form, one list, a list per relation or a
table given whole, :func:`fanout_table`), of the replace flag (:func:`check_replace`) and of the
kinds that draw typed graphs (:func:`check_typed_graph`).

A kind is known once its module calls :func:`register_sampler` with its :class:`SamplerKind` and
the function that builds its sampler; :func:`check_sampler` finds it by name and
:func:`make_sampler` builds it. Code outside a sampler's own module reads a kind's rules and never
compares it with a specific kind. This module imports no other sampler module.

Adding a sampler kind takes:

1. a module ``salientpp/sampling/NAME.py`` with a subclass of
   :class:`~salientpp.sampling.sampler.BaseSampler` (``_draw`` draws one batch's topology; the default
   ``start_epoch`` draws an epoch's batches one at a time in a background thread, so override it
   only to draw them otherwise; its constructor reads ``fanouts`` with :func:`fanout_table` into
   its ``fanouts``, the int64 ``[L, R]`` table, and checks ``replace`` with :func:`check_replace`),
   its ``SamplerKind("NAME", ...)`` and
   ``register_sampler(kind, build)``, where ``build(rowptr, col, fanouts, *, replace, ...)``
   returns the sampler and takes only the options its kind's fields say it reads
   (:func:`make_sampler`): ``minibatches_per_bulk`` with ``draws_in_bulk=True``, ``device`` with
   ``gpu=True``, ``edge_rel``, ``schema`` and ``type_of`` with ``typed=True`` (and then its
   fanouts in the forms :func:`fanout_table` reads);
2. one line in ``salientpp/sampling/__init__.py`` importing that module before ``SAMPLERS`` is
   made, so that ``--sampler NAME`` is offered by every command.

Nothing else changes when its ``distribution`` is one the cache already models (``"nodewise"``
or ``"ladies"``): it then shares their cache plans and VIP recurrence. A new distribution also
needs its VIP model in ``salientpp/cache/vip.py`` (``VIP_MODELS``); until then the VIP analysis
(the ``vip`` cache policy, ``bench vip``) refuses the kind in one sentence.
"""
from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..errors import InputError, shown
from ..options import Needs, not_applicable
from ..parsing import number_list

if TYPE_CHECKING:
    from ..data.schema import GraphSchema


@dataclass(frozen=True)
class SamplerKind:
    """How a minibatch's message-flow graphs are drawn: a kind's name and its rules.

    The built-in kinds, each declared and registered by its own module:

    * ``NODEWISE`` (:mod:`salientpp.sampling.sampler`): the C++ thread-pool sampler
      (:class:`~salientpp.sampling.NeighborSampler`), one batch at a time: every reached node
      draws ``f_h`` distinct neighbours.
    * ``BULK`` (:mod:`salientpp.sampling.bulk`): the same distribution, drawn for many minibatches
      at once with sparse-matrix operations (:class:`~salientpp.sampling.BulkSampler` ``method="nodewise"``).
    * ``LADIES`` (:mod:`salientpp.sampling.bulk`): layer-wise importance sampling
      (:class:`~salientpp.sampling.BulkSampler` ``method="ladies"``): ``fanouts[h]`` nodes per
      layer, MFGs with edge weights.

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
        typed: it draws typed graphs (per-relation fanouts, MFGs with edge types); a kind
            without it refuses a graph of several node types or relations (:func:`check_typed_graph`).
        gpu: it can draw on a GPU (its builder's ``device``), so ``--sampling-device cuda`` applies.
    """

    value: str
    title: str
    distribution: str
    default_vip_method: str = "exact"
    draws_in_bulk: bool = False
    weighted: bool = False
    layer_sizes: bool = False
    always_replaces: bool = False
    typed: bool = False
    gpu: bool = False


# The name of the kind ``--sampler`` defaults to (:func:`check_sampler` finds it); default cache
# plan names leave it out.
DEFAULT_SAMPLER = "nodewise"

# Minibatches a bulk sampler draws at once by default (the batches themselves do not depend on it).
MINIBATCHES_PER_BULK = 8

# ``build(rowptr, col, fanouts, *, replace, ...)`` -> the kind's sampler; the keywords after
# ``replace`` are those its kind's fields say it reads (:func:`make_sampler`).
Build = Callable[..., Any]

# The forms of a graph's fanouts that fanout_table reads: one list, a table given whole, a list per relation.
Fanouts = Sequence[int] | Sequence[Sequence[int]] | np.ndarray | Mapping[Any, Sequence[int]]

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


def make_sampler(rowptr, col, fanouts: Fanouts,
                 kind: str | SamplerKind = DEFAULT_SAMPLER, replace: bool = False,
                 minibatches_per_bulk: int = MINIBATCHES_PER_BULK, device: str | torch.device = "cpu", *,
                 edge_rel=None, schema: GraphSchema | None = None, type_of=None):
    """The sampler of ``kind`` over the CSR ``rowptr``, ``col`` (a
    :class:`~salientpp.sampling.sampler.BaseSampler`), built by the function its module registered:
    for the built-in kinds a :class:`~salientpp.sampling.NeighborSampler` (CPU) or a
    :class:`~salientpp.sampling.BulkSampler` running on ``device``.

    The builder gets ``fanouts``, ``replace`` and only the options its kind reads, as its
    :class:`SamplerKind` fields say: ``minibatches_per_bulk`` with ``draws_in_bulk``, ``device``
    with ``gpu`` (a kind without it draws on the CPU and refuses another ``device``), and a typed
    graph's ``edge_rel`` (int8 ``[nnz]``), ``schema`` and ``type_of`` (its ids' node types where
    they are not the schema's ranges, a partitioned graph's ``book.type_of``) with ``typed``; a
    kind without ``typed`` refuses a graph of several types or relations (:func:`check_typed_graph`)."""
    kind = check_sampler(kind)
    build = _REGISTERED[kind.value][1]
    check_typed_graph(kind, schema)
    options = {}
    if kind.draws_in_bulk:
        options["minibatches_per_bulk"] = minibatches_per_bulk
    if kind.gpu:
        options["device"] = device
    elif torch.device(device).type != "cpu":
        raise not_applicable(f"sampling on {device}", kind_needs("gpu"))
    if kind.typed:
        options.update(edge_rel=edge_rel, schema=schema, type_of=type_of)
    return build(rowptr, col, fanouts, replace=replace, **options)


# Where a loader's batches are drawn: the host's cores (the default) or the training GPU.
SAMPLING_DEVICES = ("cpu", "cuda")


def kinds_with(rule: str) -> str:
    """The registered kinds whose field ``rule`` (``"gpu"``, ``"draws_in_bulk"``, ``"typed"``)
    is true, by name: ``"bulk or ladies"``."""
    return " or ".join(name for name, (k, _) in _REGISTERED.items() if getattr(k, rule))


def kind_needs(rule: str) -> Needs:
    """Where an option applies only with the kinds whose field ``rule`` is true (:func:`kinds_with`):
    ``--sampler bulk or ladies``, of anything with a ``sampler``."""
    return Needs(f"--sampler {kinds_with(rule)}", lambda options: getattr(check_sampler(options.sampler), rule))


# --sampling-device cuda draws the batches on the training GPU (of the run's training device).
ON_THE_TRAINING_GPU = Needs("--device cuda (the batches are drawn on the training GPU)",
                            lambda device: torch.device(device).type == "cuda", instead="use --device cuda")


def check_sampling_device(sampling_device: str, kind: SamplerKind, device: str | torch.device) -> torch.device:
    """Where a loader of ``kind`` draws its batches when ``sampling_device`` (``"cpu"`` or
    ``"cuda"``, :data:`SAMPLING_DEVICES`) is asked for in a run training on ``device`` (``"cpu"``,
    ``"cuda"``, ``"cuda:1"``): the CPU, or the training GPU itself. :class:`InputError` unless
    ``kind`` can draw there (``kind.gpu``, the rule of ``train``'s option too: :func:`kind_needs`)
    and the run trains on a GPU."""
    if sampling_device not in SAMPLING_DEVICES:
        raise InputError(f"the sampling device must be one of {', '.join(SAMPLING_DEVICES)}, got {sampling_device!r}")
    if sampling_device == "cpu":
        return torch.device("cpu")
    if not kind.gpu:
        raise not_applicable("--sampling-device cuda", kind_needs("gpu"))
    if not ON_THE_TRAINING_GPU.holds(device):
        raise not_applicable("--sampling-device cuda", ON_THE_TRAINING_GPU)
    return torch.device(device)


def check_typed_graph(kind: SamplerKind, schema: GraphSchema | None) -> None:
    """The one rule of which kinds draw typed graphs: :class:`InputError` when ``schema`` has
    several node types or relations and ``kind`` draws homogeneous graphs only (not
    ``kind.typed``), naming the kinds that draw them (None: a graph whose schema is not at hand,
    drawn as a homogeneous one)."""
    if schema is not None and not schema.is_homogeneous and not kind.typed:
        raise InputError(f"the {kind.value} sampler draws homogeneous graphs only; use {kind_needs('typed').what}")


# The largest fanout: the C++ samplers count neighbours in 32 bits (-1 takes them all).
MAX_FANOUT = 2**31 - 1


def check_fanouts(fanouts: Sequence[int], kind: str | SamplerKind = DEFAULT_SAMPLER, layers: int | None = None,
                  what: str = "fanouts", zero: bool = False) -> tuple[int, ...]:
    """The one rule of a valid fanout list, returned as a tuple of ints: one integer per hop,
    ``fanouts[0]`` at the seeds, each a positive number of neighbours or -1 (all of them), or 0
    (none) with ``zero`` (one relation's list of a typed graph, :func:`fanout_table`); a kind
    whose fanouts are layer sizes (``kind.layer_sizes``, LADIES) draws ``fanouts[h]`` nodes per
    layer, so each is >= 1; with ``layers``, exactly one per layer. :class:`InputError` names
    ``what`` otherwise (the flag the list was given with, ``"--eval-fanouts"``, or the parameter):
    a bool or a float such as 5.5 is not an integer (``int`` would round it)."""
    kind = check_sampler(kind)
    items = tuple(fanouts) if isinstance(fanouts, Iterable) and not isinstance(fanouts, str) else None
    if items is None or not all(isinstance(f, numbers.Integral) and not isinstance(f, bool) for f in items):
        raise InputError(f"{what} must be integers like 15,10,5, got {fanouts!r}; pass one integer per hop")
    values = tuple(int(f) for f in items)
    if not values:
        raise InputError(f"{what} is empty; pass one integer per hop, e.g. 15,10,5")
    if kind.layer_sizes and any(f < 1 for f in values):
        raise InputError(f"{kind.title} samples a number of nodes per layer, so every entry of {what} must be >= 1 "
                         f"(got {','.join(map(str, values))}); pass layer sizes such as 512,512")
    least = 0 if zero else 1
    bad = [f for f in values if (f < least and f != -1) or f > MAX_FANOUT]
    if bad:
        raise InputError(f"fanout {bad[0]} is invalid; every entry of {what} must be an integer in [{least}, "
                         "2^31 - 1] or -1 (all neighbours)")
    _check_layers(len(values), layers, what)
    return values


def _check_table(table, num_relations: int, what: str) -> np.ndarray:
    """A fanout table given whole (:func:`fanout_table`), returned as int64 ``[L, R]``: row ``h``
    holds hop h's fanout of each of the ``R = num_relations`` relations (``table[0]`` at the
    seeds), each a number of in-neighbours of that relation that a sampled node draws, 0 (none) or
    -1 (all of them), as PyG's ``num_neighbors`` per edge type. :class:`InputError` naming ``what``
    otherwise."""
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
    return array.astype(np.int64)


def _check_layers(hops: int, layers: int | None, what: str) -> None:
    """:class:`InputError` unless ``hops`` fanouts of ``what`` give one per layer (any number when
    ``layers`` is None)."""
    if layers is not None and hops != layers:
        raise InputError(f"{what} gives {hops} hops but {layers} layers are sampled; pass one fanout per layer")


def _is_table(fanouts) -> bool:
    """Whether ``fanouts`` is a table given whole (:func:`fanout_table`): an array of other than one
    dimension, or a sequence of rows (of which any item is itself a sequence)."""
    if isinstance(fanouts, np.ndarray):
        return fanouts.ndim != 1
    return (isinstance(fanouts, Sequence) and not isinstance(fanouts, str)
            and any(isinstance(row, Iterable) and not isinstance(row, str) for row in fanouts))


def fanout_table(fanouts: Fanouts, schema: GraphSchema | None = None, kind: str | SamplerKind = DEFAULT_SAMPLER,
                 layers: int | None = None, what: str = "fanouts", *, num_relations: int | None = None) -> np.ndarray:
    """The one rule of a graph's fanouts: int64 ``[L, R]``, entry ``[h, r]`` the neighbours of
    relation ``r`` every node reached draws at hop ``h`` (PyG's ``num_neighbors``), for the ``R``
    relations of ``schema`` (None: its relations are not at hand: ``R = num_relations``, as for a
    workload read back with its relation names, or 1, a homogeneous graph; the schema's count wins
    when both are given). Every caller reads fanouts here; the rules depend on ``R`` alone.

    ``fanouts`` takes three forms:

    * one list for every relation, checked by :func:`check_fanouts` (each entry >= 1 or -1);
    * a dict relation -> list, a key naming a relation as
      :meth:`~salientpp.data.schema.GraphSchema.relation_index` accepts it (a
      :class:`~salientpp.data.schema.Relation`, a triple, ``"src__name__dst"`` or a unique name):
      every relation named once, the lists of equal length, each entry >= 1, -1 (all) or, on a
      graph of several relations, 0 (that relation draws nothing at that hop);
    * the table given whole: a 2-D array or a sequence of L rows of R integers (a typed
      :attr:`~salientpp.cache.workload.Workload.fanouts`), each entry an integer in
      ``[0, 2^31 - 1]`` or -1; with one relation its one column also obeys the rule of one list
      (:func:`check_fanouts`: >= 1, layer sizes).

    With ``layers``, exactly one row (hop) per layer. A kind that draws homogeneous graphs only is
    refused a typed ``schema`` (:func:`check_typed_graph`). :class:`InputError` names ``what``
    otherwise, in one sentence."""
    kind = check_sampler(kind)
    check_typed_graph(kind, schema)
    width = schema.num_relations if schema is not None else num_relations or 1
    if _is_table(fanouts):
        table = _check_table(fanouts, width, what)
        if width == 1:  # one column: the rule of one list (>= 1, layer sizes) holds for it too
            check_fanouts(table[:, 0].tolist(), kind, layers, what)
        _check_layers(table.shape[0], layers, what)
        return table
    if not isinstance(fanouts, Mapping):
        values = check_fanouts(fanouts, kind, layers, what)
        return np.repeat(np.array(values, dtype=np.int64)[:, None], width, axis=1)
    if schema is None:
        raise InputError(f"{what} gives a list per relation but the graph's relations are unknown; pass its schema "
                         "(dataset.schema) or one list for every relation")
    relations = [str(r) for r in schema.relations]
    given: dict[int, tuple[int, ...]] = {}
    for key, value in fanouts.items():
        try:
            r = schema.relation_index(key)
        except TypeError:  # neither a Relation, a triple nor a string: no relation of any graph
            r = schema.relation_index(shown(key))
        if r in given:
            raise InputError(f"{what} names the relation {relations[r]} twice; give each relation one list")
        given[r] = check_fanouts(value, kind, what=f"{what} of {relations[r]}", zero=width > 1)
    missing = [relations[r] for r in range(len(relations)) if r not in given]
    if missing:
        raise InputError(f"{what} gives no list for the relation{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(missing)}; name every relation (0 for one that draws nothing)")
    hops = sorted({len(v) for v in given.values()})
    if len(hops) > 1:
        raise InputError(f"the lists of {what} give different numbers of hops ({', '.join(map(str, hops))}); "
                         "give every relation one fanout per hop")
    _check_layers(hops[0], layers, what)
    return np.array([given[r] for r in range(len(relations))], dtype=np.int64).T.copy()


def check_replace(replace: bool, kind: SamplerKind) -> bool:
    """The one rule of the replace flag: ``replace`` as a bool, or :class:`InputError` when the
    kind always draws with replacement (``kind.always_replaces``, LADIES), where the flag is
    a mistake."""
    if replace and kind.always_replaces:
        raise InputError(f"{kind.title} always draws its nodes with replacement; drop --replace")
    return bool(replace)


def parse_fanouts(text: str, kind: str | SamplerKind = DEFAULT_SAMPLER, what: str = "--fanouts") -> tuple[int, ...]:
    """``"15,10,5"`` -> ``(15, 10, 5)``, checked by :func:`check_fanouts`; an error names ``what``,
    the flag ``text`` was given with (``"--eval-fanouts"``)."""
    return check_fanouts(number_list(text, int, what, "15,10,5"), kind, what=what)


# How one relation's list is introduced in the per-relation form of --fanouts, and how lists are separated.
RELATION_FANOUTS = "="
RELATION_LISTS = ";"


def parse_typed_fanouts(text: str, what: str = "--fanouts") -> tuple[int, ...] | dict[str, tuple[int, ...]]:
    """The command-line form of a typed graph's fanouts, as :func:`fanout_table` takes them:
    ``"15,10,5"`` (one list for every relation) -> ``(15, 10, 5)``, or one list per relation,
    ``"REL=15,10,5;REL2=5,5,5"`` -> ``{"REL": (15, 10, 5), "REL2": (5, 5, 5)}`` with ``REL`` as
    ``src__name__dst`` or a unique relation name. Only the form is checked here (integers, each
    relation named once); the values and the relations are checked against the graph by
    :func:`fanout_table`. An error names ``what``, the flag ``text`` was given with."""
    example = "paper__cites__paper=15,10;author__writes__paper=5,5"
    if RELATION_FANOUTS not in text:
        return number_list(text, int, what, "15,10,5")
    lists: dict[str, tuple[int, ...]] = {}
    for item in text.split(RELATION_LISTS):
        name, sep, values = (part.strip() for part in item.partition(RELATION_FANOUTS))
        if not sep or not name:
            raise InputError(f"{what} must give each relation's list as REL=15,10,5 separated by "
                             f"{RELATION_LISTS!r}, like {example}, got {shown(item.strip())}")
        if name in lists:
            raise InputError(f"{what} names the relation {shown(name)} twice; give each relation one list")
        lists[name] = number_list(values, int, f"{what} of {shown(name)}", "15,10,5")
    return lists
