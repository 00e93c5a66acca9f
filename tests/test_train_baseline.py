"""The PyG baseline of `salientpp bench train`: the same model on the same per-hop MFGs, and on a
typed graph the whole graph as a ``HeteroData`` with each layer trimmed to its hops."""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from salientpp.bench.pyg_baseline import (BaselineConfig, PyGHeteroModel, PyGReferenceModel, _mfgs, num_neighbors,
                                          pyg_graph, pyg_seeds, run_baseline, sampled_per_hop, unavailable_reason)
from salientpp.data.synthetic import synthetic_dataset
from salientpp.models import MFGModel
from salientpp.partition import load_partitioned
from salientpp.partition.partitioner import partition_dataset

needs_pyg_sampler = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


@dataclass(frozen=True)
class _Whole:
    """A block without ``rowptr``: the layer runs PyG's convolution on it."""

    num_dst: int
    edge_index: torch.Tensor


@needs_pyg_sampler
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


def test_the_typed_baselines_heterodata_holds_the_datasets_edges_features_labels_and_seeds(typed_partitions):
    root, dataset = typed_partitions
    data = load_partitioned(root / "p4")
    graph, schema = pyg_graph(data), data.schema
    # Row i of a type in PyG's graph: the type's partitioned ids, partition by partition; as the
    # dataset's ids through orig_id.
    rows = {name: np.asarray(data.orig_id)[np.concatenate([np.arange(*data.book.block(k, t))
                                                           for k in range(data.num_parts)])]
            for t, name in enumerate(schema.node_types)}
    start = dict(zip(schema.node_types, schema.offsets))
    dst = np.repeat(np.arange(schema.total_nodes), np.diff(dataset.rowptr))
    for r, relation in enumerate(schema.relations):
        edges = graph[relation.key].edge_index.numpy()
        assert (np.diff(edges[1]) >= 0).all()  # grouped by destination, as is_sorted tells PyG
        mine = dataset.edge_rel == r
        got = sorted(zip(rows[relation.src][edges[0]], rows[relation.dst][edges[1]]))
        assert got == sorted(zip(dataset.col[mine], dst[mine])) and got
    papers = rows["paper"] - start["paper"]
    np.testing.assert_array_equal(graph["paper"].x.numpy(), dataset.x[papers])
    np.testing.assert_array_equal(graph["paper"].y.numpy(), dataset.y[papers])
    np.testing.assert_array_equal(graph["inst"].x.numpy(), dataset.features["inst"][rows["inst"] - start["inst"]])
    assert "x" not in graph["author"] and graph["author"].num_nodes == 20
    seeds = [pyg_seeds(data, k) for k in range(data.num_parts)]
    assert {node_type for node_type, _ in seeds} == {"paper"}
    owned = [rows["paper"][ids.numpy()] for _, ids in seeds]
    assert sorted(np.concatenate(owned)) == sorted(dataset.train_idx)
    assert all(set(data.book.owner(np.asarray(data.part(k).train_idx))) <= {k} for k in range(data.num_parts))


@pytest.fixture(scope="module")
def igbh_parts(tmp_path_factory):
    root = tmp_path_factory.mktemp("igbh-baseline")
    partition_dataset(synthetic_dataset("igbh,num_nodes=1000"), root / "p2", 2)
    return root / "p2"


@needs_pyg_sampler
@pytest.mark.parametrize("model", ["rsage", "rgat"])
def test_typed_layers_trimmed_to_their_hops_give_the_whole_subgraph_outputs(igbh_parts, model):
    from torch_geometric.loader import NeighborLoader

    data = load_partitioned(igbh_parts)
    graph, target = pyg_graph(data), data.schema.target
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyG's deprecation notice for torch_sparse sampling
        loader = NeighborLoader(graph, num_neighbors=num_neighbors([(4,) * data.schema.num_relations,
                                                                    (3,) * data.schema.num_relations,
                                                                    (2,) * data.schema.num_relations], data),
                                input_nodes=pyg_seeds(data, 0), batch_size=16, shuffle=True, is_sorted=True)
        batches = [b for _, b in zip(range(3), loader)]
    torch.manual_seed(0)
    net = PyGHeteroModel(model, graph, 16, data.num_classes, 3, target).eval()
    for batch in batches:
        seeds = batch[target].batch_size
        nodes, edges = sampled_per_hop(batch.edge_index_dict, {target: seeds}, 3)
        # Every node and edge falls in one hop; the last hop adds nodes and edges to trim.
        assert all(sum(nodes[t]) == batch[t].num_nodes for t in batch.node_types)
        assert all(sum(edges[key]) == batch[key].edge_index.shape[1] for key in batch.edge_types)
        assert sum(e[-1] for e in edges.values()) > 0 and nodes[target][0] == seeds
        with torch.no_grad():
            trimmed = net(batch.x_dict, batch.edge_index_dict, nodes, edges)
            whole = net(batch.x_dict, batch.edge_index_dict)
        assert trimmed.shape[0] < whole.shape[0]
        torch.testing.assert_close(trimmed[:seeds], whole[:seeds], rtol=1e-5, atol=1e-6)


@needs_pyg_sampler
def test_the_typed_baseline_runs_every_ranks_batches_in_lockstep(igbh_parts):
    data = load_partitioned(igbh_parts)
    history = run_baseline(BaselineConfig(str(igbh_parts), 2, ((3,) * data.schema.num_relations,) * 2, 32, 8))
    batches = max(-(-len(data.part(k).train_idx) // 32) for k in range(data.num_parts))
    assert [h["steps"] for h in history] == [batches, batches]
    assert all(h["epoch_s"] > 0 and h["stage_s"]["train"] > 0 for h in history)
