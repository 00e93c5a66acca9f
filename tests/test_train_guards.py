"""What `salientpp train` refuses or stops, and what it leaves behind: runs that would share or
overwrite outputs, a diverging run, options that do not apply to the run, options that would
not fit in memory, models of the wrong shape, empty evaluation splits, and resumes that cannot
continue. Every refusal is one sentence with exit code 2, and prior outputs stay byte-identical."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import one_sentence
from salientpp.cache.plan import MAX_PLAN_NAME, Budget, PlanOptions, PlanRequest, default_plan_name
from salientpp.cache.workload import Workload
from salientpp.cli import build_parser, main
from salientpp.cli.train import summary
from salientpp.distributed.faults import ENV as FAULTS_ENV
from salientpp.distributed.group import check_socket_interface, env_is_distributed, init_distributed
from salientpp.errors import InputError
from salientpp.io import NULL_REASONS, output_lock, strict_json
from salientpp.models.gnn import ExpectedOutputs
from salientpp.partition.partitioner import partition_dataset
from salientpp.train import TrainConfig
from salientpp.train.checkpoint import check_checkpoint_dir
from salientpp.train.config import MINIBATCH_ONLY, flag_of, option_of
from salientpp.train.setup import resolve_run
from salientpp.train.state import TrainResult

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--hidden", "16", "--layers", "2", "--fanouts", "5,5", "--batch-size", "64", "--eval-fanouts", "5,5"]


def _strict(text: str) -> list:
    """JSON lines parsed the strict way: NaN, Infinity and -Infinity are refused."""
    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")
    return [json.loads(line, parse_constant=refuse) for line in text.splitlines()]


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _train(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "salientpp", "train", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


# ---- outputs -------------------------------------------------------------------------------------

def test_a_second_run_with_the_same_outputs_is_refused_and_the_first_finishes_alone(tiny_partitions, tmp_path,
                                                                                  capsys):
    part = str(tiny_partitions[0] / "p1")  # the outputs' locks are the launcher's: one rank shows them
    ck, out = tmp_path / "ck", tmp_path / "m.jsonl"
    # the first run holds its outputs at least 8 s (a delay at its first step), so the second meets its locks
    first = _train(part, *SMALL, "--epochs", "6", "--checkpoint-dir", str(ck), "--json", str(out), "--quiet",
                   env={FAULTS_ENV: "delay@train:rank=0,epoch=0,step=0,seconds=8"})
    deadline = time.monotonic() + 120
    while not ck.is_dir() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # the lock is taken when the directory exists
    # the second run in this process: another process than the first, as the locks need
    assert main(["train", part, *SMALL, "--epochs", "6", "--lr", "0.02", "--checkpoint-dir", str(ck), "--json",
                 str(out), "--quiet"]) == 2
    assert "another salientpp run is writing" in one_sentence(capsys)
    _, first_err = first.communicate(timeout=300)
    assert first.returncode == 0, first_err
    assert [line["epoch"] for line in _strict(out.read_text())] == list(range(6))  # one run's lines, once


def test_a_killed_holder_leaves_no_stale_lock_and_a_live_one_refuses(tmp_path):
    path = tmp_path / "m.jsonl"
    hold = textwrap.dedent(f"""
        import os, signal, sys, time
        from salientpp.io import output_lock
        with output_lock({str(path)!r}, "--json", directory=False):
            print("held", flush=True)
            if sys.argv[1] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)
    """)
    live = subprocess.Popen([sys.executable, "-c", hold, "sleep"], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert live.stdout.readline().strip() == "held"
        with pytest.raises(InputError, match="another salientpp run is writing --json"):
            with output_lock(path, "--json", directory=False):
                pass
    finally:
        live.kill()
        live.wait()
    killed = subprocess.run([sys.executable, "-c", hold, "kill"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert killed.returncode == -9 and killed.stdout.strip() == "held"
    with output_lock(path, "--json", directory=False):  # the kernel released the killed holder's lock
        path.write_text("{}\n")
    assert path.read_text() == "{}\n"


def test_a_lock_on_an_output_that_stays_empty_removes_it(tmp_path):
    with output_lock(tmp_path / "ck", "--checkpoint-dir", directory=True):
        assert (tmp_path / "ck").is_dir()
    with output_lock(tmp_path / "m.jsonl", "--json", directory=False):
        pass
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("target", ["part_meta", "part_cache", "checkpoint", "checkpoint_dir_in_part", "device",
                                    "link_to_part_meta", "link_to_best", "link_to_features", "through_linked_dir",
                                    "dotdot_into_part", "link_to_checkpoint_dir", "fifo"])
def test_an_output_inside_what_salientpp_manages_is_refused(tiny_partitions, tmp_path, capsys, no_ranks, target):
    part = tiny_partitions[0] / "p2"
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "last.pt").write_bytes(b"a checkpoint")
    (ck / "best.pt").write_bytes(b"a checkpoint")
    link = tmp_path / "m.jsonl"
    linked = {"link_to_part_meta": part / "meta.json", "link_to_best": ck / "best.pt",
              "link_to_features": part / "part_0" / "x.npy", "through_linked_dir": part}
    if target in linked:
        link.symlink_to(linked[target])
    (tmp_path / "ck-link").symlink_to(ck)
    (tmp_path / "sub").mkdir()
    if target == "fifo":
        os.mkfifo(link)  # opening it would block until a reader comes
    args = {"part_meta": ["--json", str(part / "meta.json")],
            "part_cache": ["--json", str(part / "cache" / "m.jsonl")],
            "checkpoint": ["--json", str(ck / "best.pt"), "--checkpoint-dir", str(ck), "--resume"],
            "checkpoint_dir_in_part": ["--checkpoint-dir", str(part / "ck")],
            "device": ["--json", "/dev/full"],
            "through_linked_dir": ["--json", str(link / "m.jsonl")],
            "dotdot_into_part": ["--json", f"{tmp_path}/sub/../{os.path.relpath(part, tmp_path)}/m.jsonl"],
            "link_to_checkpoint_dir": ["--json", str(tmp_path / "ck-link" / "m.jsonl"), "--checkpoint-dir", str(ck),
                                       "--resume"],
            }.get(target, ["--json", str(link)])
    before = _snapshot(part), _snapshot(ck)
    done = []
    worker = threading.Thread(target=lambda: done.append(main(["train", str(part), *args])), daemon=True)
    worker.start()
    worker.join(60)
    assert done == [2], f"train {args} did not end with exit 2 within 60 s"
    err = one_sentence(capsys)
    assert ("not a regular file" if target in ("device", "fifo") else "lies in") in err, err
    assert (_snapshot(part), _snapshot(ck)) == before


def test_json_lines_are_strict_json_with_the_reason_of_each_null():
    line = strict_json({"epoch": 3, "valid_metric": float("nan"), "nested": {"loss": float("-inf")}, "x": [1.5]})
    (record,) = _strict(line)
    assert record["valid_metric"] is None and record[NULL_REASONS] == {"valid_metric": "not a number"}
    assert record["nested"] == {"loss": None, NULL_REASONS: {"loss": "infinite"}} and record["x"] == [1.5]


# ---- a diverging run -----------------------------------------------------------------------------

def test_a_diverging_run_stops_on_every_rank_and_keeps_the_last_finite_checkpoint(tiny_partitions, tmp_path, capfd):
    ck, out = tmp_path / "ck", tmp_path / "m.jsonl"
    assert main(["train", str(tiny_partitions[0] / "p2"), *SMALL, "--epochs", "8", "--lr", "1e30", "--checkpoint-dir",
                 str(ck), "--json", str(out), "--quiet"]) == 2
    err = capfd.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "the training loss was not finite" in err and "lower the learning rate (--lr 1e+30)" in err, err
    epoch = int(err.split("at epoch ")[1].split(",")[0])
    assert out.exists() == (epoch > 0)  # a JSON file the run never wrote a line to is removed
    lines = _strict(out.read_text()) if epoch else []
    assert [line["epoch"] for line in lines] == list(range(epoch))  # every line before it, with a finite loss
    assert all(math.isfinite(line["train_loss"]) for line in lines)
    if epoch:
        assert f"keeps the last checkpoint, the end of epoch {epoch - 1}" in err, err
        state = torch.load(ck / "last.pt", weights_only=True)
        assert state["epoch"] == epoch and all(torch.isfinite(v).all() for v in state["model"].values())


def test_a_model_that_returns_nan_stops_at_its_first_step(tiny_partitions, tmp_path, monkeypatch, capsys):
    module = tmp_path / "nan_model.py"
    module.write_text(textwrap.dedent("""
        import torch
        class NanModel(torch.nn.Module):
            def __init__(self, i, o):
                super().__init__()
                self.lin = torch.nn.Linear(i, o)
            def forward(self, x, edge_index):
                return self.lin(x) * float("nan")
        def build(in_dim, hidden, out_dim, num_layers):
            return NanModel(in_dim, out_dim)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))  # one partition: the run trains in this process
    assert main(["train", str(tiny_partitions[0] / "p1"), *SMALL, "--model", "nan_model:build", "--epochs", "3",
                 "--checkpoint-dir", str(tmp_path / "ck"), "--quiet"]) == 2
    err = one_sentence(capsys)
    assert "not finite (nan) at epoch 0, step 0" in err and "no checkpoint was written before it" in err, err
    assert not (tmp_path / "ck").exists()


