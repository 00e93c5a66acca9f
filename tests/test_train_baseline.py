"""The PyG baseline of `salientpp bench train` runs the same model on the same per-hop MFGs."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from salientpp.bench.pyg_baseline import _blocks, unavailable_reason
from salientpp.data.synthetic import synthetic_dataset
from salientpp.models import MFGModel

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


def test_per_hop_blocks_give_the_whole_subgraph_outputs():
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    ds = synthetic_dataset("tiny")
    rowptr, col = torch.from_numpy(ds.rowptr), torch.from_numpy(ds.col)
    n = rowptr.shape[0] - 1
    dst = torch.repeat_interleave(torch.arange(n), rowptr[1:] - rowptr[:-1])
    graph = Data(x=torch.from_numpy(np.asarray(ds.x)), edge_index=torch.stack([col, dst]), num_nodes=n)
    torch.manual_seed(0)
    model = MFGModel("sage", graph.x.shape[1], 16, ds.num_classes, 3).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyG's deprecation notice for torch_sparse sampling
        loader = NeighborLoader(graph, num_neighbors=[4, 3, 2], input_nodes=torch.from_numpy(ds.train_idx),
                                batch_size=16, shuffle=True)
        batches = [b for _, b in zip(range(3), loader)]
    for batch in batches:
        blocks = _blocks(batch, 3)
        # The input layer has every edge, later layers drop hops; destinations shrink to the seeds.
        edges = [b.edge_index.shape[1] for b in blocks]
        assert edges[0] == batch.edge_index.shape[1] and edges[0] > edges[1] > edges[2] > 0
        assert batch.num_nodes > blocks[0].num_dst > blocks[1].num_dst > blocks[2].num_dst == batch.batch_size
        whole = [type(blocks[0])(batch.num_nodes, batch.edge_index)] * 3
        with torch.no_grad():
            torch.testing.assert_close(model(batch.x, blocks), model(batch.x, whole)[:batch.batch_size],
                                       rtol=1e-5, atol=1e-6)
