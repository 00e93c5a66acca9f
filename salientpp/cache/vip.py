r"""Vertex inclusion probabilities (VIP) of node-wise neighbour sampling.

The sampler (``salientpp.sampling``) builds one message-flow graph per layer: at hop h every
vertex reached so far (not only the new frontier) draws ``min(f_h, d(u))`` distinct neighbours
uniformly (with ``replace=True``: ``f_h`` uniform draws, duplicates merged), and
``n_id[:count after hop h]`` is the node set :math:`S^h` after hop h, so
:math:`S^0 \subseteq S^1 \subseteq \dots \subseteq S^L`.

Let :math:`T_k` be partition k's seed set and b the batch size. The ranks run in lockstep, so
every partition runs the same number of minibatches per epoch,
:math:`S = \max_j \lceil |T_j| / b \rceil`: partition k shuffles :math:`T_k` and cuts it into S
balanced batches (``NeighborLoader(..., num_batches=S)``; sizes :math:`\lfloor |T_k|/S \rfloor`
or :math:`\lceil |T_k|/S \rceil`, at most b). Batch i is a uniform random subset of
:math:`T_k` of its size, and every seed lies in exactly one batch of the epoch, so per
minibatch (averaged over the S batches) :math:`p^0(v) = 1/S` on :math:`T_k` and 0 elsewhere.
Batch i's own seed probability :math:`n_i/|T_k|` is within :math:`1/|T_k|` of it, since sizes
differ by at most one; a partition with fewer than S seeds has batches without seeds, and the
average is still exactly 1/S. A neighbour u that is in :math:`S^{h-1}` picks v with probability

* without replacement: :math:`w_h(u) = \min(1, f_h / d(u))`,
* with replacement:    :math:`w_h(u) = 1 - (1 - 1/d(u))^{f_h}`,
* fanout -1:           :math:`w_h(u) = 1`.

v is outside :math:`S^h` iff it was outside :math:`S^{h-1}` and no neighbour in
:math:`S^{h-1}` picked it. Treating these events as independent gives the recurrence

.. math::  p^h(v) = 1 - (1 - p^{h-1}(v)) \prod_{u \in N(v)} \bigl(1 - w_h(u)\, p^{h-1}(u)\bigr).

Because the sets are nested, "v is in the minibatch" is the event :math:`v \in S^L`, so
:math:`\mathrm{VIP}_k(v) = p^L(v)`. (The product :math:`1 - \prod_h (1 - p^h(v))` over hops
that some formulations use would count the same event several times; with nested sets it is
simply :math:`p^L`.)

Accuracy. Hop 1 is exact up to the correlation of the seed draw (a fixed-size subset, not
independent coins): the relative error of the product is about :math:`p^0 m^2 / (2|T_k|)` for
a vertex with m seed neighbours, negligible when :math:`|T_k| \gg m^2`. From hop 2 on, the neighbours'
inclusion events are positively correlated (shared ancestors) and they are not independent of
v's own absence, so the product over-estimates: a few per cent per hop on sparse graphs.

``method`` selects the estimate:

* ``"exact"``  the recurrence above (the default).
* ``"taylor"`` :math:`1 - (1 - p^{h-1}(v)) \exp(-\sum_u w_h(u) p^{h-1}(u))`, the first-order
  form the reference implementation ships; it is never larger than the exact form and falls
  short where single terms :math:`w_h(u) p^{h-1}(u)` are large (large batches, low degrees).
* ``"cavity"`` the exact product, but each neighbour's probability excludes the path back
  through v (a non-backtracking, cavity-style correction): v outside :math:`S^{h-1}` means v
  cannot have pulled u in at hop h-1, so u's factor for v is divided out,
  :math:`1 - \tilde p^{h-1}_{u \setminus v} = (1 - p^{h-1}(u)) / (1 - w_{h-1}(v) p^{h-2}(v))`.
  Hops 0-1 are unchanged; from hop 2 on it removes much of the over-estimate at the same cost.
* ``"pair"``   the cavity product times a second-order term for siblings: neighbours u1, u2 of
  v that one parent x in :math:`S^{h-2}` may draw together at hop h-1 are positively correlated
  (co-authors of a paper enter together), which the product ignores. With :math:`I_u` = [u in
  :math:`S^{h-1}`] and :math:`A_u` u's cavity factor, :math:`E[\prod_u (1 - w_u I_u)] \approx
  \prod_u A_u \, (1 + \sum_{u_1 < u_2} w_{u_1} w_{u_2} \mathrm{Cov}(I_{u_1}, I_{u_2}) / (A_{u_1} A_{u_2}))`,
  and the covariance that x brings is :math:`(1 - y_1)(1 - y_2)\, p^{h-2}(x) (\pi_x(u_1, u_2) -
  p^{h-2}(x) w_x(u_1) w_x(u_2))`, where :math:`1 - y_i = (1 - p^{h-1}(u_i)) / (1 - p^{h-2}(x) w_x(u_i))`
  is :math:`u_i`'s absence but for x's draw and :math:`\pi_x` the probability that x's draw at hop
  h-1 picks both: :math:`w_x(u_1) w_x(u_2)` through different relations (independent draws),
  times :func:`pair_ratio` through one (:math:`(f-1)d / (f(d-1))` without replacement). The sum
  runs over the paths v - u - x (x not v) grouped by x, so it costs the two-hop neighbourhood of
  every vertex (a sort per vertex): 65 times ``cavity`` on 9,400 nodes, more on larger graphs
  (docs/typed-graphs.md). Node-wise sampling only. On the
  IGBH-shaped preset it removes the +7% hop-2 over-estimate of institutes (reached only through
  co-authors) that ``cavity`` leaves (docs/cache.md, "Typed graphs").

**Typed graphs** (:mod:`salientpp.data.schema`). At hop h every vertex u of :math:`S^{h-1}`
draws, for each relation r into u's type, ``fanouts[h - 1][r]`` of its relation-r in-neighbours
(-1 = all, 0 = none; ``fanouts`` is the int64 ``[L, R]`` table that
:func:`~salientpp.sampling.kinds.fanout_table` makes). The CSR is the symmetric typed one
(:func:`~salientpp.data.csr.build_typed_csr`): entry e of row v is ``u = col[e]`` of relation
``r = edge_rel[e]``, the edge u -> v that v draws among its relation-r in-neighbours, and u draws
v through the reverse :math:`r' = \mathrm{rev}(r)`, among its :math:`d_{r'}(u)` entries of
relation r' (:func:`relation_degrees`, ``[N, R]``). So u picks v with probability
:math:`w_h(u, r')`, the weights above with :math:`d_{r'}(u)` for d(u) and the relation's fanout
:math:`f_{h,r'}` for :math:`f_h` (:func:`pick_weights` per relation), and

.. math::  p^h(v) = 1 - (1 - p^{h-1}(v)) \prod_{e \in \mathrm{row}(v)}
           \bigl(1 - w_h(u_e, \mathrm{rev}(r_e))\, p^{h-1}(u_e)\bigr).

The taylor form sums the same terms; the cavity form divides u's absence by v's own pick of u at
hop h - 1, which used the entry's relation, :math:`1 - w_{h-1}(v, r_e)\, p^{h-2}(v)` (and by u's
pick of v, :math:`1 - w_{h-1}(u, \mathrm{rev}(r_e))\, p^{h-2}(u)`, as the kernel does for one
relation). A homogeneous graph is the case of one relation that is its own reverse
(:meth:`~salientpp.data.schema.GraphSchema.homogeneous`): the same kernels run on it, with
weights ``[N, 1]`` and the relation of every entry one ``np.int8`` constant (which numba compiles
hoisted out of the loops, no memory per entry), so its speed is that of the untyped recurrence.
A relation of fanout 0 at every hop leaves out the types reachable only through it.
:func:`expected_nodes_per_type` sums VIP per node type: the expected vertices of each type per
minibatch. LADIES stays homogeneous (its ``"ladies"`` distribution refuses a graph of several
types or relations). Accuracy: hop 1 is exact as above, and against a reference
typed sampler of a few dozen nodes the cavity estimate is within 2% per type from hop 2 on
(``tests/test_vip.py``). A type reached only through siblings one parent pulls in together (IGBH's
institutes, through the authors of a paper) is over-estimated by the cavity form at hop 2 (+7% on
``synthetic:igbh`` in 4 parts, b = 16): the ``"pair"`` form corrects it to within 1%
(``experiments/typed_vip_accuracy.py`` measures every type and hop against the C++ sampler).

**LADIES** (:class:`~salientpp.sampling.BulkSampler` ``method="ladies"``; ``fanouts`` are layer
sizes :math:`s_h`). Given the set :math:`S = S^{h-1}`, hop h draws :math:`s_h` nodes independently
from :math:`q_j(S) = m_j(S) / Z(S)` with :math:`m_j(S) = \sum_{i \in S \cap N(j)} d_i^{-2}` and
:math:`Z(S) = \sum_{i \in S} d_i^{-1}` (the squared column norms of the row-selected
:math:`D^{-1}A`; :math:`Z = \sum_j m_j`), and :math:`S^h = S^{h-1} \cup` drawn. So, exactly,

.. math::  P(v \in S^h \mid S) = 1 - \mathbf 1[v \notin S]\,(1 - q_v(S))^{s_h}.

Z sums over hundreds of vertices and barely varies, so it is replaced by its expectation
:math:`\bar Z = \sum_u p^{h-1}(u) / d_u`. :math:`m_v` does vary: it is a sum over v's few
neighbours in S, and :math:`(1 - q)^{s}` is convex, so plugging in :math:`E[m_v]` over-estimates
badly (+12% vertices at hop 1 on ``small``). Instead, with :math:`(1 - q)^s \approx e^{-s q}`
(q is below 1e-3 here), the draw factorises over v's neighbours,
:math:`e^{-s_h m_v / \bar Z} = \prod_{u \in N(v) \cap S} e^{-s_h / (d_u^2 \bar Z)}`, and treating the
neighbours' memberships as independent, as the node-wise recurrence does, gives the same form as
the node-wise recurrence with a per-partition pick weight:

.. math::  p^h(v) = 1 - (1 - p^{h-1}(v)) \prod_{u \in N(v)} \bigl(1 - w_h(u)\, p^{h-1}(u)\bigr),
           \qquad w_h(u) = 1 - e^{-s_h / (d_u^2 \bar Z)}.

From hop 2 on, the same correlation the cavity form corrects for node-wise sampling makes this
over-estimate (a vertex absent from :math:`S^{h-1}` was not drawn through its neighbours, so they
were less likely in the layer before): the ``method`` choices apply with these weights, and
``cavity`` is LADIES's default (:func:`default_method`). ``bench vip --sampler ladies`` measures them.

**Sampler kinds.** A kind's ``distribution`` (:class:`~salientpp.sampling.SamplerKind`) selects
its pick weights :math:`w_h` in :data:`VIP_MODELS`, never the kind itself: node-wise and bulk
node-wise draw the ``"nodewise"`` distribution, LADIES the ``"ladies"`` one. A kind of a new
distribution needs its weights there (:func:`vip_model` refuses it until then).

**Link prediction** (:class:`~salientpp.sampling.link_loader.LinkNeighborLoader`). Partition k's
seeds are its :math:`E_k` edges (those whose source it owns). The ranks run
:math:`S = \max_j \lceil E_j / b \rceil` batches in lockstep: partition k shuffles its edges and
cuts them into S balanced batches, batch i a uniform random subset of
:math:`n_i = \lfloor (i + 1) E_k / S \rfloor - \lfloor i E_k / S \rfloor` edges
(:math:`E_k \bmod S` batches of :math:`\lceil E_k / S \rceil`, the others of
:math:`\lfloor E_k / S \rfloor`). Each positive brings r negatives (:mod:`~salientpp.sampling.link`),
and the batch's node seeds are the distinct endpoints of both. Let :math:`m = m_k(v)` count
partition k's edges incident to v, as source or destination (the data layer refuses self loops;
one would count once).

* Positives: none of v's m edges is in batch i iff the batch lies among the other
  :math:`E_k - m` edges, with probability
  :math:`A_i(m) = \binom{E_k - m}{n_i} / \binom{E_k}{n_i} = \prod_{j < m} (1 - n_i / (E_k - j))`.
  Drawing with replacement would give :math:`(1 - n_i / E_k)^m`: equal for :math:`m \le 1`, but
  larger by the factor :math:`\approx \exp(m (m - 1) / (2 E_k (S - 1)))` for :math:`n_i = E_k / S`
  (1.6 for the hub of the test graph, m = 37 of :math:`E_k` = 263 edges, S = 7: the chance that
  none of its edges is in a batch comes out 60% too high). The product costs no more (a
  cumulative sum over m), so it is used.
* Negatives: :math:`r\, n_i` destinations drawn uniformly and independently over the
  :math:`N_d` nodes of the relation's destination type and, for ``uniform`` negatives, as many
  sources over the :math:`N_s` nodes of its source type (``per-source`` negatives' sources are the
  positives' sources, seeds already; a homogeneous graph's both ends range over all N vertices),
  so v is none of them with probability :math:`B_i(v) = \beta(v)^{n_i}`, with
  :math:`\beta(v) = (1 - 1/N_d)^{r [v \in d]} (1 - 1/N_s)^{r [v \in s]}` (the second factor for
  ``uniform`` only; :math:`(1 - 1/N)^{2 r}` where one node type holds all N vertices).

The negatives are drawn independently of which edges the batch holds, so v is not a node seed
of batch i with probability exactly :math:`A_i(m) B_i`, and per minibatch (averaged over the S
batches of an epoch, as for node seeds)

.. math::  p^0_k(v) = 1 - \frac{1}{S} \sum_{i=1}^{S} A_i(m_k(v))\, \beta(v)^{n_i}

(:func:`link_seed_probabilities`: two batch sizes, so two tables over m). To first order this is
:math:`1 - (1 - 1/S)^{m} \beta(v)^{E_k / S}`. The recurrence runs from it unchanged
(``seed_probs``). Hop 1 is again exact up to the correlation of the seed draw, which edges make
stronger: both ends of an edge enter together, so where the seed edges are also graph edges (as
in training) a vertex that is not a seed has none of its edges in the batch, its partners are
less likely seeds than :math:`p^0` says, and :math:`p^1` over-estimates slightly: +0.4% to +2.5%
vertices at hop 1 on the test graph of ``tests/test_link_seeds.py``, within 0.1% when the seed
edges are not graph edges.
``bench vip --task link`` and ``simulate --task link`` check it against the sampler.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numba
import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from ..errors import InputError, check_int
from ..data.schema import GraphSchema
from ..sampling.kinds import DEFAULT_SAMPLER, SamplerKind, check_replace, check_sampler, fanout_table
from ..sampling.link import LinkEnds, NegativeSampling, check_negative_sampling, check_num_negatives
from .workload import Workload, check_batch_size, lockstep_steps

METHODS = ("exact", "taylor", "cavity", "pair")


def default_method(sampler: SamplerKind | str) -> str:
    """The VIP estimate used unless one is chosen, the sampler kind's ``default_vip_method``:
    ``exact`` for node-wise sampling, ``cavity`` for LADIES, whose plain recurrence over-estimates
    by 4-12% from hop 2 on (``bench vip``, docs/cache.md)."""
    return check_sampler(sampler).default_vip_method


def _rel(edge_rel, j):  # pragma: no cover - compiled through its overload
    """The relation of the CSR entry ``j``."""
    raise NotImplementedError


@overload(_rel, inline="always")
def _rel_kernel(edge_rel, j):  # pragma: no cover - compiled
    # edge_rel int8 [nnz], or the one int8 relation of every entry (a graph of one relation,
    # :func:`_relations`): numba compiles each kernel once for each, the constant hoisted out of its loops.
    if isinstance(edge_rel, types.Integer):
        return lambda edge_rel, j: edge_rel
    return lambda edge_rel, j: edge_rel[j]


@njit(inline="always")
def _pick(w, edge_rel, reverse, u, j):  # pragma: no cover - compiled
    """The weight with which ``u = col[j]`` picks the vertex of row ``v`` (the CSR entry ``j``): u
    draws v through the reverse of the entry's relation (w float64 ``[N, R]``)."""
    return w[u, reverse[_rel(edge_rel, j)]]


