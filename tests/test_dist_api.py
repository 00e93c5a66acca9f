"""The public distributed API: DistGraph + DistNeighborLoader feed a user's own model and loop.

Distributed results are compared with what one process computes from the whole dataset: the
assembled features of every batch equal the global ``x[n_id]``, and the example script trains
Cora under a real ``torchrun`` to the accuracy of the built-in trainer.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import salientpp
from salientpp.cache import Budget, PolicyContext, Workload, build_plans, save_plans
from salientpp.distributed.group import free_port
from salientpp.errors import InputError
from salientpp.partition import load_partitioned

from conftest import typed_sample

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "bring_your_own_model.py"


def _global_features(part_dir) -> tuple[np.ndarray, np.ndarray]:
    data = load_partitioned(part_dir)
    return (np.concatenate([np.asarray(data.part(k).x) for k in range(data.num_parts)]),
            np.concatenate([np.asarray(data.part(k).y) for k in range(data.num_parts)]))


def _check_epoch(part_dir: str, plan: str | None, batch_size: int) -> dict:
    """One epoch of the training split on this rank (run inside a rank): checks every batch
    against the global arrays and returns what the test compares across ranks."""
    ctx = salientpp.init_distributed()
    graph = salientpp.DistGraph(part_dir, ctx)
    x, y = _global_features(part_dir)
    loader = salientpp.DistNeighborLoader(graph, "train", fanouts=[5, 5], batch_size=batch_size, plan=plan)
    loader.set_epoch(1)
    sizes, seeds = [], []
    for batch in loader:
        n_id = batch.n_id.numpy()
        assert np.array_equal(batch.x.numpy(), x[n_id]), "assembled features differ from x[n_id]"
        assert np.array_equal(batch.y.numpy(), y[n_id[:batch.batch_size]])
        sizes.append(batch.batch_size)
        seeds.append(n_id[:batch.batch_size])
    seeds = np.concatenate(seeds)
    out = {"sizes": sizes, "batches": len(loader), "seeds_ok": bool(np.array_equal(np.sort(seeds), graph.split("train"))),
           "cache_hits": loader.stats.device_hits + loader.stats.host_hits, "received": loader.stats.received}
    salientpp.shutdown_distributed(ctx)
    return out


def test_one_rank_batches_hold_every_seed_once_with_the_global_features(tiny_partitions):
    out = _check_epoch(str(tiny_partitions[0] / "p1"), None, 64)
    assert out["seeds_ok"] and out["batches"] == len(out["sizes"]) and max(out["sizes"]) <= 64
    assert max(out["sizes"]) - min(out["sizes"]) <= 1
    assert out["received"] == 0  # one partition owns every row


def test_two_ranks_run_as_many_batches_and_assemble_owned_cached_and_fetched_rows(tiny_partitions, tmp_path):
    part_dir = tiny_partitions[0] / "p2"
    data = load_partitioned(part_dir)
    plan = tmp_path / "plan"
    ctx = PolicyContext(data, (Workload((5, 5), 48),))
    save_plans(build_plans(ctx, "vip", Budget(device_bytes=60 * data.num_features * 4,
                                              host_bytes=60 * data.num_features * 4), 0.5), plan)
    results = salientpp.launch(_check_epoch, (str(part_dir), str(plan), 48), nprocs=2)
    assert results[0]["batches"] == results[1]["batches"]
    for out in results:
        assert out["seeds_ok"] and len(out["sizes"]) == out["batches"]
        assert min(out["sizes"]) >= 1 and max(out["sizes"]) <= 48 and max(out["sizes"]) - min(out["sizes"]) <= 1
        assert out["cache_hits"] > 0 and out["received"] > 0


def _epochs_in_a_loop(part_dir: str) -> dict:
    """A user's loop over epochs (run inside a rank), with a pipelined loader that prefetches
    the next epoch and with a serial one that does not: what each iteration yields, and the
    loaders' positions during and after an epoch."""
    ctx = salientpp.init_distributed()
    graph = salientpp.DistGraph(part_dir, ctx)
    x, _ = _global_features(part_dir)
    options = dict(fanouts=[5, 5], batch_size=16, sampler_threads=2)
    plain = salientpp.DistNeighborLoader(graph, "train", pipeline_depth=1, **options)
    fast = salientpp.DistNeighborLoader(graph, "train", pipeline_depth=4, prefetch_next_epoch=True, **options)
    threaded = salientpp.DistNeighborLoader(graph, "train", pipeline_depth=4, prefetch_next_epoch=True,
                                            fetch_thread=True, **options)
    out = {"same": [], "features_ok": True, "states": []}
    for epoch in (0, None, 1, 2, 5):  # None: iterate again without set_epoch
        ids = []
        for loader in (plain, fast, threaded):
            if epoch is not None:
                loader.set_epoch(epoch)
            got = []
            for step, batch in enumerate(loader):
                got.append(batch.n_id.numpy().copy())
                out["features_ok"] &= bool(np.array_equal(batch.x.numpy(), x[got[-1]]))
                if loader is fast and step == 1:
                    out["states"].append(loader.state_dict())
            ids.append(got)
        out["same"].append(len(ids[0]) == len(ids[1]) == len(ids[2]) == len(plain) and
                           all(np.array_equal(a, b) and np.array_equal(a, c) for a, b, c in zip(*ids)))
        out["states"].append(fast.state_dict())
    resumed = salientpp.DistNeighborLoader(graph, "train", pipeline_depth=4, **options)
    resumed.load_state_dict({"epoch": 5, "next_batch": 2})
    tail = [batch.n_id.numpy().copy() for batch in resumed]
    out["resumed_same"] = len(tail) == len(ids[0]) - 2 and all(np.array_equal(a, b) for a, b in zip(ids[0][2:], tail))
    salientpp.shutdown_distributed(ctx)
    return out


