"""`salientpp bench sampler`: counts the edges it claims, same work for any thread count, clean errors."""
from __future__ import annotations

import json

import numpy as np
import pytest

from salientpp.bench.sampler import BenchRow, SamplerBenchConfig, format_table
from salientpp.cli import main
from salientpp.data.csr import build_csr
from salientpp.data.format import Dataset, save_dataset
from salientpp.sampling import NeighborLoader, NeighborSampler


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    rng = np.random.default_rng(0)
    n = 3000
    rowptr, col = build_csr(rng.integers(0, n, size=(2, 15000)), n)
    dataset = Dataset(rowptr, col, rng.standard_normal((n, 4)).astype(np.float32), rng.integers(0, 3, n),
                      np.arange(0, 1000, dtype=np.int64), np.arange(1000, 1200, dtype=np.int64),
                      np.arange(1200, 1500, dtype=np.int64))
    return save_dataset(dataset, tmp_path_factory.mktemp("bench") / "graph")


def test_bench_reports_sampled_edges(dataset_dir, tmp_path, capsys):
    out = tmp_path / "result.json"
    assert main(["bench", "sampler", str(dataset_dir), "--fanouts", "4,3", "--batch-size", "100",
                 "--threads", "1,2", "--batches", "4", "--repeats", "1", "--no-pyg", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["config"]["num_batches"] == 4 and result["config"]["num_edges"] > 0
    rows = result["rows"]
    assert [(r["impl"], r["threads"]) for r in rows] == [("salientpp", 1), ("salientpp", 2)]
    # The last timed repeat is epoch 1 over the benchmark's fixed seed subset.
    seeds = np.random.default_rng(0).permutation(np.arange(1000))[:400]
    loader = NeighborLoader(NeighborSampler(*_csr(dataset_dir), [4, 3]), seeds, 100, shuffle=False)
    loader.set_epoch(1)
    expected = np.mean([b.num_sampled_edges for b in loader])
    assert rows[0]["edges_per_batch"] == rows[1]["edges_per_batch"] == pytest.approx(expected)
    assert all(r["edges_per_s"] > 0 and r["edges_per_cpu_s"] > 0 for r in rows)
    assert "skipped" not in capsys.readouterr().out  # --no-pyg asks for no PyG column: no skip notice


def _csr(path):
    return np.load(path / "rowptr.npy"), np.load(path / "col.npy")


def test_bench_refuses_existing_json_and_missing_dataset(dataset_dir, tmp_path, capsys):
    existing = tmp_path / "taken.json"
    existing.write_text("{}")
    assert main(["bench", "sampler", str(dataset_dir), "--json", str(existing), "--no-pyg"]) == 2
    assert existing.read_text() == "{}"
    assert main(["bench", "sampler", str(tmp_path / "absent"), "--no-pyg"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and "already exists" in errors[0] and "absent" in errors[1]


def test_table_ratios():
    config = SamplerBenchConfig("g", 10, 20, [2], 4, 3, 1, [1, 2])
    rows = [BenchRow("salientpp", 1, 6e6, 6e6, 1.0, 100, [6e6]), BenchRow("salientpp", 2, 11e6, 5.5e6, 1.0, 100, [11e6]),
            BenchRow("pyg", 1, 1e6, 1e6, 1.0, 50, [1e6]), BenchRow("pyg", 2, 1e6, 0.5e6, 1.0, 50, [1e6])]
    lines = format_table(config, rows).splitlines()
    assert lines[2].split()[-2:] == ["1.00x", "6.0x"]
    assert lines[3].split()[-2:] == ["1.83x", "11.0x"]
    assert lines[5].split()[-2:] == ["1.00x", "-"]