@njit(inline="always")
def _own(w, edge_rel, v, j):  # pragma: no cover - compiled
    """The weight with which ``v`` picks its neighbour ``col[j]`` (the CSR entry ``j`` of row ``v``)."""
    return w[v, _rel(edge_rel, j)]


@njit(parallel=True, cache=True)
def _hop_product(rowptr, col, edge_rel, reverse, w, prev, out):  # pragma: no cover - compiled
    n, num_parts = prev.shape
    for v in prange(n):
        for k in range(num_parts):
            out[v, k] = 1.0 - prev[v, k]
        for j in range(rowptr[v], rowptr[v + 1]):
            u = col[j]
            wu = _pick(w, edge_rel, reverse, u, j)
            if wu > 0.0:
                for k in range(num_parts):
                    out[v, k] *= 1.0 - wu * prev[u, k]
        for k in range(num_parts):
            out[v, k] = 1.0 - out[v, k]


@njit(parallel=True, cache=True)
def _hop_taylor(rowptr, col, edge_rel, reverse, w, prev, out):  # pragma: no cover - compiled
    n, num_parts = prev.shape
    for v in prange(n):
        for k in range(num_parts):
            out[v, k] = 0.0
        for j in range(rowptr[v], rowptr[v + 1]):
            u = col[j]
            wu = _pick(w, edge_rel, reverse, u, j)
            if wu > 0.0:
                for k in range(num_parts):
                    out[v, k] += wu * prev[u, k]
        for k in range(num_parts):
            out[v, k] = 1.0 - (1.0 - prev[v, k]) * np.exp(-out[v, k])