def test_a_loop_over_epochs_gets_the_same_batches_with_prefetching_and_the_loop_position_as_state(tiny_partitions):
    """Prefetching the next epoch, pipelining and a fetch thread change no batch: the epochs a loop runs with
    ``set_epoch`` (0, 1, 2, then 5, whose prefetch is discarded), and an epoch iterated again
    without it, which repeats. ``state_dict`` is where the loop stands (batch 2 is next after it
    got batch 1, although the sampler is further ahead), 0 after the epoch, and a new loader
    resumed from it continues with the same batches."""
    for out in salientpp.launch(_epochs_in_a_loop, (str(tiny_partitions[0] / "p2"),), nprocs=2):
        assert out["same"] == [True] * 5 and out["features_ok"] and out["resumed_same"]
        epochs = (0, 0, 1, 2, 5)
        assert out["states"] == [state for e in epochs for state in ({"epoch": e, "next_batch": 2},
                                                                      {"epoch": e, "next_batch": 0})]


def test_the_pyg_edge_view_is_hop_ordered_and_trim_to_layer_keeps_the_seed_outputs(tiny_partitions):
    from torch_geometric.nn import SAGEConv
    from torch_geometric.utils import trim_to_layer

    ctx = salientpp.init_distributed()
    graph = salientpp.DistGraph(tiny_partitions[0] / "p1", ctx)
    batch = next(iter(salientpp.DistNeighborLoader(graph, "train", fanouts=[4, 3, 2], batch_size=32)))
    nodes, edges = batch.num_sampled_nodes, batch.num_sampled_edges
    assert sum(nodes) == batch.num_nodes and sum(edges) == batch.edge_index.shape[1] and nodes[0] == batch.batch_size
    bounds = np.cumsum([0] + nodes)
    first = 0
    for hop, count in enumerate(edges):  # hop h's edges lead into the nodes first reached at hop h
        src, dst = batch.edge_index[:, first:first + count]
        assert dst.min() >= bounds[hop] and dst.max() < bounds[hop + 1]
        assert src.max() < bounds[hop + 2]
        first += count
    convs = torch.nn.ModuleList([SAGEConv(graph.num_features, 8), SAGEConv(8, 8), SAGEConv(8, 3)])
    with torch.no_grad():
        full, x, edge_index = batch.x.float(), batch.x.float(), batch.edge_index
        for conv in convs:
            full = conv(full, batch.edge_index)
        for layer, conv in enumerate(convs):
            x, edge_index, _ = trim_to_layer(layer, nodes, edges, x, edge_index)
            x = conv(x, edge_index)
    assert torch.allclose(full[:batch.batch_size], x[:batch.batch_size], atol=1e-5)
    data = batch.to_pyg()
    assert data.batch_size == batch.batch_size and torch.equal(data.edge_index, batch.edge_index)
    # a homogeneous graph is a typed one with one type and one relation
    assert batch.x_dict.keys() == {"node"} and batch.x_dict["node"] is batch.x and batch.target_type == "node"
    assert batch.schema.is_homogeneous and batch.node_type.shape == batch.n_id.shape
    assert batch.node_type.stride() == (0,) and not batch.node_type.any()  # zeros as a view: no per-node memory
    assert all(m.edge_type.stride() == (0,) for m in batch.mfgs) and batch.edge_type.shape == (batch.edge_index.shape[1],)
    assert batch.edge_index_dict.keys() == {("node", "to", "node")}
    assert torch.equal(batch.edge_index_dict[("node", "to", "node")], batch.edge_index)
    assert batch.num_sampled_nodes_dict == {"node": nodes}
    assert batch.num_sampled_edges_dict == {("node", "to", "node"): edges}
    salientpp.shutdown_distributed(ctx)



