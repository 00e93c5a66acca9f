"""Layer-wise full-neighbour inference: exact outputs of the model for owned vertices.

Layer ``l`` computes the layer-``l`` embeddings of every owned vertex from ALL its neighbours'
layer-``(l-1)`` embeddings, so the result equals a forward pass over the whole graph, whatever
the partitioning. Neighbours owned by other ranks form the *halo*; it is the same at every
layer, so its ids are exchanged once (counts, then ids) and each layer exchanges only rows,
with the all-to-all of :class:`~salientpp.distributed.exchange.RowExchange`. Destinations are
processed in chunks of ``chunk_size``: a chunk holds one source row per edge of its
destinations, so memory stays bounded by the chunk, not the graph.
"""
from __future__ import annotations

import numpy as np
import torch

from ..data.csr import row_edge_positions
from ..distributed import CommStats, DistContext, RowExchange
from ..distributed.exchange import Halo
from ..models import MFGModel
from ..partition import PartitionedDataset
from ..sampling import MFG


class LayerwiseInference:
    """Full-neighbour inference on one rank (building it is a collective: every rank at once).

    Args:
        ctx: the process group context (rank = partition).
        data: the partitioned dataset (the graph is replicated, features are not).
        x_local: ``[n_k, F]`` owned feature rows in local id order (any float dtype).
        chunk_size: destinations per chunk.
    """

    def __init__(self, ctx: DistContext, data: PartitionedDataset, x_local, chunk_size: int):
        self.ctx = ctx
        self.rowptr, self.col = np.asarray(data.rowptr), np.asarray(data.col)
        self.lo, self.hi = int(data.book.offsets[ctx.rank]), int(data.book.offsets[ctx.rank + 1])
        self.x_local = torch.from_numpy(np.array(x_local, dtype=np.float32))  # a writable float32 copy
        self.chunk_size = int(chunk_size)
        neighbours = self.col[self.rowptr[self.lo]:self.rowptr[self.hi]]
        ids = np.unique(neighbours[(neighbours < self.lo) | (neighbours >= self.hi)]).astype(np.int64)
        self.halo = Halo.build(ctx, ids, data.book)

    def _exchange_rows(self, h: torch.Tensor, stats: CommStats) -> torch.Tensor:
        """``[n_h, d]`` halo rows of the embeddings ``h`` (``[n_k, d]``, owned, local order)."""
        comm = self.ctx.comm_device
        width = int(h.shape[1])
        exchange = RowExchange(self.ctx, lambda ids, counts: h[ids.cpu() - self.lo].to(comm), width, h.dtype)
        exchange.stats = stats
        halo = self.halo
        return exchange.rows(halo.requested.to(comm), halo.requested_counts, halo.counts).wait().cpu().view(-1, width)

    def _layer(self, model: MFGModel, i: int, table: torch.Tensor, dst_local: np.ndarray) -> torch.Tensor:
        """Layer ``i`` for owned local ids ``dst_local``; ``table`` = ``[owned rows; halo rows]``."""
        device, n_k = self.ctx.device, self.hi - self.lo
        halo_ids = self.halo.ids.numpy()
        out = []
        # An empty dst_local still runs one (empty) chunk, so the output has the layer's width.
        for start in range(0, max(dst_local.shape[0], 1), self.chunk_size):
            dst = dst_local[start:start + self.chunk_size]
            positions, degree = row_edge_positions(self.rowptr, dst + self.lo)
            nbr = np.asarray(self.col[positions], dtype=np.int64)
            owned = (nbr >= self.lo) & (nbr < self.hi)
            rows = np.where(owned, nbr - self.lo, n_k + np.searchsorted(halo_ids, nbr))
            # Sources: the destinations first (a prefix, as in an MFG), then one row per edge.
            src = torch.from_numpy(np.concatenate([dst, rows]))
            c, e = dst.shape[0], rows.shape[0]
            edge_index = torch.stack([torch.arange(c, c + e), torch.repeat_interleave(torch.arange(c),
                                                                                       torch.from_numpy(degree))])
            rowptr = torch.from_numpy(np.concatenate([[0], np.cumsum(degree)]))
            mfg = MFG(c + e, c, edge_index.to(device), rowptr.to(device))
            out.append(model.layer(i, table[src].to(device), mfg).cpu())
        return torch.cat(out)

    @torch.no_grad()
    def __call__(self, model: MFGModel, dst_local: np.ndarray, stats: CommStats) -> torch.Tensor:
        """``[len(dst_local), out_dim]`` model outputs of owned local ids ``dst_local`` (a
        collective). Every layer but the last runs on all owned vertices; the last on
        ``dst_local`` only. ``stats`` counts the halo rows moved."""
        was_training = model.training
        model.eval()
        everyone = np.arange(self.hi - self.lo, dtype=np.int64)
        h = self.x_local
        for i in range(model.num_layers):
            table = torch.cat([h, self._exchange_rows(h, stats)])
            dst = np.asarray(dst_local, dtype=np.int64) if i == model.num_layers - 1 else everyone
            h = self._layer(model, i, table, dst)
        model.train(was_training)
        return h
