"""The communication simulator: its counts equal a direct recount of the sampled batches, the
oracle is a lower bound at every α, and `salientpp simulate` writes its table, JSON and plot."""
from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest
import torch

from cache_support import make_partitioned
from salientpp.cache import Budget, PolicyContext, Workload, build_plans, simulate
from salientpp.cache.simulator import RESULT_KIND
from salientpp.streams import loader_seed
from salientpp.plots import require_pyplot
from salientpp.cli import main
from salientpp.errors import InputError
from salientpp.sampling import NeighborLoader, NeighborSampler

POLICIES = ("vip", "vip-cavity", "vip-simulation", "degree", "halo", "num-paths", "random", "oracle")
ALPHAS = (0.0, 0.01, 0.1, 0.5, 1.0, 3.0)


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    return make_partitioned(tmp_path_factory.mktemp("sim") / "parts", parts=4)


@pytest.fixture(scope="module")
def result(parts):
    ctx = PolicyContext(parts, (Workload((10, 5), 8),), seed=3, epochs=3, simulation_epochs=2)
    return simulate(ctx, POLICIES, ALPHAS)


def test_oracle_fetches_no_more_than_any_policy_at_every_alpha(result, parts):
    oracle = result.rows[POLICIES.index("oracle")]
    for i, name in enumerate(POLICIES):
        assert np.all(oracle <= result.rows[i] + 1e-9), name  # per partition, hence in total too
    # No cache fetches every remote row touched; α = K-1 (full replication) caches every remote row,
    # also on partitions smaller than N/K, and fetches nothing.
    np.testing.assert_allclose(result.rows[:, 0, :], np.broadcast_to(result.accessed, result.rows[:, 0, :].shape))
    remote = parts.num_nodes - np.diff(parts.book.offsets)
    assert (remote > 3 * parts.num_nodes // 4).any(), "the fixture should have a partition smaller than N/K"
    assert np.all(result.cached[:, -1] == remote)  # [P, A, K]: every policy caches them all
    assert np.all(result.rows[:, -1, :] == 0)
    # More cache never fetches more (each policy's order is fixed; α only moves the cut).
    assert np.all(np.diff(result.rows, axis=1) <= 1e-9)
    eff = result.efficiency()
    assert np.all(np.isnan(eff[:, 0])) and np.allclose(eff[POLICIES.index("oracle"), 1:], 1.0)
    assert np.all(eff[:, 1:] <= 1 + 1e-12)


def _recount(parts, k, seed, epochs, slots=None, workload=Workload((10, 5), 8), index=0):
    """Remote rows the batches of partition k fetch (uncached ones only, when ``slots`` is given)."""
    sampler = NeighborSampler(parts.rowptr, parts.col, list(workload.fanouts))
    loader = NeighborLoader(sampler, torch.from_numpy(workload.seeds(parts, k)), workload.batch_size, shuffle=True,
                            seed=loader_seed(seed, k, 0, index), num_batches=workload.lockstep_steps(parts))
    lo, hi = parts.book.offsets[k], parts.book.offsets[k + 1]
    fetched = 0
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            n_id = batch.n_id.numpy()
            assert np.unique(n_id).size == n_id.size
            remote = n_id[(n_id < lo) | (n_id >= hi)]
            fetched += remote.size if slots is None else int((slots[remote] < 0).sum())
    return fetched / epochs


def test_counts_equal_a_direct_recount_of_the_batches(result, parts):
    for k in range(parts.num_parts):
        assert result.accessed[k] == _recount(parts, k, seed=3, epochs=3)
        # Every partition runs the same S = max_k ceil(|T_k| / b) balanced batches (lockstep).
        assert result.steps[k] == max(math.ceil(parts.part(j).train_idx.size / 8) for j in range(parts.num_parts))
    # A saved plan's slot map gives the same misses as the simulator's count for that policy and α.
    ctx = PolicyContext(parts, (Workload((10, 5), 8),), seed=3, epochs=3)
    for plan in build_plans(ctx, "degree", Budget(replication=0.1)):
        expected = result.rows[POLICIES.index("degree"), ALPHAS.index(0.1), plan.part]
        assert _recount(parts, plan.part, seed=3, epochs=3, slots=plan.slot_map()) == expected


def test_mixed_workload_adds_inference_fetches_by_weight(parts):
    train, infer = Workload((10, 5), 8), Workload((5, 5), 32, splits=("valid",), weight=0.5)
    ctx = PolicyContext(parts, (train, infer), seed=1, epochs=2)
    mixed = simulate(ctx, ("vip", "oracle"), (0.0, 0.2))
    for k in range(parts.num_parts):
        expected = _recount(parts, k, 1, 2, workload=train) + 0.5 * _recount(parts, k, 1, 2, workload=infer, index=1)
        assert mixed.accessed[k] == pytest.approx(expected, rel=1e-12)
    assert np.all(mixed.rows[1] <= mixed.rows[0] + 1e-9)


def test_no_efficiency_is_shown_where_no_cache_saves_anything_even_with_weighted_workloads(parts):
    # weighted rows are floats, summed in another order with a cache than without: at α = 0 the
    # "saving" is a rounding error, whose ratios once read as efficiencies (1.000, 0.909, ...)
    from salientpp.cache.simulator import efficiency_text, mean_efficiency

    train, infer = Workload((10, 5), 16), Workload((7, 7), 16, splits=("valid",), weight=0.3)
    mixed = simulate(PolicyContext(parts, (train, infer), seed=1, epochs=3), ("vip", "degree", "oracle"), (0.0, 0.5))
    eff = mixed.efficiency()
    assert np.isnan(eff[:, 0]).all() and (eff[:, 1] > 0).all()
    assert [line.split(" | ")[1] for line in mixed.table().splitlines()[-3:]] == ["-"] * 3
    assert mean_efficiency(eff[0]) == eff[0, 1] and efficiency_text(mean_efficiency(eff[:, :1].ravel())) == "-"
    assert efficiency_text(None) == "-"  # the JSON's null, as bench report reads it


def test_vip_beats_random_and_halo_on_average(result):
    # Not a law, but with 4 partitions and α in (0, 1] a sound VIP ranking must save clearly more
    # than random caching and than the 1-hop halo (the two ignore hops 2-3 and the fanouts).
    eff = result.efficiency()[:, 1:-1]
    vip, rnd, halo = (eff[POLICIES.index(p)].mean() for p in ("vip", "random", "halo"))
    assert vip > rnd + 0.1 and vip > halo


def test_json_table_and_plot(parts, tmp_path, capsys):
    out, png = tmp_path / "sim.json", tmp_path / "sim.png"
    code = main(["simulate", str(parts.path), "--fanouts", "10,5", "--batch-size", "8", "--epochs", "2",
                 "--policies", "vip,degree,oracle", "--replication", "0,0.1,1", "--json", str(out), "--plot", str(png)])
    assert code == 0
    text = capsys.readouterr().out
    assert "| vip |" in text and "Saving efficiency" in text
    data = json.loads(out.read_text())
    assert data["kind"] == RESULT_KIND == "salientpp-simulate"
    assert data["policies"] == ["vip", "degree", "oracle"] and data["replication"] == [0.0, 0.1, 1.0]
    assert data["rows_per_epoch"]["oracle"][0] == data["no_cache_rows_per_epoch"]
    assert data["bytes_per_epoch"]["vip"][1] == data["rows_per_epoch"]["vip"][1] * data["row_bytes"]
    assert data["efficiency"]["oracle"][1:] == [1.0, 1.0]
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("args, message", [
    (["--replication", "0,4"], "outside [0, 3]"),
    (["--replication", "0,x"], "comma-separated numbers"),
    (["--policies", "vip,nope"], "unknown cache policy"),
    (["--fanouts", "5,0"], "fanout 0 is invalid"),
    (["--epochs", "0"], "epochs must be a positive integer"),
    (["--plot", "/nonexistent/dir/x.png"], "does not exist"),
])
def test_simulate_bad_input_is_one_sentence_and_exit_2(parts, capsys, args, message):
    base = {"--fanouts": "10,5", "--batch-size": "8", "--epochs": "1", "--policies": "vip", "--replication": "0,1"}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    assert main(["simulate", str(parts.path), *[x for kv in base.items() for x in kv]]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_missing_matplotlib_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    with pytest.raises(InputError, match="pip install matplotlib"):
        require_pyplot()


# ---- typed graphs: rows fetched and cache hits per node type -------------------------------------

@pytest.fixture(scope="module")
def typed_parts(tmp_path_factory):
    from cache_support import make_typed_partitioned

    return make_typed_partitioned(tmp_path_factory.mktemp("typed-sim") / "parts")


def _typed_recount(parts, workload, k, seed, epochs):
    """float64 [T]: remote feature rows of each node type that the C++ typed sampler's batches of
    partition k fetch per epoch (a type without features fetches none)."""
    from salientpp.cache.plan import type_row_bytes

    sampler = NeighborSampler(parts.rowptr, parts.col, workload.fanout_table, edge_rel=parts.edge_rel,
                              schema=parts.schema)
    loader = NeighborLoader(sampler, torch.from_numpy(workload.seeds(parts, k)), workload.batch_size, shuffle=True,
                            seed=loader_seed(seed, k, 0, 0), num_batches=workload.lockstep_steps(parts))
    lo, hi = parts.book.offsets[k], parts.book.offsets[k + 1]
    has_features = type_row_bytes(parts) > 0
    out = np.zeros(parts.schema.num_types)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            n_id = batch.n_id.numpy()
            types = parts.book.type_of(n_id[(n_id < lo) | (n_id >= hi)])
            out += np.bincount(types[has_features[types]], minlength=out.size)
    return out / epochs


def test_a_typed_simulation_counts_rows_and_hits_per_node_type_as_the_typed_sampler_fetches(typed_parts, tmp_path):
    schema = typed_parts.schema
    workload = Workload({str(r): ((0, 3, 2) if r.name == "writes" else (2, 2, 2)) for r in schema.relations}, 3,
                        schema=schema)
    ctx = PolicyContext(typed_parts, (workload,), seed=2, epochs=3, simulation_epochs=2)
    result = simulate(ctx, ("vip", "degree", "oracle"), (0.0, 0.2, 1.0))
    expected = sum(_typed_recount(typed_parts, workload, k, 2, 3) for k in range(typed_parts.num_parts))
    np.testing.assert_allclose(result.type_accessed, expected)
    assert result.type_accessed[schema.type_index("author")] == 0  # no features: its rows are embeddings
    assert result.type_accessed[schema.type_index("inst")] > 0 and result.type_accessed[schema.type_index("paper")] > 0
    np.testing.assert_allclose(result.type_rows.sum(axis=2), result.total_rows())  # the types add up
    np.testing.assert_allclose(result.type_rows[:, 0], np.broadcast_to(expected, result.type_rows[:, 0].shape))
    assert np.all(result.type_rows[:, -1] == 0)  # alpha = K - 1 caches every row with features
    out = result.to_json()["per_type"]
    assert out["node_types"] == ["author", "paper", "inst"] and out["row_bytes"] == [0, 20, 8]
    hits = np.array(out["hits_per_epoch"]["vip"]) + np.array(out["rows_per_epoch"]["vip"])
    np.testing.assert_allclose(hits, np.broadcast_to(expected, hits.shape))
    eff = result.efficiency()  # in bytes: the oracle's saving is the unit
    assert np.allclose(eff[2, 1:], 1.0)
    assert "Rows of node type inst fetched per epoch (8 bytes each" in result.table()
    assert "Rows of node type author" not in result.table()


def test_a_homogeneous_simulation_has_no_per_type_breakdown(result):
    assert "per_type" not in result.to_json() and "node type" not in result.table()


def test_a_homogeneous_simulation_is_counted_as_its_one_node_type(result):
    # The per-type accounting runs on every graph: a homogeneous graph's one type holds every count,
    # bit for bit, and its bytes are its rows times the row width.
    assert result.node_types == ("node",) and result.type_bytes.tolist() == [result.row_bytes]
    assert np.array_equal(result.type_rows[..., 0], result.total_rows())
    assert result.type_accessed[0] == result.accessed.sum()
    assert np.array_equal(result.total_bytes(), result.total_rows() * result.row_bytes)


def test_simulate_takes_fanouts_per_relation_on_a_typed_graph(typed_parts, tmp_path, capsys):
    text = ";".join(f"{r}={'0,3' if r.name == 'writes' else '2,2'}" for r in typed_parts.schema.relations)
    assert main(["simulate", str(typed_parts.path), "--fanouts", text, "--batch-size", "3", "--policies",
                 "vip,oracle", "--replication", "0,0.5", "--epochs", "2", "--json", str(tmp_path / "s.json")]) == 0
    saved = json.loads((tmp_path / "s.json").read_text())
    assert saved["per_type"]["node_types"] == ["author", "paper", "inst"]
    assert "Rows of node type paper fetched per epoch" in capsys.readouterr().out
    assert main(["simulate", str(typed_parts.path), "--fanouts", "cites=2,2", "--batch-size", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--fanouts gives no list for the relations" in err and "\n" not in err
