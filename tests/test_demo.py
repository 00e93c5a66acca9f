"""``salientpp demo`` runs the whole pipeline and leaves what each step promises."""
from __future__ import annotations

import json

from salientpp.cli import main


def test_demo_runs_every_step_and_learns(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--epochs", "8"]) == 0
    printed = capsys.readouterr().out
    for command in ("prepare", "partition", "analyze", "simulate", "train"):
        assert f"$ salientpp {command}" in printed
    assert json.loads((out / "dataset" / "meta.json").read_text())["kind"] == "salientpp-dataset"
    part_meta = json.loads((out / "partitioned-2" / "meta.json").read_text())
    assert part_meta["num_parts"] == 2
    assert len(list((out / "partitioned-2" / "cache").iterdir())) == 1, "analyze wrote one plan"
    epochs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(epochs) == 8
    # 8 classes: chance is 0.125; a GNN on the tiny preset clears 0.5 within a few epochs.
    assert max(e["test_metric"] for e in epochs) > 0.5
    assert epochs[-1]["train_loss"] < epochs[0]["train_loss"]


def test_demo_refuses_an_existing_output(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err