@njit(inline="always")
def _cavity_absent(own, back, prev, prev2, v, u, k):  # pragma: no cover - compiled
    """u's absence from S^{h-1} with v's pick of u and u's pick of v at hop h - 1 divided out: the
    cavity form's factor for a CSR entry of row v (u its column) and partition k. ``own`` and
    ``back`` are those two picks' weights at hop h - 1 (``_own`` and ``_pick`` of ``w_prev`` at the
    entry), the same for every partition, so a kernel reads them once per entry."""
    q = 1.0 - prev[u, k]
    keep = (1.0 - own * prev2[v, k]) * (1.0 - back * prev2[u, k])
    if keep > 1e-12:  # keep == 0 only if v is surely in S^{h-1}: out is 0 anyway
        q = min(1.0, q / keep)
    return q


@njit(parallel=True, cache=True)
def _hop_cavity(rowptr, col, edge_rel, reverse, w, prev, w_prev, prev2, out):  # pragma: no cover - compiled
    n, num_parts = prev.shape
    for v in prange(n):
        for k in range(num_parts):
            out[v, k] = 1.0 - prev[v, k]
        for j in range(rowptr[v], rowptr[v + 1]):
            u = col[j]
            wu = _pick(w, edge_rel, reverse, u, j)
            if wu > 0.0:
                # v's own pick of u: through the entry's relation
                own, back = _own(w_prev, edge_rel, v, j), _pick(w_prev, edge_rel, reverse, u, j)
                for k in range(num_parts):
                    out[v, k] *= 1.0 - wu * (1.0 - _cavity_absent(own, back, prev, prev2, v, u, k))
        for k in range(num_parts):
            out[v, k] = 1.0 - out[v, k]


