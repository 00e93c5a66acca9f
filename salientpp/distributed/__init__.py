"""The processes of a job (starting local ranks, joining the process group), the tiered feature
store, the all-to-all row exchange, the device side stream and health reports."""
from .exchange import CommStats, RowExchange
from .feature_store import FeatureStore
from .group import DistContext, WorkerError, init_distributed, launch, shutdown_distributed

__all__ = ["CommStats", "DistContext", "FeatureStore", "RowExchange", "WorkerError", "init_distributed",
           "launch", "shutdown_distributed"]
