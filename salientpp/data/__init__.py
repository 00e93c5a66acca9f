"""Datasets: the on-disk format, importers and synthetic graphs."""
from .csr import build_csr, check_csr
from .format import Dataset, load_dataset, save_dataset

__all__ = ["Dataset", "build_csr", "check_csr", "load_dataset", "save_dataset"]
