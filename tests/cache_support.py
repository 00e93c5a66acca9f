"""Helpers shared by the cache tests: small partitioned datasets and the sampler's hop sets."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from salientpp.data.synthetic import synthetic_dataset
from salientpp.partition import load_partitioned
from salientpp.partition.partitioner import partition_dataset


def make_partitioned(path: Path, spec: str = "tiny", parts: int = 4, method: str = "metis"):
    """Generate the synthetic graph ``spec``, partition it into ``parts`` and load it back."""
    partition_dataset(synthetic_dataset(spec), path, parts, method=method)
    return load_partitioned(path)


def hop_counts(batch) -> list[int]:
    """Sizes of the nested node sets S^0 (the seeds) .. S^L of a sampled batch."""
    return [batch.batch_size] + [m.num_src for m in reversed(batch.mfgs)]


def line_graph(n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the path 0 - 1 - ... - (n-1)."""
    from salientpp.data.csr import build_csr

    edges = np.stack([np.arange(n - 1), np.arange(1, n)])
    return build_csr(edges, n)


def make_typed_partitioned(path: Path, parts: int = 2):
    """conftest's small typed dataset (``author`` without features, ``paper`` 5 and ``inst`` 2
    float32 features) partitioned into ``parts`` and loaded back."""
    from conftest import typed_dataset

    partition_dataset(typed_dataset()[0], path, parts)
    return load_partitioned(path)
