"""Layer-wise full-neighbour inference: exact outputs of the model for owned vertices.

Layer ``l`` computes the layer-``l`` embeddings of every owned vertex from ALL its neighbours'
layer-``(l-1)`` embeddings, so the result equals a forward pass over the whole graph, whatever
the partitioning. Neighbours owned by other ranks form the *halo*; it is the same at every
layer, so its ids are exchanged once (counts, then ids) and each layer exchanges only rows,
with the all-to-all of :class:`~salientpp.distributed.exchange.RowExchange` (one per node type,
each of its rows' width). Destinations are processed in chunks of ``chunk_size``, so the
temporaries stay bounded by the chunk, not the graph; each chunk's outputs go straight into
the next layer's table (its owned rows, then room for the halo's), which is never copied.

The embeddings are kept per node type (``h[t]``: the rank's owned rows of type ``t`` in id
order, then its halo rows of the type), as the typed models keep a batch's: a rank's owned ids
hold its nodes type by type (the partition book's blocks), each type's input rows have their own
width, and the model's ``layer_inputs`` projects them. A type's input rows are what a sampled
batch feeds the model (:class:`~salientpp.models.gnn.SeedForward`): its features, then its rows of
the learned :class:`~salientpp.embedding.DistEmbedding` (a featureless type's, or beside a
homogeneous graph's features). Both are the rank's owned rows, read where they lie: the halo's
come with the layer's exchange like any other layer's. A chunk is a
:class:`~salientpp.models.typed.TypedBlock` of destinations of one type: per relation into it, a
CSR over the destinations whose ``col`` are rows of the source type's table (the relation of each
edge is the partitioned graph's ``edge_rel``), and the destinations' own rows (``dst_rows``). A
homogeneous graph is the case of one type and one relation.
"""
from __future__ import annotations

import numpy as np
import torch

from ..data.csr import row_edge_positions
from ..data.learned import feature_widths
from ..distributed import CommStats, DistContext, RowExchange
from ..distributed.exchange import Halo
from ..embedding import DistEmbedding
from ..errors import InputError, shown
from ..models.typed import RelationBlock, TypedBlock
from ..partition import PartitionedDataset


