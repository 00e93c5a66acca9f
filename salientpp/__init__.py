"""salientpp: distributed minibatch GNN training with VIP-driven caching of remote features."""

__version__ = "0.1.0"