@njit(parallel=True, cache=True)
def _hop_pair(rowptr, col, edge_rel, reverse, w, prev, w_prev, prev2, ratio, out):  # pragma: no cover - compiled
    # The cavity product times 1 + the pair term of the siblings u1, u2 of v that one parent x in
    # S^{h-2} pulled in together at hop h - 1 (module docstring, "pair"). ratio[x, r]: P(x draws two
    # given relation-r entries) over the product of their single pick probabilities.
    n, num_parts = prev.shape
    num_relations = reverse.shape[0]
    for v in prange(n):
        size = 0
        for j in range(rowptr[v], rowptr[v + 1]):
            size += rowptr[col[j] + 1] - rowptr[col[j]]
        parent = np.empty(size, dtype=np.int64)  # x * R + the relation x draws u by, per path v - u - x
        via = np.empty(size, dtype=np.int64)  # the entry j of row v whose u = col[j] is x's pick
        size = 0
        for j in range(rowptr[v], rowptr[v + 1]):
            u = col[j]
            if _pick(w, edge_rel, reverse, u, j) > 0.0:
                for i in range(rowptr[u], rowptr[u + 1]):
                    x, r = col[i], reverse[_rel(edge_rel, i)]
                    if x != v and w_prev[x, r] > 0.0:
                        parent[size] = x * num_relations + r
                        via[size] = j
                        size += 1
        order = np.argsort(parent[:size])
        for k in range(num_parts):
            absent = 1.0 - prev[v, k]
            for j in range(rowptr[v], rowptr[v + 1]):
                u = col[j]
                wu = _pick(w, edge_rel, reverse, u, j)
                if wu > 0.0:
                    own, back = _own(w_prev, edge_rel, v, j), _pick(w_prev, edge_rel, reverse, u, j)
                    absent *= 1.0 - wu * (1.0 - _cavity_absent(own, back, prev, prev2, v, u, k))
            term = 0.0
            start = 0
            while start < size:
                x = parent[order[start]] // num_relations
                px = prev2[x, k]
                total = 0.0  # sum of b over x's relations so far, for the pairs drawn by different relations
                while start < size and parent[order[start]] // num_relations == x:
                    key = parent[order[start]]
                    r = key % num_relations
                    same = 0.0
                    squares = 0.0
                    while start < size and parent[order[start]] == key:
                        j = via[order[start]]
                        u = col[j]
                        wu = _pick(w, edge_rel, reverse, u, j)
                        wx = w_prev[x, r]
                        own, back = _own(w_prev, edge_rel, v, j), _pick(w_prev, edge_rel, reverse, u, j)
                        factor = 1.0 - wu * (1.0 - _cavity_absent(own, back, prev, prev2, v, u, k))
                        others = 1.0 - px * wx  # u's absence from S^{h-1} but for x's pick
                        if factor > 1e-12 and others > 1e-12:
                            b = wu * wx * (1.0 - prev[u, k]) / others / factor
                            same += b
                            squares += b * b
                        start += 1
                    term += px * (ratio[x, r] - px) * (same * same - squares) / 2.0 + px * (1.0 - px) * total * same
                    total += same
            out[v, k] = 1.0 - min(1.0 - prev[v, k], absent * (1.0 + max(0.0, term)))


def _count_row(rowptr, edge_rel, out, v):  # pragma: no cover - compiled through its overload
    """Add the entries of row ``v`` to ``out[v]``, by relation."""
    raise NotImplementedError


@overload(_count_row, inline="always")
def _count_row_kernel(rowptr, edge_rel, out, v):  # pragma: no cover - compiled
    if isinstance(edge_rel, types.Integer):  # every entry of one relation: the row's length
        def count(rowptr, edge_rel, out, v):
            out[v, edge_rel] += rowptr[v + 1] - rowptr[v]
        return count

    def count_each(rowptr, edge_rel, out, v):
        for j in range(rowptr[v], rowptr[v + 1]):
            out[v, edge_rel[j]] += 1
    return count_each


@njit(parallel=True, cache=True)
def _relation_degrees(rowptr, edge_rel, out):  # pragma: no cover - compiled
    for v in prange(rowptr.shape[0] - 1):
        _count_row(rowptr, edge_rel, out, v)


@njit(parallel=True, cache=True)
def _neighbour_sum(rowptr, col, x, out):  # pragma: no cover - compiled
    n, num_parts = x.shape
    for v in prange(n):
        for k in range(num_parts):
            out[v, k] = 0.0
        for j in range(rowptr[v], rowptr[v + 1]):
            u = col[j]
            for k in range(num_parts):
                out[v, k] += x[u, k]


