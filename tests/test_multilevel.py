"""The bounded-memory multilevel partitioner: quality against METIS, balance, chunking, memory."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from salientpp.cli import main
from salientpp.data.format import save_dataset
from salientpp.data.synthetic import synthetic_dataset
from salientpp.partition import load_partitioned, multilevel
from salientpp.partition.multilevel import MultilevelOptions, _coarse_pairs, _reduce_sorted, memory_model
from salientpp.partition.partitioner import assign_parts, balance_weights

from test_partition import constraint_imbalance, edge_cut, planted_dataset

# A budget that makes `small` (2M edges) coarsen before METIS: METIS may take 50e6 / 232 = 215k edges.
SMALL_BUDGET = 50_000_000


@pytest.fixture(scope="module")
def small():
    return synthetic_dataset("small")


def multilevel_parts(dataset, k: int, budget: int = SMALL_BUDGET, seed: int = 0) -> np.ndarray:
    return assign_parts(dataset, k, "multilevel", seed=seed, memory_budget=budget)


def test_multilevel_cut_is_within_15_percent_of_metis_with_every_constraint_within_5_percent(small):
    k = 8
    ours = multilevel_parts(small, k)
    metis = assign_parts(small, k, "metis")
    assert edge_cut(small, ours) <= 1.15 * edge_cut(small, metis)
    assert np.all(constraint_imbalance(small, ours, k) <= 0.05), constraint_imbalance(small, ours, k)


def test_multilevel_balances_planted_constraints_that_keep_communities_whole():
    dataset = planted_dataset()
    k = 4
    # 4,000 nodes, ~22k edges; a budget that lets METIS take at most 18k edges forces coarsening
    ours = multilevel_parts(dataset, k, budget=4 << 20)
    assert np.all(constraint_imbalance(dataset, ours, k) <= 0.05), constraint_imbalance(dataset, ours, k)
    assert edge_cut(dataset, ours) <= edge_cut(dataset, assign_parts(dataset, k, "random")) / 2


def test_metis_only_ever_sees_a_graph_within_the_budget(small, monkeypatch):
    seen = []
    real = multilevel.part_graph_kway

    def recording(rowptr, col, *args, **kwargs):
        seen.append((rowptr.shape[0] - 1, col.shape[0], kwargs.get("edge_weights") is not None))
        return real(rowptr, col, *args, **kwargs)

    monkeypatch.setattr(multilevel, "part_graph_kway", recording)
    multilevel_parts(small, 4)
    (nodes, edges, weighted), = seen
    assert edges <= MultilevelOptions(memory_budget=SMALL_BUDGET).target_edges() < small.num_edges
    assert weighted and nodes < small.num_nodes / 10


def test_the_result_does_not_depend_on_the_chunk_size_and_follows_the_seed(small, monkeypatch):
    first = multilevel_parts(small, 4)
    assert np.array_equal(first, multilevel_parts(small, 4))
    # rows are processed in order whatever the chunks, so 1,000-edge chunks change nothing
    monkeypatch.setattr(MultilevelOptions, "chunk_edges", lambda self: 1000)
    assert np.array_equal(first, multilevel_parts(small, 4))
    assert not np.array_equal(first, multilevel_parts(small, 4, seed=1))


def test_coarse_edge_keys_stay_exact_for_ids_beyond_32_bits():
    num_coarse = 3_000_000_000
    coarse_id = np.array([2_999_999_999, 2_500_000_000, 7], dtype=np.int64)
    rowptr = np.array([0, 2, 3, 4], dtype=np.int64)
    col = np.array([1, 2, 0, 0], dtype=np.int64)
    keys, weights = np.empty(4, dtype=np.int64), np.empty(4, dtype=np.int64)
    count = _coarse_pairs(0, rowptr, col, np.array([5, 6, 7, 8]), coarse_id, num_coarse, keys, weights)
    # each edge counted once, from its smaller cluster's row: rows 1 and 2
    expected = [int(coarse_id[u]) * num_coarse + int(coarse_id[v]) for u, v in [(1, 0), (2, 0)]]
    assert count == 2 and keys[:2].tolist() == expected and weights[:2].tolist() == [7, 8]
    assert keys[0] > 2**62  # beyond 32 bits many times over, still exact
    order = np.argsort(keys[:2])
    assert _reduce_sorted(keys[:2][order], weights[:2][order]) == 2


def test_a_budget_too_small_for_the_coarse_graph_keeps_its_heaviest_edges_and_still_balances(small):
    k, budget = 8, 1 << 20  # 8,192 cluster pairs per level, where `small` has ~100x more
    ours = multilevel_parts(small, k, budget=budget)
    assert np.all(constraint_imbalance(small, ours, k) <= 0.05), constraint_imbalance(small, ours, k)
    assert edge_cut(small, ours) <= edge_cut(small, assign_parts(small, k, "random")) / 2


def test_contraction_counts_every_edge_between_clusters_once_and_stays_symmetric(small):
    level = multilevel.Level(small.rowptr, small.col, None, balance_weights(small))
    labels = np.arange(small.num_nodes) // 50  # clusters of 50 consecutive ids
    coarse, coarse_id = multilevel.contract(level, labels, MultilevelOptions(memory_budget=1 << 30))
    rows = np.repeat(np.arange(small.num_nodes), small.degree())
    between = coarse_id[rows] != coarse_id[small.col]
    assert coarse.edge_weight.sum() == between.sum()  # both directions, each edge once per direction
    dense = np.zeros((coarse.num_nodes, coarse.num_nodes), dtype=np.int64)
    np.add.at(dense, (np.repeat(np.arange(coarse.num_nodes), np.diff(coarse.rowptr)), coarse.col), coarse.edge_weight)
    assert np.array_equal(dense, dense.T)
    expected = np.zeros_like(dense)
    np.add.at(expected, (coarse_id[rows][between], coarse_id[small.col][between]), 1)
    assert np.array_equal(dense, expected)
    assert np.array_equal(coarse.vertex_weight.sum(axis=0), balance_weights(small).sum(axis=0))


# ---- memory ----------------------------------------------------------------------------------

MEASURE = textwrap.dedent("""
    import json, sys
    import numpy as np
    from salientpp.partition.multilevel import MultilevelOptions, multilevel_partition

    def status(key):  # kB lines of /proc/self/status; VmHWM is this process's own peak (ru_maxrss
        # would start from the parent's resident size at the fork)
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

    path, k, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rowptr = np.load(path + "/rowptr.npy", mmap_mode="r")
    col = np.load(path + "/col.npy", mmap_mode="r")
    weights = np.load(path + "/weights.npy")
    # compile (or load) every kernel first, on a small circulant graph that has to coarsen
    n, steps = 2000, np.array([-4, -3, -2, -1, 1, 2, 3, 4])
    small_col = np.sort((np.arange(n)[:, None] + steps) % n, axis=1).ravel()
    multilevel_partition(np.arange(0, 8 * n + 1, 8), small_col, weights[:n], 2, MultilevelOptions(memory_budget=1 << 20))
    before = status("VmRSS")
    parts = multilevel_partition(rowptr, col, weights, k, MultilevelOptions(memory_budget=budget))
    print(json.dumps({"increase": status("VmHWM") - before, "sizes": np.bincount(parts, minlength=k).tolist()}))
