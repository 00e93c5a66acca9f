"""Full-graph training: the dependency schedules, the keyed dropout, and exactness against one process."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from salientpp.data.synthetic import synthetic_dataset
from salientpp.distributed import init_distributed, launch, shutdown_distributed
from salientpp.errors import InputError
from salientpp.fullgraph import CostModel, Dependencies, FullGraphEngine, schedule_dependencies
from salientpp.fullgraph.schedule import candidate_schedules, in_neighbours
from salientpp.models.gnn import build_model
from salientpp.models.ops import keyed_dropout_mask, keyed_dropout_mask_reference, keyed_relu_dropout
from salientpp.partition import load_partitioned
from salientpp.partition.partitioner import partition_dataset
from salientpp.sampling import MFG
from salientpp.train import TrainConfig
from trainers import rank_trainer
from salientpp.streams import dropout_seed
from salientpp.train.run import train
from salientpp.train.tasks import task_of

# scipy.stats is imported by the tests that use it: each rank launched with a function of this
# module imports the module, and scipy.stats would add about a second to every rank's start.

LAYERS, HIDDEN, EPOCHS = 3, 16, 3
OPTIONS = dict(mode="full-graph", layers=LAYERS, hidden=HIDDEN, epochs=EPOCHS, lr=0.01, dropout=0.5, eval_every=0,
               progress=False, timeout_s=120)


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """The ``tiny`` graph (2000 nodes) partitioned into 1, 2 and 4 parts."""
    root = tmp_path_factory.mktemp("fullgraph")
    dataset = synthetic_dataset("tiny,num_nodes=600")
    for k in (1, 2, 4):
        partition_dataset(dataset, root / f"p{k}", k)
    return root


def _csr(root, k=1):
    data = load_partitioned(root / f"p{k}")
    return data, np.asarray(data.rowptr), np.asarray(data.col)


# -- schedules --------------------------------------------------------------------------------------------

def _hops(rowptr, col, ids, hops):
    out = np.asarray(ids)
    for _ in range(hops):
        out = np.union1d(out, in_neighbours(rowptr, col, out))
    return out


def _check_consistent(schedule, rowptr, col):
    """Every vertex computed at level l + 1 finds itself and its in-neighbours at level l."""
    for level in range(schedule.num_layers):
        above = schedule.computed[level + 1]
        need = np.union1d(above, in_neighbours(rowptr, col, above))
        have = np.union1d(schedule.computed[level], schedule.fetched[level])
        assert np.isin(need, have).all()
        assert not np.intersect1d(schedule.computed[level], schedule.fetched[level]).size  # each row has one source


def test_cache_plan_computes_the_l_hop_neighbourhood_and_exchanges_nothing(parts):
    data, rowptr, col = _csr(parts, 2)
    lo, hi = int(data.book.offsets[1]), int(data.book.offsets[2])
    targets = np.asarray(data.part(1).train_idx)
    schedule = schedule_dependencies(rowptr, col, lo, hi, targets, LAYERS, Dependencies.CACHE)
    # Every owned vertex is computed at every level below the top (the owner of a vertex serves
    # its rows in the other modes); remote ones are those that the level above needs.
    want = np.sort(targets)
    for level in range(LAYERS - 1, -1, -1):
        want = np.union1d(np.arange(lo, hi), _hops(rowptr, col, want, 1))
        assert np.array_equal(np.sort(schedule.computed[level]), want)
        assert schedule.fetched[level].size == 0
    assert schedule.exchanged_rows == 0 and schedule.redundant_vertex_layers > 0
    _check_consistent(schedule, rowptr, col)


def test_communicate_plan_computes_owned_vertices_and_fetches_their_halo(parts):
    data, rowptr, col = _csr(parts, 2)
    lo, hi = int(data.book.offsets[0]), int(data.book.offsets[1])
    targets = np.asarray(data.part(0).train_idx)
    schedule = schedule_dependencies(rowptr, col, lo, hi, targets, LAYERS, Dependencies.COMMUNICATE)
    owned = np.arange(lo, hi)
    for level in range(1, LAYERS):
        assert np.array_equal(schedule.computed[level], owned)
        above = schedule.computed[level + 1]
        need = np.union1d(above, in_neighbours(rowptr, col, above))
        assert np.array_equal(schedule.fetched[level], need[(need < lo) | (need >= hi)])
    assert schedule.redundant_vertex_layers == 0 and schedule.exchanged_rows > 0
    _check_consistent(schedule, rowptr, col)


@pytest.mark.parametrize("byte_s", [1e-9, 1e-6, 1e-4, 1e-2])
def test_hybrid_plans_are_consistent_and_lie_between_the_pure_ones(parts, byte_s):
    data, rowptr, col = _csr(parts, 4)
    dims = [data.num_features] + [HIDDEN] * (LAYERS - 1) + [data.num_outputs]
    cost = CostModel((1e-6,) * LAYERS, (1e-7,) * LAYERS, byte_s, 1e-4)
    for part in range(4):
        lo, hi = int(data.book.offsets[part]), int(data.book.offsets[part + 1])
        targets = np.asarray(data.part(part).train_idx)
        schedules = {mode: schedule_dependencies(rowptr, col, lo, hi, targets, LAYERS, mode, cost, dims) for mode in Dependencies}
        hybrid = schedules[Dependencies.HYBRID]
        _check_consistent(hybrid, rowptr, col)
        assert hybrid.redundant_vertex_layers <= schedules[Dependencies.CACHE].redundant_vertex_layers
        assert hybrid.exchanged_rows <= schedules[Dependencies.COMMUNICATE].exchanged_rows


def test_hybrid_follows_the_cost_model_to_either_pure_plan(parts):
    data, rowptr, col = _csr(parts, 2)
    dims = [data.num_features] + [HIDDEN] * (LAYERS - 1) + [data.num_outputs]
    lo, hi = int(data.book.offsets[0]), int(data.book.offsets[1])
    targets = np.asarray(data.part(0).train_idx)

    def schedule(byte_s):
        return schedule_dependencies(rowptr, col, lo, hi, targets, LAYERS, Dependencies.HYBRID,
                                 CostModel((1e-6,) * LAYERS, (1e-7,) * LAYERS, byte_s, 0.0), dims)
    free_exchange, dear_exchange = schedule(0.0), schedule(1.0)
    pure = {mode: schedule_dependencies(rowptr, col, lo, hi, targets, LAYERS, mode)
            for mode in (Dependencies.CACHE, Dependencies.COMMUNICATE)}
    for level in range(LAYERS + 1):
        assert np.array_equal(free_exchange.computed[level], pure[Dependencies.COMMUNICATE].computed[level])
        assert np.array_equal(dear_exchange.computed[level], pure[Dependencies.CACHE].computed[level])
    # same_sets sees it (hybrid's probe then times the schedule once, under its first name)
    assert free_exchange.same_sets(pure[Dependencies.COMMUNICATE]) and dear_exchange.same_sets(pure[Dependencies.CACHE])
    assert not free_exchange.same_sets(pure[Dependencies.CACHE])


def test_hybrid_caches_low_degree_vertices_and_communicates_hubs(parts):
    data, rowptr, col = _csr(parts, 2)
    dims = [data.num_features] + [HIDDEN] * (LAYERS - 1) + [data.num_outputs]
    lo, hi = int(data.book.offsets[0]), int(data.book.offsets[1])
    # Exchanging a row of width 16 costs as much as aggregating 8 edges: at level 1 (features below,
    # free) a remote vertex is cached exactly when its degree is below 8.
    cost = CostModel((0.0,) * LAYERS, (1.0,) * LAYERS, 8 / (8 * HIDDEN), 0.0)
    schedule = schedule_dependencies(rowptr, col, lo, hi, np.asarray(data.part(0).train_idx), LAYERS, Dependencies.HYBRID,
                             cost, dims)
    degree = np.diff(rowptr)
    cached, fetched = schedule.cached(1), schedule.fetched[1]
    assert cached.size and fetched.size
    assert (degree[cached] < 8).all() and (degree[fetched] >= 8).all()


# -- keyed dropout --------------------------------------------------------------------------------------

def test_keyed_dropout_keeps_each_element_with_probability_one_minus_p():
    from scipy import stats

    p, ids = 0.3, torch.arange(50_000) * 7919
    kept = int((keyed_relu_dropout(torch.ones(ids.shape[0], 8), ids, p, 12345, True) > 0).sum())
    # Two-sided binomial test at level 1e-3: fails by chance once in a thousand runs of a fixed seed.
    assert stats.binomtest(kept, ids.shape[0] * 8, 1 - p).pvalue > 1e-3


def test_keyed_masks_are_the_rows_of_the_flat_dropout_mask_at_each_key():
    from salientpp._ext import extension

    width, p, seed = 12, 0.4, 2**62 + 12345
    ids = torch.tensor([0, 7, 3, 999, 500, 7])
    flat = extension().dropout_mask([1000 * width], p, seed).view(1000, width)
    assert torch.equal(keyed_dropout_mask(ids, width, p, seed), flat[ids])
    # The torch reference (other devices) draws exactly the extension's bits.
    for q in (0.0, 0.1, 0.5, 0.9):
        assert torch.equal(keyed_dropout_mask_reference(ids * 1_000_003, width, q, seed),
                           keyed_dropout_mask(ids * 1_000_003, width, q, seed))


def test_keyed_masks_of_two_seeds_agree_as_independent_draws_would():
    from scipy import stats

    n, p = 40_000, 0.5
    a = keyed_dropout_mask(torch.arange(n), 8, p, 1)
    b = keyed_dropout_mask(torch.arange(n), 8, p, 2)
    agree = int((a == b).sum())
    assert stats.binomtest(agree, a.numel(), p * p + (1 - p) * (1 - p)).pvalue > 1e-3


# -- exactness ------------------------------------------------------------------------------------------

def _reference(root, model_name: str) -> tuple[list[float], dict[str, torch.Tensor]]:
    """One process, plain torch over the whole graph: the losses of EPOCHS steps and the final
    weights, by original id order-independent names."""
    data, rowptr, col = _csr(root, 1)
    task = task_of(data, None)
    torch.manual_seed(0)
    model = build_model(model_name, data.num_features, HIDDEN, task.num_outputs, LAYERS, OPTIONS["dropout"])
    optimizer = torch.optim.Adam(model.parameters(), lr=OPTIONS["lr"])
    n = rowptr.shape[0] - 1
    rowptr_t, col_t = torch.from_numpy(rowptr.copy()), torch.from_numpy(col.copy())
    whole = MFG(n, n, torch.stack([col_t, torch.repeat_interleave(torch.arange(n), rowptr_t.diff())]), rowptr_t)
    x = torch.from_numpy(np.array(data.part(0).x, dtype=np.float32))
    train_ids = torch.from_numpy(np.array(data.part(0).train_idx))
    y = task.targets(np.asarray(data.part(0).y)[train_ids.numpy()])
    orig = torch.from_numpy(np.asarray(data.orig_id, dtype=np.int64))
    losses = []
    for epoch in range(EPOCHS):
        seed = dropout_seed(0, epoch)
        h = x
        for i in range(LAYERS):
            h = model.convolve(i, h, whole)
            if i < LAYERS - 1:
                h = keyed_relu_dropout(h, orig, model.dropout, seed + i, True)
        loss = task.loss(h[train_ids], y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def _mixed_cost(layers: int) -> CostModel:
    """Exchanging a row costs as much as aggregating 8 of its edges: low-degree remote vertices
    are cached, hubs communicated (a mixed schedule whatever the machine)."""
    return CostModel((0.0,) * layers, (1.0,) * layers, 8 / (8 * HIDDEN), 0.0)


def _worker(part_dir: str, models: tuple[str, ...]) -> dict[tuple[str, str], tuple[list[float], dict, int, int]]:
    """Train EPOCHS full-graph steps of each model with each schedule; per (model, schedule):
    losses, weights, and this rank's cached and exchanged vertex-levels. The trainers are given
    the cost model rather than calibrating one each (90% of the time; the fixed schedules do not
    read it, and the calibration is tested with bench fullgraph and the hybrid probe)."""
    ctx = init_distributed("cpu", timeout_s=120)
    out = {}
    for model in models:
        for name in ("cache", "communicate", "mixed"):
            dependencies = "communicate" if name == "mixed" else name
            trainer = rank_trainer(TrainConfig(part_dir, model=model, dependencies=dependencies, **OPTIONS), ctx,
                                   cost=_mixed_cost(LAYERS))
            if name == "mixed":
                graph = trainer.graph
                dims = [graph.num_features] + [HIDDEN] * (LAYERS - 1) + [trainer.task.num_outputs]
                trainer.schedule = schedule_dependencies(graph.rowptr, graph.col, graph.offset,
                                                         graph.offset + graph.num_owned, trainer.train_ids, LAYERS,
                                                         Dependencies.HYBRID, _mixed_cost(LAYERS), dims)
                trainer.engine = FullGraphEngine(ctx, graph, trainer.schedule)
            losses = [trainer.train_epoch(epoch)["train_loss"] for epoch in range(EPOCHS)]
            # numpy, not tensors: a tensor returned from a rank shares memory with the process that exits.
            out[model, name] = (losses, {k: v.detach().numpy().copy() for k, v in trainer.model.state_dict().items()},
                                trainer.schedule.redundant_vertex_layers, trainer.schedule.exchanged_rows)
    shutdown_distributed(ctx)
    return out


def test_full_graph_training_on_1_2_and_4_ranks_equals_one_process(parts):
    """SAGE and GCN, each with the cache, communicate and mixed schedules, trained by one job per
    rank count (one launch serves every model and schedule)."""
    models = ("sage", "gcn")
    wanted = {model: _reference(parts, model) for model in models}
    for k in (1, 2, 4):
        results = [_worker(str(parts / "p1"), models)] if k == 1 else launch(_worker, (str(parts / f"p{k}"), models), k)
        for (model, name), _ in results[0].items():
            want_losses, want_weights = wanted[model]
            for losses, weights, _, _ in (r[model, name] for r in results):
                np.testing.assert_allclose(losses, want_losses, rtol=1e-5, atol=1e-6)
                for key, value in weights.items():
                    torch.testing.assert_close(torch.from_numpy(value), want_weights[key], rtol=1e-5, atol=1e-5)
        if k > 1:  # the schedules really differ: recomputation, exchange, and both at once
            totals = {name: np.sum([r["sage", name][2:] for r in results], axis=0)
                      for name in ("cache", "communicate", "mixed")}
            assert totals["cache"][0] > 0 and totals["cache"][1] == 0
            assert totals["communicate"][0] == 0 and totals["communicate"][1] > 0
            assert totals["mixed"][0] > 0 and totals["mixed"][1] > 0


# -- options and accuracy -------------------------------------------------------------------------------

@pytest.mark.parametrize("options, words", [
    (dict(task="link"), "--task link"), (dict(embedding_dim=8), "--embedding-dim"),
    (dict(model="torch.nn:Linear"), "built-in models"), (dict(fanouts=(5, 5, 5)), "--fanouts"),
    (dict(dependencies="sometimes"), "unknown dependency mode")])
def test_full_graph_refuses_what_it_cannot_train(parts, options, words):
    with pytest.raises(InputError, match=words):
        TrainConfig(str(parts / "p2"), **{**OPTIONS, **options}).validate()


def test_memory_limit_covers_full_graph_activations(parts, no_ranks):
    from salientpp.resources import estimate_full_graph

    data = load_partitioned(parts / "p2")
    sizes = {mode: estimate_full_graph(data, hidden=HIDDEN, layers=LAYERS, model="sage", dependencies=mode,
                                       local_ranks=2) for mode in ("cache", "communicate")}
    activations = {mode: e.items["full-graph activations"] for mode, e in sizes.items()}
    assert activations["cache"] > activations["communicate"] > 0  # recomputation keeps more rows
    # A limit the process fits in but not its activations: refused before any rank starts.
    limit = sizes["cache"].total - activations["cache"] // 2
    with pytest.raises(InputError, match="full-graph training of 2 of 2 partitions .* needs about"):
        train(TrainConfig(str(parts / "p2"), **{**OPTIONS, "dependencies": "cache"}, memory_limit=limit))


def test_cora_full_graph_gcn_on_two_ranks_reaches_gcn_accuracy(tmp_path, cora_npz):
    from salientpp.data.importers import load_source

    partition_dataset(load_source(f"npz:{cora_npz}"), tmp_path / "cora-2", 2)
    result = train(TrainConfig(str(tmp_path / "cora-2"), mode="full-graph", model="gcn", layers=2, hidden=64,
                               lr=0.01, weight_decay=5e-4, dropout=0.5, epochs=200, eval_every=200, progress=False))
    assert result.final_test >= 0.80  # measured after the last epoch: the one evaluation needed


def test_a_resumed_full_graph_run_equals_an_uninterrupted_one(parts, tmp_path):
    part_dir, options = str(parts / "p2"), {**OPTIONS, "epochs": 4, "dependencies": "communicate"}
    whole = train(TrainConfig(part_dir, **options))
    train(TrainConfig(part_dir, **{**options, "epochs": 2}, checkpoint_dir=str(tmp_path / "ck")))
    resumed = train(TrainConfig(part_dir, **options, checkpoint_dir=str(tmp_path / "ck"), resume=True))
    assert resumed.resumed_from == (2, 0)
    assert [h["train_loss"] for h in resumed.history] == [h["train_loss"] for h in whole.history[2:]]


def test_bench_fullgraph_counts_the_bytes_and_recomputation_of_each_plan(parts, tmp_path, capsys):
    import json

    from salientpp.cli import main

    out = tmp_path / "fg.json"
    assert main(["bench", "fullgraph", str(parts / "p2"), "--epochs", "2", "--hidden", str(HIDDEN), "--layers",
                 str(LAYERS), "--candidates", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["kind"] == "salientpp-bench-fullgraph"
    rows = {r["dependencies"]: r for r in results["modes"]}
    calibration = results["calibration"]  # the CostModel every trainer planned with, per layer where it is
    assert len(calibration["row_s"]) == len(calibration["edge_s"]) == LAYERS
    assert all(r >= 0 and e >= 0 and r + e > 0 for r, e in zip(calibration["row_s"], calibration["edge_s"]))
    assert calibration["byte_s"] >= 0 and calibration["exchange_s"] >= 0
    # the three modes, the per-vertex schedule and every split by level
    assert set(rows) == set(candidate_schedules(LAYERS)) | {Dependencies.HYBRID.value}
    for name in rows:  # a split by level recomputes and exchanges between the pure extremes
        assert rows[name]["schedule"] == name or name == Dependencies.HYBRID.value
        assert rows[name]["redundant_vertex_layers"] <= rows["cache"]["redundant_vertex_layers"]
    data, rowptr, col = _csr(parts, 2)
    fetched = 0
    for part in range(2):
        lo, hi = int(data.book.offsets[part]), int(data.book.offsets[part + 1])
        fetched += schedule_dependencies(rowptr, col, lo, hi, np.asarray(data.part(part).train_idx), LAYERS,
                                     Dependencies.COMMUNICATE).exchanged_rows
    # Every fetched row comes once forward and its gradient once back, float32 of the hidden width.
    assert rows["communicate"]["exchanged_bytes"] == 2 * fetched * HIDDEN * 4
    assert rows["communicate"]["redundant_vertex_layers"] == 0
    assert rows["cache"]["exchanged_bytes"] == 0 and rows["cache"]["redundant_vertex_layers"] > 0
    assert all(r["epoch_s"] > 0 and r["predicted_s"] > 0 for r in rows.values())
    probed = rows["hybrid"]["probed_s"]  # hybrid trains the fastest schedule its probe timed, if it probed
    assert set(probed) <= set(candidate_schedules(LAYERS))
    if probed:
        assert rows["hybrid"]["schedule"] == min(probed, key=probed.__getitem__)
    assert main(["bench", "fullgraph", str(parts / "p2"), "--dependencies", "sometimes"]) == 2
    assert "unknown dependency mode" in capsys.readouterr().err


def test_hybrid_probes_only_the_plans_predicted_within_the_band_of_the_fastest():
    from salientpp.fullgraph.schedule import PER_VERTEX
    from salientpp.train.fullgraph import PROBE_BAND, shortlist

    predictions = {"cache": 1.0, "communicate": 1.0 + PROBE_BAND / 2, PER_VERTEX: 1.0 + 2 * PROBE_BAND, "cache-1": 0.99}
    assert shortlist(predictions) == ["cache-1", "cache", "communicate"]  # fastest prediction first
    assert shortlist({"cache": 1.0, "communicate": 1.0 + 2 * PROBE_BAND, PER_VERTEX: 1.5}) == ["cache"]
    # a per-vertex schedule that caches nothing is communicate, predicted alike: the pure name comes first
    assert shortlist({"cache": 2.0, PER_VERTEX: 1.0, "communicate": 1.0}) == ["communicate", PER_VERTEX]


def test_hybrid_leaves_the_plan_predicted_fastest_only_for_one_probed_clearly_faster():
    from salientpp.train.fullgraph import PROBE_MARGIN, choose_schedule

    names = ["communicate", "cache-1", "cache"]  # fastest prediction first
    assert choose_schedule(names[:1], {}) == "communicate"  # nothing probed
    slightly = 1.0 - PROBE_MARGIN / 2
    assert choose_schedule(names, {"communicate": 1.0, "cache-1": slightly, "cache": 1.2}) == "communicate"
    clearly = 1.0 - 2 * PROBE_MARGIN
    assert choose_schedule(names, {"communicate": 1.0, "cache-1": clearly, "cache": clearly * 0.99}) == "cache"


def _probe_worker(part_dir: str) -> tuple[dict[str, float], str, list[float], list[float]]:
    """A hybrid trainer that probes every candidate schedule, and one told to train the schedule it
    chose: the probe's times, the choice, and both trainers' losses."""
    import salientpp.train.fullgraph as fullgraph

    ctx = init_distributed("cpu", timeout_s=120)
    fullgraph.PROBE_BAND, fullgraph.PROBE_MARGIN = float("inf"), 0.0  # probe every schedule, train the fastest
    config = TrainConfig(part_dir, dependencies="hybrid", **OPTIONS)
    hybrid = rank_trainer(config, ctx)
    direct = rank_trainer(config, ctx, cost=hybrid.cost, schedule=hybrid.chosen)
    losses = [[trainer.train_epoch(epoch)["train_loss"] for epoch in range(2)] for trainer in (hybrid, direct)]
    shutdown_distributed(ctx)
    return hybrid.probed, hybrid.chosen, *losses


def test_hybrid_trains_the_fastest_probed_plan_and_the_probe_leaves_no_trace(parts):
    results = launch(_probe_worker, (str(parts / "p2"),), 2)
    probed, chosen, hybrid_losses, direct_losses = results[0]
    # every distinct candidate schedule (the per-vertex one may equal a pure one and is then timed once)
    assert {"cache", "communicate"} <= set(probed) <= set(candidate_schedules(LAYERS))
    assert len(probed) >= len(candidate_schedules(LAYERS)) - 1 and all(s > 0 for s in probed.values())
    assert chosen == min(probed, key=probed.__getitem__)
    assert all(r[:2] == (probed, chosen) for r in results)  # every rank times the slowest rank: one choice
    # The probe's passes changed neither the weights nor the optimizer: training is as without it.
    assert hybrid_losses == direct_losses
