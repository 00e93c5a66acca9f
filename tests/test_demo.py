"""``salientpp demo`` runs the whole pipeline and leaves what each step promises."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import one_sentence
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

    def step(argv, *, step):  # prepare writes its directory; the next step is interrupted or fails
        assert step  # a step's interrupt stops the demo even once the step's output is complete
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


@pytest.mark.parametrize("raised, code", [(KeyboardInterrupt(), 130), (cli.Terminated(), 143)])
def test_an_interrupt_after_a_steps_output_is_complete_still_stops_the_demo(tmp_path, monkeypatch, capsys, raised,
                                                                           code):
    from salientpp.cli import prepare as cli_prepare
    out = tmp_path / "demo"

    def interrupted(*args, **kwargs):  # prepare's summary, once its dataset is renamed into place
        assert (out / "dataset" / "meta.json").is_file()
        raise raised
    monkeypatch.setattr(cli_prepare, "print", interrupted, raising=False)
    assert main(["demo", "--out", str(out)]) == code
    assert "$ salientpp partition" not in capsys.readouterr().out and not out.exists()


def test_an_interrupt_while_the_finished_demo_prints_keeps_its_output_and_exits_0(tmp_path, monkeypatch, capsys):
    from salientpp.cli import demo as cli_demo
    out = tmp_path / "demo"
    real_main = cli.main
    monkeypatch.setattr(cli, "main", lambda argv, *, step: 0)  # every step succeeds at once

    def interrupted(*args, **kwargs):
        if "demo finished" in str(args[0]):
            raise KeyboardInterrupt
    monkeypatch.setattr(cli_demo, "print", interrupted, raising=False)
    assert real_main(["demo", "--out", str(out)]) == 0
    assert capsys.readouterr().err == f"salientpp demo: interrupted after its output was complete: {out}\n"
    assert out.is_dir()


@pytest.mark.parametrize("argv, expected", [
    (["--parts", "3000"], "cannot split 2000 nodes into 3000 parts"),
    (["--parts", "1000"], "the tiny graph has 160 training nodes and every rank needs one, so it cannot train in "
                          "1000 parts; use at most --parts 160"),
    (["--preset", "tiny,num_nodes=100000", "--parts", "100"], "training 100 ranks needs about 50.5 GiB of memory"),
    (["--preset", "huge"], "unknown synthetic preset 'huge'"),
])
def test_a_demo_a_later_step_would_refuse_is_refused_before_the_first_step(tmp_path, monkeypatch, capsys, argv,
                                                                          expected):
    monkeypatch.setattr(cli, "main", lambda argv, *, step: pytest.fail("a step ran"))
    monkeypatch.setattr("salientpp.resources.memory_budget", lambda limit: (16 * 2**30, "available"))
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), *argv]) == 2  # the real main, imported before the patch
    assert expected in one_sentence(capsys)
    assert not out.exists()
