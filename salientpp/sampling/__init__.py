"""Minibatch sampling producing per-layer message-flow graphs: node-wise (C++ thread pool) and bulk
(sparse-matrix operations, node-wise or LADIES)."""
from .bulk import BulkSampler
from .kinds import MINIBATCHES_PER_BULK, SAMPLERS, SamplerKind, check_fanouts, check_sampler, parse_fanouts
from .loader import NeighborLoader
from .sampler import MFG, BaseSampler, FetchContext, FetchPlan, NeighborSampler, SampledBatch

__all__ = ["BaseSampler", "NeighborSampler", "BulkSampler", "NeighborLoader", "SampledBatch", "MFG", "FetchContext",
           "FetchPlan", "SamplerKind", "SAMPLERS", "check_fanouts", "make_sampler", "parse_fanouts"]


def make_sampler(rowptr, col, fanouts, kind: SamplerKind = SamplerKind.NODEWISE, replace: bool = False,
                 minibatches_per_bulk: int = MINIBATCHES_PER_BULK, device: str = "cpu"):
    """The sampler of ``kind`` over the CSR ``rowptr``, ``col``: a
    :class:`~salientpp.sampling.NeighborSampler` (CPU), or a :class:`~salientpp.sampling.BulkSampler`
    running on ``device``."""
    kind = check_sampler(kind)
    if kind is SamplerKind.NODEWISE:
        return NeighborSampler(rowptr, col, list(fanouts), replace=replace)
    method = "ladies" if kind is SamplerKind.LADIES else "nodewise"
    return BulkSampler(rowptr, col, list(fanouts), method=method, minibatches_per_bulk=minibatches_per_bulk,
                       replace=replace, device=device)