def _typed_batch(sample):
    """The hand-built typed sample as the Batch a typed loader yields (labels: the seeds' ids)."""
    from salientpp.loader.dist_loader import hop_layout

    return salientpp.Batch(sample.n_id[:sample.num_seeds], sample.n_id, sample.num_seeds, sample.mfgs,
                           *hop_layout(sample.mfgs, sample.num_seeds), schema=sample.schema,
                           node_type=sample.node_type, x_dict=sample.x_dict)


def test_a_to_hetero_model_gives_the_seeds_the_outputs_of_the_same_subgraph_built_as_a_heterodata():
    """batch.to_pyg() of a typed batch follows PyG's NeighborLoader: one edge index per relation
    for the whole sample, hop by hop, per-type n_id and hop counts; a to_hetero(SAGE) model (with
    its own embedding of the featureless fields) runs on it unchanged, also trimmed layer by layer,
    and gives the seeds what it gives on the subgraph built directly from the graph."""
    from torch_geometric.data import HeteroData
    from torch_geometric.nn import HeteroConv, SAGEConv, to_hetero
    from torch_geometric.utils import trim_to_layer

    sample = typed_sample(seed=7)
    schema, batch = sample.schema, _typed_batch(sample)
    data = batch.to_pyg()
    assert isinstance(data, HeteroData) and data["paper"].batch_size == sample.num_seeds
    assert torch.equal(data["paper"].y, sample.n_id[:sample.num_seeds]) and "x" not in data["field"]
    direct = HeteroData()
    for t, name in enumerate(schema.node_types):
        ids = sample.n_id[sample.node_type == t]
        assert torch.equal(data[name].n_id, ids) and data[name].num_nodes == ids.shape[0]
        assert sum(data[name].num_sampled_nodes) == ids.shape[0]
        direct[name].n_id = ids
        if name in sample.features:
            assert torch.equal(data[name].x, sample.features[name][ids - int(schema.offsets[t])])
            direct[name].x = data[name].x
    local = {v: i for t in range(schema.num_types) for i, v in enumerate(sample.n_id[sample.node_type == t].tolist())}
    for r, relation in enumerate(schema.relations):  # every kept edge between batch nodes, in the types' rows
        pairs = [(local[u], local[v]) for u, v in sample.edges[r].T.tolist() if u in local and v in local]
        direct[relation.key].edge_index = torch.tensor(pairs, dtype=torch.int64).view(-1, 2).T
        ours = data[relation.key].edge_index
        assert ours.shape[1] == sum(data[relation.key].num_sampled_edges)
        assert {tuple(e) for e in ours.T.tolist()} <= set(pairs)  # the sample's edges are the graph's

    class Sage(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList(SAGEConv((-1, -1), 8) for _ in range(2))

        def forward(self, x, edge_index):
            return self.convs[1](self.convs[0](x, edge_index).relu(), edge_index)

    torch.manual_seed(0)
    fields = torch.nn.Embedding(8, 4)  # the user's rows of the featureless type
    first_field = int(schema.offsets[schema.type_index("field")])
    to_hetero_model = to_hetero(Sage(), data.metadata(), aggr="sum")
    # MLPerf's way: HeteroConv layers, trimmed to each layer's nodes and edges
    hetero_convs = [HeteroConv({r.key: SAGEConv((-1, -1), 8) for r in schema.relations}) for _ in range(2)]

    def run(graph, how: str):
        x_dict = {**graph.x_dict, "field": fields(graph["field"].n_id - first_field)}
        if how == "to_hetero":
            return to_hetero_model(x_dict, graph.edge_index_dict)["paper"][:sample.num_seeds]
        edge_index_dict = graph.edge_index_dict
        for layer, conv in enumerate(hetero_convs):
            if how == "trimmed":
                x_dict, edge_index_dict, _ = trim_to_layer(layer, graph.num_sampled_nodes_dict,
                                                           graph.num_sampled_edges_dict, x_dict, edge_index_dict)
            x_dict = conv(x_dict, edge_index_dict)
        return x_dict["paper"][:sample.num_seeds]

    with torch.no_grad():
        torch.testing.assert_close(run(data, "to_hetero"), run(direct, "to_hetero"))
        expected = run(direct, "whole")
        torch.testing.assert_close(run(data, "whole"), expected)
        torch.testing.assert_close(run(data, "trimmed"), expected)

def test_seeds_must_be_owned_distinct_ids_and_splits_known_names(tiny_partitions):
    ctx = salientpp.init_distributed()
    graph = salientpp.DistGraph(tiny_partitions[0] / "p1", ctx)
    with pytest.raises(InputError, match="unknown split 'training'"):
        graph.split("training")
    with pytest.raises(InputError, match="not owned by rank 0"):
        graph.split(torch.tensor([0, graph.num_nodes]))
    with pytest.raises(InputError, match="repeat"):
        graph.split(torch.tensor([1, 1]))
    valid = graph.split("valid")  # a copy torch takes without its "not writable" warning
    assert valid.dtype == np.int64 and valid.flags.writeable and np.array_equal(valid, graph.part.valid_idx)
    valid[:] = -1
    assert np.array_equal(graph.split("valid"), graph.part.valid_idx) and graph.part.valid_idx.min() >= 0
    salientpp.shutdown_distributed(ctx)


def test_the_readme_example_trains_cora_under_torchrun_with_a_user_model(cora_npz, tmp_path):
    from salientpp.cli import main as cli_main

    assert cli_main(["prepare", f"npz:{cora_npz}", str(tmp_path / "cora")]) == 0
    assert cli_main(["partition", str(tmp_path / "cora"), str(tmp_path / "cora-2"), "--parts", "2"]) == 0
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    (tmp_path / "tmp").mkdir()  # PyG writes the example's GraphConv code there and never removes it
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "--master-port", str(free_port()), str(EXAMPLE), str(tmp_path / "cora-2")],
                          env={**env, "GLOO_SOCKET_IFNAME": "lo", "TMPDIR": str(tmp_path / "tmp")},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    accuracy = float(re.search(r"test accuracy ([0-9.]+)", done.stdout).group(1))
    assert accuracy >= 0.78, done.stdout