class LayerwiseInference:
    """Full-neighbour inference on one rank (building it is a collective: every rank at once).

    The model is a built-in one (:func:`~salientpp.models.gnn.runs_layer_by_layer`): it has
    ``num_layers``, ``layer_inputs(rows)`` and ``whole_graph_layer(i, h, blocks)``.

    Args:
        ctx: the process group context (rank = partition).
        data: the partitioned dataset (the graph is replicated, features are not).
        chunk_size: destinations per chunk.
        features: whether the stored features are fed to the model (``--no-features``: not).
        embedding: the learned rows of the types it holds (``None``: none), read at every call, so
            an evaluation during training sees its current values. A type with neither
            features nor embedding rows is refused (:class:`InputError`).
    """

    def __init__(self, ctx: DistContext, data: PartitionedDataset, chunk_size: int, features: bool = True,
                 embedding: DistEmbedding | None = None):
        self.ctx, self.schema, self.book = ctx, data.schema, data.book
        self.rowptr, self.col, self.edge_rel = np.asarray(data.rowptr), np.asarray(data.col), data.edge_rel
        self.lo, self.hi = int(data.book.offsets[ctx.rank]), int(data.book.offsets[ctx.rank + 1])
        # the first owned id and the owned nodes of each type, and the relations by index: (source
        # type, destination type)
        blocks = [data.book.block(ctx.rank, t) for t in range(self.schema.num_types)]
        self.starts, self.counts = [start for start, _ in blocks], [stop - start for start, stop in blocks]
        self.ends = self.schema.relation_ends
        self.features = _owned_features(data, ctx.rank, features, self.counts)
        self.embedding, self.learned = embedding, _learned_slices(embedding, data, self.counts)
        for t, (x, rows) in enumerate(zip(self.features, self.learned)):
            if not x.shape[1] and rows is None:
                raise InputError(f"layer-wise inference reads each node type's features or learned embedding, but "
                                 f"the node type {shown(self.schema.node_types[t])} has neither; give it a learned "
                                 "embedding with --embedding-dim")
        self.chunk_size = int(chunk_size)
        neighbours = self.col[self.rowptr[self.lo]:self.rowptr[self.hi]]
        ids = np.unique(neighbours[(neighbours < self.lo) | (neighbours >= self.hi)]).astype(np.int64)
        kinds = np.asarray(data.book.type_of(ids))
        # one halo per node type, whose rows have the type's width (a raw input's own)
        self.halos = [Halo.build(ctx, ids[kinds == t], data.book) for t in range(self.schema.num_types)]
        self.halo_ids = [halo.ids.numpy() for halo in self.halos]  # ascending

    def _fill_halo(self, tables: list[torch.Tensor], stats: CommStats) -> None:
        """Write each type's halo rows into its table ``tables[t]`` (``[n_kt + n_ht, d_t]``, its
        owned rows first), after the owned rows: one exchange per type (a collective); ``stats``
        counts the rows moved."""
        comm = self.ctx.comm_device
        for t, (table, halo) in enumerate(zip(tables, self.halos)):
            owned, width = table[:self.counts[t]], int(table.shape[1])

            def serve(ids: torch.Tensor, counts: torch.Tensor, owned=owned, start=self.starts[t]) -> torch.Tensor:
                return owned[(ids - start).to(owned.device)].to(comm)
            exchange = RowExchange(self.ctx, serve, width, table.dtype)
            exchange.stats = stats
            rows = exchange.rows(halo.requested.to(comm), halo.requested_counts, halo.counts).wait()
            table[self.counts[t]:] = rows.view(-1, width).to(table.device)

    def _rows(self, ids: np.ndarray, t: int) -> np.ndarray:
        """int64 rows in type ``t``'s table of global ids ``ids`` of that type."""
        owned = (ids >= self.lo) & (ids < self.hi)
        return np.where(owned, ids - self.starts[t], self.counts[t] + np.searchsorted(self.halo_ids[t], ids))

    def _chunk(self, t: int, dst: np.ndarray) -> TypedBlock:
        """The block of the owned destinations of type ``t`` at rows ``dst`` of its table: every
        edge into them, split by relation."""
        c, num_types = dst.shape[0], self.schema.num_types
        positions, degree = row_edge_positions(self.rowptr, dst + self.starts[t])
        nbr, rel = np.asarray(self.col[positions], dtype=np.int64), np.asarray(self.edge_rel[positions])
        dst_index = np.repeat(np.arange(c, dtype=np.int64), degree)
        relations = []
        for r, (src_type, dst_type) in enumerate(self.ends):
            chosen = rel == r if dst_type == t else np.zeros(rel.shape[0], dtype=bool)
            rows = dst_index[chosen]
            rowptr = np.zeros((c if dst_type == t else 0) + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows, minlength=rowptr.shape[0] - 1), out=rowptr[1:])
            relations.append(RelationBlock(r, src_type, dst_type, torch.from_numpy(rowptr),
                                           torch.from_numpy(self._rows(nbr[chosen], src_type)), torch.from_numpy(rows)))
        counts, dst_rows = [0] * num_types, [torch.empty(0, dtype=torch.int64)] * num_types
        counts[t], dst_rows[t] = c, torch.from_numpy(dst)  # the chunk's destinations are all of type t
        return TypedBlock(counts, relations, dst_rows)

    def _layer(self, model: torch.nn.Module, i: int, tables: list[torch.Tensor], dst: list[np.ndarray],
               spare: list[int]) -> list[torch.Tensor]:
        """Layer ``i``'s outputs of the owned rows ``dst[t]`` of each type ``t`` (rows of its table),
        one call of the model over every chunk of the layer: ``out[t]`` ``[len(dst[t]) + spare[t],
        d]``, the outputs in ``dst[t]``'s order, then ``spare[t]`` rows left for the halo."""
        device, size = tables[0].device, self.chunk_size
        # An empty set of rows still runs one (empty) chunk, so the output has the layer's width.
        chunks = [(t, start) for t, rows in enumerate(dst) for start in range(0, max(rows.shape[0], 1), size)]
        blocks = (_to(self._chunk(t, dst[t][start:start + size]), device) for t, start in chunks)
        out: list[torch.Tensor | None] = [None] * len(dst)
        for (t, start), rows in zip(chunks, model.whole_graph_layer(i, tables, blocks)):
            if out[t] is None:  # the type's first chunk gives the layer's width
                out[t] = rows[t].new_empty((dst[t].shape[0] + spare[t], rows[t].shape[1]))
            out[t][start:start + rows[t].shape[0]] = rows[t]
        return out

    def _input_rows(self) -> list[torch.Tensor]:
        """float32 ``[n_kt, F_t + D_t]`` each type's input rows of its owned nodes: its features
        fed, then its rows of the embedding (``D_t`` = 0 for a type it does not hold)."""
        weight = None if self.embedding is None else self.embedding.weight
        return [x if rows is None else torch.cat([x, weight[rows]], dim=1) for x, rows in zip(self.features, self.learned)]

    @torch.no_grad()
    def __call__(self, model: torch.nn.Module, dst_local: np.ndarray, stats: CommStats) -> torch.Tensor:
        """``[len(dst_local), out_dim]`` model outputs of the owned nodes of the target type at rows
        ``dst_local`` of its features (ids ``seed_start + i``; a collective). Every layer but the
        last runs on all owned vertices; the last on ``dst_local`` only. ``stats`` counts the halo
        rows moved."""
        was_training = model.training
        model.eval()
        target, halo = self.schema.target_index, [ids.shape[0] for ids in self.halo_ids]
        everyone = [np.arange(count, dtype=np.int64) for count in self.counts]
        last = [np.asarray(dst_local, dtype=np.int64) if t == target else np.empty(0, dtype=np.int64)
                for t in range(self.schema.num_types)]
        inputs = model.layer_inputs([x.to(self.ctx.device) for x in self._input_rows()])
        h = [torch.cat([x, x.new_empty((n, x.shape[1]))]) if n else x for x, n in zip(inputs, halo)]
        self._fill_halo(h, stats)
        for i in range(model.num_layers - 1):  # every owned row, then the halo's
            h = self._layer(model, i, h, everyone, halo)
            self._fill_halo(h, stats)
        out = self._layer(model, model.num_layers - 1, h, last, [0] * len(halo))
        model.train(was_training)
        return out[target].cpu()