""")


def circulant(path: Path, n: int, half_degree: int) -> tuple[int, int]:
    """A circulant graph (vertex i adjacent to i +- 1..half_degree) written as .npy files with
    balance weights (every 10th vertex "training", degree); returns (N, E)."""
    path.mkdir()
    steps = np.concatenate([np.arange(-half_degree, 0), np.arange(1, half_degree + 1)])
    col = np.lib.format.open_memmap(path / "col.npy", mode="w+", dtype=np.int64, shape=(n * 2 * half_degree,))
    rows = 1 << 16
    for lo in range(0, n, rows):
        ids = np.arange(lo, min(n, lo + rows))
        col[lo * 2 * half_degree:ids[-1] * 2 * half_degree + 2 * half_degree] = np.sort(
            (ids[:, None] + steps) % n, axis=1).ravel()
    col.flush()
    del col
    np.save(path / "rowptr.npy", np.arange(0, n * 2 * half_degree + 1, 2 * half_degree, dtype=np.int64))
    weights = np.stack([np.arange(n) % 10 == 0, np.full(n, 2 * half_degree)], axis=1).astype(np.int64)
    np.save(path / "weights.npy", weights)
    return n, n * 2 * half_degree


def test_peak_memory_stays_within_the_model_and_far_below_the_edges(tmp_path):
    # 400,000 vertices, 16M directed edges: col is 128 MB on disk; the budget is 32 MiB.
    n, e = circulant(tmp_path / "graph", 400_000, 20)
    budget, k = 32 << 20, 4
    done = subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path / "graph"), str(k), str(budget)],
                          capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    model = memory_model(n, e, 2, MultilevelOptions(memory_budget=budget))
    # allocator slack and the memory-mapped rowptr's pages: 16 MiB
    assert result["increase"] <= model + (16 << 20), (result["increase"], model)
    assert result["increase"] < 8 * e / 2  # col (8 bytes per edge) is never held whole
    assert max(result["sizes"]) <= 1.03 * n / k + 1


# ---- command line ------------------------------------------------------------------------------

def test_cli_multilevel_writes_a_directory_that_loads_and_reports_its_method(tmp_path, small):
    dataset_dir = save_dataset(small, tmp_path / "small")
    out = tmp_path / "p4"
    assert main(["partition", str(dataset_dir), str(out), "--parts", "4", "--method", "multilevel"]) == 0
    loaded = load_partitioned(out, verify=True)
    assert loaded.meta["method"] == "multilevel" and loaded.num_parts == 4
    assert max(loaded.meta["quality"]["imbalance"].values()) <= 0.05


def test_cli_refuses_a_memory_limit_below_the_per_vertex_arrays_before_any_work(tmp_path, small, capsys):
    dataset_dir = save_dataset(small, tmp_path / "small")
    code = main(["partition", str(dataset_dir), str(tmp_path / "p"), "--parts", "4", "--method", "multilevel",
                 "--memory-limit", "300MiB"])
    err = capsys.readouterr().err
    assert code == 2 and "--memory-limit allows only" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p").exists()
    meta = json.loads((dataset_dir / "meta.json").read_text())
    assert meta["num_edges"] == small.num_edges


# ---- bench partition ------------------------------------------------------------------------------

def test_bench_partition_reports_each_method_against_the_first(tmp_path, capsys):
    from salientpp.bench.partition import extrapolate

    dataset_dir = save_dataset(synthetic_dataset("tiny"), tmp_path / "tiny")
    out = tmp_path / "bench.json"
    assert main(["bench", "partition", str(dataset_dir), "--parts", "4", "--methods", "metis,random",
                 "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["kind"] == "salientpp-bench-partition"
    metis, random = written["rows"]
    assert (metis["method"], random["method"]) == ("metis", "random")
    assert random["edge_cut"] > 2 * metis["edge_cut"]  # as test_partition measures in-process
    assert metis["peak_bytes"] > 50 << 20  # a whole Python process with numpy and numba
    assert "| tiny | random |" in capsys.readouterr().out
    assert not list(tmp_path.glob("bench-partition-*"))  # the partitioned outputs are gone
    # the fit is linear in the edges: 1 s + 1 us per edge, 100 MB + 10 bytes per edge
    rows = [{"method": "multilevel", "num_edges": e, "seconds": 1 + 1e-6 * e, "peak_bytes": 1e8 + 10 * e}
            for e in (10**6, 2 * 10**6, 4 * 10**6)]
    line = extrapolate(rows, "multilevel", 10**7, 6 * 10**8, budget=1 << 30)
    assert "about 10 min" in line and "5.7 GiB" in line
    assert extrapolate(rows[:1], "multilevel", 10**7, 6 * 10**8, budget=1 << 30) is None