# ---- misuse of the API: one sentence, as the command line gives ----------------------------------

@pytest.fixture
def one_rank(tiny_partitions):
    """This process alone as a job, with the one partition of ``tiny``."""
    ctx = salientpp.init_distributed()
    yield salientpp.DistGraph(tiny_partitions[0] / "p1", ctx)
    salientpp.shutdown_distributed(ctx)


@pytest.mark.parametrize("loader", [salientpp.DistNeighborLoader, salientpp.DistLinkNeighborLoader])
@pytest.mark.parametrize("options, expected", [
    (dict(fanouts=[5.5, 5]), "fanouts must be integers like 15,10,5, got [5.5, 5]"),
    (dict(fanouts=[True, True]), "fanouts must be integers like 15,10,5, got [True, True]"),
    (dict(fanouts="55"), "fanouts must be integers like 15,10,5, got '55'"),
    (dict(device_fraction=2.0), "device_fraction must be a number in [0, 1], got 2.0"),
    (dict(device_fraction=float("nan")), "device_fraction must be a number in [0, 1], got nan"),
    (dict(device_fraction="all"), "device_fraction must be a number in [0, 1], got 'all'"),
    (dict(seed=1.5), "seed must be an integer in [0, 2^63), got 1.5"),
    (dict(seed=2**70), f"seed must be an integer in [0, 2^63), got {2**70}"),
    (dict(seed=-1), "seed must be an integer in [0, 2^63), got -1"),
])
def test_a_loader_option_that_is_not_a_valid_value_is_refused_in_one_sentence(one_rank, loader, options, expected):
    with pytest.raises(InputError, match=re.escape(expected)):
        loader(one_rank, "train", **(dict(fanouts=[5, 5], batch_size=16) | options))


