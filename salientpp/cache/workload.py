"""What the cache serves: sampled workloads (fanouts, batch size, seed split, weight).

A training run fetches remote features for its training minibatches; sampled inference fetches
them too. A :class:`Workload` describes one such stream of minibatches; the VIP analysis, the
policies and the simulator all take a tuple of them, training first.
"""
from __future__ import annotations

from dataclasses import InitVar, dataclass

import numpy as np

from ..data.format import SPLITS
from ..data.schema import HOMOGENEOUS_RELATION, GraphSchema, Relation
from ..errors import InputError, check_int
from ..sampling.kinds import (DEFAULT_SAMPLER, RELATION_FANOUTS, RELATION_LISTS, SamplerKind, check_replace,
                              check_sampler, fanout_table)
from ..sampling.sampler import NODEWISE
from ..sampling.link import NUM_NEGATIVES, NegativeSampling, check_negative_sampling, check_num_negatives


# The negatives of its source each held-out edge is ranked against when link prediction is
# evaluated (train's --eval-negatives, analyze's): :meth:`EdgeSeeds.evaluation`.
EVAL_NEGATIVES = 100

# The relations of a homogeneous graph's workload, the one column of its fanout table
# (:meth:`~salientpp.data.schema.GraphSchema.homogeneous`'s relation).
HOMOGENEOUS_RELATIONS = (str(Relation(*HOMOGENEOUS_RELATION)),)


def check_batch_size(batch_size) -> int:
    return check_int(batch_size, "the batch size", hint="pass e.g. --batch-size 1024")


