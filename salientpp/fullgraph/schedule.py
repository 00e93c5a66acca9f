"""Which remote dependencies a rank recomputes (caches) and which it exchanges (communicates).

Full-graph training of an L-layer GNN computes ``h^l`` (``h^0`` = the features) for the
vertices each layer needs. Rank k owns the ids ``[lo, hi)``; its loss needs ``h^L`` of its
training vertices T_k. Going down from the top, level l needs the rows

    need_l = C_{l+1} ∪ N(C_{l+1})          (C_L = T_k; N = in-neighbours)

where C_{l+1} are the vertices whose ``h^{l+1}`` the rank computes. At a hidden level
1 <= l <= L-1 every remote vertex of ``need_l`` is either

* **cached**: the rank computes its ``h^l`` itself (it joins C_l, so its own neighbours join
  need_{l-1}: a vertex cached at l needs its dependencies at l-1), or
* **communicated**: its owner sends ``h^l`` each epoch, and the rank sends the gradient back.

C_l always holds every owned vertex (an owner serves the rows the others communicate). At
level 0 the remote features are fetched once at start-up: they never change. ``cache`` caches
every remote vertex (C_l = the L-l hop in-neighbourhood of T_k: no exchange at all),
``communicate`` none (C_l = the owned vertices: the halo rows are exchanged at every hidden
level), and ``hybrid`` decides per vertex and level with a :class:`CostModel` (docs/full-graph.md):

    cache u at l  iff  r_l + a_l deg(u) + new_l(u) * min(x_{l-1}, r_{l-1} + a_{l-1} mean_deg)  <  x_l

with ``a_l``/``r_l`` the seconds per edge/row of the layer that computes level l (forward and
backward), ``x_l`` the seconds to move one row of width d_l forward and its gradient back, and
``new_l(u)`` the vertices among u and its neighbours that level l-1 needs for u alone (beyond
the owned vertices and their neighbours, which it needs anyway). Each must come from somewhere:
communicated, or recomputed (estimated at the mean degree); features (l-1 = 0) cost nothing per
epoch. :func:`schedule_dependencies` builds a schedule. The per-vertex rule misses what whole schedules
share (an all-to-all's fixed cost, saved only where a level exchanges nothing), so the trainer
predicts the epoch of every schedule of :func:`candidate_schedules` (per vertex, pure, or split by
level) and probes the schedules predicted close to the fastest
(:class:`~salientpp.train.fullgraph.FullGraphTrainer`).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..data.csr import row_edge_positions
from ..errors import check_choice


class Dependencies(str, enum.Enum):
    """How a rank gets the hidden embeddings of remote vertices (module docstring)."""

    CACHE = "cache"
    COMMUNICATE = "communicate"
    HYBRID = "hybrid"


def check_dependencies(value) -> Dependencies:
    """``value`` as a :class:`Dependencies`; :class:`InputError` naming the choices."""
    return check_choice(Dependencies, value, "dependency mode")


@dataclass(frozen=True)
class CostModel:
    """Seconds of one epoch's unit operations on this machine, forward and backward together.

    Attributes:
        row_s: ``[L]`` per destination row of layer i (its dense transforms, ReLU, dropout).
        edge_s: ``[L]`` per edge of layer i (gathering and summing a source row).
        byte_s: per byte an all-to-all moves into one rank.
        exchange_s: the fixed cost of one all-to-all.
        step_s: the all-reduce of the parameters' gradients (once per epoch, every mode).
    """

    row_s: tuple[float, ...]
    edge_s: tuple[float, ...]
    byte_s: float
    exchange_s: float
    step_s: float = 0.0

    def row_exchange_s(self, width: int) -> float:
        """One float32 row of ``width`` forward and its gradient back."""
        return 2 * 4 * width * self.byte_s


@dataclass(frozen=True)
class DependencySchedule:
    """One rank's sets per level, global ids.

    Attributes:
        lo, hi: the owned ids ``[lo, hi)``.
        computed: L + 1 int64 arrays. ``computed[l]`` (l >= 1): the vertices whose ``h^l`` the rank
            computes, the owned ones (ascending; at l = L the training vertices only) first, then
            the cached remote ones (ascending). ``computed[0]``: the vertices whose features it
            holds, owned first, then the remote ones fetched at start-up.
        fetched: L int64 arrays; ``fetched[l]`` (1 <= l <= L-1): remote vertices whose ``h^l``
            their owners send each epoch, ascending (hence grouped by owner); ``fetched[0]`` is empty.
        degree: int64 ``[N]``, in-degrees (shared, not copied).
    """

    lo: int
    hi: int
    computed: tuple[np.ndarray, ...]
    fetched: tuple[np.ndarray, ...]
    degree: np.ndarray

    @property
    def num_layers(self) -> int:
        return len(self.fetched)

    def same_sets(self, other: "DependencySchedule") -> bool:
        """Whether ``other`` computes and fetches the same vertices at every level."""
        return all(np.array_equal(a, b) for a, b in zip(self.computed + self.fetched, other.computed + other.fetched))

    def cached(self, level: int) -> np.ndarray:
        """Remote vertices whose ``h^level`` this rank computes itself."""
        ids = self.computed[level]
        return ids[(ids < self.lo) | (ids >= self.hi)]

    @property
    def redundant_vertex_layers(self) -> int:
        """Remote vertex-levels this rank computes (l = 1..L): work their owners also do."""
        return sum(int(self.cached(level).shape[0]) for level in range(1, self.num_layers + 1))

    @property
    def exchanged_rows(self) -> int:
        """Rows this rank receives per epoch (each also sends a gradient back)."""
        return sum(int(f.shape[0]) for f in self.fetched)

    def edges(self, layer: int) -> int:
        """Edges layer ``layer`` aggregates (into ``computed[layer + 1]``)."""
        return int(self.degree[self.computed[layer + 1]].sum())

    def segment_seconds(self, cost: CostModel, dims: Sequence[int], active: Sequence[bool]) -> list[float]:
        """This rank's predicted seconds per epoch between synchronisations: the all-to-all of a
        level where ``active[l]`` (any rank communicates there) is a barrier, forward and
        backward, so the layers between two such levels form one segment (their rows and edges),
        and each exchange is one more (its fixed cost and rows). The epoch takes, per segment,
        its slowest rank's time (:func:`~salientpp.fullgraph.engine.predicted_epoch_s`)."""
        segments: list[float] = []
        for i in range(self.num_layers):
            if i == 0 or active[i]:
                segments.append(0.0)
            segments[-1] += cost.row_s[i] * self.computed[i + 1].shape[0] + cost.edge_s[i] * self.edges(i)
        segments += [2 * cost.exchange_s + cost.row_exchange_s(dims[level]) * self.fetched[level].shape[0]
                     for level in range(1, self.num_layers) if active[level]]
        return segments


