"""A loader over edges: :class:`LinkNeighborLoader` cuts an epoch's shuffled edges into batches,
adds negatives, and samples the batch's endpoints like node seeds."""
from __future__ import annotations

import numpy as np
import torch

from ..errors import InputError
from .bulk import stream_seed
from .link import (NUM_NEGATIVES, LinkEnds, LinkSeeds, NegativeSampling, check_negative_sampling,
                   check_num_negatives, draw_link_seeds)
from .loader import NeighborLoader
from .sampler import BaseSampler, FetchContext


def check_edges(edges: torch.Tensor | np.ndarray, num_nodes: int, what: str) -> torch.Tensor:
    """int64 ``[2, E]`` edges with ids in ``[0, num_nodes)``, as a tensor; :class:`InputError` otherwise."""
    t = torch.as_tensor(np.asarray(edges) if isinstance(edges, np.ndarray) else edges)
    if t.ndim != 2 or t.shape[0] != 2 or t.dtype != torch.int64:
        raise InputError(f"{what} must be an int64 [2, E] edge array, got {t.dtype} {list(t.shape)}")
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= num_nodes):
        raise InputError(f"{what} holds node ids outside [0, {num_nodes}); re-partition the dataset")
    return t


class LinkNeighborLoader(NeighborLoader):
    """Minibatches of edges, sampled like :class:`NeighborLoader`'s node seeds.

    Epoch ``e`` shuffles the edges (seeded by ``(seed, e)``) and cuts them into ``S`` balanced
    batches (batch ``i`` holds ``order[i * E // S:(i + 1) * E // S]``, at most ``batch_size``).
    Each batch draws its negatives from its own stream ``(seed, e, i)``
    (:func:`~salientpp.sampling.link.draw_link_seeds`), and its node seeds, the distinct
    endpoints of the positives and negatives, are sampled as batch ``i`` of a
    :class:`NeighborLoader` whose epoch order lists every batch's node seeds in turn. The
    :class:`SampledBatch` of batch ``i`` then has those node seeds first in ``n_id``, and
    :meth:`links` gives its :class:`~salientpp.sampling.link.LinkSeeds` (``edge_label_index``
    indexes them).

    Args:
        sampler: a :class:`~salientpp.sampling.sampler.BaseSampler` of any kind, as for :class:`NeighborLoader`.
        edges: int64 ``[2, E]`` positive edges (global ids) of ``ends.relation``.
        batch_size: the most positive edges per batch.
        num_negatives: negatives per positive (>= 1); negative_sampling: ``"uniform"`` or
            ``"per-source"`` (:class:`~salientpp.sampling.link.NegativeSampling`).
        num_batches: S (default ``ceil(E / batch_size)``); distributed ranks pass the largest
            of any rank, so they run in lockstep (a rank with fewer edges gets empty batches).
        shuffle, seed, sampler_threads, read_ahead, fetch, low_priority, prefetch_next_epoch: as for
            :class:`NeighborLoader`.
        ends: where the negatives' ends are drawn (:class:`~salientpp.sampling.link.LinkEnds`: the
            nodes of the relation's source and destination types, in the sampler's numbering).
    """

    def __init__(self, sampler: BaseSampler, edges: torch.Tensor | np.ndarray, batch_size: int,
                 num_negatives: int = NUM_NEGATIVES,
                 negative_sampling: str | NegativeSampling = NegativeSampling.UNIFORM,
                 shuffle: bool = True, seed: int = 0, sampler_threads: int = 1, read_ahead: int = 4,
                 fetch: FetchContext | None = None, num_batches: int | None = None, low_priority: bool = False,
                 prefetch_next_epoch: bool = False, *, ends: LinkEnds):
        self.edges = check_edges(edges, sampler.num_nodes, "edges")
        self.ends = ends
        self.num_negatives = check_num_negatives(num_negatives)
        self.negative_sampling = check_negative_sampling(negative_sampling)
        num_edges = int(self.edges.shape[1])
        if num_batches is None:
            if num_edges == 0:
                raise InputError("the loader has no edges; pass edges or num_batches")
            num_batches = -(-num_edges // int(batch_size))
        if int(num_batches) < -(-num_edges // int(batch_size)):
            raise InputError(f"num_batches={num_batches} would put more than batch_size={batch_size} of the "
                             f"{num_edges} edges in a batch; pass num_batches >= {-(-num_edges // int(batch_size))}")
        super().__init__(sampler, torch.empty(0, dtype=torch.int64), batch_size, shuffle=shuffle, seed=seed,
                         sampler_threads=sampler_threads, read_ahead=read_ahead, fetch=fetch, num_batches=int(num_batches),
                         low_priority=low_priority, prefetch_next_epoch=prefetch_next_epoch)
        self._links: dict[int, list[LinkSeeds]] = {}  # by epoch (see _links_of)

    def links(self) -> list[LinkSeeds]:
        """This epoch's :class:`LinkSeeds`, one per batch (computed once per epoch)."""
        return self._links_of(self.epoch)

    def _links_of(self, epoch: int) -> list[LinkSeeds]:
        """:meth:`links` of ``epoch``; besides it, only the epochs just before and after it are
        kept (the running epoch's and, with ``prefetch_next_epoch``, the next one's)."""
        links = self._links.get(epoch)
        if links is None:  # a local result: a fetch thread may replace the dict meanwhile
            shuffle_key = self._epoch_keys(epoch)[0]
            num_edges = int(self.edges.shape[1])
            if self.shuffle:
                order = torch.randperm(num_edges, generator=torch.Generator().manual_seed(shuffle_key >> 1))
            else:
                order = torch.arange(num_edges)
            bounds = (torch.arange(len(self) + 1) * num_edges // len(self)).tolist()
            links = [draw_link_seeds(self.edges[:, order[bounds[i]:bounds[i + 1]]], self.ends,
                                     self.num_negatives, self.negative_sampling,
                                     torch.Generator().manual_seed(stream_seed(shuffle_key, i)))
                     for i in range(len(self))]
            self._links = {**{e: kept for e, kept in self._links.items() if e == epoch - 1 or e == epoch + 1},
                           epoch: links}
        return links

    def _order(self, epoch: int) -> torch.Tensor:
        """int64: the node seeds of every batch of ``epoch``, batch after batch."""
        nodes = [link.nodes for link in self._links_of(epoch)]
        return torch.cat(nodes) if nodes else torch.empty(0, dtype=torch.int64)

    def _bounds(self, epoch: int) -> torch.Tensor:
        sizes = torch.tensor([int(link.nodes.shape[0]) for link in self._links_of(epoch)], dtype=torch.int64)
        bounds = torch.zeros(len(self) + 1, dtype=torch.int64)
        torch.cumsum(sizes, 0, out=bounds[1:])
        return bounds