def test_an_epoch_that_is_not_a_non_negative_int_is_refused_and_the_position_kept(one_rank):
    loader = salientpp.DistNeighborLoader(one_rank, "train", [5, 5], 16)
    loader.set_epoch(2)
    for epoch in ("1", True, -1, 1.0):
        with pytest.raises(InputError, match=re.escape(f"the epoch must be a non-negative integer, got {epoch!r}")):
            loader.set_epoch(epoch)
    assert loader.state_dict() == {"epoch": 2, "next_batch": 0}


@pytest.mark.parametrize("state, expected", [
    ({"x": 1}, "the loader state lacks the keys 'epoch', 'next_batch' and has the unexpected key 'x'"),
    ({"epoch": 1}, "the loader state lacks the key 'next_batch'; pass what the loader's state_dict() returned"),
    ({"epoch": 1, "next_batch": 0, "step": 3}, "the loader state has the unexpected key 'step'"),
    ([1, 0], "the loader state must be a dict with the keys epoch, next_batch, got a list"),
    ({"epoch": "1", "next_batch": 0}, "the loader state's epoch must be a non-negative integer, got '1'"),
    ({"epoch": 1, "next_batch": -1}, "the loader state's next_batch must be a non-negative integer, got -1"),
])
def test_a_loader_state_of_another_shape_is_refused_naming_the_keys_and_the_position_kept(one_rank, state, expected):
    loader = salientpp.DistNeighborLoader(one_rank, "train", [5, 5], 16)
    with pytest.raises(InputError, match=re.escape(expected)):
        loader.load_state_dict(state)
    assert loader.state_dict() == {"epoch": 0, "next_batch": 0}


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), 0, -1.0, 1e-7, 0.0009, 10**6 + 1, True, "300"])
def test_a_timeout_torch_cannot_keep_is_refused_by_init_distributed(timeout):
    with pytest.raises(InputError, match=re.escape("timeout_s must be a number of seconds from 0.001 (torch counts "
                                                   f"whole milliseconds) to 1,000,000, got {timeout!r}")):
        salientpp.init_distributed(timeout_s=timeout)
    assert salientpp.init_distributed(timeout_s=0.001).timeout_s == 0.001  # one millisecond is kept


@pytest.mark.parametrize("args", [(), (None,), ("cpu",)])
def test_a_graph_opened_without_the_context_of_init_distributed_is_refused(tiny_partitions, args):
    """``DistGraph(path)``, the form without a context, and ``DistGraph(path, None)``."""
    with pytest.raises(InputError, match=re.escape("DistGraph needs the DistContext that init_distributed() returns "
                                                   "as its second argument, got ")
                       + r".*; open it with DistGraph\(path, init_distributed\(\)\)$"):
        salientpp.DistGraph(tiny_partitions[0] / "p1", *args)


# ---- typed graphs -----------------------------------------------------------------------------------

