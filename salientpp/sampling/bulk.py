r"""Bulk sampling: many minibatches at once as sparse-matrix operations, node-wise or layer-wise (LADIES).

For ``k`` minibatches whose current node sets are :math:`S_1, \dots, S_k` (concatenated: ``R``
rows), the row-selection matrix :math:`Q \in \{0,1\}^{R \times N}` has one 1 per row, and
:math:`P = QA` holds every row's neighbours. :func:`select_rows` forms ``P``'s CSR directly
(a row gather: for a selection matrix it is exactly the sparse product; ``tests`` check it
against ``torch.sparse.mm``). Each hop then samples ``P``:

* **node-wise** (``method="nodewise"``), per row and relation ``r`` (a typed graph's CSR groups a
  row's entries by relation, ascending, so a row is ``R`` consecutive segments; a homogeneous
  graph's row is one): ``min(f_r, d_r)`` distinct entries of the segment, every subset of that
  size equally likely: Floyd's algorithm run for all segments at once, one vectorised step per
  drawn entry (for ``f_r > 32``, the ``f_r`` entries of smallest independent uniform key); ``P``
  stays implicit (each segment is a slice of ``A``'s ``col``), so undrawn entries cost nothing;
  ``f_r = -1`` keeps the whole segment, ``f_r = 0`` none of it.
  With ``replace=True``: ``f_r`` independent uniform entries. This is the distribution of the C++
  :class:`~salientpp.sampling.NeighborSampler`, typed graphs included (per-relation fanouts, MFGs
  with ``edge_type``, batches with ``node_type``), with its semantics (every node reached so far
  draws again at every hop), so the node-wise VIP applies unchanged.
* **LADIES** (``method="ladies"``), per minibatch: with :math:`\hat A = D^{-1}A` (the mean
  aggregation a SAGE layer computes), candidate ``j`` of the union of the minibatch's
  neighbourhoods has probability
  :math:`q_j = \lVert \hat A_{S,j} \rVert^2 / \lVert \hat A_{S,:} \rVert_F^2
  = \sum_{i \in S \cap N(j)} d_i^{-2} \,/\, \sum_{i \in S} d_i^{-1}`, and ``s = fanouts[h]``
  candidates are drawn independently from ``q`` (with replacement; ``c_j`` times each). The
  edge ``j -> i`` of a drawn ``j`` gets the importance weight :math:`w_{ij} = \hat A_{ij}\,c_j / (s\,q_j)`,
  so :math:`\sum_j w_{ij} x_j` is an unbiased estimate of the neighbour mean of ``i``.
  The next layer's set is :math:`S \cup \{\text{drawn}\}` (destinations stay a prefix of the
  sources, as in every MFG here).

Randomness: batch ``i`` of stream ``seed`` draws from its own generator, seeded by
``(seed, i)``, in a fixed order, so a batch does not depend on which other batches share its
bulk or on ``minibatches_per_bulk``; the same code runs on CPU and CUDA tensors (the two
devices' generators give different, equally distributed, batches).
"""
from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError, check_int
from .convert import as_int64_tensor
from ..data.schema import GraphSchema
from .convert import one_type
from .kinds import Fanouts, SamplerKind, check_replace, fanout_table, register_sampler
from .sampler import (MFG, BaseSampler, BatchStages, EpochSchedule, NodeTypes, SampledBatch, TypeOf, check_csr_ends,
                      check_typed_graph_arrays, graph_schema, node_types)

# The kinds this module draws (registered below, with their builders).
BULK = SamplerKind("bulk", "bulk node-wise", "nodewise", draws_in_bulk=True, typed=True, gpu=True)
# LADIES's plain VIP recurrence over-estimates by 4-12% from hop 2 on (``bench vip``, docs/cache.md).
LADIES = SamplerKind("ladies", "LADIES", "ladies", default_vip_method="cavity", draws_in_bulk=True,
                     weighted=True, layer_sizes=True, always_replaces=True, gpu=True)

