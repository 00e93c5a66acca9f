"""The PyG baseline of `salientpp bench train` runs the same model on the same per-hop MFGs."""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from salientpp.bench.pyg_baseline import PyGReferenceModel, _mfgs, unavailable_reason
from salientpp.data.synthetic import synthetic_dataset
from salientpp.models import MFGModel

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


@dataclass(frozen=True)
class _Whole:
    """A block without ``rowptr``: the layer runs PyG's convolution on it."""

    num_dst: int
    edge_index: torch.Tensor


def test_per_hop_mfgs_give_the_whole_subgraph_outputs():
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    ds = synthetic_dataset("tiny")
    rowptr, col = torch.from_numpy(ds.rowptr), torch.from_numpy(ds.col)
    n = rowptr.shape[0] - 1
    dst = torch.repeat_interleave(torch.arange(n), rowptr[1:] - rowptr[:-1])
    graph = Data(x=torch.from_numpy(np.asarray(ds.x)), edge_index=torch.stack([col, dst]), num_nodes=n)
    torch.manual_seed(0)
    model = MFGModel("sage", graph.x.shape[1], 16, ds.num_classes, 3).eval()
    reference = PyGReferenceModel("sage", graph.x.shape[1], 16, ds.num_classes, 3).eval()
    reference.load_state_dict(model.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyG's deprecation notice for torch_sparse sampling
        loader = NeighborLoader(graph, num_neighbors=[4, 3, 2], input_nodes=torch.from_numpy(ds.train_idx),
                                batch_size=16, shuffle=True, is_sorted=True)  # as the bench passes it
        batches = [b for _, b in zip(range(3), loader)]
    for batch in batches:
        mfgs = _mfgs(batch, 3)
        # The input layer has every edge, later layers drop hops; destinations shrink to the seeds.
        edges = [b.edge_index.shape[1] for b in mfgs]
        assert edges[0] == batch.edge_index.shape[1] and edges[0] > edges[1] > edges[2] > 0
        assert batch.num_nodes > mfgs[0].num_dst > mfgs[1].num_dst > mfgs[2].num_dst == batch.batch_size
        # Every layer over the whole subgraph, through PyG's convolutions (no rowptr used), with
        # the same weights: the per-hop CSR MFGs must give the seeds the same outputs.
        whole = [_Whole(batch.num_nodes, batch.edge_index)] * 3
        with torch.no_grad():
            torch.testing.assert_close(model(batch.x, mfgs), reference(batch.x, whole)[:batch.batch_size],
                                       rtol=1e-5, atol=1e-6)