def _typed_epoch(part_dir: str, plan: str | None, dataset) -> dict:
    """One epoch of a typed graph's training split on this rank: every batch's x_dict, y, node
    types and edge types against the unpartitioned dataset; returns the counters and what the
    batches requested per type (nodes of a type with features neither owned nor cached)."""
    ctx = salientpp.init_distributed()
    graph = salientpp.DistGraph(part_dir, ctx)
    schema, book = dataset.schema, graph.book
    orig = np.asarray(graph.data.orig_id)
    rows = {schema.target: dataset.x, **dataset.features}
    loader = salientpp.DistNeighborLoader(graph, "train", fanouts={r: [3, 2] for r in map(str, schema.relations)},
                                          batch_size=4, plan=plan)
    requested = np.zeros(schema.num_types, dtype=np.int64)
    cache_slot = loader.store.cache_slot.numpy()
    loader.set_epoch(1)
    for batch in loader:
        n_id, node_type = batch.n_id.numpy(), batch.node_type.numpy()
        assert batch.x is batch.x_dict[schema.target] and batch.schema is graph.schema
        assert np.array_equal(node_type, book.type_of(n_id))
        assert set(batch.x_dict) == set(rows)  # every type with features, none for the authors
        for name, x in batch.x_dict.items():
            t = schema.type_index(name)
            ids = orig[n_id[node_type == t]] - schema.offsets[t]  # the unpartitioned rows of the type
            assert np.array_equal(x.numpy(), rows[name][ids]), f"the {name} rows differ from the dataset's"
        assert np.array_equal(batch.y.numpy(), dataset.y[orig[n_id[:batch.batch_size]] - schema.offsets[1]])
        assert all(m.edge_type is not None and m.edge_type.shape[0] == m.num_edges for m in batch.mfgs)
        remote = (book.owner(n_id) != graph.rank) & (cache_slot[n_id] < 0) & np.isin(node_type, [1, 2])
        requested += np.bincount(node_type[remote], minlength=schema.num_types)
    stats = loader.stats
    out = {"requested": requested.tolist(), "received_by_type": stats.received_by_type, "received": stats.received,
           "device_hits": stats.device_hits, "host_hits": stats.host_hits, "batches": len(loader)}
    salientpp.shutdown_distributed(ctx)
    return out


@pytest.mark.parametrize("parts, cached", [(1, False), (2, False), (4, False), (2, True), (4, True)])
def test_a_typed_batch_holds_the_dataset_rows_of_every_type_with_features_on_any_ranks_and_cache(
        typed_partitions, parts, cached):
    root, dataset = typed_partitions
    plan = str(root / f"plan{parts}") if cached else None
    args = (str(root / f"p{parts}"), plan, dataset)
    results = [_typed_epoch(*args)] if parts == 1 else salientpp.launch(_typed_epoch, args, nprocs=parts)
    for out in results:
        # rows received of each type are exactly the ids the batches requested of it (none of the authors)
        assert out["received_by_type"] in (out["requested"], []) and sum(out["requested"]) == out["received"]
    assert len({out["batches"] for out in results}) == 1
    if parts > 1:
        assert sum(out["received"] for out in results) > 0
    if cached:  # rows from both cache tiers
        assert sum(out["device_hits"] for out in results) > 0 and sum(out["host_hits"] for out in results) > 0


def _typed_model_step(part_dir: str) -> tuple:
    from salientpp.models.gnn import SeedForward, build_model
    from salientpp.models.typed import TypedInput

    ctx = salientpp.init_distributed()
    graph = salientpp.DistGraph(part_dir, ctx)
    loader = salientpp.DistNeighborLoader(graph, "train", fanouts=[3, 2], batch_size=4)
    batch = next(iter(loader))
    typed = TypedInput(graph.schema, {name: int(x.shape[1]) for name, x in batch.x_dict.items()}, embedding_dim=3)
    model = build_model("rsage", graph.num_features, 8, 3, 2, inputs=typed)
    # the authors (no features) get their rows from an embedding of the featureless types
    embedding = salientpp.DistEmbedding(graph, 3, node_types=typed.featureless)
    forward = SeedForward.of(model, embedding, typed=True)
    out = forward(batch)
    data = batch.to_pyg()
    salientpp.shutdown_distributed(ctx)
    return (tuple(out.shape), batch.batch_size, tuple(data["paper"].x.shape), int(data["paper"].batch_size),
            int(data["author"].num_nodes), tuple(data["paper"].y.shape))


def test_a_typed_batch_runs_the_built_in_rsage_and_becomes_a_hetero_data(typed_partitions):
    root, _ = typed_partitions
    for out_shape, batch_size, paper_x, seeds, authors, y in salientpp.launch(_typed_model_step, (str(root / "p2"),),
                                                                              nprocs=2):
        assert out_shape == (batch_size, 3) and seeds == batch_size and y == (batch_size,)
        assert paper_x[1] == 5 and paper_x[0] >= batch_size and authors >= 0