def _to(block: TypedBlock, device: torch.device) -> TypedBlock:
    """``block`` with its tensors on ``device``."""
    return TypedBlock(block.num_dst, [RelationBlock(r.relation, r.src_type, r.dst_type, r.rowptr.to(device),
                                                    r.col.to(device), r.dst.to(device)) for r in block.relations],
                      [rows.to(device) for rows in block.dst_rows])


def _owned_features(data: PartitionedDataset, rank: int, features: bool, counts: list[int]) -> list[torch.Tensor]:
    """float32 ``[n_kt, F_t]`` (writable copies) the features fed to the model of ``rank``'s
    ``counts[t]`` nodes of each node type, in the schema's order (rows in id order): ``F_t`` = 0
    for a type without features, and for every type unless ``features``
    (:func:`~salientpp.data.learned.feature_widths`)."""
    part, schema = data.part(rank), data.schema
    rows = []
    for t, (name, width) in enumerate(zip(schema.node_types, feature_widths(data, features))):
        if width:
            x = part.x if t == schema.target_index else part.features[name]
            rows.append(torch.from_numpy(np.array(x, dtype=np.float32)))
        else:
            rows.append(torch.empty((counts[t], 0)))
    return rows


def _learned_slices(embedding: DistEmbedding | None, data: PartitionedDataset, counts: list[int]) -> list[slice | None]:
    """Where each node type's owned rows lie in ``embedding.weight`` (its blocks of the types it
    holds, each in id order), or ``None`` for a type it does not hold (or no embedding)."""
    if embedding is None:
        return [None] * len(counts)
    kinds = np.asarray(data.book.type_of(embedding.owned_ids()))
    slices: list[slice | None] = []
    for t, count in enumerate(counts):
        rows = np.flatnonzero(kinds == t)
        slices.append(slice(int(rows[0]), int(rows[0]) + count) if rows.shape[0] else None)
    return slices
