"""Datasets: the on-disk format, importers and synthetic graphs."""
from .csr import build_csr, check_csr
from .format import MULTICLASS, MULTILABEL, Dataset, load_dataset, save_dataset
from .pyg import from_pyg

__all__ = ["Dataset", "MULTICLASS", "MULTILABEL", "build_csr", "check_csr", "from_pyg", "load_dataset",
           "save_dataset"]