@pytest.mark.parametrize("fanouts, sampler, phrase", [
    ({"writes": [3, 2]}, "nodewise", "gives no list for the relations"),
    ({"writes": [3, 2], "nope": [3, 2]}, "nodewise", "nope"),
    ([3, 2], "ladies", "draws homogeneous graphs only"),
])
def test_a_typed_loader_refuses_bad_fanouts_or_an_untyped_sampler_in_one_sentence(typed_partitions, fanouts, sampler,
                                                                                   phrase):
    root, _ = typed_partitions
    ctx = salientpp.init_distributed()
    try:
        graph = salientpp.DistGraph(root / "p1", ctx)
        with pytest.raises(InputError, match=phrase) as info:
            salientpp.DistNeighborLoader(graph, "train", fanouts=fanouts, batch_size=4, sampler=sampler)
        assert str(info.value).count(". ") == 0
    finally:
        salientpp.shutdown_distributed(ctx)


def _drawn(graph, fanouts) -> list[tuple]:
    """What a loader over ``fanouts`` draws in an epoch of the training split: per batch its
    ``n_id``, each MFG's edges and edge types, and its node types."""
    loader = salientpp.DistNeighborLoader(graph, "train", fanouts=fanouts, batch_size=4, seed=5)
    return [(b.n_id.tolist(), [(m.edge_index.tolist(), m.edge_type.tolist()) for m in b.mfgs], b.node_type.tolist())
            for b in loader]


@pytest.mark.parametrize("typed", [False, True])
def test_a_loader_given_the_fanout_table_draws_the_batches_of_its_list_and_its_mapping(tiny_partitions,
                                                                                       typed_partitions, typed):
    """fanouts as the [L, R] table (Workload's form), one list for every relation, or a dict per
    relation are one thing: the loader reads them into the same table and draws the same batches."""
    root = (typed_partitions if typed else tiny_partitions)[0]
    ctx = salientpp.init_distributed()
    try:
        graph = salientpp.DistGraph(root / "p1", ctx)
        relations = [str(r) for r in graph.schema.relations]
        table = np.array([[3] * len(relations), [2] * len(relations)])
        forms = [[3, 2], {r: [3, 2] for r in relations}, table, table.tolist()]
        loaders = [salientpp.DistNeighborLoader(graph, "train", fanouts=f, batch_size=4) for f in forms]
        assert all(np.array_equal(loader.fanouts, table) for loader in loaders)
        drawn = [_drawn(graph, f) for f in forms]
        assert drawn[0] and all(d == drawn[0] for d in drawn[1:])
        if typed:  # a table with a relation that draws nothing draws fewer edges of it than the full one
            table[:, relations.index(str(graph.schema.relations[0]))] = 0
            fewer = _drawn(graph, table)
            assert sum(len(e[0][0]) for b in fewer for e in b[1]) < sum(len(e[0][0]) for b in drawn[0] for e in b[1])
    finally:
        salientpp.shutdown_distributed(ctx)


def _typed_valid_steps(part_dir: str) -> list:
    ctx = salientpp.init_distributed()
    graph = salientpp.DistGraph(part_dir, ctx)
    steps = []
    for batch in salientpp.DistNeighborLoader(graph, "valid", fanouts=[3, 2], batch_size=1, shuffle=False):
        steps.append((batch.batch_size, {name: tuple(x.shape) for name, x in batch.x_dict.items()},
                      tuple(batch.node_type.shape), [m.edge_type.shape == (m.num_edges,) for m in batch.mfgs],
                      tuple(batch.to_pyg()["paper"].x.shape)))
    without = next(iter(salientpp.DistNeighborLoader(graph, "valid", fanouts=[3, 2], batch_size=1, features=False)))
    papers = int((without.node_type == graph.schema.target_index).sum())
    steps.append(((papers, 0), tuple(without.x.shape), without.x_dict, tuple(without.node_type.shape)))
    salientpp.shutdown_distributed(ctx)
    return steps


def test_a_typed_empty_step_has_no_rows_of_each_type_and_a_loader_without_features_none_at_all(typed_partitions):
    root, _ = typed_partitions
    results = salientpp.launch(_typed_valid_steps, (str(root / "p4"),), nprocs=4)
    empty = [step for steps in results for step in steps[:-1] if step[0] == 0]
    assert empty, "some rank of 4 has fewer of the 5 validation seeds than the steps"
    for _, shapes, node_type, edge_types, paper in empty:
        assert shapes == {"paper": (0, 5), "inst": (0, 2)} and node_type == (0,) and all(edge_types)
        assert paper == (0, 5)
    for steps in results:
        papers, x, x_dict, node_type = steps[-1]
        assert x == papers and x_dict == {} and node_type[0] >= 0  # x: no columns, a row per paper
