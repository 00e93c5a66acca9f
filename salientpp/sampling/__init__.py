"""Node-wise neighbour sampling (C++ thread pool) producing per-layer message-flow graphs."""
from .loader import NeighborLoader
from .sampler import NeighborSampler
from .types import MFG, FetchContext, FetchPlan, SampledBatch

__all__ = ["NeighborSampler", "NeighborLoader", "SampledBatch", "MFG", "FetchContext", "FetchPlan"]
