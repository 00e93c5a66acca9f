"""``salientpp demo`` runs the whole pipeline and leaves what each step promises."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from salientpp import cli
from salientpp.cli import build_parser, main


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


@pytest.mark.parametrize("failure", ["interrupted", "failed_step"])
def test_an_interrupted_or_failed_demo_leaves_no_half_of_its_output(tmp_path, monkeypatch, capsys, failure):
    out = tmp_path / "demo"
    ran = []

    def step(argv):  # prepare writes its directory; the next step is interrupted or fails
        ran.append(argv[0])
        if len(ran) == 1:
            Path(argv[2]).mkdir()
            (Path(argv[2]) / "meta.json").write_text("{}")
            return 0
        if failure == "interrupted":
            raise KeyboardInterrupt
        return 2

    monkeypatch.setattr(cli, "main", step)
    args = build_parser().parse_args(["demo", "--out", str(out)])
    if failure == "interrupted":
        with pytest.raises(KeyboardInterrupt):
            args.func(args)
    else:
        assert args.func(args) == 2
    assert ran == ["prepare", "partition"] and not out.exists()
