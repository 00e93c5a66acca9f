"""Process groups, the local launcher, the tiered feature store and the all-to-all row exchange."""
from .exchange import CommStats, RowExchange
from .feature_store import FeatureStore
from .group import DistContext, init_distributed, shutdown_distributed
from .launcher import WorkerError, launch

__all__ = ["CommStats", "DistContext", "FeatureStore", "RowExchange", "WorkerError", "init_distributed",
           "launch", "shutdown_distributed"]
