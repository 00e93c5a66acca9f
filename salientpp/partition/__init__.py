"""Partitioning: METIS or the bounded-memory multilevel partitioner with several balance constraints,
renumbering, the partition book."""
from .book import PartitionBook
from .format import PartData, PartitionedDataset, load_partitioned, save_partitioned
from .partitioner import (CONSTRAINTS, METHODS, PartitionReport, Partitioning, assign_parts, partition,
                          partition_dataset)
from .quality import PartitionQuality

__all__ = ["CONSTRAINTS", "METHODS", "PartData", "PartitionBook", "PartitionQuality", "PartitionReport",
           "PartitionedDataset", "Partitioning", "assign_parts", "load_partitioned", "partition", "partition_dataset",
           "save_partitioned"]
