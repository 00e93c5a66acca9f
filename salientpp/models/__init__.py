"""GNN models over message-flow graphs (one bipartite graph per layer): SAGE, GAT, GIN, GCN, and
over the typed MFGs of a typed graph R-SAGE, R-GCN and R-GAT; and how the trainer calls a model
(:class:`ModelInput`), built-in or a user's."""
from .gnn import MODELS, MFGModel, ModelInput
from .typed import TYPED_MODELS, TypedInput, TypedMFGModel, TypedStructure

__all__ = ["MODELS", "MFGModel", "ModelInput", "TYPED_MODELS", "TypedInput", "TypedMFGModel", "TypedStructure"]