def in_neighbours(rowptr: np.ndarray, col: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The distinct in-neighbours of ``ids`` (int64, ascending)."""
    positions, _ = row_edge_positions(rowptr, ids)
    return np.unique(np.asarray(col)[positions])


def _new_dependencies(rowptr: np.ndarray, col: np.ndarray, candidates: np.ndarray, known: np.ndarray) -> np.ndarray:
    """int64 ``[n]``: for each candidate u, how many of u and its in-neighbours are not ``known``
    (a bool ``[N]`` mask)."""
    positions, degree = row_edge_positions(rowptr, candidates)
    segment = np.repeat(np.arange(candidates.shape[0]), degree)
    unknown = np.bincount(segment, weights=~known[np.asarray(col)[positions]], minlength=candidates.shape[0])
    return unknown.astype(np.int64) + ~known[candidates]


def schedule_dependencies(rowptr: np.ndarray, col: np.ndarray, lo: int, hi: int, targets: np.ndarray, num_layers: int,
                      mode: Dependencies | Sequence[Dependencies], cost: CostModel | None = None,
                      dims: Sequence[int] | None = None) -> DependencySchedule:
    """The :class:`DependencySchedule` of the rank owning ``[lo, hi)`` whose loss needs ``h^L`` of
    ``targets`` (owned global ids). ``mode`` is one for every hidden level, or one per level
    ``1..L-1`` (``mode[l - 1]``); ``hybrid`` needs ``cost`` and the layer widths ``dims``
    (``[d_0, ..., d_L]``)."""
    rowptr = np.asarray(rowptr)
    num_nodes = rowptr.shape[0] - 1
    degree = np.diff(rowptr).astype(np.int64)
    mean_degree = float(degree.mean()) if num_nodes else 0.0
    owned = np.arange(lo, hi, dtype=np.int64)
    modes = [mode] * (num_layers - 1) if isinstance(mode, Dependencies) else list(mode)
    if len(modes) != num_layers - 1:
        raise ValueError(f"{len(modes)} level modes for {num_layers - 1} hidden levels")
    if Dependencies.HYBRID in modes and (cost is None or dims is None):
        raise ValueError("a hybrid schedule needs a cost model and the layer widths")
    computed: list[np.ndarray] = [np.empty(0, np.int64)] * (num_layers + 1)
    fetched: list[np.ndarray] = [np.empty(0, np.int64) for _ in range(num_layers)]
    computed[num_layers] = np.unique(np.asarray(targets, dtype=np.int64))
    # Needed at every level below L whatever is cached: the owned vertices and their neighbours.
    known = np.zeros(num_nodes, dtype=bool)
    known[owned] = True
    known[in_neighbours(rowptr, col, owned)] = True
    for level in range(num_layers - 1, -1, -1):
        above = computed[level + 1]
        need = np.union1d(above, in_neighbours(rowptr, col, above))
        remote = need[(need < lo) | (need >= hi)]
        if level == 0 or modes[level - 1] is Dependencies.CACHE:
            cache = np.ones(remote.shape[0], dtype=bool)
        elif modes[level - 1] is Dependencies.COMMUNICATE:
            cache = np.zeros(remote.shape[0], dtype=bool)
        else:
            compute = cost.row_s[level - 1] + cost.edge_s[level - 1] * degree[remote]
            # A new dependency at level - 1 is fetched or recomputed, whichever is cheaper (for a
            # vertex of mean degree); features (level 1 reads level 0) cost nothing per epoch.
            below = 0.0 if level == 1 else min(cost.row_exchange_s(dims[level - 1]),
                                               cost.row_s[level - 2] + cost.edge_s[level - 2] * mean_degree)
            compute = compute + below * _new_dependencies(rowptr, col, remote, known)
            cache = compute < cost.row_exchange_s(dims[level])
        computed[level] = np.concatenate([owned, remote[cache]])
        if level > 0:
            fetched[level] = remote[~cache]
    return DependencySchedule(lo, hi, tuple(computed), tuple(fetched), degree)


# The name of the candidate schedule that decides per vertex at every level (the rule above).
PER_VERTEX = "per-vertex"


def candidate_schedules(num_layers: int) -> dict[str, list[Dependencies]]:
    """The per-level modes ``hybrid`` chooses from, by name: :data:`PER_VERTEX` (the rule at
    every level), ``cache``, ``communicate``, and ``cache-l1,l2`` for every other set of hidden
    levels cached whole (the rest communicated)."""
    hidden = range(1, num_layers)
    schedules = {PER_VERTEX: [Dependencies.HYBRID] * len(hidden),
             Dependencies.CACHE.value: [Dependencies.CACHE] * len(hidden),
             Dependencies.COMMUNICATE.value: [Dependencies.COMMUNICATE] * len(hidden)}
    for mask in range(1, (1 << len(hidden)) - 1):
        levels = [level for level in hidden if mask >> (level - 1) & 1]
        schedules["cache-" + ",".join(map(str, levels))] = [
            Dependencies.CACHE if level in levels else Dependencies.COMMUNICATE for level in hidden]
    return schedules
