"""GNN models over message-flow graphs (one bipartite graph per layer): SAGE, GAT, GIN, GCN; and
how the trainer calls a model (:class:`ModelInput`), built-in or a user's."""
from .gnn import MODELS, MFGModel, ModelInput

__all__ = ["MODELS", "MFGModel", "ModelInput"]
