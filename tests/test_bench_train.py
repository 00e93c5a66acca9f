"""``salientpp bench train`` keeps what it measured when a baseline's ranks fail."""
from __future__ import annotations

import json

from salientpp.bench import train as bench_train
from salientpp.cli import main as cli
from salientpp.distributed.launcher import WorkerError


def test_a_baseline_killed_for_memory_is_reported_and_the_measured_rows_are_kept(tmp_path, monkeypatch, capsys):
    assert cli(["prepare", "synthetic:tiny,num_nodes=600", str(tmp_path / "ds")]) == 0
    assert cli(["partition", str(tmp_path / "ds"), str(tmp_path / "p1"), "--parts", "1"]) == 0
    calls = []

    def killed(config):
        calls.append(config.model)
        raise WorkerError(2, "the process was killed by SIGKILL")

    monkeypatch.setattr(bench_train, "unavailable_reason", lambda: None)
    monkeypatch.setattr(bench_train, "run_baseline", killed)
    out = tmp_path / "rows.json"
    assert cli(["bench", "train", str(tmp_path / "p1"), "--fanouts", "5,5", "--batch-size", "64", "--epochs", "1",
                "--alphas", "", "--hidden", "8", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert len(calls) == 2  # both baselines were tried
    assert printed.count("failed: rank 2 failed: the process was killed by SIGKILL") == 2
    rows = json.loads(out.read_text())
    assert [(r["cache"], r["depth"]) for r in rows] == [("none", 1), ("none", 4)]
    assert all(r["epoch_s"] > 0 for r in rows)