def pick_weights(degree: np.ndarray, fanout, replace: bool) -> np.ndarray:
    """float64 ``[N]``: probability that a vertex of degree ``d(u)`` in the frontier picks one given
    neighbour when it draws ``fanout`` of them (-1 = all, 0 = none). Per relation: ``degree`` int
    ``[N, R]`` (:func:`relation_degrees`) and ``fanout`` int ``[R]`` give float64 ``[N, R]``."""
    d = np.asarray(degree, dtype=np.float64)
    f = np.asarray(fanout)
    with np.errstate(divide="ignore", invalid="ignore"):
        if replace:
            w = 1.0 - np.power(1.0 - 1.0 / d, f)
        else:
            w = np.minimum(1.0, f / d)
    np.copyto(w, d > 0, where=f == -1)
    w[d == 0] = 0.0
    return w


def pair_ratio(degree: np.ndarray, fanout, replace: bool) -> np.ndarray:
    """float64 like ``degree`` (``[N]``, or ``[N, R]`` with ``fanout`` ``[R]``): the probability that a
    vertex of degree d picks two given neighbours of one relation in one draw of ``fanout`` of them,
    over :math:`w^2` (:func:`pick_weights`): :math:`(f - 1) d / (f (d - 1))` without replacement
    (below 1: the picks exclude each other), :math:`(1 - 2(1 - 1/d)^f + (1 - 2/d)^f) / w^2` with
    replacement, 1 when it takes them all; 1 where d < 2 (no pair to draw)."""
    d = np.asarray(degree, dtype=np.float64)
    f = np.broadcast_to(np.asarray(fanout, dtype=np.float64), d.shape)
    w = pick_weights(degree, fanout, replace)
    with np.errstate(divide="ignore", invalid="ignore"):
        if replace:
            both = 1.0 - 2.0 * np.power(1.0 - 1.0 / d, f) + np.power(1.0 - 2.0 / d, f)
            ratio = both / (w * w)
        else:
            ratio = (f - 1.0) * d / (f * (d - 1.0))
    takes_all = (f == -1) | (~replace & (f >= d))
    return np.where((d < 2) | takes_all | (w == 0), 1.0, ratio)


def relation_degrees(rowptr: np.ndarray, edge_rel: np.ndarray, num_relations: int) -> np.ndarray:
    """int64 ``[N, R]``: ``out[v, r]`` counts the relation-r entries of row ``v`` (``rowptr`` int64
    ``[N + 1]``, ``edge_rel`` int8 ``[nnz]`` with values in ``[0, R)``, or one int8: the relation
    of every entry), v's relation-r in-neighbours."""
    out = np.zeros((rowptr.shape[0] - 1, num_relations), dtype=np.int64)
    _relation_degrees(_kernel_array(rowptr, np.int64), _kernel_relations(edge_rel), out)
    return out


def seed_probabilities(num_nodes: int, seed_sets: Sequence[np.ndarray], batch_size: int, *,
                       num_batches: int | None = None) -> np.ndarray:
    """float64 ``[N, K]``: :math:`p^0`, ``1/S`` on partition k's seeds, 0 elsewhere.

    ``S = num_batches``, by default :func:`lockstep_steps` of the seed sets, ``max_k ceil(|T_k| / b)``:
    the batches per epoch that every partition runs, each seed in exactly one of them.
    """
    batch_size = check_batch_size(batch_size)
    sets = [np.unique(np.asarray(seeds, dtype=np.int64)) for seeds in seed_sets]
    steps = lockstep_steps([s.size for s in sets], batch_size) if num_batches is None else _check_steps(num_batches)
    p0 = np.zeros((num_nodes, len(sets)), dtype=np.float64)
    for k, seeds in enumerate(sets):
        if seeds.size:
            if seeds[0] < 0 or seeds[-1] >= num_nodes:
                raise InputError(f"seed ids of partition {k} lie outside [0, {num_nodes}); re-partition the dataset")
            p0[seeds, k] = 1.0 / steps
    return p0


