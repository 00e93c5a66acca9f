"""GNN models over message-flow graphs (one bipartite graph per layer): SAGE, GAT, GIN."""
from .gnn import MODELS, EmptyBlock, MFGModel

__all__ = ["MODELS", "EmptyBlock", "MFGModel"]