def lockstep_steps(num_seeds, batch_size: int) -> int:
    """``max_k ceil(num_seeds[k] / batch_size)``: the batches per epoch that K ranks with
    ``num_seeds[k]`` seeds each run in lockstep (0 when every count is 0)."""
    batch_size = check_batch_size(batch_size)
    return max((-(-int(n) // batch_size) for n in num_seeds), default=0)


def check_training_seeds(num_seeds: list[int], batch_size: int, part_dir, seeds: str = "nodes") -> int:
    """The one rule of a training split in lockstep: every rank has a seed for each of the
    :func:`lockstep_steps` ``S`` (returned), so no rank trains an empty step, nor none at all.
    :class:`InputError` naming the partition otherwise (``seeds``: what a seed is, in the message)."""
    steps = lockstep_steps(num_seeds, batch_size)
    k, big = num_seeds.index(min(num_seeds)), num_seeds.index(max(num_seeds))
    if num_seeds[k] == 0:
        raise InputError(f"partition {k} of {part_dir} has no training {seeds}, so rank {k} would never train; "
                         "re-partition with fewer parts or a balanced training split")
    if num_seeds[k] < steps:
        raise InputError(f"partition {k} of {part_dir} has {num_seeds[k]} training {seeds} but every rank runs "
                         f"{steps} steps per epoch (partition {big} has {num_seeds[big]} at batch size {batch_size}), "
                         f"so rank {k} would have steps without data; re-partition so that training {seeds} are "
                         "balanced (METIS balances nodes within 3%) or raise --batch-size")
    return steps


@dataclass(frozen=True)
class EdgeSeeds:
    """A workload whose seeds are edges (link prediction): each batch's positive edges come with
    ``num_negatives`` negatives each, drawn ``negative_sampling``, and the distinct endpoints are
    the batch's node seeds (:class:`~salientpp.sampling.link_loader.LinkNeighborLoader`)."""

    num_negatives: int = NUM_NEGATIVES
    negative_sampling: NegativeSampling = NegativeSampling.UNIFORM

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_negatives", check_num_negatives(self.num_negatives))
        object.__setattr__(self, "negative_sampling", check_negative_sampling(self.negative_sampling))

    @classmethod
    def evaluation(cls, num_negatives: int | None = None) -> "EdgeSeeds":
        """The edge seeds of link evaluation: each held-out edge with ``num_negatives`` (default
        :data:`EVAL_NEGATIVES`) destinations of its source, against which its rank is measured."""
        return cls(EVAL_NEGATIVES if num_negatives is None else num_negatives, NegativeSampling.PER_SOURCE)

    def to_json(self) -> dict:
        return {"num_negatives": self.num_negatives, "negative_sampling": self.negative_sampling.value}


@dataclass(frozen=True)
class Workload:
    """One stream of sampled minibatches whose remote feature rows a rank must fetch.

    Attributes:
        fanouts: the checked ``[L, R]`` table of :func:`~salientpp.sampling.kinds.fanout_table`
            (made from one list for every relation, a dict relation -> list, or the table given
            whole) as a tuple of L rows of R ints: entry ``[h][r]`` the neighbours of relation r
            drawn at hop h, ``fanouts[0]`` at the seeds (-1 = all, 0 = none). A homogeneous graph
            is the case of one relation (``R = 1``). :attr:`fanout_table` is it as an int64 array.
        batch_size: the most seeds per minibatch: every partition runs :meth:`lockstep_steps`
            batches per epoch, ``S = max_k ceil(|seeds_k| / batch_size)``, balanced within
            the partition.
        replace: sampling with replacement (``f`` draws, duplicates merged) instead of without
            (refused for a kind that always replaces: :func:`~salientpp.sampling.kinds.check_replace`).
        splits: the seed sets of each partition it runs over, e.g. ``("train",)`` or ``("valid", "test")``.
        weight: passes of this workload per training epoch (1 for training itself; e.g. 0.2 for
            sampled inference every fifth epoch). Scores and fetched rows add up with this weight.
        sampler: how the minibatches are drawn (:class:`~salientpp.sampling.SamplerKind`); for a
            kind with ``layer_sizes`` (LADIES), ``fanouts`` are the nodes drawn per layer.
        edges: ``None`` for node seeds; an :class:`EdgeSeeds` for link prediction, whose seeds are
            the splits' held-out edges (whose sources the partition owns) and ``batch_size``
            counts edges.
        relations: the graph's relations (``"src__name__dst"``), the columns of the fanout table:
            those of ``schema``, or of a workload read back (:meth:`from_json`); by default
            :data:`HOMOGENEOUS_RELATIONS`, a homogeneous graph's one relation.
        schema: (init only) the graph's :class:`~salientpp.data.schema.GraphSchema`, whose
            relations become ``relations`` and which reads ``fanouts`` (a dict names them).
    """

    fanouts: tuple[tuple[int, ...], ...]
    batch_size: int
    replace: bool = False
    splits: tuple[str, ...] = ("train",)
    weight: float = 1.0
    sampler: SamplerKind = DEFAULT_SAMPLER  # a kind or its name, checked into the kind
    edges: EdgeSeeds | None = None
    relations: tuple[str, ...] = ()
    schema: InitVar[GraphSchema | None] = None

    def __post_init__(self, schema: GraphSchema | None) -> None:
        object.__setattr__(self, "sampler", check_sampler(self.sampler))
        relations = tuple(self.relations) if schema is None else tuple(str(r) for r in schema.relations)
        object.__setattr__(self, "relations", relations or HOMOGENEOUS_RELATIONS)
        # without a schema, a workload read back (from_json) gives its relations' count
        table = fanout_table(self.fanouts, schema, self.sampler, num_relations=len(self.relations))
        object.__setattr__(self, "fanouts", tuple(tuple(int(f) for f in row) for row in table))
        object.__setattr__(self, "replace", check_replace(self.replace, self.sampler))
        object.__setattr__(self, "batch_size", check_batch_size(self.batch_size))
        splits = (self.splits,) if isinstance(self.splits, str) else tuple(self.splits)
        if not splits or any(s not in SPLITS for s in splits):
            raise InputError(f"workload splits must be a non-empty subset of {', '.join(SPLITS)}, got {self.splits!r}")
        object.__setattr__(self, "splits", splits)
        if not (np.isfinite(self.weight) and self.weight > 0):
            raise InputError(f"workload weight must be a positive number, got {self.weight!r}")

    @property
    def num_hops(self) -> int:
        return len(self.fanouts)

    @property
    def fanout_table(self) -> np.ndarray:
        """int64 ``[L, R]``: :attr:`fanouts` as an array, as every sampler kind takes it
        (:func:`~salientpp.sampling.make_sampler`)."""
        return np.array(self.fanouts, dtype=np.int64).reshape(len(self.fanouts), len(self.relations))

    @property
    def hop_fanouts(self) -> tuple[int, ...]:
        """The most neighbours a node draws at each hop: of each node type the fanouts of the
        relations into it summed, the largest over the types (-1 where a relation takes them
        all; at least 1). One list, for estimates of a batch's size (a homogeneous workload's
        one column)."""
        into = [Relation.parse(r).dst for r in self.relations]
        hops = []
        for row in self.fanouts:
            drawn: dict[str, int] = {}
            for dst, fanout in zip(into, row):
                drawn[dst] = drawn.get(dst, 0) + fanout
            hops.append(-1 if -1 in row else max(1, *drawn.values()))
        return tuple(hops)

    def seeds(self, dataset, k: int) -> np.ndarray:
        """Partition ``k``'s seeds of a PartitionedDataset (new global numbering): int64 sorted node
        ids ``[n]``, or with :attr:`edges` its int64 ``[2, E]`` edges."""
        part = dataset.part(k)
        if self.edges is not None:
            arrays = [np.asarray(getattr(part, f"{s}_edges"), dtype=np.int64) for s in self.splits]
            return arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=1)
        arrays = [np.asarray(getattr(part, f"{s}_idx"), dtype=np.int64) for s in self.splits]
        return arrays[0] if len(arrays) == 1 else np.unique(np.concatenate(arrays))

    def seed_nodes(self, dataset, k: int) -> np.ndarray:
        """int64 sorted node ids partition ``k``'s batches start from (an edge workload: the
        edges' endpoints; negatives aside)."""
        seeds = self.seeds(dataset, k)
        return np.unique(seeds) if self.edges is not None else seeds

    def num_seeds(self, dataset, k: int) -> int:
        """Partition ``k``'s seeds: nodes, or edges."""
        return int(self.seeds(dataset, k).shape[-1])

    def lockstep_steps(self, dataset) -> int:
        """S: the minibatches per epoch of every partition when the ranks run in lockstep.

        ``S = max_k ceil(|seeds_k| / batch_size)`` over the partitions of a PartitionedDataset
        (0 when no partition has seeds). Each partition cuts its shuffled seeds into S balanced
        batches (``NeighborLoader(..., num_batches=S)``), so every seed is in exactly one batch
        per epoch and a batch holds at most ``batch_size`` seeds.
        """
        return lockstep_steps([self.num_seeds(dataset, k) for k in range(dataset.num_parts)], self.batch_size)

    def to_json(self) -> dict:
        """The workload as JSON: its fanouts the table's rows, with its relations; a homogeneous
        graph's (:data:`HOMOGENEOUS_RELATIONS`) the one list of hops, without relations, as plans
        and results have recorded it since before typed graphs (:meth:`from_json` reads both)."""
        hops = self.relations == HOMOGENEOUS_RELATIONS
        return {"fanouts": [row[0] for row in self.fanouts] if hops else [list(row) for row in self.fanouts],
                "batch_size": self.batch_size, "replace": self.replace,
                "splits": list(self.splits), "weight": self.weight, "sampler": self.sampler.value,
                "edges": None if self.edges is None else self.edges.to_json(),
                **({} if hops else {"relations": list(self.relations)})}

    @classmethod
    def from_json(cls, entry: dict) -> "Workload":
        return cls(fanouts=entry["fanouts"], batch_size=int(entry["batch_size"]),
                   replace=bool(entry["replace"]), splits=tuple(entry["splits"]), weight=float(entry["weight"]),
                   sampler=entry.get("sampler", NODEWISE.value),
                   edges=None if entry.get("edges") is None else EdgeSeeds(**entry["edges"]),
                   relations=tuple(entry.get("relations", ())))


def fanouts_text(workload: Workload) -> str:
    """A workload's fanouts as ``--fanouts`` takes them: ``15,10,5``; a typed table whose
    relations draw alike at every hop (none 0) in the same form, else one list per relation,
    ``REL=15,10;REL2=5,0`` (:func:`~salientpp.sampling.kinds.parse_typed_fanouts` reads it back)."""
    table = workload.fanout_table
    if (table == table[:, :1]).all() and (table != 0).all():
        return ",".join(str(f) for f in table[:, 0])
    return RELATION_LISTS.join(f"{rel}{RELATION_FANOUTS}{','.join(str(f) for f in table[:, r])}"
                               for r, rel in enumerate(workload.relations))


def fanouts_tag(workload: Workload) -> str:
    """A workload's fanouts in a file name: ``15-10-5``, hops joined by ``-``; a typed hop whose
    relations draw differently lists them in the order of its relations, joined by ``.``
    (``15.0.5-10.0.5``)."""
    table = workload.fanout_table
    return "-".join(str(row[0]) if (row == row[0]).all() else ".".join(map(str, row)) for row in table)
