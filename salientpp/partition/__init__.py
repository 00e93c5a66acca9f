"""Partitioning: METIS with several balance constraints, renumbering, the partition book."""
from .book import PartitionBook
from .format import PartData, PartitionedDataset, load_partitioned, save_partitioned

__all__ = ["PartData", "PartitionBook", "PartitionedDataset", "load_partitioned", "save_partitioned"]
