"""Learnable node embeddings partitioned across ranks, and their sparse optimisers."""
from .optim import SPARSE_OPTIMIZERS, SparseAdagrad, SparseAdam, SparseOptimizer, make_sparse_optimizer
from .table import INITS, DistEmbedding

__all__ = ["DistEmbedding", "INITS", "SPARSE_OPTIMIZERS", "SparseAdagrad", "SparseAdam", "SparseOptimizer",
           "make_sparse_optimizer"]