# ``method`` -> the kind it draws.
METHODS = {"nodewise": BULK, "ladies": LADIES}


def stream_seed(seed: int, batch_index: int) -> int:
    """The generator seed of batch ``batch_index`` of stream ``seed`` (63 bits)."""
    state = np.random.SeedSequence([int(seed) % (1 << 64), int(batch_index) % (1 << 64)]).generate_state(1, np.uint64)
    return int(state[0]) >> 1


def _offsets(counts: torch.Tensor) -> torch.Tensor:
    """int64 ``[n + 1]``: ``0`` then the running sum of ``counts`` ``[n]`` (a CSR row pointer)."""
    out = torch.zeros(counts.shape[0] + 1, dtype=torch.int64, device=counts.device)
    torch.cumsum(counts, 0, out=out[1:])
    return out


def select_rows(rowptr: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The CSR of ``P = Q A`` for the row selection ``Q`` of ``rows``, as positions into ``col``.

    Args:
        rowptr: int64 ``[N + 1]`` of ``A``.
        rows: int64 ``[R]`` selected row ids (repeats allowed).

    Returns:
        ``(ptr, entry)``: int64 ``[R + 1]`` row pointer of ``P`` and int64 ``[nnz(P)]``, the
        position in ``A``'s ``col`` of every entry of ``P`` (so ``P``'s columns are ``col[entry]``).
    """
    start = rowptr[rows]
    degree = rowptr[rows + 1] - start
    ptr = _offsets(degree)
    total = int(ptr[-1])
    shift = torch.repeat_interleave(ptr[:-1] - start, degree, output_size=total)
    return ptr, torch.arange(total, dtype=torch.int64, device=rows.device) - shift


def _segment_ids(ptr: torch.Tensor, total: int) -> torch.Tensor:
    """int64 ``[total]``: the segment of each position of a CSR with row pointer ``ptr``."""
    return torch.repeat_interleave(torch.arange(ptr.shape[0] - 1, device=ptr.device), ptr[1:] - ptr[:-1],
                                   output_size=total)


@dataclass
class _Frontier:
    """The node sets of the ``k`` minibatches of a bulk, concatenated minibatch by minibatch.

    Attributes:
        nodes: int64 ``[R]`` global ids, minibatch 0's nodes first (in local order), then 1's, ...
        mb: int64 ``[R]`` minibatch of each node; counts: int64 ``[k]`` nodes per minibatch.
    """

    nodes: torch.Tensor
    mb: torch.Tensor
    counts: torch.Tensor

    @property
    def local(self) -> torch.Tensor:
        """int64 ``[R]`` local index of each node within its minibatch."""
        return torch.arange(self.nodes.shape[0], device=self.nodes.device) - _offsets(self.counts)[self.mb]


class BulkSampler(BaseSampler):
    """Samples ``minibatches_per_bulk`` minibatches at a time with sparse-matrix operations.

    The output is the node-wise sampler's :class:`~salientpp.sampling.SampledBatch` with one
    :class:`~salientpp.sampling.MFG` per layer (model order); LADIES MFGs carry ``edge_weight``,
    node-wise ones of a typed graph ``edge_type`` (its batches ``node_type``).
    See the module docstring for the two methods and their distributions: ``method`` picks the
    kind, ``bulk`` or ``ladies`` (:data:`METHODS`). A loader runs it in one background thread
    that samples ``minibatches_per_bulk`` batches at a time (:meth:`_epoch_batches`).

    Args:
        rowptr: int64 ``[N + 1]``, col: int64 ``[nnz]``: CSR of a symmetric graph (numpy arrays,
            memory maps or tensors; CPU tensors are shared, not copied).
        fanouts: node-wise: neighbours per node per hop (``>= 1`` or ``-1``, all), or a typed
            graph's per-relation forms :func:`~salientpp.sampling.kinds.fanout_table` reads (a dict
            relation -> list, the ``[L, R]`` table); LADIES: nodes drawn per layer (``>= 1``);
            ``fanouts[0]`` at the seeds.
        method: ``"nodewise"`` or ``"ladies"``.
        minibatches_per_bulk: ``k >= 1``, the minibatches a loader samples in one bulk step.
        replace: node-wise with replacement (``f`` independent draws per node).
        device: where the CSR lives and the sampling runs (``"cpu"`` or a CUDA device).
        edge_rel: int8 ``[nnz]``, the relation of each CSR entry, a row's entries grouped by
            relation ascending (``Dataset.edge_rel``); None for a homogeneous graph. Node-wise only.
        schema: the graph's :class:`~salientpp.data.schema.GraphSchema`, needed with ``edge_rel``;
            not given: the homogeneous schema of the CSR's nodes.
        type_of: the node type of ids for the batches' ``node_type`` (int64 ``[n]`` -> int64
            ``[n]``); None: ``schema.type_of``.

    Attributes:
        fanouts: int64 ``[L, R]`` (``R = 1`` for a homogeneous graph or LADIES).
        schema: the graph's schema.
        segptr: int64 ``[N * R + 1]``: the entries of relation ``r`` in row ``v`` are
            ``col[segptr[v * R + r]:segptr[v * R + r + 1]]`` (``rowptr`` itself when ``R = 1``).
    """

    def __init__(self, rowptr: torch.Tensor | np.ndarray, col: torch.Tensor | np.ndarray, fanouts: Fanouts,
                 method: str = "nodewise", minibatches_per_bulk: int = 1, replace: bool = False,
                 device: torch.device | str = "cpu", *, edge_rel: torch.Tensor | np.ndarray | None = None,
                 schema: GraphSchema | None = None, type_of: TypeOf | None = None):
        if method not in METHODS:
            raise InputError(f"unknown bulk sampling method {method!r}; choose one of {', '.join(METHODS)}")
        check_int(minibatches_per_bulk, "minibatches_per_bulk (--bulk-size)")
        self.kind = METHODS[method]
        self.replace = check_replace(replace, self.kind)
        self.minibatches_per_bulk = int(minibatches_per_bulk)
        self.device = torch.device(device)
        rowptr_t, col_t = _device_csr(rowptr, "rowptr", self.device), _device_csr(col, "col", self.device)
        check_csr_ends(rowptr_t, col_t)
        self.rowptr, self.col = rowptr_t, col_t
        self.num_nodes = int(rowptr_t.shape[0] - 1)
        self.degree = rowptr_t[1:] - rowptr_t[:-1]
        self.schema = graph_schema(schema, edge_rel, self.num_nodes)
        self.fanouts = fanout_table(fanouts, self.schema, self.kind)  # int64 [L, R]
        self.segptr = _segments(rowptr_t, check_typed_graph_arrays(edge_rel, self.schema, col_t, self.num_nodes),
                                self.schema.num_relations)
        self._types: NodeTypes = node_types(self.schema, type_of)
        self._split_segments = _segment_split(self.schema.num_relations)

    def _draw(self, seeds: torch.Tensor, seed: int, batch_index: int) -> SampledBatch:
        """Batch 0 of ``sample_bulk([seeds], seed, batch_index)``."""
        (batch,) = self.sample_bulk([seeds], seed, batch_index)
        return batch

    def _epoch_batches(self, schedule: EpochSchedule, stages: BatchStages) -> Iterator[SampledBatch]:
        """The batches of :meth:`start_epoch`, ``minibatches_per_bulk`` at a time (one background
        thread; torch's intra-op threads do the work, with the GIL released). On a GPU the thread
        draws on a CUDA stream of its own, so its kernels can overlap the model step's; each batch
        is complete when yielded (:meth:`~salientpp.sampling.sampler.BatchStages.apply` copies its
        seeds to the host, which waits for the stream)."""
        order, bounds = schedule.order, schedule.bounds.tolist()
        num_batches = len(bounds) - 1
        if self.device.type == "cuda":  # this thread draws on the GPU: on a stream of its own
            torch.cuda.set_device(self.device)
            torch.cuda.set_stream(torch.cuda.Stream(self.device))
        for start in range(schedule.first, num_batches, self.minibatches_per_bulk):
            stop = min(start + self.minibatches_per_bulk, num_batches)
            bulk = self.sample_bulk([order[bounds[i]:bounds[i + 1]] for i in range(start, stop)], schedule.seed, start)
            for batch in bulk:
                yield stages.apply(batch)

    def sample_bulk(self, seed_lists: Sequence[torch.Tensor], seed: int, first_index: int) -> list[SampledBatch]:
        """Samples ``len(seed_lists)`` minibatches in one bulk step.

        Args:
            seed_lists: int64 ``[b_j]`` distinct, checked ids per minibatch (may be empty).
            seed, first_index: minibatch ``j`` draws from the stream ``(seed, first_index + j)``.

        Returns:
            one :class:`SampledBatch` per minibatch (on this sampler's device, no labels, no row origins).
        """
        device = self.device
        generators = [torch.Generator(device=device).manual_seed(stream_seed(seed, first_index + j))
                      for j in range(len(seed_lists))]
        counts = torch.tensor([int(s.shape[0]) for s in seed_lists], dtype=torch.int64, device=device)
        mb = torch.repeat_interleave(torch.arange(len(seed_lists), device=device), counts)
        nodes = torch.cat([s.to(device) for s in seed_lists]) if seed_lists else torch.empty(0, dtype=torch.int64)
        frontier = _Frontier(nodes, mb, counts)
        hops = []  # per hop: (counts before, counts after, edges per row, dst local, src local, weights, types)
        for fanout in self.fanouts:
            if self.kind is LADIES:
                edge_row, src, weight = self._ladies(frontier, int(fanout[0]), generators)
                edge_type = one_type(edge_row.shape[0], device)
            else:
                edge_row, edge_type, src = self._nodewise(frontier, fanout, generators)
                weight = None
            src_local, grown = _grow(frontier, frontier.mb[edge_row], src, self.num_nodes)
            row_counts = torch.bincount(edge_row, minlength=frontier.nodes.shape[0])
            hops.append((frontier.counts, grown.counts, row_counts, frontier.local[edge_row], src_local, weight,
                         edge_type))
            frontier = grown
        return _split(frontier, [len(s) for s in seed_lists], hops, self._types)

    def _nodewise(self, frontier: _Frontier, fanouts: np.ndarray, generators: list[torch.Generator]
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(edge_row, edge_type, src)``: the drawn entries of ``P = QA`` (grouped by row, then
        relation ascending), their relations (int64) and their columns, for the hop's fanout of
        each relation ``fanouts`` (int64 ``[R]``).

        ``P`` stays implicit: the segment ``s = v * R + r`` (row ``v``'s entries of relation ``r``)
        is ``col[segptr[s]:segptr[s + 1]]`` of ``A``, and a draw is a position within it, so no
        entry of ``P`` that is not drawn is ever touched."""
        device = frontier.nodes.device
        num_relations = fanouts.shape[0]
        seg = (frontier.nodes.unsqueeze(1) * num_relations + torch.arange(num_relations, device=device)).reshape(-1)
        owner = frontier.mb.repeat_interleave(num_relations)
        start = self.segptr[seg]
        degree = self.segptr[seg + 1] - start
        fanout = torch.from_numpy(fanouts).to(device).repeat(frontier.nodes.shape[0])  # of each segment
        everything = fanout == -1
        drawn = torch.where(degree > 0, fanout, 0) if self.replace else torch.minimum(degree, fanout)
        take = torch.where(everything, degree, drawn)
        edge_ptr = _offsets(take)
        total = int(edge_ptr[-1])
        edge_seg = _segment_ids(edge_ptr, total)
        offset = torch.arange(total, device=device) - edge_ptr[edge_seg]  # all of a segment: 0 .. d - 1
        if self.replace:  # f independent uniform positions in each segment not taken whole (fanout -1)
            # the segments drawing, and their edges: masks only where a relation takes all (known on the host)
            chosen, draw = (~everything, ~everything[edge_seg]) if (fanouts == -1).any() else (slice(None),) * 2
            seg_degree = degree[edge_seg[draw]]
            uniform = _uniforms(generators, owner[chosen], take[chosen])
            offset[draw] = (uniform * seg_degree).long().clamp_(max=seg_degree - 1)
        else:  # segments with more neighbours than their fanout: f distinct positions each
            for f in sorted({int(f) for f in fanouts} - {-1, 0}):
                big = (fanout == f) & (degree > f)
                if bool(big.any()):
                    offset[big[edge_seg]] = _distinct(degree[big], f, generators, owner[big]).reshape(-1)
        return (*self._split_segments(edge_seg), self.col[start[edge_seg] + offset])

    def _ladies(self, frontier: _Frontier, layer_size: int, generators: list[torch.Generator]
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(edge_row, src, weight)``: the entries of ``P = QA`` whose column was drawn (grouped
        by row), their columns and their float32 importance weights."""
        ptr, entry = select_rows(self.rowptr, frontier.nodes)
        device = ptr.device
        num_mb = frontier.counts.shape[0]
        row = _segment_ids(ptr, entry.shape[0])
        inv_degree = 1.0 / self.degree[frontier.nodes].clamp(min=1).to(torch.float64)  # \hat A_ij of row i
        value = inv_degree[row]
        # Candidates: the distinct (minibatch, column) pairs of P; their squared column norms.
        key = frontier.mb[row] * self.num_nodes + self.col[entry]
        cand, inverse = torch.unique(key, sorted=True, return_inverse=True)
        mass = torch.zeros(cand.shape[0], dtype=torch.float64, device=device).index_add_(0, inverse, value * value)
        cand_mb = cand // self.num_nodes
        total = torch.zeros(num_mb, dtype=torch.float64, device=device).index_add_(0, cand_mb, mass)
        has_cand = torch.bincount(cand_mb, minlength=num_mb) > 0
        draws = torch.where(has_cand, layer_size, 0)
        uniform = _uniforms(generators, torch.arange(num_mb, device=device), draws)
        draw_mb = torch.repeat_interleave(torch.arange(num_mb, device=device), draws, output_size=int(uniform.shape[0]))
        cumulative = torch.cumsum(mass, 0)
        before = cumulative - mass  # mass of the candidates before each one
        first = torch.searchsorted(cand_mb, torch.arange(num_mb, device=device))
        last = torch.searchsorted(cand_mb, torch.arange(num_mb, device=device), right=True) - 1
        base = before[first.clamp(max=max(cand.shape[0] - 1, 0))] if cand.shape[0] else torch.zeros_like(total)
        target = base[draw_mb] + uniform * total[draw_mb]
        picked = torch.searchsorted(cumulative, target, right=True)
        picked = torch.minimum(torch.maximum(picked, first[draw_mb]), last[draw_mb])  # float rounding at the ends
        times = torch.bincount(picked, minlength=cand.shape[0]).to(torch.float64)
        q = mass / total[cand_mb].clamp(min=torch.finfo(torch.float64).tiny)
        factor = times / (layer_size * q.clamp(min=torch.finfo(torch.float64).tiny))
        keep = times[inverse] > 0
        return row[keep], self.col[entry[keep]], (value[keep] * factor[inverse[keep]]).to(torch.float32)


def _segments(rowptr: torch.Tensor, edge_rel: torch.Tensor | None, num_relations: int) -> torch.Tensor:
    """int64 ``[N * R + 1]``: the segment pointer of a CSR whose rows hold ``R = num_relations``
    consecutive segments, one per relation ascending (:attr:`BulkSampler.segptr`): ``rowptr`` itself
    for one relation (``edge_rel`` None), else from ``edge_rel`` (int8 ``[nnz]``, CPU), checked to
    hold relations of the schema grouped ascending in every row (:class:`InputError` otherwise)."""
    if edge_rel is None:
        return rowptr
    num_nodes = rowptr.shape[0] - 1
    rel = edge_rel.to(device=rowptr.device, dtype=torch.int64)
    row = _segment_ids(rowptr, rel.shape[0])
    if rel.shape[0] and (int(rel.min()) < 0 or int(rel.max()) >= num_relations):
        raise InputError(f"edge_rel holds relations outside [0, {num_relations}), the schema's; pass the "
                         "edge_rel of this graph")
    key = row * num_relations + rel
    if bool((key[1:] < key[:-1]).any()):
        raise InputError("edge_rel must group each row's entries by relation, ascending; build the CSR with "
                         "build_typed_csr")
    return _offsets(torch.bincount(key, minlength=num_nodes * num_relations))


def _segment_split(num_relations: int):
    """What gives a hop's edges their rows and ``edge_type``: int64 ``[E]`` segments ``s = v * R + r``
    -> ``(v, r)``, two int64 ``[E]``, decided once: with one relation the segments are the rows
    and the relations the constant view :func:`~salientpp.sampling.convert.one_type` (no
    arithmetic, no memory), as the C++ sampler gives."""
    if num_relations == 1:
        return lambda seg: (seg, one_type(seg.shape[0], seg.device))
    return lambda seg: (torch.div(seg, num_relations, rounding_mode="floor"), seg % num_relations)


def _device_csr(array: torch.Tensor | np.ndarray, name: str, device: torch.device) -> torch.Tensor:
    if isinstance(array, torch.Tensor) and array.device == device:
        if array.dim() != 1 or array.dtype != torch.int64:
            raise InputError(f"{name} must be a 1-D int64 array, got {array.dtype} of shape {list(array.shape)}")
        return array.contiguous()
    if isinstance(array, torch.Tensor):
        array = array.cpu()
    return as_int64_tensor(array, name).to(device)


def _uniforms(generators: list[torch.Generator], owner: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """float64 uniforms in [0, 1): ``lengths[r]`` for each row ``r``, row by row; the rows of
    minibatch ``j`` (``owner[r] == j``, rows of a minibatch contiguous) come from ``generators[j]``."""
    per_mb = torch.zeros(len(generators), dtype=torch.int64, device=lengths.device).index_add_(0, owner, lengths)
    parts = [torch.rand(int(n), generator=g, dtype=torch.float64, device=lengths.device)
             for g, n in zip(generators, per_mb.tolist())]
    return torch.cat(parts) if parts else torch.empty(0, dtype=torch.float64, device=lengths.device)


# Fanouts up to this draw with Floyd's algorithm (f vectorised steps of up to f comparisons per
# row); larger ones sort random keys over the row's positions.
FLOYD_MAX_FANOUT = 32


def _distinct(degree: torch.Tensor, fanout: int, generators: list[torch.Generator], owner: torch.Tensor
              ) -> torch.Tensor:
    """int64 ``[n, fanout]``: ``fanout`` distinct positions in ``[0, degree[r])`` for each row
    ``r`` (all ``degree > fanout``), every subset equally likely; row ``r`` draws from
    ``generators[owner[r]]`` (the rows of a minibatch are contiguous).

    Floyd's algorithm, one step for all rows at a time: at step ``i`` (``j = d - f + i``) draw
    ``t`` uniform in ``[0, j]`` and keep it unless already kept, else keep ``j``. For large
    fanouts: the ``fanout`` positions of smallest independent uniform key."""
    device = degree.device
    n = degree.shape[0]
    if fanout <= FLOYD_MAX_FANOUT:
        uniform = _uniforms(generators, owner, torch.full_like(degree, fanout)).view(n, fanout)
        picks = torch.empty((n, fanout), dtype=torch.int64, device=device)
        for step in range(fanout):
            j = degree - fanout + step
            t = (uniform[:, step] * (j + 1)).long().clamp_(max=j)  # float rounding could give j + 1
            if step:
                t = torch.where((picks[:, :step] == t.unsqueeze(1)).any(1), j, t)
            picks[:, step] = t
        return picks
    ptr = _offsets(degree)
    total = int(ptr[-1])
    keys = _uniforms(generators, owner, degree)
    rows = _segment_ids(ptr, total)
    order = torch.argsort(keys, stable=True)
    order = order[torch.argsort(rows[order], stable=True)]  # by row, then by key
    rank = torch.arange(total, device=device) - ptr[rows[order]]
    chosen = order[rank < fanout]  # fanout per row, rows in order
    return (chosen - ptr[rows[chosen]]).view(n, fanout)


def _grow(frontier: _Frontier, edge_mb: torch.Tensor, src: torch.Tensor, num_nodes: int
          ) -> tuple[torch.Tensor, _Frontier]:
    """Local indices of the sources ``src`` (global ids) of edges of minibatches ``edge_mb``, and
    the frontier with every new source appended to its minibatch (new ids in ascending order).

    One sort of the keys ``minibatch * N + id`` of the known nodes and the sources finds both."""
    device = src.device
    num_known = frontier.nodes.shape[0]
    keys, inverse = torch.unique(torch.cat([frontier.mb * num_nodes + frontier.nodes, edge_mb * num_nodes + src]),
                                 sorted=True, return_inverse=True)
    local = torch.full((keys.shape[0],), -1, dtype=torch.int64, device=device)
    local[inverse[:num_known]] = frontier.local
    new = local < 0
    new_keys = keys[new]
    new_mb = new_keys // num_nodes
    new_counts = torch.bincount(new_mb, minlength=frontier.counts.shape[0])
    local[new] = frontier.counts[new_mb] + torch.arange(new_keys.shape[0], device=device) - _offsets(new_counts)[new_mb]
    nodes = torch.cat([frontier.nodes, new_keys % num_nodes])
    mb = torch.cat([frontier.mb, new_mb])
    order = torch.argsort(mb, stable=True)  # each minibatch's old nodes, then its new ones
    return local[inverse[num_known:]], _Frontier(nodes[order], mb[order], frontier.counts + new_counts)


def _split(frontier: _Frontier, sizes: list[int], hops: list, types: NodeTypes) -> list[SampledBatch]:
    """Cuts the bulk's hops into one :class:`SampledBatch` per minibatch, whose ``node_type``
    ``types`` gives (:func:`~salientpp.sampling.sampler.node_types`)."""
    n_ids = torch.split(frontier.nodes, frontier.counts.tolist())
    per_hop = []
    for dst_counts, src_counts, row_counts, dst_local, src_local, weight, edge_type in hops:
        edge_counts = torch.zeros_like(dst_counts).index_add_(
            0, torch.repeat_interleave(torch.arange(dst_counts.shape[0], device=dst_counts.device), dst_counts),
            row_counts)
        edge_sizes = edge_counts.tolist()
        rows = torch.split(row_counts, dst_counts.tolist())
        edges = torch.split(torch.stack([src_local, dst_local]), edge_sizes, dim=1)
        weights = [None] * len(sizes) if weight is None else torch.split(weight, edge_sizes)
        edge_types = torch.split(edge_type, edge_sizes)
        mfgs = []
        for j, (num_src, num_dst) in enumerate(zip(src_counts.tolist(), dst_counts.tolist())):
            mfgs.append(MFG(num_src, num_dst, edges[j], _offsets(rows[j]), weights[j], edge_types[j]))
        per_hop.append(mfgs)
    return [SampledBatch(n_ids[j], sizes[j], [hop[j] for hop in reversed(per_hop)], node_type=types(n_ids[j]))
            for j in range(len(sizes))]


register_sampler(BULK, functools.partial(BulkSampler, method="nodewise"))
register_sampler(LADIES, functools.partial(BulkSampler, method="ladies"))
