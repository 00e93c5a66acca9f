"""Minibatch sampling producing per-layer message-flow graphs: node-wise (C++ thread pool) and bulk
(sparse-matrix operations, node-wise or LADIES)."""
from .bulk import BulkSampler
from .kinds import SAMPLERS, SamplerKind, make_sampler
from .loader import NeighborLoader
from .sampler import NeighborSampler
from .types import MFG, FetchContext, FetchPlan, SampledBatch

__all__ = ["NeighborSampler", "BulkSampler", "NeighborLoader", "SampledBatch", "MFG", "FetchContext", "FetchPlan",
           "SamplerKind", "SAMPLERS", "make_sampler"]
