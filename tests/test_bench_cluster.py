"""`salientpp bench cluster`: SALIENT++'s experiment on an emulated network, its rows, JSON and
figure, the rows fetched against the simulator's, and one-sentence refusals before any run."""
from __future__ import annotations

import json
import shutil

import pytest

from salientpp.bench import cluster as bench_cluster
from salientpp.cli import main as cli_main
from conftest import one_sentence

SMALL = ["--epochs", "2", "--fanouts", "5,5", "--batch-size", "32", "--hidden", "8", "--pipeline-depth", "2"]


@pytest.fixture
def p2(tiny_partitions, tmp_path):
    part_dir = tmp_path / "p2"
    shutil.copytree(tiny_partitions[0] / "p2", part_dir, ignore=shutil.ignore_patterns("cache"))
    return part_dir


def test_the_table_has_every_setting_and_fetches_what_the_simulator_predicts(p2, tmp_path, capsys):
    out = tmp_path / "cluster.json"
    assert cli_main(["bench", "cluster", str(p2), "--network", "400mbit,20us", "--replication", "0,0.1,0.5",
                     "--policies", "vip,random", *SMALL, "--json", str(out), "--plot", str(tmp_path / "c.png")]) == 0
    result = json.loads(out.read_text())
    assert result["kind"] == bench_cluster.KIND
    assert result["network"] == "400mbit,20us" and result["rate_bytes_per_s"] == 5e7
    rows = result["rows"]
    settings = [(r["setting"], r["policy"], r["alpha"], r["pipeline"]) for r in rows]
    assert settings == [("full", "degree", 1.0, True), ("partitioned", None, None, False),
                        ("pipelined", None, None, True), ("cache", "vip", 0.1, True), ("cache", "vip", 0.5, True),
                        ("cache", "random", 0.1, True), ("cache", "random", 0.5, True)]
    for r in rows:  # the trainer's batches are the simulator's
        assert len(r["epoch_s_rounds"]) == 1
        assert r["rows_per_epoch"] == pytest.approx(r["predicted_rows"], abs=1e-6), r
        assert r["epoch_s"] > 0 and r["vs_full"] == pytest.approx(r["epoch_s"] / rows[0]["epoch_s"])
    full, partitioned = rows[0], rows[1]
    assert full["rows_per_epoch"] == 0 and full["bytes_per_epoch"] == 0
    row_bytes = partitioned["bytes_per_epoch"] / partitioned["rows_per_epoch"]
    assert full["feature_bytes_per_rank"] == 2000 * row_bytes  # every row of the tiny graph
    held = {(r["policy"], r["alpha"]): r["feature_bytes_per_rank"] for r in rows[3:]}
    assert partitioned["feature_bytes_per_rank"] < held[("vip", 0.1)] < held[("vip", 0.5)] < full["feature_bytes_per_rank"]
    assert rows[3]["rows_per_epoch"] <= rows[5]["rows_per_epoch"]  # VIP fetches no more than random
    for r in rows:  # no cache of a row's size fetches fewer rows than the oracle's on these batches
        if r["setting"] == "cache":
            assert 0 <= r["oracle_rows"] <= r["rows_per_epoch"] + 1e-6, r
        else:
            assert r["oracle_rows"] is None
    oracle = {r["alpha"]: r["oracle_rows"] for r in rows[3:]}
    assert oracle[0.5] <= oracle[0.1] < partitioned["rows_per_epoch"], oracle
    assert "vs_slowest_stage" in rows[2] and (tmp_path / "c.png").stat().st_size > 0
    assert "| full | degree |" in capsys.readouterr().out


def test_alpha_zero_alone_runs_only_the_settings_without_a_cache(p2, tmp_path, monkeypatch):
    """--replication 0 plans the three runs without a cache and scores no policy (the oracle alone
    gives the rows touched); the runs themselves are the ones the test above trains for real."""
    planned = []

    def run(args, setting, policy, alpha, depth, owned_bytes, row_bytes):
        planned.append((setting, policy, alpha, depth))
        timed = dict.fromkeys(("epoch_s", "sample_s", "fetch_s", "fetch_cpu_s", "compute_s", "compute_cpu_s"), 1.0)
        return {"setting": setting, "policy": policy, "alpha": alpha, "pipeline": depth > 1, "pipeline_depth": depth,
                **timed, "rows_per_epoch": 0.0, "bytes_per_epoch": 0.0, "feature_bytes_per_rank": owned_bytes}
    monkeypatch.setattr(bench_cluster, "_run", run)
    out = tmp_path / "cluster.json"
    assert cli_main(["bench", "cluster", str(p2), "--network", "400mbit", "--replication", "0", *SMALL,
                     "--json", str(out)]) == 0
    assert planned == [("full", "degree", 1.0, 2), ("partitioned", None, None, 1), ("pipelined", None, None, 2)]
    rows = json.loads(out.read_text())["rows"]
    assert rows[1]["predicted_rows"] == rows[2]["predicted_rows"] > 0 and rows[0]["predicted_rows"] == 0


@pytest.mark.parametrize("args, expected", [
    (["--network", "fast"], "--network 'fast' has no rate"),
    (["--network", "1gbit", "--policies", "vip,nope"], "nope"),
    (["--network", "1gbit", "--replication", "0.1,,0.2"], "empty item"),
    (["--network", "1gbit", "--plot", "x.txt"], "not an image format"),
    (["--network", "1gbit", "--replication", "0.1,-1"], "replication factor -1.0 is outside"),
    (["--network", "1gbit", "--replication", "nan"], "replication factor nan is outside"),
])
def test_bad_options_are_one_sentence_before_any_run(p2, capsys, no_ranks, args, expected):
    assert cli_main(["bench", "cluster", str(p2), *args]) == 2
    assert expected in one_sentence(capsys)


def test_one_partition_has_no_network_to_emulate(tiny_partitions, capsys, no_ranks):
    assert cli_main(["bench", "cluster", str(tiny_partitions[0] / "p1"), "--network", "1gbit"]) == 2
    assert "one partition" in one_sentence(capsys)


def test_a_setting_run_in_several_rounds_reports_the_median_of_their_times():
    from salientpp.bench.cluster import _median_of_rounds

    rounds = [{"epoch_s": e, "sample_s": 0.1, "fetch_s": f, "fetch_cpu_s": 0.0, "compute_s": 1.0, "compute_cpu_s": 1.0,
               "rows_per_epoch": 7.0} for e, f in ((3.0, 1.0), (1.0, 3.0), (2.0, 2.0))]
    row = _median_of_rounds(rounds)
    assert (row["epoch_s"], row["fetch_s"], row["rows_per_epoch"]) == (2.0, 2.0, 7.0)
    assert row["epoch_s_rounds"] == [3.0, 1.0, 2.0]