def link_seed_probabilities(num_nodes: int, edge_sets: Sequence[np.ndarray], batch_size: int, num_negatives: int,
                            mode: NegativeSampling | str, ends: LinkEnds, *,
                            num_batches: int | None = None) -> np.ndarray:
    """float64 ``[N, K]``: :math:`p^0` of link batches, the probability that a vertex is a node seed of
    a batch of partition k, averaged over the S batches of an epoch (module docstring, "Link prediction").

    Args:
        edge_sets: K int64 ``[2, E_k]`` arrays, partition k's seed edges (global ids).
        batch_size: b, the most edges per batch; num_negatives: r per edge; mode: how negatives are drawn.
        ends: the pools of the negatives' ends (:class:`~salientpp.sampling.link.LinkEnds`).
        num_batches: S, overriding ``max_k ceil(E_k / b)``.
    """
    batch_size = check_batch_size(batch_size)
    r = check_num_negatives(num_negatives)
    pools = [ends.destinations] + ([] if check_negative_sampling(mode) is NegativeSampling.PER_SOURCE
                                   else [ends.sources])
    ids = np.arange(num_nodes, dtype=np.int64)
    miss = np.ones(num_nodes)  # beta(v): the chance that one edge's negatives all miss v
    for pool in pools:
        miss *= np.where(pool.contains(ids), (1.0 - 1.0 / max(pool.size, 1)) ** r, 1.0)
    sets = [_check_edge_set(edges, num_nodes, k) for k, edges in enumerate(edge_sets)]
    sizes = [edges.shape[1] for edges in sets]
    steps = lockstep_steps(sizes, batch_size) if num_batches is None else _check_steps(num_batches)
    p0 = np.zeros((num_nodes, len(sets)), dtype=np.float64)
    for k, (source, target) in enumerate(sets):
        total = sizes[k]
        if total == 0:
            continue
        incident = np.bincount(source, minlength=num_nodes) + np.bincount(target[target != source],
                                                                           minlength=num_nodes)
        beyond = total - np.arange(incident.max())  # E_k - j for j < max m
        absent = np.zeros(num_nodes)  # sum over the batches of A_i(m(v)) B_i(v)
        for size, count in ((total // steps, steps - total % steps), (total // steps + 1, total % steps)):
            with np.errstate(divide="ignore"):  # n_i >= E_k - j: the batch cannot miss v (log 0)
                log_none = np.log1p(-np.minimum(size / beyond, 1.0))
            none = np.exp(np.concatenate([[0.0], np.cumsum(log_none)]))
            absent += count * none[incident] * miss ** size
        p0[:, k] = 1.0 - absent / steps
    return p0


def _check_edge_set(edges, num_nodes: int, k: int) -> np.ndarray:
    """Partition ``k``'s seed edges as int64 ``[2, E]`` ids in ``[0, num_nodes)``, or :class:`InputError`."""
    edges = np.asarray(edges, dtype=np.int64)
    if edges.ndim != 2 or edges.shape[0] != 2:
        raise InputError(f"the seed edges of partition {k} must be an int64 [2, E] array, "
                         f"got shape {list(edges.shape)}")
    if edges.size and (edges.min() < 0 or edges.max() >= num_nodes):
        raise InputError(f"edge ids of partition {k} lie outside [0, {num_nodes}); re-partition the dataset")
    return edges


def workload_probabilities(dataset, workload: Workload, *, method: str = "exact", return_hops: bool = False,
                           num_threads: int | None = None) -> np.ndarray | list[np.ndarray]:
    """:func:`inclusion_probabilities` of one workload over every partition of a PartitionedDataset
    (its lockstep batches; node seeds, or edge seeds with :func:`link_seed_probabilities`), over the
    dataset's ``schema`` and ``edge_rel``. It passes the workload's
    :attr:`~Workload.fanout_table`, so a workload made without a typed dataset's schema (one
    column) is refused on it in one sentence."""
    seed_sets = [workload.seeds(dataset, k) for k in range(dataset.num_parts)]
    steps = workload.lockstep_steps(dataset)
    seed_probs = None
    if workload.edges is not None:
        seed_probs = link_seed_probabilities(dataset.num_nodes, seed_sets, workload.batch_size,
                                             workload.edges.num_negatives, workload.edges.negative_sampling,
                                             LinkEnds.of_partitions(dataset), num_batches=steps)
    return inclusion_probabilities(dataset.rowptr, dataset.col, seed_sets, workload.fanout_table, workload.batch_size,
                                   num_batches=steps, replace=workload.replace, method=method,
                                   return_hops=return_hops, num_threads=num_threads, sampler=workload.sampler,
                                   seed_probs=seed_probs, edge_rel=dataset.edge_rel, schema=dataset.schema)


def _check_steps(num_batches) -> int:
    return check_int(num_batches, "num_batches (batches per epoch)")


def _kernel_array(a, dtype) -> np.ndarray:
    """``a`` as a read-only ``dtype`` array (a view where it already is one) for the kernels: numba
    compiles a kernel once per signature, and a read-only array (a dataset's, memory-mapped) is
    another type than a writable one (an in-memory graph's), so the kernels take every graph
    array read-only: one compilation of about 1.5 s instead of two."""
    view = np.asarray(a, dtype=dtype).view()
    view.flags.writeable = False
    return view


def _as_csr(rowptr: np.ndarray, col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return _kernel_array(rowptr, np.int64), _kernel_array(col, np.int64)


def inclusion_probabilities(rowptr: np.ndarray, col: np.ndarray, seed_sets: Sequence[np.ndarray],
                            fanouts: Sequence[int] | np.ndarray, batch_size: int, *, num_batches: int | None = None,
                            replace: bool = False, method: str = "exact", return_hops: bool = False,
                            num_threads: int | None = None, sampler: SamplerKind | str = DEFAULT_SAMPLER,
                            seed_probs: np.ndarray | None = None, edge_rel: np.ndarray | None = None,
                            schema: GraphSchema | None = None) -> np.ndarray | list[np.ndarray]:
    """Per-minibatch inclusion probability of every vertex, for every partition at once.

    The seed sets are the K partitions of one job whose ranks run in lockstep: each runs
    ``S = max_k ceil(|T_k| / b)`` balanced batches per epoch, so :math:`p^0 = 1/S` on
    :math:`T_k` (see the module docstring).

    Args:
        rowptr: int64 ``[N + 1]``, col: int64 ``[nnz]``: the symmetric global CSR.
        seed_sets: K int64 arrays, partition k's seed ids :math:`T_k` (may be empty).
        fanouts: per hop, ``fanouts[0]`` at the seeds; -1 = all neighbours. A typed graph's
            int64 ``[L, R]`` table of every hop's fanout per relation (0 = none), or any form
            :func:`~salientpp.sampling.kinds.fanout_table` reads (one list for every relation, a
            dict relation -> list); it checks them.
        batch_size: b, the most seeds per batch; ``b >= |T_k|`` for every k gives S = 1 and
            probability 1 on the seeds (one batch holds all), never NaN.
        num_batches: S, overriding ``max_k ceil(|T_k| / b)`` (e.g. to model one partition of a
            larger job, or a loader run alone).
        replace: model sampling with replacement.
        method: ``"exact"``, ``"taylor"`` or ``"cavity"`` (see the module docstring).
        return_hops: return ``[p^0, ..., p^L]`` instead of ``p^L``.
        num_threads: numba threads (default: numba's, i.e. all cores).
        sampler: the sampler kind; its ``distribution`` picks the weights (:data:`VIP_MODELS`):
            node-wise and bulk node-wise share the recurrence above; ``"ladies"`` uses it with
            LADIES's pick weights (``fanouts`` = layer sizes; see the module docstring).
        seed_probs: float64 ``[N, K]`` :math:`p^0` to start from instead of ``1/S`` on the seed
            sets (e.g. :func:`link_seed_probabilities`; ``seed_sets`` then only gives K).
        edge_rel: int8 ``[nnz]``, the relation of each CSR entry (``Dataset.edge_rel``; module
            docstring, "Typed graphs"); not read on a graph of one relation (may be ``None``):
            every entry is relation 0.
        schema: the graph's :class:`~salientpp.data.schema.GraphSchema`, whose relations number
            ``edge_rel`` and give each its reverse; needed with ``edge_rel``; ``None``: the
            homogeneous schema of the N vertices.

    Returns:
        float64 ``[N, K]``: ``VIP[v, k]`` = P(v is in a minibatch of partition k); or the list of
        the L + 1 per-hop arrays.
    """
    if method not in METHODS:
        raise InputError(f"unknown VIP method {method!r}; choose one of {', '.join(METHODS)}")
    sampler = check_sampler(sampler)
    if method == "pair" and sampler.distribution != "nodewise":
        raise InputError(f"the pair VIP method models node-wise draws; use cavity with {sampler.title} sampling")
    replace = check_replace(replace, sampler)
    weights_of = vip_model(sampler)
    batch_size = check_batch_size(batch_size)
    rowptr, col = _as_csr(rowptr, col)
    num_nodes = rowptr.shape[0] - 1
    schema, edge_rel = _relations(edge_rel, schema, num_nodes, col.shape[0], sampler)
    reverse = np.asarray(schema.reverse, dtype=np.int64)
    fanouts = fanout_table(fanouts, schema, sampler)  # one row per hop, one column per relation
    degree = relation_degrees(rowptr, edge_rel, schema.num_relations)
    if num_threads is not None:
        numba.set_num_threads(max(1, min(int(num_threads), numba.config.NUMBA_NUM_THREADS)))
    if seed_probs is None:
        seed_probs = seed_probabilities(num_nodes, seed_sets, batch_size, num_batches=num_batches)
    else:
        seed_probs = np.asarray(seed_probs, dtype=np.float64)
        if seed_probs.shape != (num_nodes, len(seed_sets)):
            raise InputError(f"seed_probs must be float64 [{num_nodes}, {len(seed_sets)}] (vertices, partitions), "
                             f"got {list(seed_probs.shape)}")
    hops = [seed_probs]
    weights = [None]
    graph = (rowptr, col, edge_rel, reverse)
    for h, fanout in enumerate(fanouts):
        prev = hops[-1]
        w = weights_of(degree, fanout, replace, prev)
        if w.ndim == 3:  # a pick weight per partition, [K, N, R]: one partition at a time
            out = np.empty_like(prev)
            for k in range(prev.shape[1]):
                column = _hop(method, graph, np.ascontiguousarray(w[k]), np.ascontiguousarray(prev[:, k:k + 1]),
                              None if weights[-1] is None else np.ascontiguousarray(weights[-1][k]),
                              None if len(hops) < 2 else np.ascontiguousarray(hops[-2][:, k:k + 1]))
                out[:, k] = column[:, 0]
        else:
            ratio = pair_ratio(degree, fanouts[h - 1], replace) if method == "pair" and h else None
            out = _hop(method, graph, w, prev, weights[-1], None if len(hops) < 2 else hops[-2], ratio)
        np.clip(out, 0.0, 1.0, out=out)
        if not return_hops and len(hops) >= 2:
            hops[-2] = None  # only the last two hops are needed from here on
        hops.append(out)
        weights.append(w)
    return hops if return_hops else hops[-1]


# The sampler distributions whose pick weights the typed recurrence models per relation.
TYPED_DISTRIBUTIONS = ("nodewise",)


def _kernel_relations(edge_rel) -> np.ndarray | np.int8:
    """``edge_rel`` (int ``[nnz]``, or one integer) as the kernels take it: a read-only int8 array,
    or an ``np.int8``."""
    return np.int8(edge_rel) if np.ndim(edge_rel) == 0 else _kernel_array(edge_rel, np.int8)


def _relations(edge_rel, schema: GraphSchema | None, num_nodes: int, nnz: int,
               sampler: SamplerKind) -> tuple[GraphSchema, np.ndarray | np.int8]:
    """The graph's schema (``None``: the homogeneous one of ``num_nodes`` vertices) and the
    relation of each CSR entry as the kernels read it: ``edge_rel`` as int8 ``[nnz]``, or on a graph
    of one relation ``np.int8(0)``, the relation of every entry (``edge_rel`` is then not read);
    :class:`InputError` when they do not fit the graph or the sampler."""
    if schema is None:
        if edge_rel is not None:
            raise InputError("edge_rel needs the graph's schema, which numbers its relations and gives their "
                             "reverses; pass schema= (the dataset's schema)")
        schema = GraphSchema.homogeneous(num_nodes)
    if not schema.is_homogeneous and sampler.distribution not in TYPED_DISTRIBUTIONS:
        raise InputError(f"the VIP analysis of {sampler.title} sampling covers homogeneous graphs only; sample a "
                         "typed graph node-wise (--sampler nodewise)")
    if schema.num_relations == 1:  # every entry is relation 0 (a dataset's edge_rel: a constant view), never scanned
        return schema, np.int8(0)
    if edge_rel is None:
        raise InputError(f"the graph has {schema.num_relations} relations but no edge_rel was given; pass the "
                         "relation of each CSR entry (the dataset's edge_rel)")
    edge_rel = np.asarray(edge_rel)
    if edge_rel.shape != (nnz,) or not np.issubdtype(edge_rel.dtype, np.integer):
        raise InputError(f"edge_rel must be an int8 array of one relation per CSR entry ([{nnz}]), got "
                         f"{edge_rel.dtype} {list(edge_rel.shape)}; pass the dataset's edge_rel")
    if nnz and (edge_rel.min() < 0 or edge_rel.max() >= schema.num_relations):
        raise InputError(f"edge_rel holds relations outside [0, {schema.num_relations}), the schema's; pass the "
                         "edge_rel and schema of the same dataset")
    return schema, _kernel_array(edge_rel, np.int8)


def _hop(method: str, graph: tuple, w: np.ndarray, prev: np.ndarray, w_prev: np.ndarray | None,
         prev2: np.ndarray | None, ratio: np.ndarray | None = None) -> np.ndarray:
    """:math:`p^h` from :math:`p^{h-1}` (``prev``, ``[N, K]``) with pick weights ``w`` (``[N, R]``,
    per relation); ``w_prev`` and ``prev2`` (hop h - 1's weights and :math:`p^{h-2}`) serve the
    cavity and pair forms, ``ratio`` (:func:`pair_ratio` of hop h - 1, shaped like ``w``) the pair
    form. ``graph`` is ``(rowptr, col, edge_rel, reverse)``."""
    out = np.empty_like(prev)
    if method == "taylor":
        _hop_taylor(*graph, w, prev, out)
    elif method == "pair" and prev2 is not None:
        _hop_pair(*graph, w, prev, w_prev, prev2, ratio, out)
    elif method == "cavity" and prev2 is not None:
        _hop_cavity(*graph, w, prev, w_prev, prev2, out)
    else:
        _hop_product(*graph, w, prev, out)
    return out


def ladies_weights(degree: np.ndarray, layer_size: int, prev: np.ndarray) -> np.ndarray:
    r"""float64 ``[N, K]``: LADIES's pick weight :math:`w_h(u) = 1 - e^{-s_h / (d_u^2 \bar Z_k)}`,
    :math:`\bar Z_k = \sum_u p^{h-1}_k(u) / d_u`, of a vertex u in the layer set (module docstring)."""
    inv_degree = np.where(degree > 0, 1.0 / np.maximum(degree, 1), 0.0)
    total = prev.T @ inv_degree  # E[Z] per partition, [K]
    rate = np.divide(float(layer_size), total, out=np.zeros_like(total), where=total > 0)
    return -np.expm1(-np.outer(inv_degree**2, rate))


# The pick weights w_h of each distribution a sampler kind draws from (``SamplerKind.distribution``),
# ``weights(degree, fanout, replace, prev)`` with ``degree`` int64 ``[N, R]`` (:func:`relation_degrees`),
# ``fanout`` the hop's row ``[R]`` and ``prev`` = p^{h-1} ``[N, K]``: float64 ``[N, R]`` (the same for
# every partition) or ``[K, N, R]`` (one per partition). LADIES draws graphs of one relation
# (:func:`_relations`). A kind of another distribution needs its model here.
VIP_MODELS: dict[str, Callable[[np.ndarray, np.ndarray, bool, np.ndarray], np.ndarray]] = {
    "nodewise": lambda degree, fanout, replace, prev: pick_weights(degree, fanout, replace),
    "ladies": lambda degree, fanout, replace, prev: ladies_weights(degree[:, 0], fanout[0], prev).T[:, :, None],
}


def vip_model(sampler: SamplerKind | str) -> Callable[[np.ndarray, np.ndarray, bool, np.ndarray], np.ndarray]:
    """The pick weights of ``sampler``'s distribution (:data:`VIP_MODELS`), or :class:`InputError`."""
    kind = check_sampler(sampler)
    if kind.distribution not in VIP_MODELS:
        raise InputError(f"the VIP analysis has no model of the {kind.distribution} distribution that the "
                         f"{kind.value} sampler draws; add its pick weights to VIP_MODELS in salientpp/cache/vip.py")
    return VIP_MODELS[kind.distribution]


def neighbour_sum(rowptr: np.ndarray, col: np.ndarray, x: np.ndarray) -> np.ndarray:
    """float64 ``[N, K]``: ``out[v] = sum_{u in N(v)} x[u]`` (a sparse matrix product ``A @ x``)."""
    rowptr, col = _as_csr(rowptr, col)
    x = np.ascontiguousarray(x, dtype=np.float64)
    out = np.empty_like(x)
    _neighbour_sum(rowptr, col, x, out)
    return out


def expected_nodes_per_type(probs: np.ndarray, node_type: np.ndarray, num_types: int) -> np.ndarray:
    """float64 ``[T, K]``: ``out[t, k]`` sums ``probs[v, k]`` (float ``[N, K]``, e.g. one hop of
    :func:`inclusion_probabilities`) over the vertices v of type t, the expected vertices of type t
    in a minibatch of partition k. ``node_type``: int ``[N]``, each vertex's type in ``[0, T)`` in
    the numbering of ``probs`` (a partitioned dataset's: ``dataset.book.type_of(np.arange(N))``)."""
    probs, node_type = np.asarray(probs, dtype=np.float64), np.asarray(node_type)
    if probs.ndim != 2 or node_type.shape != probs.shape[:1] or not np.issubdtype(node_type.dtype, np.integer):
        raise InputError(f"give one integer node type per row of the [N, K] probabilities, got types "
                         f"{node_type.dtype} {list(node_type.shape)} for probabilities {list(probs.shape)}")
    if node_type.size and (node_type.min() < 0 or node_type.max() >= num_types):
        raise InputError(f"node types must lie in [0, {num_types}), found {node_type.min()}..{node_type.max()}; "
                         "pass the type of each vertex in the numbering of the probabilities")
    out = np.zeros((num_types, probs.shape[1]))
    for k in range(probs.shape[1]):
        out[:, k] = np.bincount(node_type, weights=probs[:, k], minlength=num_types)
    return out


def expected_accesses(dataset, workloads: Sequence[Workload], *, method: str = "exact",
                      num_threads: int | None = None) -> np.ndarray:
    """Expected number of minibatches per training epoch in which partition k touches vertex v.

    Every rank runs the same number of steps per epoch (collectives are in lockstep): for
    workload w each partition runs ``S_w = workload.lockstep_steps(dataset)`` balanced batches
    (:meth:`Workload.lockstep_steps`), with no padding, so the score is
    ``weight_w * S_w * VIP_{w,k}(v)`` summed over the workloads, where ``VIP`` uses
    :math:`p^0 = 1/S_w` (each seed is in exactly one batch: its own score from hop 0 is 1). For a
    static cache the expected number of fetched rows is the sum of this score over the vertices
    not cached, so caching the highest scores minimises it; with one workload the score is VIP
    times a constant and ranks exactly as VIP does. A partition with fewer seeds than ``S_w``
    runs some batches with no seeds, which fetch nothing.

    Args:
        dataset: a ``PartitionedDataset``.
        workloads: training first, then e.g. sampled inference with its weight.

    Returns:
        float64 ``[N, K]``.
    """
    if not workloads:
        raise InputError("at least one workload (the training fanouts and batch size) is needed")
    total = np.zeros((dataset.num_nodes, dataset.num_parts), dtype=np.float64)
    for workload in workloads:
        steps = workload.lockstep_steps(dataset)
        if steps == 0:  # no partition has seeds for this workload: it never runs
            continue
        vip = workload_probabilities(dataset, workload, method=method, num_threads=num_threads)
        vip *= workload.weight * steps
        total += vip
    return total
