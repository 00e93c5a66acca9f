"""The distributed loader of link prediction: :class:`DistLinkNeighborLoader` and its :class:`LinkBatch`.

Its seeds are edges of the dataset's link relation (``PartitionedDataset.link_relation``): each
rank's are the edges whose source it owns (``DistGraph.edges``). A batch's positive edges come with
negatives, whose ends are drawn from the relation's source and destination types
(:meth:`~salientpp.sampling.link.LinkEnds.of_partitions`), and the distinct endpoints of both
(nodes of those two types) are sampled and
fetched like the node seeds of :class:`~salientpp.loader.dist_loader.DistNeighborLoader`, through
the same cache and pipeline. Ranks run in lockstep: every rank runs
``S = max_k ceil(E_k / batch_size)`` batches per epoch.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np
import torch

from ..errors import InputError
from ..sampling.link import (NUM_NEGATIVES, KnownPairs, LinkEnds, NegativeSampling, check_negative_sampling,
                              check_num_negatives)
from ..sampling.link_loader import LinkNeighborLoader, check_edges
from .dist_loader import Batch, DistNeighborLoader
from .pipeline import InFlight


@dataclass
class LinkBatch(Batch):
    """A :class:`~salientpp.loader.dist_loader.Batch` whose seeds are the endpoints of its edges.

    Attributes (besides Batch's; ``y`` is empty):
        edge_label_index: int64 ``[2, P + Q]`` the positive edges, then the negatives, as indices
            into ``n_id`` (into its first ``batch_size`` entries, the node seeds), on the device.
        edge_label: float32 ``[P + Q]``: 1 for the positives, 0 for the negatives, on the device.
        num_positives: P.
    """

    edge_label_index: torch.Tensor
    edge_label: torch.Tensor
    num_positives: int

    def to_pyg(self):
        """:meth:`Batch.to_pyg` with ``edge_label_index`` and ``edge_label``, as PyG's ``LinkNeighborLoader`` sets them."""
        data = super().to_pyg()
        data.edge_label_index, data.edge_label = self.edge_label_index, self.edge_label
        return data


class DistLinkNeighborLoader(DistNeighborLoader):
    """Minibatches of this rank's edges with their endpoints' sampled neighbourhoods and features.

    Args:
        graph: the :class:`~salientpp.loader.graph.DistGraph` (partitioned with held-out
            edges: ``salientpp prepare --link-split``).
        split: ``"train"``, ``"valid"`` or ``"test"`` (this rank's edges of that split), or an int64
            ``[2, E]`` array of edges whose sources this rank owns.
        fanouts, batch_size: as for DistNeighborLoader; ``batch_size`` counts positive edges.
        num_negatives: negatives per positive edge (>= 1).
        negative_sampling: ``"uniform"`` (random node pairs) or ``"per-source"`` (each positive's
            source with random destinations, OGB's ranking protocol); see
            :class:`~salientpp.sampling.link.NegativeSampling`.
        exclude_edges: draw no negative that is an edge of the relation in any split
            (:meth:`~salientpp.loader.graph.DistGraph.known_edges`, a collective at its first use),
            as evaluation does; by default negatives are not checked, as training's.
        **options: the other keywords of DistNeighborLoader (plan, seed, features, ...).

    Yields :class:`LinkBatch` objects.
    """

    SEEDS = "edges"

    def __init__(self, graph, split, fanouts, batch_size: int, num_negatives: int = NUM_NEGATIVES,
                 negative_sampling: str | NegativeSampling = NegativeSampling.UNIFORM, exclude_edges: bool = False,
                 **options):
        self.num_negatives = check_num_negatives(num_negatives)
        self.negative_sampling = check_negative_sampling(negative_sampling)
        ends = LinkEnds.of_partitions(graph.data)
        self.ends = replace(ends, known=KnownPairs.of(graph.known_edges(), graph.num_nodes)) if exclude_edges else ends
        super().__init__(graph, split, fanouts, batch_size, **options)

    def _split_seeds(self, split) -> np.ndarray:
        if isinstance(split, str):
            return self.graph.edges(split)
        edges = check_edges(split.cpu() if isinstance(split, torch.Tensor) else split, self.graph.num_nodes,
                            "the seed edges").numpy()
        source = edges[0]
        outside = (source < self.graph.offset) | (source >= self.graph.offset + self.graph.num_owned)
        if outside.any():
            raise InputError(f"seed edge source {int(source[outside][0])} is not owned by rank {self.graph.rank}; "
                             "give each rank the edges whose sources it owns (graph.edges(split))")
        return edges

    def _inner_loader(self, sampler, **options) -> LinkNeighborLoader:
        return LinkNeighborLoader(sampler, torch.from_numpy(self.seeds), num_negatives=self.num_negatives,
                                  negative_sampling=self.negative_sampling, ends=self.ends,
                                  **options)

    def _labels(self, seeds: torch.Tensor) -> torch.Tensor:
        return torch.empty(0)

    def _batch(self, item: InFlight) -> LinkBatch:
        batch = super()._batch(item)
        links = self._loader.links()[item.step]
        device = self.graph.ctx.device
        return LinkBatch(**{f.name: getattr(batch, f.name) for f in fields(Batch)},
                         edge_label_index=links.edge_label_index.to(device), edge_label=links.edge_label.to(device),
                         num_positives=links.num_positives)