def test_weights_that_turn_non_finite_after_a_finite_loss_are_never_checkpointed_or_predicted(
        tiny_partitions, tmp_path, monkeypatch, capsys):
    (tmp_path / "poisoned_model.py").write_text(textwrap.dedent("""
        import torch
        class Poisoned(torch.nn.Module):
            # A finite loss, but a weight that turns NaN in the second training step (it has no
            # gradient, as an update that overflows would leave it).
            def __init__(self, i, o):
                super().__init__()
                self.lin = torch.nn.Linear(i, o)
                self.spare = torch.nn.Parameter(torch.zeros(1))
                self.steps = 0
            def forward(self, x, edge_index):
                if self.training:
                    self.steps += 1
                    if self.steps == 2:
                        with torch.no_grad():
                            self.spare.fill_(float("nan"))
                    return self.lin(x)
                return self.lin(x) * torch.exp(self.spare)
        def build(in_dim, hidden, out_dim, num_layers):
            return Poisoned(in_dim, out_dim)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))  # one partition: the run trains in this process
    part, ck = tiny_partitions[0] / "p1", tmp_path / "ck"
    assert main(["train", str(part), *SMALL, "--model", "poisoned_model:build", "--epochs", "3", "--quiet",
                 "--checkpoint-dir", str(ck), "--checkpoint-every", "1steps"]) == 2
    err = one_sentence(capsys)
    assert "the model's weights are not finite (spare) at step 2 of epoch 0" in err, err
    assert "--weight-decay" in err and "keeps the last checkpoint, step 1 of epoch 0" in err, err
    state = torch.load(ck / "last.pt", weights_only=True)
    assert (state["epoch"], state["step"]) == (0, 1) and all(torch.isfinite(v).all() for v in state["model"].values())
    assert not (ck / "best.pt").exists()
    # A checkpoint holding such weights (written by another tool) is refused by predict, before any rank.
    state["model"]["spare"] = torch.tensor([float("inf")])
    torch.save(state, ck / "last.pt")
    assert main(["predict", str(part), "--checkpoint", str(ck), "--out", str(tmp_path / "pred")]) == 2
    assert "are not finite (spare), so every output would be NaN" in one_sentence(capsys)
    assert not (tmp_path / "pred").exists()
    # Finite weights whose outputs overflow (exp(100) in float32) write nothing either.
    state["model"]["spare"] = torch.tensor([100.0])
    torch.save(state, ck / "last.pt")
    assert main(["predict", str(part), "--checkpoint", str(ck), "--out", str(tmp_path / "pred")]) == 2
    assert re.search(r"the model's outputs for [\d,]+ nodes are not finite .* so nothing was written",
                     one_sentence(capsys))
    assert not (tmp_path / "pred").exists()


@pytest.mark.parametrize("flag, value", [("--lr", "inf"), ("--lr", "nan"), ("--lr", "-1"), ("--embedding-lr", "inf"),
                                         ("--timeout", "inf"), ("--timeout", "0"), ("--timeout", "1e-7"),
                                         ("--timeout", "nan"), ("--weight-decay", "inf"), ("--weight-decay", "nan"),
                                         ("--weight-decay", "-1e-4"), ("--device-fraction", "2"),
                                         ("--device-fraction", "nan")])
def test_a_rate_timeout_or_fraction_out_of_its_range_is_refused(tiny_partitions, capsys, no_ranks, flag, value):
    """Among them a timeout below the millisecond torch keeps (it would become 0), by the rule
    init_distributed applies too (test_dist_api)."""
    extra = ["--embedding-dim", "8"] if flag == "--embedding-lr" else []
    assert main(["train", str(tiny_partitions[0] / "p2"), *extra, f"{flag}={value}"]) == 2
    assert flag in one_sentence(capsys)


# ---- options -------------------------------------------------------------------------------------

# A value other than its default, and a run it does not apply to, for every option with `needs`.
NOT_APPLYING = {
    "dependencies": ("cache", {}),
    "task": ("link", {"mode": "full-graph"}),
    "num_negatives": (5, {}), "negative_sampling": ("per-source", {}), "decoder": ("mlp", {}),
    "eval_negatives": (10, {}),
    "fanouts": ((5, 5), {"mode": "full-graph"}),
    "sampler": ("bulk", {"mode": "full-graph"}),
    "minibatches_per_bulk": (4, {}), "sampling_device": ("cuda", {}),
    "fetch_thread": (True, {"mode": "full-graph"}),
    "embedding_dim": (8, {"mode": "full-graph"}),
    "features": (False, {}),
    "embedding_optimizer": ("adagrad", {}), "embedding_lr": (0.1, {}),
    "plan": ("some-plan", {"mode": "full-graph"}),
    "policy": ("degree", {"mode": "full-graph"}), "replication": (0.2, {"policy": "none"}),
    "plan_workload": ("train", {"policy": "none"}),
    "device_fraction": (0.5, {"mode": "full-graph"}), "precision": ("bf16", {"mode": "full-graph"}),
    "pipeline_depth": (2, {"mode": "full-graph"}),
    "eval_fanouts": ((5, 5), {"inference": "layerwise"}),
    "inference": ("layerwise", {"eval_every": 0}), "eval_batch_size": (64, {"eval_every": 0}),
    "checkpoint_every": ("2steps", {}), "resume": (True, {}),
    "typed_root": ("relation", {"model": "sage"}), "typed_input": ("raw", {"model": "sage"}),
}


def test_every_option_that_needs_another_is_covered_here():
    needing = {f.name for f in dataclasses.fields(TrainConfig) if option_of(f).needs is not None}
    assert needing == set(NOT_APPLYING)


@pytest.mark.parametrize("name", sorted(NOT_APPLYING))
def test_an_option_the_run_does_not_use_is_refused_naming_what_it_needs(tiny_partitions, name):
    value, others = NOT_APPLYING[name]
    field = TrainConfig.__dataclass_fields__[name]
    config = TrainConfig(str(tiny_partitions[0] / "p2"), layers=2, **others, **{name: value})
    assert not option_of(field).needs.holds(config)
    with pytest.raises(InputError, match=f"^{flag_of(field)}.* applies only with "
                                         f"{option_of(field).needs.what}"):
        config.validate()


@pytest.mark.parametrize("name, value, others", [
    ("replication", 0.2, {"mode": "full-graph"}), ("eval_fanouts", (5, 5), {"eval_every": 0}),
])
def test_an_option_is_refused_in_every_kind_of_run_that_does_not_use_it(tiny_partitions, name, value, others):
    field = TrainConfig.__dataclass_fields__[name]
    with pytest.raises(InputError, match=f"^{flag_of(field)}.* applies only with"):
        TrainConfig(str(tiny_partitions[0] / "p2"), layers=2, **others, **{name: value}).validate()


def test_an_option_at_its_default_or_in_a_run_that_uses_it_is_accepted(tiny_partitions):
    part = str(tiny_partitions[0] / "p2")
    TrainConfig(part, layers=2, mode="full-graph", dependencies="cache").validate()
    TrainConfig(part, layers=2, fanouts=(5, 5), sampler="bulk", minibatches_per_bulk=4).validate()
    TrainConfig(part, layers=2, mode="full-graph", sampler="nodewise").validate()  # the default, given
    assert MINIBATCH_ONLY.holds(TrainConfig(part))


@pytest.mark.parametrize("argv, rule", [
    (["--mode", "bogus"], "invalid choice"),
    (["--batch-size", "\u0665"], "invalid int value"),
    (["--lr", "1_0"], "invalid float value"),
])
def test_a_malformed_option_is_one_line_not_the_usage(capsys, argv, rule):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["train", "PART_DIR", *argv])
    err = one_sentence(capsys)
    assert exit_.value.code == 2 and rule in err and "see salientpp train --help" in err, err


@pytest.mark.parametrize("fanouts", ["5_0,5", "\u0665,5"])
def test_fanouts_are_ascii_integers_only(tiny_partitions, capsys, no_ranks, fanouts):
    assert main(["train", str(tiny_partitions[0] / "p2"), "--layers", "2", "--fanouts", fanouts]) == 2
    assert "fanouts must be comma-separated integers" in one_sentence(capsys)


def test_a_list_of_negative_fanouts_is_read_as_a_value():
    args = build_parser().parse_args(["train", "p", "--eval-fanouts", "-1,-1", "--fanouts", "-1,5"])
    assert (args.eval_fanouts, args.fanouts) == ("-1,-1", "-1,5")


@pytest.mark.parametrize("lr", ["-1e-3", "-1E+2", "-.5", "-1.", "-inf"])
def test_a_negative_learning_rate_in_any_notation_reaches_its_check(tiny_partitions, capsys, no_ranks, lr):
    assert main(["train", str(tiny_partitions[0] / "p2"), "--lr", lr]) == 2  # not "expected one argument"
    assert "the learning rate (--lr) must be a positive finite number, got -" in one_sentence(capsys)


def test_lists_of_negative_numbers_are_read_as_values():
    args = build_parser().parse_args(["simulate", "p", "--fanouts", "-1,-1", "--batch-size", "8", "--replication",
                                      "-0.1,0.5"])
    assert (args.fanouts, args.replication) == ("-1,-1", "-0.1,0.5")


@pytest.mark.parametrize("argv, expected", [
    (["--eval-fanouts", "x,5"], "--eval-fanouts must be comma-separated integers like 15,10,5, got 'x,5'"),
    (["--eval-fanouts", "0,5"], "fanout 0 is invalid; every entry of --eval-fanouts must be an integer"),
    (["--eval-fanouts", "5,5,5"], "--eval-fanouts gives 3 hops but 2 layers are sampled"),
    (["--inference-fanouts", "0,5"], "every entry of --eval-fanouts must be"),  # the old name: the flag's name now
    (["--fanouts", "5,5,5"], "--fanouts gives 3 hops but 2 layers are sampled"),
    (["--fanouts", "x,5"], "--fanouts must be comma-separated integers like 15,10,5, got 'x,5'"),
])
def test_a_fanout_error_names_the_flag_it_came_from(tiny_partitions, capsys, no_ranks, argv, expected):
    assert main(["train", str(tiny_partitions[0] / "p2"), "--layers", "2", "--fanouts", "5,5", *argv]) == 2
    assert expected in capsys.readouterr().err.splitlines()[-1]  # after the note of an old flag


def test_rank_variables_without_a_rendezvous_address_are_refused(monkeypatch):
    for key in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(InputError, match="RANK and WORLD_SIZE are set but MASTER_ADDR and MASTER_PORT are not"):
        env_is_distributed()


@pytest.mark.parametrize("variables, named", [
    ({"RANK": "3", "WORLD_SIZE": "2"}, r"RANK is '3', not an integer in \[0, 1\]"),
    ({"RANK": "-1"}, r"RANK is '-1', not an integer in \[0, 1\]"),
    ({"WORLD_SIZE": "two"}, r"WORLD_SIZE is 'two', not an integer"),
    ({"WORLD_SIZE": "0"}, r"WORLD_SIZE is '0', not an integer in \[1, "),
    ({"RANK": "9" * 30}, r"RANK is '9{30}', not an integer"),
    ({"MASTER_PORT": "x"}, r"MASTER_PORT is 'x', not an integer in \[1, 65535\]"),
    ({"MASTER_PORT": "70000"}, r"MASTER_PORT is '70000'"),
    ({"LOCAL_RANK": "2"}, r"LOCAL_RANK is '2', not an integer in \[0, 1\]"),
])
def test_rendezvous_variables_no_rank_can_have_are_refused_at_once(tiny_partitions, monkeypatch, capsys, no_ranks,
                                                                   variables, named):
    for key, value in {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
                       **variables}.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(InputError, match=named):
        env_is_distributed()
    assert main(["train", str(tiny_partitions[0] / "p2"), "--timeout", "600"]) == 2  # not a wait of 600 s
    err = one_sentence(capsys)
    assert re.search(named, err) and "so this process cannot join a job" in err, err


def test_a_rendezvous_variable_set_alone_is_one_sentence(tiny_partitions, monkeypatch, capsys, no_ranks):
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MASTER_PORT", "x")
    assert main(["train", str(tiny_partitions[0] / "p2")]) == 2
    assert "MASTER_PORT is set but RANK and WORLD_SIZE and MASTER_ADDR are not" in one_sentence(capsys)


def test_a_socket_interface_this_machine_lacks_is_refused_before_any_rank_starts(tiny_partitions, monkeypatch,
                                                                                  capsys):
    def no_rank(*args, **kwargs):
        raise AssertionError("a rank was started")
    monkeypatch.setattr("salientpp.distributed.group.rank_start_context", no_rank)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "nosuchif")
    named = "GLOO_SOCKET_IFNAME is 'nosuchif', but this machine has no network interface 'nosuchif'; set it to one of"
    assert main(["train", str(tiny_partitions[0] / "p2"), "--quiet"]) == 2  # two local ranks
    assert named in one_sentence(capsys)
    for key, value in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(key, value)  # a rank of torchrun's: refused before the rendezvous
    with pytest.raises(InputError, match=named):
        init_distributed("cpu", timeout_s=600)
    for accepted in ("lo", "lo,", ""):
        check_socket_interface({"GLOO_SOCKET_IFNAME": accepted})


# ---- memory, models, splits ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def link_parts(tmp_path_factory, cora_npz):
    """Cora with held-out edges in 2 parts, and with every edge for training (empty valid and test)."""
    root = tmp_path_factory.mktemp("link-guards")
    for name, split in (("held-out", "0.85,0.05,0.10"), ("all-train", "1,0,0")):
        assert main(["prepare", f"npz:{cora_npz}", str(root / name), "--link-split", split]) == 0
        assert main(["partition", str(root / name), str(root / f"{name}-2"), "--parts", "2"]) == 0
    return root


@pytest.mark.parametrize("option", ["num_negatives", "eval_negatives"])
def test_negatives_that_cannot_fit_in_memory_are_refused_before_any_rank(link_parts, option):
    config = TrainConfig(str(link_parts / "held-out-2"), task="link", **{option: 10**9})
    with pytest.raises(InputError, match="needs about .* TiB of memory .*--num-negatives, --eval-negatives"):
        resolve_run(config, memory_check=True)


def test_empty_evaluation_splits_are_skipped_and_said(link_parts, tmp_path, capfd):
    out = tmp_path / "m.jsonl"
    assert main(["train", str(link_parts / "all-train-2"), "--task", "link", *SMALL, "--epochs", "2",
                 "--json", str(out)]) == 0
    printed = capfd.readouterr().out  # rank 0 is a process of its own
    assert "no validation or test edges" in printed and "neither split is evaluated" in printed, printed
    assert all("valid_metric" not in line for line in _strict(out.read_text()))
    assert "no epoch evaluated a validation split" in printed


@pytest.fixture(scope="module")
def train_only_parts(tiny_partitions, tmp_path_factory):
    """The tiny dataset with empty validation and test splits, in 1 and 2 parts."""
    root = tmp_path_factory.mktemp("train-only")
    tiny = tiny_partitions[1]
    dataset = dataclasses.replace(tiny, valid_idx=tiny.valid_idx[:0], test_idx=tiny.test_idx[:0])
    for k in (1, 2):
        partition_dataset(dataset, root / f"p{k}", k)
    return root


@pytest.mark.parametrize("parts, args", [
    ("p1", []), ("p1", ["--inference", "layerwise"]), ("p1", ["--eval-every", "0"]), ("p1", ["--mode", "full-graph"]),
    ("p2", []),
], ids=["sampled", "layerwise", "no_evaluation", "full_graph", "two_ranks"])
def test_a_node_task_without_validation_and_test_nodes_trains_and_says_so(train_only_parts, tmp_path, capfd,
                                                                           parts, args):
    out = tmp_path / "m.jsonl"
    small = SMALL[:SMALL.index("--eval-fanouts")] if "layerwise" in args or "--eval-every" in args else SMALL
    if "full-graph" in args:  # sampling options do not apply to full-graph training
        small = SMALL[:SMALL.index("--fanouts")]
    assert main(["train", str(train_only_parts / parts), *small, *args, "--epochs", "2", "--json", str(out)]) == 0
    printed = capfd.readouterr().out
    assert ("neither split is evaluated" in printed) == ("--eval-every" not in args), printed
    lines = _strict(out.read_text())
    assert len(lines) == 2 and all("valid_metric" not in line for line in lines)
    assert "no epoch evaluated a validation split" in printed


def test_a_user_model_of_the_wrong_shape_is_named_with_what_was_expected():
    expected = ExpectedOutputs(7, "a score per class of 7", "mine:build")
    expected.check(torch.zeros(4, 7), 4)
    for shape in ((1, 7), (4, 1, 7), (4, 3), (4, 9)):
        with pytest.raises(InputError, match=rf"the model mine:build returned outputs of shape "
                                             rf"\[{', '.join(map(str, shape))}\] for a batch of 4 seeds, but training "
                                             r"needs \[4, 7\] \(a score per class of 7\)"):
            expected.check(torch.zeros(shape), 4)


def test_a_ladies_run_refuses_a_model_that_cannot_see_edge_weights_before_any_rank_starts(tiny_partitions, tmp_path,
                                                                                          monkeypatch, capsys, no_ranks):
    (tmp_path / "plain_model.py").write_text(textwrap.dedent("""
        import torch
        def build(in_dim, hidden, out_dim, num_layers):
            class Plain(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.lin = torch.nn.Linear(in_dim, out_dim)
                def forward(self, x, edge_index):
                    return self.lin(x)
            return Plain()
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["train", str(tiny_partitions[0] / "p2"), "--model", "plain_model:build", "--sampler", "ladies",
                 "--layers", "2", "--fanouts", "64,64", "--epochs", "1", "--quiet"]) == 2
    assert "cannot see: it takes 'edge_index' input" in one_sentence(capsys)


def test_the_summary_says_why_there_is_no_best_validation_metric():
    nan = TrainResult(metric="roc-auc", history=[{"valid_metric": float("nan")}], epochs_done=1)
    assert "it was not a number in any epoch" in summary(nan)
    off = TrainResult(metric="accuracy", history=[{"epoch": 0}], epochs_done=1)
    assert "no epoch evaluated a validation split" in summary(off)


# ---- resuming ----------------------------------------------------------------------------------------

def test_a_resume_that_cannot_continue_is_refused_before_any_rank_or_plan(tiny_partitions, tmp_path, capsys):
    part = tiny_partitions[0] / "p2"
    ck = tmp_path / "ck"
    assert main(["train", str(part), *SMALL, "--epochs", "2", "--checkpoint-dir", str(ck), "--quiet"]) == 0
    capsys.readouterr()
    before = _snapshot(part), _snapshot(ck)
    assert main(["train", str(part), *SMALL, "--epochs", "2", "--checkpoint-dir", str(ck), "--resume"]) == 2
    assert "holds the run up to the end of epoch 1, so --epochs 2 leaves nothing to train" in one_sentence(capsys)
    other = [a if a != "5,5" or i != SMALL.index("--fanouts") + 1 else "3,3" for i, a in enumerate(SMALL)]
    assert main(["train", str(part), *other, "--epochs", "3", "--checkpoint-dir", str(ck), "--resume"]) == 2
    assert "was trained with fanouts=[5, 5], not [3, 3]" in one_sentence(capsys)
    assert (_snapshot(part), _snapshot(ck)) == before


def test_a_resume_with_other_training_options_says_what_changed(tiny_partitions, tmp_path, capsys):
    part = tiny_partitions[0] / "p1"
    ck = tmp_path / "ck"
    assert main(["train", str(part), *SMALL, "--epochs", "1", "--checkpoint-dir", str(ck), "--quiet"]) == 0
    assert main(["train", str(part), *SMALL, "--epochs", "2", "--lr", "0.01", "--checkpoint-dir", str(ck),
                 "--resume"]) == 0
    out = capsys.readouterr().out
    assert ("options changed since it was written, which apply from here on: --epochs 2 (was 1), --lr 0.01 "
            "(was 0.003)") in out, out
    assert "resumed from the checkpoint at the end of epoch 0" in out


def test_a_long_default_plan_name_fits_a_file_name_and_stays_distinct():
    def name(fanouts):
        return default_plan_name(PlanRequest((Workload(fanouts, 1024),), PlanOptions("vip", Budget(replication=0.1))))
    deep, deeper = name((10,) * 60), name((10,) * 61)
    assert len(deep) <= MAX_PLAN_NAME and len(deeper) <= MAX_PLAN_NAME and deep != deeper
    assert name((15, 10, 5)) == "vip-f15-10-5-b1024-r0.1"


def test_an_accuracy_that_is_the_majority_class_share_is_pointed_out(tmp_path, capsys):
    n = 400
    edges = tmp_path / "ring.txt"
    edges.write_text("".join(f"{i} {(i + 1) % n}\n" for i in range(n)))
    labels = tmp_path / "y.npy"
    np.save(labels, (np.arange(n) % 5 == 0).astype(np.int64))  # 80% class 0
    (tmp_path / "constant_model.py").write_text(textwrap.dedent("""
        import torch
        class Constant(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.bias = torch.nn.Parameter(torch.tensor([5.0, 0.0]))
            def forward(self, x, edge_index):
                return self.bias.expand(x.shape[0], 2) + 0 * x[:, :1]
        def build(in_dim, hidden, out_dim, num_layers):
            return Constant()
    """))
    assert main(["prepare", f"edgelist:{edges}", str(tmp_path / "d"), "--labels", str(labels)]) == 0
    assert main(["partition", str(tmp_path / "d"), str(tmp_path / "p"), "--parts", "1"]) == 0
    sys.path.insert(0, str(tmp_path))
    try:
        assert main(["train", str(tmp_path / "p"), "--model", "constant_model:build", *SMALL, "--lr", "1e-6",
                     "--epochs", "2"]) == 0
    finally:
        sys.path.remove(str(tmp_path))
    out = capsys.readouterr().out
    assert out.count("is the share of the most common class") == 1, out  # said once, at the first such epoch
    assert "--metric roc-auc" in out


def test_demo_refuses_zero_epochs_before_any_step(tmp_path, capsys):
    assert main(["demo", "--epochs", "0", "--out", str(tmp_path / "demo")]) == 2
    assert "--epochs must be a positive integer, got 0" in one_sentence(capsys)
    assert not (tmp_path / "demo").exists() and capsys.readouterr().out == ""


def test_what_a_checkpoint_writer_killed_midway_left_is_removed_and_a_live_writers_file_kept(tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for name in ("last.pt", "best.pt", "embedding-e0s2.rank1.pt"):  # SIGKILLed while writing each
        (ck / f".{name}.tmp-{dead.pid}").write_bytes(b"half a checkpoint")
    with pytest.raises(InputError, match="no checkpoint .*last.pt to resume from"):
        check_checkpoint_dir(ck, resume=True)
    assert list(ck.iterdir()) == []
    (ck / f".last.pt.tmp-{dead.pid}").write_bytes(b"half a checkpoint")
    assert check_checkpoint_dir(ck, resume=False) == ck and list(ck.iterdir()) == []
    writing = ck / f".last.pt.tmp-{os.getppid()}"  # a live process writing it now
    writing.write_bytes(b"being written")
    with pytest.raises(InputError, match="already holds another run's files"):
        check_checkpoint_dir(ck, resume=False)
    assert writing.exists()


def test_a_fresh_run_ignores_another_ranks_writability_probe_in_its_checkpoint_directory(tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / ".salientpp-probe-abc123").touch()  # a rank of the same job checking that it can write here
    assert check_checkpoint_dir(ck, resume=False) == ck
    (ck / "last.pt").touch()
    with pytest.raises(InputError, match="already holds another run's files"):
        check_checkpoint_dir(ck, resume=False)
