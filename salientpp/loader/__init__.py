"""What a training script iterates: one rank's view of the partitioned graph (:class:`DistGraph`),
the distributed loaders that yield model-ready batches (:class:`DistNeighborLoader`,
:class:`DistLinkNeighborLoader`) and the pipeline of stages between a sampled batch and the
model (:mod:`salientpp.loader.pipeline`). It sits above :mod:`salientpp.distributed` (process
groups, the row exchange, the feature store) and :mod:`salientpp.sampling`."""
from .graph import DistGraph
from .dist_link_loader import DistLinkNeighborLoader, LinkBatch
from .dist_loader import Batch, DistNeighborLoader
from .pipeline import Pipeline, StageTimes

__all__ = ["Batch", "DistGraph", "DistLinkNeighborLoader", "DistNeighborLoader", "LinkBatch", "Pipeline",
           "StageTimes"]
