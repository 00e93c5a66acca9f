"""`salientpp bench sampler`: counts the edges it claims, same work for any thread count, clean errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import one_sentence, typed_dataset
from salientpp.bench.sampler import BenchRow, SamplerBenchConfig, format_table
from salientpp.cli import main
from salientpp.data.csr import build_csr
from salientpp.data.format import Dataset, save_dataset
from salientpp.sampling import NeighborLoader, NeighborSampler
from salientpp.sampling import make_sampler

REPO = Path(__file__).resolve().parents[1]


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
                 "--sampler-threads", "1,2", "--batches", "4", "--repeats", "1", "--no-pyg", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["kind"] == "salientpp-bench-sampler"
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
    rows = [BenchRow("salientpp", 1, 6e6, 6e6, 1.0, 100, [6e6]),
            BenchRow("salientpp", 2, 11e6, 5.5e6, 1.0, 100, [11e6]),
            BenchRow("bulk", 1, 3e6, 3e6, 1.0, 100, [3e6], 4), BenchRow("bulk", 2, 4.4e6, 2.2e6, 1.0, 100, [4.4e6], 4),
            BenchRow("pyg", 1, 1e6, 1e6, 1.0, 50, [1e6]), BenchRow("pyg", 2, 1e6, 0.5e6, 1.0, 50, [1e6])]
    lines = format_table(config, rows).splitlines()
    # columns: sampler, k, threads, ..., vs 1 thread, vs nodewise, vs PyG
    assert lines[2].split()[:3] == ["nodewise", "-", "1"] and lines[2].split()[-3:] == ["1.00x", "-", "6.0x"]
    assert lines[3].split()[-3:] == ["1.83x", "-", "11.0x"]
    assert lines[4].split()[:3] == ["bulk", "4", "1"] and lines[4].split()[-3:] == ["1.00x", "0.50x", "3.0x"]
    assert lines[5].split()[-3:] == ["1.47x", "0.40x", "4.4x"]
    assert lines[7].split()[-3:] == ["1.00x", "-", "-"]
    assert "exceeds" in lines[-1]  # k = 4 > the 3 batches per repeat


# ---- bulk and LADIES rows ---------------------------------------------------------------------

def test_bench_bulk_rows(dataset_dir, tmp_path, capsys):
    out, plot = tmp_path / "bulk.json", tmp_path / "bulk.png"
    assert main(["bench", "sampler", str(dataset_dir), "--fanouts", "4,3", "--batch-size", "50", "--sampler-threads", "1,2",
                 "--batches", "8", "--repeats", "1", "--no-pyg", "--samplers", "nodewise,bulk,ladies",
                 "--bulk-sizes", "1,3", "--ladies-fanouts", "64,64", "--json", str(out), "--plot", str(plot)]) == 0
    table = capsys.readouterr().out.splitlines()
    result = json.loads(out.read_text())
    assert result["config"]["samplers"] == ["nodewise", "bulk", "ladies"]
    assert result["config"]["bulk_sizes"] == [1, 3] and result["config"]["ladies_fanouts"] == [64, 64]
    rows = result["rows"]
    expected_keys = [("salientpp", None, 1), ("salientpp", None, 2)] + [
        (impl, k, t) for impl in ("bulk", "ladies") for k in (1, 3) for t in (1, 2)]
    assert [(r["impl"], r["bulk_size"], r["threads"]) for r in rows] == expected_keys
    # One table line per row: bulk and ladies once per (k, threads), with k in its column.
    bulk_lines = [line.split() for line in table if line.startswith(("bulk ", "ladies "))]
    assert sorted((w[0], int(w[1]), int(w[2])) for w in bulk_lines) == sorted(k for k in expected_keys if k[1])
    assert all(w[-2].endswith("x") for w in bulk_lines)  # vs nodewise, at the same thread count
    assert plot.read_bytes()[:4] == b"\x89PNG"

    # Batch i of an epoch comes from the stream (epoch seed, i) whatever k and the thread count:
    # every bulk row (and every LADIES row) counts the very same edges, the ones a loader over
    # the benchmark's seeds samples in epoch 1 (the last timed repeat).
    seeds = np.random.default_rng(0).permutation(np.arange(1000))[:400]
    per_batch = {impl: {r["edges_per_batch"] for r in rows if r["impl"] == impl}
                 for impl in ("salientpp", "bulk", "ladies")}
    assert all(len(values) == 1 for values in per_batch.values()), per_batch
    (nodewise,), (bulk,), (ladies,) = per_batch.values()
    for value, impl, layers in ((bulk, "bulk", [4, 3]), (ladies, "ladies", [64, 64])):
        loader = NeighborLoader(make_sampler(*_csr(dataset_dir), layers, impl, minibatches_per_bulk=5), seeds, 50,
                                shuffle=False)
        loader.set_epoch(1)
        assert value == pytest.approx(np.mean([b.num_sampled_edges for b in loader])), impl
    # Bulk node-wise draws from the C++ sampler's distribution with another generator, so the
    # counts differ by sampling noise only. Hop 1 is exact (sum of min(4, degree) over the seeds);
    # hop 2 varies with how many distinct nodes hop 1 reached. Over 200 epochs on this graph the
    # mean edges/batch of an epoch (8 batches) has a relative sd of 0.3% for both samplers (means
    # 919.0 and 919.3), so the difference of two epochs has sd ~0.4%: 3% is > 7 sd, while a
    # sampler that expanded only the new frontier (as PyG does) would be ~13% low.
    assert bulk == pytest.approx(nodewise, rel=0.03)
    # LADIES draws 64 nodes per layer for 50 seeds: far fewer edges than node-wise, but some.
    assert 0 < ladies < nodewise


@pytest.mark.parametrize("options, expected", [
    (["--samplers", "nodewise,foo"], "unknown sampler 'foo'"),
    (["--samplers", "bulk,bulk"], "twice"),
    (["--samplers", ""], "--samplers is empty"),
    (["--samplers", "bulk", "--bulk-sizes", "1,0"], ">= 1"),
    (["--samplers", "ladies", "--bulk-sizes", "1,x"], "--bulk-sizes must be comma-separated integers"),
    (["--samplers", "ladies", "--ladies-fanouts", "512"], "--ladies-fanouts gives 1 hops but 3 layers are sampled"),
    (["--samplers", "ladies", "--ladies-fanouts", "512,0,512"],
     "LADIES samples a number of nodes per layer, so every entry of --ladies-fanouts must be >= 1"),
    (["--plot", "PLOT.xyz"], "not an image format"),
    (["--plot", "SAME.png", "--json", "SAME.png"], "name the same file"),
    pytest.param(["--samplers", "bulk", "--device", "cuda"], "--device cuda needs a GPU", id="no-gpu",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")),
], ids=["unknown", "twice", "empty", "k0", "k-not-int", "ladies-layers", "ladies-0", "plot-suffix", "plot-json",
        "no-gpu"])
def test_bench_refuses_bad_options_before_loading(options, expected, tmp_path, capsys):
    options = [str(tmp_path / o) if o.startswith(("PLOT", "SAME")) else o for o in options]
    # The dataset does not exist: the option's sentence, not the dataset's, shows it is checked first.
    assert main(["bench", "sampler", str(tmp_path / "no-such-dataset"), *options]) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.startswith("salientpp bench: error: ") and err.count("\n") == 1, err
    assert expected in err and "no-such-dataset" not in err and "Traceback" not in err + captured.out
    assert not list(tmp_path.iterdir())  # no plot or JSON file left behind


def test_bench_bad_option_exit_code_from_the_shell(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "salientpp", "bench", "sampler", str(tmp_path / "absent"),
                           "--samplers", "nodewise,bulk", "--bulk-sizes", "0"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert "--bulk-sizes must be integers >= 1" in proc.stderr


def test_bench_sampler_refuses_a_typed_dataset_in_one_sentence(tmp_path, capsys):
    path = save_dataset(typed_dataset()[0], tmp_path / "typed")
    assert main(["bench", "sampler", str(path), "--fanouts", "2,2", "--batch-size", "4", "--no-pyg"]) == 2
    assert "typed graphs are not supported by bench sampler yet; use a homogeneous dataset" in one_sentence(capsys)
