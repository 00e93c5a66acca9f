"""salientpp: distributed minibatch GNN training with VIP-driven caching of remote features.

The layer a training script programs against (imported on first use, so ``import salientpp``
stays light)::

    ctx = salientpp.init_distributed(device="cpu")          # joins torchrun's group, or runs alone
    graph = salientpp.DistGraph("cora-2", ctx)              # this rank's partition
    loader = salientpp.DistNeighborLoader(graph, "train", fanouts=[10, 10], batch_size=64)
    salientpp.launch(main, nprocs=2)                         # local ranks without torchrun
"""
from importlib import import_module

__version__ = "0.2.0"

_API = {
    "init_distributed": "salientpp.distributed.group",
    "shutdown_distributed": "salientpp.distributed.group",
    "DistGraph": "salientpp.loader.graph",
    "DistNeighborLoader": "salientpp.loader.dist_loader",
    "Batch": "salientpp.loader.dist_loader",
    "launch": "salientpp.distributed.group",
    "DistEmbedding": "salientpp.embedding",
    "DistLinkNeighborLoader": "salientpp.loader.dist_link_loader",
}
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        return getattr(import_module(_API[name]), name)
    raise AttributeError(f"module 'salientpp' has no attribute {name!r}")
