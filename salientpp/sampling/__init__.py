"""Minibatch sampling producing per-layer message-flow graphs, by sampler kind (:mod:`.kinds`):
node-wise (C++ thread pool) and bulk (sparse-matrix operations, node-wise or LADIES)."""
from .bulk import BULK, LADIES, BulkSampler
from .kinds import (DEFAULT_SAMPLER, MINIBATCHES_PER_BULK, SAMPLING_DEVICES, SamplerKind, check_fanouts, check_replace,
                    check_sampler, check_sampling_device, check_typed_graph, fanout_table, make_sampler, parse_fanouts, parse_typed_fanouts,
                    register_sampler, sampler_names)
from .loader import NeighborLoader
from .sampler import (MFG, NODEWISE, BaseSampler, BatchStages, EpochSchedule, FetchContext, NeighborSampler, RowOrigins,
                      SampledBatch, Workers)

# The kinds that the modules imported above registered (adding a kind: salientpp/sampling/kinds.py).
SAMPLERS = sampler_names()

__all__ = ["NODEWISE", "BULK", "LADIES", "BaseSampler", "EpochSchedule", "BatchStages", "Workers", "NeighborSampler", "BulkSampler", "NeighborLoader", "SampledBatch", "MFG", "FetchContext",
           "RowOrigins", "SamplerKind", "SAMPLERS", "DEFAULT_SAMPLER", "MINIBATCHES_PER_BULK", "check_fanouts",
           "SAMPLING_DEVICES", "check_replace", "check_sampler", "check_sampling_device", "check_typed_graph", "fanout_table", "make_sampler", "parse_fanouts",
           "parse_typed_fanouts", "register_sampler"]
