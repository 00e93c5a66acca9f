"""The built-in models of typed graphs: R-SAGE, R-GCN and R-GAT (``--model rsage|rgcn|rgat``),
over the typed MFGs of a batch.

**Input.** ``forward(x_dict, mfgs, node_type, n_id)``:

* ``x_dict``: node type name -> ``[n_t, F_t]`` input rows of the batch nodes of that type, in
  ``n_id`` order (float32, float16 or bfloat16): a type's features, or, for a type without
  features, its learnable embedding rows, which the caller looks up (the trainer in one
  :class:`~salientpp.embedding.DistEmbedding` of the featureless types, keyed by the partitioned
  ids; :class:`~salientpp.models.gnn.SeedForward` adds them to the batch's ``x_dict``).
* ``mfgs``: one :class:`~salientpp.sampling.MFG` per layer (model order), whose ``edge_type``
  (int64 ``[E]``) holds the relation of each edge; edges are grouped by destination, then
  relation. Local indices are positions in ``n_id`` (all types mixed), destinations a prefix of
  the sources.
* ``node_type``: int64 ``[num_nodes]``, the type index of each node of ``n_id``.
* ``n_id``: int64 ``[num_nodes]`` global ids, the seeds first (of the target type for node
  classification; of the link relation's two endpoint types for link prediction).

A homogeneous batch (``node_type`` and ``edge_type`` zeros) is a typed one with one type and one
relation, so these models run on it too.

**Structure** (MLPerf's R-GAT reference, GraphLearn-for-PyTorch's ``examples/igbh/rgnn.py``: a
``HeteroConv`` per layer summing one convolution per relation, LeakyReLU and dropout between
layers, a linear head on the seeds): a per-type input projection ``Linear(F_t, hidden)``
(of the features, or of the embedding rows), ``num_layers`` relational layers ``hidden ->
hidden``, each but the last followed by LeakyReLU (slope 0.01) and dropout, then
``Linear(hidden, out_dim)`` on the seeds. Over the destinations ``v`` of type ``t`` and the
relations ``r`` into ``t`` (``N_r(v)``: the sampled sources of ``v``'s relation-``r`` edges):

* **R-SAGE**: ``h'_v = sum_r W_r mean_{u in N_r(v)} h_u + W_t h_v + b_t``: a root weight and
  bias per destination type. It equals PyG's ``to_hetero(SAGEConv model, aggr="sum")``, whose
  per-relation root weights and biases of the relations into ``t`` sum to ``W_t`` and ``b_t``.
  :class:`TypedStructure` builds it as ``to_hetero(SAGE)`` is built instead: a root weight and
  bias per relation (``root="relation"``: ``sum_r (W_r mean + R_r h_v + b_r)``, the same
  functions with more parameters, which Adam moves each by the learning rate; a type that no
  relation enters gets zeros), and the first layer convolving each type's input rows as they come
  (``input="raw"``: no projection, ``W_r`` ``[F_src, hidden]``, ``R_r`` or ``W_t`` ``[F_dst,
  hidden]``).
* **R-GCN**: ``h'_v = sum_r (1 / |N_r(v)|) sum_{u in N_r(v)} W_r h_u + W_0 h_v + b``
  (Schlichtkrull et al.; PyG's ``RGCNConv`` with ``aggr="mean"`` and no bases): one root weight
  and bias for every type.
* **R-GAT**: ``h'_v = sum_r GAT_r(v) + b_t``, where ``GAT_r`` is PyG's ``GATConv(hidden, hidden
  / heads, heads, add_self_loops=False)`` over the relation-``r`` edges (a weight ``W_r`` shared
  by sources and destinations, attention vectors per head, heads concatenated), and ``b_t`` the
  sum of its biases over the relations into ``t``: PyG's ``HeteroConv`` of such convolutions
  (``aggr="sum"``). MLPerf configures 3 layers, hidden 512, 4 heads, fanouts 15,10,5.

The mean aggregations run on :func:`~salientpp.models.ops.aggregate` over a CSR per relation
(:func:`typed_blocks`); the hidden state is kept per type (``h[t]``: ``[n_t, hidden]``, rows in
``n_id`` order), so a relation's sources and destinations are rows of their types' tensors, as
in PyG's ``HeteroData``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..data.schema import GraphSchema
from ..errors import InputError, check_int, shown
from ..sampling import MFG
from .ops import aggregate, dropout

TYPED_MODELS = ("rsage", "rgcn", "rgat")
# GATConv's attention slope, and MLPerf's activation between layers (F.leaky_relu's default slope).
ATTENTION_SLOPE = 0.2
# PyG's softmax adds it to every denominator.
_SOFTMAX_EPS = 1e-16


# The built-in models with attention heads (homogeneous and typed), as their messages name them.
_ATTENTION = {"gat": "GAT", "rgat": "R-GAT"}

# TypedStructure's choices: R-SAGE's root weights per destination type or per relation, and its
# first layer over each type's projection to the hidden width or over the input rows as they come.
ROOT_PER_TYPE, ROOT_PER_RELATION = "type", "relation"
ROOTS = (ROOT_PER_TYPE, ROOT_PER_RELATION)
PROJECTED_INPUT, RAW_INPUT = "project", "raw"
INPUTS = (PROJECTED_INPUT, RAW_INPUT)


@dataclass(frozen=True)
class TypedStructure:
    """Where a built-in typed model may be built as PyG's ``to_hetero(SAGE)`` and DGL's
    ``HeteroGraphConv(SAGEConv)`` are (the module docstring's R-SAGE); the defaults are ours.

    Attributes:
        root: ``"type"``, one root weight and bias per destination type (their sum over the
            relations into it), or ``"relation"``, one per relation.
        input: ``"project"``, every type's input rows projected to the hidden width first
            (``Linear(F_t, hidden)``), or ``"raw"``, the first layer convolving them as they come.
    """

    root: str = ROOT_PER_TYPE
    input: str = PROJECTED_INPUT

    # the built-in models it applies to: R-GCN's one root and R-GAT's weights shared by a relation's
    # sources and destinations take neither choice
    MODELS = ("rsage",)

    def check(self, model: str) -> None:
        """:class:`InputError` for a choice that is none of :data:`ROOTS` or :data:`INPUTS`, or a
        structure other than the default for a ``model`` outside :attr:`MODELS`."""
        for value, choices, what in ((self.root, ROOTS, "root"), (self.input, INPUTS, "input")):
            if value not in choices:
                raise InputError(f"unknown typed {what} {value!r}; choose {' or '.join(choices)}")
        if self != TypedStructure() and model not in self.MODELS:
            raise InputError(f"the typed root {self.root!r} and input {self.input!r} apply to the built-in "
                             f"{' and '.join(self.MODELS)} model only, not {model}; build {model} with the defaults "
                             f"({ROOT_PER_TYPE!r}, {PROJECTED_INPUT!r})")


def check_architecture(model: str, models: Sequence[str], what: str, num_layers: int, hidden: int,
                       heads: int) -> None:
    """The one check of a built-in model's arguments (``MFGModel``'s and :class:`TypedMFGModel`'s):
    ``model`` one of ``models`` (``what`` names them: ``"model"``, ``"typed model"``), a positive
    number of layers, and an attention model's ``hidden`` divisible by its ``heads``;
    :class:`InputError` otherwise."""
    if model not in models:
        raise InputError(f"unknown {what} {model!r}; choose one of {', '.join(models)}")
    check_int(num_layers, "the number of layers")
    if model in _ATTENTION and hidden % heads:
        raise InputError(f"{_ATTENTION[model]} needs a hidden size divisible by its {heads} heads, got {hidden}")


def type_ranks(node_type: torch.Tensor, num_types: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each batch node sits among the batch nodes of its type.

    Args:
        node_type: int64 ``[num_nodes]`` type index of each node of ``n_id`` (a one-type graph's
            is never read: each node's row is its position).

    Returns:
        ``(rank, counts)``: int64 ``[num_nodes]``, the row of each node in its type's rows (its
        ``x_dict`` row: ``n_id`` order within a type), and int64 ``[num_types]`` nodes per type.
    """
    if num_types == 1:
        num_nodes = node_type.shape[0]
        return (torch.arange(num_nodes, dtype=torch.int64, device=node_type.device),
                torch.tensor([num_nodes], dtype=torch.int64, device=node_type.device))
    if node_type.device.type == "cpu":  # numpy's masked writes, one pass per type: several times faster than a sort
        types = node_type.numpy()
        counts_np = np.bincount(types, minlength=num_types)
        rank_np = np.empty_like(types)
        for t in range(num_types):
            rank_np[types == t] = np.arange(counts_np[t])
        return torch.from_numpy(rank_np), torch.from_numpy(counts_np)
    counts = torch.bincount(node_type, minlength=num_types)
    order = torch.argsort(node_type, stable=True)
    first = torch.cumsum(counts, 0) - counts  # the first position of each type in ``order``
    rank = torch.empty_like(node_type)
    rank[order] = torch.arange(node_type.shape[0], device=node_type.device) - first[node_type[order]]
    return rank, counts


@dataclass
class RelationBlock:
    """The edges of one relation in one layer, in the rows of its types.

    Attributes:
        relation, src_type, dst_type: indices into the schema's relations and node types.
        rowptr: int64 ``[n_dst + 1]`` over the layer's destinations of ``dst_type`` (their rows);
            the edges of destination row ``d`` are ``col[rowptr[d]:rowptr[d + 1]]``.
        col: int64 ``[E_r]`` source row of each edge among the rows of ``src_type``.
        dst: int64 ``[E_r]`` destination row of each edge (ascending).
    """

    relation: int
    src_type: int
    dst_type: int
    rowptr: torch.Tensor
    col: torch.Tensor
    dst: torch.Tensor


@dataclass
class TypedBlock:
    """One layer of a typed batch: ``num_dst[t]`` destinations of each type and one
    :class:`RelationBlock` per relation of the schema.

    ``dst_rows``: int64 ``[num_dst[t]]`` per type, the destinations' rows among the rows of their
    type (layer-wise inference's chunk of a whole-graph table); ``None``: the first ``num_dst[t]``
    rows, a sampled batch's (its destinations are a prefix of its sources)."""

    num_dst: list[int]
    relations: list[RelationBlock]
    dst_rows: list[torch.Tensor] | None = None

    def destinations(self, t: int, x: torch.Tensor) -> torch.Tensor:
        """``[num_dst[t], d]`` the destinations' rows of ``x``, the rows of type ``t``."""
        return x[:self.num_dst[t]] if self.dst_rows is None else x[self.dst_rows[t]]


def typed_blocks(mfgs: Sequence[MFG], node_type: torch.Tensor, schema: GraphSchema) -> tuple[list[int], list[TypedBlock]]:
    """The per-type view of a batch's MFGs: nodes per type, and each layer's edges split by
    relation into CSRs over the rows of their types (one host synchronisation for the counts).

    Args:
        mfgs: model order, with their ``edge_type``.
        node_type: int64 ``[num_nodes]`` (a homogeneous batch's: zeros).

    Returns:
        ``(counts, blocks)``: batch nodes per type ``[T]``, and one :class:`TypedBlock` per MFG.
    """
    num_types, num_relations = schema.num_types, schema.num_relations
    if not isinstance(node_type, torch.Tensor):
        raise InputError(f"a batch of a graph with {num_types} node types needs node_type, the type of each "
                         "node of n_id; pass the batch's node_type")
    device = mfgs[0].edge_index.device if mfgs else torch.device("cpu")
    rank, counts = type_ranks(node_type, num_types)
    rank, counts = rank.to(device), counts.to(device)
    if num_types == 1 and num_relations == 1:
        rank = None  # the rows of the one type are the positions
    parts = [counts]
    for mfg in mfgs:
        parts.append(_counts(node_type[:mfg.num_dst], num_types, device))
        parts.append(_counts(mfg.edge_type, num_relations, device))
    numbers = torch.cat(parts).tolist()  # the one synchronisation
    node_counts, numbers = numbers[:num_types], numbers[num_types:]
    blocks = []
    for i, mfg in enumerate(mfgs):
        step = num_types + num_relations
        num_dst = numbers[i * step:i * step + num_types]
        edges = numbers[i * step + num_types:(i + 1) * step]
        blocks.append(TypedBlock(num_dst, _relation_blocks(mfg, rank, schema, num_dst, edges)))
    return node_counts, blocks


def _counts(index: torch.Tensor, size: int, device: torch.device) -> torch.Tensor:
    """int64 ``[size]``: how many entries of ``index`` (``[n]``, values in ``[0, size)``) hold each
    value, on ``device``; with one value, ``[n]`` without reading them."""
    if size == 1:
        return torch.tensor([index.shape[0]], dtype=torch.int64, device=device)
    return torch.bincount(index.to(device), minlength=size)


def _relation_blocks(mfg: MFG, rank: torch.Tensor | None, schema: GraphSchema, num_dst: list[int],
                     edges: list[int]) -> list[RelationBlock]:
    """:func:`typed_blocks`'s relation CSRs of one MFG (``edges[r]`` edges of relation ``r``;
    ``rank`` None: one node type, whose rows are the positions)."""
    src, dst = mfg.edge_index[0], mfg.edge_index[1]
    if rank is None:  # one type and one relation: the MFG's own CSR
        return [RelationBlock(0, 0, 0, mfg.rowptr, src, dst)]
    # stable: within a relation the edges stay grouped by destination (one relation: they are already)
    order = torch.argsort(mfg.edge_type, stable=True) if schema.num_relations > 1 else None
    blocks, start = [], 0
    for r, (s, t) in enumerate(schema.relation_ends):
        chosen = slice(start, start + edges[r]) if order is None else order[start:start + edges[r]]
        rows = rank[dst[chosen]]
        blocks.append(RelationBlock(r, s, t, _rowptr(rows, num_dst[t]), rank[src[chosen]], rows))
        start += edges[r]
    return blocks


def _rowptr(rows: torch.Tensor, num_rows: int) -> torch.Tensor:
    """int64 ``[num_rows + 1]`` CSR offsets of the ascending destination rows ``rows``."""
    rowptr = torch.zeros(num_rows + 1, dtype=torch.int64, device=rows.device)
    torch.cumsum(torch.bincount(rows, minlength=num_rows), 0, out=rowptr[1:])
    return rowptr


def seed_rows(rows: Sequence[torch.Tensor | None], seed_type: torch.Tensor, counts: Sequence[int]) -> torch.Tensor:
    """``[n, d]``: the rows of a batch's ``n`` seeds in ``n_id`` order, gathered from per-type rows.

    Args:
        rows: per node type (the schema's order), ``[n_t, d]`` rows of the batch nodes of the type
            in ``n_id`` order (so its seeds' come first), or ``None`` for a type without seeds.
        seed_type: int64 ``[n]`` the type of each seed.
        counts: the seeds of each type (host ints, ``sum(counts) == n``).

    Seeds of one type (node classification's, of the target type) are that type's first rows, no
    copy; seeds of several (link prediction's two endpoint types) are merged into their order.
    """
    present = [t for t, count in enumerate(counts) if count]
    if len(present) <= 1:
        t = present[0] if present else next(t for t, r in enumerate(rows) if r is not None)
        return rows[t][:counts[t]]
    first = rows[present[0]]
    merged = first.new_empty((int(seed_type.shape[0]), first.shape[1]))
    seed_type = seed_type.to(first.device)  # a batch's types may be kept on the host
    for t in present:
        merged[seed_type == t] = rows[t][:counts[t]]
    return merged


@dataclass(frozen=True)
class TypedInput:
    """What a typed model needs to know of its graph's inputs.

    Attributes:
        schema: the graph's node types and relations.
        feature_dims: node type name -> ``F_t``, the feature width of each type with features.
        embedding_dim: width of the learnable rows of each type without features, or None (then
            every type must have features); the caller passes those rows in ``x_dict`` as it does
            features (the trainer looks them up in a
            :class:`~salientpp.embedding.DistEmbedding` of the featureless types).
    """

    schema: GraphSchema
    feature_dims: Mapping[str, int]
    embedding_dim: int | None = None

    @classmethod
    def homogeneous(cls, in_dim: int) -> TypedInput:
        """The input of a homogeneous graph of ``in_dim`` features (no embedding)."""
        schema = GraphSchema.homogeneous(0)
        return cls(schema, {schema.target: int(in_dim)})

    @property
    def beside_features(self) -> bool:
        """Whether the embedding's rows go beside features: with an embedding and every type with
        features, it learns rows for the target type, fed beside them (``[x || emb]``,
        :func:`~salientpp.data.learned.learned_types`), which a model reading one input per type
        (these typed models) does not take."""
        return self.embedding_dim is not None and not self.featureless

    @property
    def featureless(self) -> tuple[str, ...]:
        """The node types without features, in the schema's order: those the embedding serves."""
        return tuple(t for t in self.schema.node_types if t not in self.feature_dims)

    def input_dims(self) -> list[int]:
        """The width of each type's input rows, in the schema's order (:meth:`input_dim`)."""
        return [self.input_dim(t) for t in self.schema.node_types]

    def input_dim(self, node_type: str) -> int:
        """The width of ``node_type``'s input rows: its features', or its embedding's;
        :class:`InputError` for a featureless type without ``embedding_dim``."""
        if node_type in self.feature_dims:
            return check_int(self.feature_dims[node_type], f"the feature width of the node type {shown(node_type)}")
        if self.embedding_dim is None:
            raise InputError(f"the node type {shown(node_type)} has no features; give it a learnable embedding "
                             "with --embedding-dim")
        return check_int(self.embedding_dim, "the embedding dimension")


class _RelationalConv(nn.Module):
    """A relational layer: ``forward(h, block)``, and :meth:`over_chunks` for layer-wise inference."""

    def over_chunks(self, h: list[torch.Tensor], blocks: Iterable[TypedBlock]) -> Iterator[list[torch.Tensor]]:
        """``forward(h, block)`` of each block, all over the same rows ``h`` (layer-wise
        inference's chunks of one whole-graph layer)."""
        for block in blocks:
            yield self(h, block)


# RelationalMeanConv's roots beside TypedStructure's: R-GCN's one for every type.
SHARED_ROOT = "shared"


class RelationalMeanConv(_RelationalConv):
    """R-SAGE's layer (a root weight per destination type, ``root="type"``, or per relation,
    ``"relation"``) or R-GCN's (one root for every type, ``"shared"``, which needs one input
    width): ``forward(h, block)`` with ``h[t]`` ``[n_t, in_dims[t]]`` source rows of type ``t``
    returns ``out[t]`` ``[block.num_dst[t], out_dim]``."""

    def __init__(self, schema: GraphSchema, in_dims: Sequence[int], out_dim: int, root: str):
        super().__init__()
        ends = schema.relation_ends
        self.rel = nn.ModuleList(nn.Linear(in_dims[s], out_dim, bias=False) for s, _ in ends)
        # the input width of each root, and the roots each destination type sums
        widths, self.roots_of = {
            SHARED_ROOT: ([in_dims[0]], [[0]] * schema.num_types),
            ROOT_PER_TYPE: (list(in_dims), [[t] for t in range(schema.num_types)]),
            ROOT_PER_RELATION: ([in_dims[t] for _, t in ends],
                                [[r for r, (_, d) in enumerate(ends) if d == t] for t in range(schema.num_types)]),
        }[root]
        self.root = nn.ModuleList(nn.Linear(width, out_dim) for width in widths)
        self.out_dim = out_dim

    def over_chunks(self, h: list[torch.Tensor], blocks: Iterable[TypedBlock]) -> Iterator[list[torch.Tensor]]:
        """As :meth:`_RelationalConv.over_chunks`, with the projections of :meth:`_messages` kept
        for all the chunks."""
        projected: dict[int, torch.Tensor] = {}
        for block in blocks:
            yield self(h, block, projected)

    def forward(self, h: list[torch.Tensor], block: TypedBlock,
                projected: dict[int, torch.Tensor] | None = None) -> list[torch.Tensor]:
        """``projected``: the projections :meth:`_messages` keeps across the chunks of a layer
        (:meth:`over_chunks`), or ``None``."""
        out = [self._root(t, block.destinations(t, x)) for t, x in enumerate(h)]
        for rel in block.relations:
            if rel.col.numel() and block.num_dst[rel.dst_type]:
                out[rel.dst_type] = out[rel.dst_type] + self._messages(h, rel, projected)
        return out

    def _messages(self, h: list[torch.Tensor], rel: RelationBlock,
                  projected: dict[int, torch.Tensor] | None) -> torch.Tensor:
        """``[n_dst, out_dim]`` ``W_r`` of the mean of each destination's relation-``r`` sources.
        Over the chunks of a whole-graph layer (``projected`` not ``None``), when the source type has
        fewer rows than the destination type, the mean of ``W_r`` of the sources instead (the same
        sum in another order): ``W_r`` of every source row, computed at the relation's first chunk
        and kept in ``projected[r]``, costs fewer rows than one per destination."""
        x, r = h[rel.src_type], rel.relation
        if projected is None or x.shape[0] >= h[rel.dst_type].shape[0]:
            return self.rel[r](aggregate(x, rel.rowptr, rel.col, mean=True))
        if r not in projected:
            projected[r] = self.rel[r](x)
        return aggregate(projected[r], rel.rowptr, rel.col, mean=True)

    def _root(self, t: int, x: torch.Tensor) -> torch.Tensor:
        """``[n, out_dim]``: the sum of type ``t``'s roots of its destinations' rows ``x``
        ``[n, in_dims[t]]`` (zeros where no relation enters ``t`` and each relation has its root)."""
        roots = [self.root[i](x) for i in self.roots_of[t]]
        return sum(roots[1:], roots[0]) if roots else x.new_zeros((x.shape[0], self.out_dim))


class RelationalGATConv(_RelationalConv):
    """R-GAT's layer: per relation ``r``, PyG's ``GATConv(in_dim, out_dim // heads, heads,
    add_self_loops=False)`` over the relation's edges, summed over the relations into each type,
    with one bias per type (the sum of the relations' biases). ``forward`` as
    :class:`RelationalMeanConv`'s."""

    def __init__(self, schema: GraphSchema, in_dim: int, out_dim: int, heads: int):
        super().__init__()
        self.heads, self.channels = heads, out_dim // heads
        self.lin = nn.ModuleList(nn.Linear(in_dim, out_dim, bias=False) for _ in schema.relations)
        self.att_src = nn.Parameter(torch.empty(schema.num_relations, heads, self.channels))
        self.att_dst = nn.Parameter(torch.empty(schema.num_relations, heads, self.channels))
        self.bias = nn.Parameter(torch.zeros(schema.num_types, out_dim))
        self.src_types = [src for src, _ in schema.relation_ends]
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def over_chunks(self, h: list[torch.Tensor], blocks: Iterable[TypedBlock]) -> Iterator[list[torch.Tensor]]:
        """As :meth:`_RelationalConv.over_chunks`, with every relation's :meth:`_sources` computed
        once for all the chunks, not by each chunk over every row."""
        sources = [self._sources(r, h[t]) for r, t in enumerate(self.src_types)]
        for block in blocks:
            yield self(h, block, sources)

    def _sources(self, relation: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(z [n, heads, channels], score [n, heads])``: relation ``relation``'s projection of the
        source rows ``x`` ``[n, in_dim]``, and their half of the attention score."""
        z = self.lin[relation](x).view(-1, self.heads, self.channels)
        return z, (z * self.att_src[relation]).sum(-1)

    def forward(self, h: list[torch.Tensor], block: TypedBlock,
                sources: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None) -> list[torch.Tensor]:
        """``sources``: per relation, its :meth:`_sources` of every row of ``h[src_type]``, when
        already computed (:meth:`over_chunks`)."""
        out = [self.bias[t].expand(n, -1) for t, n in enumerate(block.num_dst)]
        heads, channels = self.heads, self.channels
        for rel in block.relations:
            num_dst = block.num_dst[rel.dst_type]
            if not rel.col.numel() or not num_dst:
                continue
            r, col = rel.relation, rel.col
            z, z_score = self._sources(r, h[rel.src_type]) if sources is None else sources[r]
            z_dst = self.lin[r](block.destinations(rel.dst_type, h[rel.dst_type])).view(-1, heads, channels)
            score = z_score[col] + (z_dst * self.att_dst[r]).sum(-1)[rel.dst]  # [E_r, heads]
            alpha = _segment_softmax(F.leaky_relu(score, ATTENTION_SLOPE), rel.dst, num_dst)
            messages = z[col] * alpha.unsqueeze(-1)
            total = torch.zeros((num_dst, heads, channels), dtype=messages.dtype, device=messages.device)
            out[rel.dst_type] = out[rel.dst_type] + total.index_add_(0, rel.dst, messages).view(num_dst, -1)
        return out


def _segment_softmax(score: torch.Tensor, index: torch.Tensor, num_segments: int) -> torch.Tensor:
    """Softmax of ``score`` ``[E, H]`` over the entries of each segment ``index`` ``[E]``, as PyG's
    ``torch_geometric.utils.softmax`` computes it."""
    spread = index.unsqueeze(1).expand_as(score)
    top = torch.full((num_segments, score.shape[1]), float("-inf"), dtype=score.dtype, device=score.device)
    top = top.scatter_reduce(0, spread, score.detach(), "amax", include_self=True)
    weights = (score - top[index]).exp()
    total = torch.zeros_like(top).index_add_(0, index, weights) + _SOFTMAX_EPS
    return weights / total[index]


class TypedMFGModel(nn.Module):
    """R-SAGE, R-GCN or R-GAT over typed MFGs (see the module docstring): ``forward(x_dict,
    mfgs, node_type, n_id)`` returns the seeds' ``[mfgs[-1].num_dst, out_dim]`` outputs (float32,
    or the parameters' dtype).

    Args:
        model: one of :data:`TYPED_MODELS`.
        typed: the graph's schema and input widths (:class:`TypedInput`).
        hidden: the width of every layer (R-GAT: divisible by ``heads``).
        structure: R-SAGE's roots and first layer (:class:`TypedStructure`); the other models
            take the default only.
    """

    # ModelInput.TYPED_MFGS, by value (salientpp.models.gnn, which reads it, imports this module).
    salientpp_input = "x_dict+mfgs"

    def __init__(self, model: str, typed: TypedInput, hidden: int, out_dim: int, num_layers: int,
                 dropout: float = 0.5, heads: int = 4, structure: TypedStructure = TypedStructure()):
        super().__init__()
        check_architecture(model, TYPED_MODELS, "typed model", num_layers, hidden, heads)
        structure.check(model)
        schema = typed.schema
        dims = typed.input_dims()
        raw = structure.input == RAW_INPUT
        # the raw input goes to the first layer as it comes (an identity keeps one path for both)
        self.project = nn.ModuleList(nn.Identity() if raw else nn.Linear(d, hidden) for d in dims)
        in_dims = [dims if raw and i == 0 else [hidden] * schema.num_types for i in range(num_layers)]
        if model == "rgat":
            self.convs = nn.ModuleList(RelationalGATConv(schema, hidden, hidden, heads) for _ in range(num_layers))
        else:
            root = SHARED_ROOT if model == "rgcn" else structure.root
            self.convs = nn.ModuleList(RelationalMeanConv(schema, in_dims[i], hidden, root) for i in range(num_layers))
        self.head = nn.Linear(hidden, out_dim)
        self.schema = schema
        self.dropout = float(dropout)
        self.model = model
        self.structure = structure

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def inputs(self, x_dict: Mapping[str, torch.Tensor], counts: list[int]) -> list[torch.Tensor]:
        """``h[t]`` ``[counts[t], hidden]``: each type's projected input rows (features or embedding
        rows); with the raw input, those rows as they are, ``[counts[t], F_t]``."""
        dtype = self.head.weight.dtype
        h = []
        for t, name in enumerate(self.schema.node_types):
            if name not in x_dict:
                raise InputError(f"x_dict has no rows of the node type {shown(name)}, which the model reads; pass "
                                 "the batch's x_dict with the embedding rows of each type without features")
            rows = x_dict[name]
            if rows.shape[0] != counts[t]:
                raise InputError(f"x_dict holds {rows.shape[0]} rows of the node type {shown(name)} but the batch "
                                 f"has {counts[t]} nodes of it; pass one row per node, in n_id order")
            h.append(self.project[t](rows.to(dtype)))
        return h

    def layer_inputs(self, rows: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Layer-wise inference's input (:meth:`whole_graph_layer`'s of layer 0): ``rows[t]``
        ``[n_t, F_t]`` input rows of ``n_t`` nodes of type ``t`` (the schema's order) -> their
        projections ``[n_t, hidden]`` (the raw input: the rows, ``[n_t, F_t]``)."""
        return self.inputs(dict(zip(self.schema.node_types, rows)), [int(x.shape[0]) for x in rows])

    def whole_graph_layer(self, i: int, h: Sequence[torch.Tensor],
                          blocks: Iterable[TypedBlock]) -> Iterator[list[torch.Tensor]]:
        """Layer ``i`` over chunks of the whole graph, as layer-wise inference runs it: ``h[t]``
        ``[n_t, hidden]`` (the raw input's layer 0: ``[n_t, F_t]``) every row of type ``t`` it
        holds, each block a chunk's destinations (their ``dst_rows``) and edges (``col``: rows of
        ``h[src_type]``). Yields, per block, each type's ``[block.num_dst[t], hidden]`` (LeakyReLU
        and dropout after every layer but the last); the last layer's through the head,
        ``[num_dst[t], out_dim]``."""
        for out in self.convs[i].over_chunks(list(h), blocks):
            out = self._activate(i, out)
            yield [self.head(x) for x in out] if i == self.num_layers - 1 else out

    def _activate(self, i: int, h: list[torch.Tensor]) -> list[torch.Tensor]:
        """Layer ``i``'s per-type outputs ``h``, with LeakyReLU and dropout after every layer but the last."""
        if i < self.num_layers - 1:
            h = [dropout(F.leaky_relu(x), self.dropout, self.training) for x in h]
        return h

    def forward(self, x_dict: Mapping[str, torch.Tensor], mfgs: Sequence[MFG], node_type: torch.Tensor,
                n_id: torch.Tensor) -> torch.Tensor:
        if len(mfgs) != self.num_layers:
            raise ValueError(f"{len(mfgs)} MFGs for {self.num_layers} layers")
        counts, blocks = typed_blocks(mfgs, node_type, self.schema)
        h = self.inputs(x_dict, counts)
        for i, (conv, block) in enumerate(zip(self.convs, blocks)):
            h = self._activate(i, conv(h, block))
        return self.head(seed_rows(h, node_type[:mfgs[-1].num_dst], blocks[-1].num_dst))
