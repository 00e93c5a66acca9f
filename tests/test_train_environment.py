"""`salientpp train` against bad options and a bad environment: refused in one sentence before any
rank starts, runtime write failures named as such, prior outputs left byte-identical, plans built
by two jobs at once, and messages that say what really happened."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from salientpp.cli import main as cli_main
from salientpp.cli.train import summary
from salientpp.distributed import DistContext
from salientpp.distributed.group import init_distributed, may_be_a_restart, rendezvous_error, restart_count
from salientpp.distributed.health import Health, Position
from salientpp.distributed.group import free_port
from salientpp.errors import InputError
from salientpp.partition import load_partitioned
from salientpp.train import TrainConfig, TrainResult, train
from salientpp.cache import plan as plan_module
from salientpp.train import setup as run_setup
from salientpp.train.checkpoint import LAST
from conftest import file_size_limit, one_sentence

SMALL = ["--hidden", "16", "--layers", "2", "--fanouts", "5,5", "--batch-size", "16", "--eval-fanouts", "5,5"]
UNEVALUATED = SMALL[:SMALL.index("--eval-fanouts")]  # for runs with --eval-every 0


@pytest.fixture(scope="module")
def p1(tiny_partitions):
    return str(tiny_partitions[0] / "p1")


@pytest.fixture(scope="module")
def p2(tiny_partitions):
    return str(tiny_partitions[0] / "p2")






def _snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


# -- options and paths, refused before any rank starts ------------------------------------------------


@pytest.mark.parametrize("args, expected", [
    (["--seed", "-1"], "seed must be an integer in [0, 2^63)"),
    (["--seed", str(2**63)], "seed must be an integer"),
    (["--policy", "bogus"], "unknown cache policy 'bogus'"),
    (["--fanouts", "5,,5", "--layers", "3"], "empty"),
])
def test_bad_training_options_are_refused_before_any_rank_starts(p2, args, expected, capsys, no_ranks):
    assert cli_main(["train", p2, *SMALL, *args]) == 2
    assert expected in one_sentence(capsys)


def test_an_existing_checkpoint_dir_without_resume_is_refused_and_left_byte_identical(p2, tmp_path, capsys, no_ranks):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / LAST).write_bytes(b"another run's checkpoint")
    (ckpt / "best.pt").write_bytes(b"another run's best")
    before = _snapshot(ckpt)
    assert cli_main(["train", p2, *SMALL, "--checkpoint-dir", str(ckpt)]) == 2
    err = one_sentence(capsys)
    assert "already holds another run's files" in err and "--resume" in err
    assert _snapshot(ckpt) == before


@pytest.mark.parametrize("variable", ["TORCHELASTIC_RESTART_COUNT", "SALIENTPP_RESTART_COUNT"])
@pytest.mark.parametrize("parts", ["p1", "p2"])
def test_a_restart_variable_left_in_the_environment_does_not_let_a_fresh_run_overwrite_another_run(
        parts, variable, request, tmp_path, monkeypatch, capsys, no_ranks):
    # Not under torchrun and not a rank of the local launcher: a fresh run, whatever the variable says.
    monkeypatch.setenv(variable, "1")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / LAST).write_bytes(b"another run's checkpoint")
    before = _snapshot(ckpt)
    assert cli_main(["train", request.getfixturevalue(parts), *SMALL, "--checkpoint-dir", str(ckpt)]) == 2
    assert "already holds another run's files" in one_sentence(capsys)
    assert _snapshot(ckpt) == before


def test_a_restart_count_that_is_no_count_is_refused_in_a_rank(monkeypatch):
    for key, value in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1",
                       "SALIENTPP_RESTART_COUNT": "one"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    with pytest.raises(InputError, match="SALIENTPP_RESTART_COUNT is 'one', not a restart count"):
        restart_count()
    monkeypatch.setenv("SALIENTPP_RESTART_COUNT", "2")
    assert restart_count() == 2 and may_be_a_restart()
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.delenv("MASTER_ADDR")
    monkeypatch.delenv("MASTER_PORT")
    assert restart_count() == 0 and not may_be_a_restart()  # alone: no rank of a job


def test_an_empty_existing_checkpoint_dir_is_accepted(p1, tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    TrainConfig(part_dir=p1, checkpoint_dir=str(ckpt)).validate()


@pytest.mark.parametrize("option", ["--checkpoint-dir", "--json"])
@pytest.mark.parametrize("where", ["under a file", "is the other kind"])
def test_unusable_output_paths_are_refused_before_any_rank_starts(p2, tmp_path, capsys, no_ranks, option, where):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    if where == "under a file":
        path = blocker / "out"
    elif option == "--checkpoint-dir":
        path = blocker  # a file where a directory is needed
    else:
        path = tmp_path  # a directory where a file is needed
    assert cli_main(["train", p2, *SMALL, option, str(path)]) == 2
    assert str(path) in one_sentence(capsys)
    assert blocker.read_text() == "not a directory\n"


def test_resume_without_a_checkpoint_is_refused_before_any_rank_starts(p2, tmp_path, capsys, no_ranks):
    assert cli_main(["train", p2, *SMALL, "--checkpoint-dir", str(tmp_path / "none"), "--resume"]) == 2
    assert "no checkpoint" in one_sentence(capsys)


# -- write failures while training ----------------------------------------------------------------------


def _tiny(part_dir: str, **kwargs) -> TrainConfig:
    return TrainConfig(part_dir=part_dir, hidden=16, layers=2, fanouts=(5, 5), batch_size=64, progress=False, **kwargs)


def test_a_full_disk_while_writing_metrics_is_named_as_such(p1, tmp_path, monkeypatch):
    with pytest.raises(InputError, match="--json /dev/full is not a regular file"):  # refused before the run
        train(_tiny(p1, epochs=1, eval_every=0, json_path="/dev/full"))
    metrics = tmp_path / "m.jsonl"

    def full(value, indent=None):
        raise OSError(errno.ENOSPC, "No space left on device")  # a failed write names no file
    monkeypatch.setattr("salientpp.train.loop.strict_json", full)
    with pytest.raises(InputError, match=f"cannot write {metrics}: no space left on device"):
        train(_tiny(p1, epochs=1, eval_every=0, json_path=str(metrics)))


def test_a_full_disk_while_checkpointing_keeps_the_previous_checkpoint(p1, tmp_path):
    ckpt = tmp_path / "ckpt"
    train(_tiny(p1, epochs=1, eval_every=0, checkpoint_dir=str(ckpt)))
    before = _snapshot(ckpt)
    size = (ckpt / "last.pt").stat().st_size
    with file_size_limit(size // 2), pytest.raises(InputError, match=f"cannot write {ckpt / 'last.pt'}: the file "
                                                                     "grew larger than the file system allows"):
        train(_tiny(p1, epochs=2, eval_every=0, checkpoint_dir=str(ckpt), resume=True))  # a real short write
    assert _snapshot(ckpt) == before  # last.pt intact, no temporary left


# -- two jobs building the same plan at once ----------------------------------------------------------


def test_a_job_that_loses_the_race_to_save_a_plan_uses_the_winners(tiny_partitions, tmp_path, monkeypatch):
    import shutil

    part_dir = tmp_path / "p2"
    shutil.copytree(tiny_partitions[0] / "p2", part_dir, ignore=shutil.ignore_patterns("cache"))
    choice = run_setup.resolve_run(_tiny(str(part_dir))).cache
    path = choice.path
    real_build = plan_module.build_plans

    def build_while_another_job_saves(*args, **kwargs):
        plans = real_build(*args, **kwargs)
        plan_module.save_plans(plans, path)  # the other job renames its identical plan into place first
        return plans
    # analyze's own build-and-save, as the trainer calls it: the other job wins between build and save
    monkeypatch.setattr(plan_module, "build_plans", build_while_another_job_saves)
    opened = run_setup.open_cache(choice, load_partitioned(part_dir), 0, 0, 1)
    assert opened.source == f"using {path}" and opened.plan.path == path and not opened.built
    assert not list(path.parent.glob(".*tmp*"))  # the loser's temporary is gone


def test_two_trainings_started_at_once_without_a_plan_both_finish(tiny_partitions, tmp_path):
    import shutil

    part_dir = tmp_path / "p2"
    shutil.copytree(tiny_partitions[0] / "p2", part_dir, ignore=shutil.ignore_patterns("cache"))
    command = [sys.executable, "-m", "salientpp", "train", str(part_dir), *UNEVALUATED, "--epochs", "1",
               "--eval-every", "0", "--quiet"]
    jobs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [job.communicate(timeout=300) for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], outputs
    assert [p.name for p in (part_dir / "cache").iterdir()] == ["vip-f5-5-b16-r0.1"]  # one plan, no temporaries


# -- messages --------------------------------------------------------------------------------------------


def test_a_rank_that_never_arrives_is_not_reported_as_an_address_problem(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    with pytest.raises(InputError, match=r"only 1 of 2 ranks reached the rendezvous .* start all 2 ranks"):
        init_distributed("cpu", timeout_s=2)
    assert "MASTER_ADDR" in str(rendezvous_error(1, 2, 2, "The client socket has timed out"))


def test_peer_reports_never_show_negative_ages():
    store = torch.distributed.HashStore()
    ctx = DistContext(0, 2, 0, torch.device("cpu"), torch.device("cpu"), "gloo", rendezvous_store=store, timeout_s=5)
    future = Position("rows", 0, 3, time.time() + 0.04)  # a peer's clock a little ahead of ours
    store.set("position/1", json.dumps(future.__dict__))
    health = Health(ctx)
    health.position = Position("ids", 0, 3, time.time() + 0.04)
    message = str(health.failure(RuntimeError("connection closed")))
    assert "-0.0" not in message and "0.0 s ago" in message and "after 0.0 s" in message


@pytest.mark.parametrize("result, expected", [
    (TrainResult(epochs_done=1), "trained 1 epoch (no best validation metric: no epoch evaluated"),
    (TrainResult(metric="accuracy", epochs_done=3, best_valid=0.5, best_epoch=2, test_at_best=0.4, final_test=0.4),
     "trained 3 epochs: best valid accuracy 0.5000 (epoch 2)"),
])
def test_the_closing_line_counts_epochs_and_omits_accuracies_never_measured(result, expected):
    line = summary(result)
    assert line.startswith(expected) and "-1" not in line


def test_bad_input_on_the_rank_that_hosts_the_store_is_one_sentence_without_cpp_log_noise(tiny_partitions,
                                                                                            tmp_path, capfd,
                                                                                            monkeypatch):
    import shutil

    import numpy as np

    part_dir = tmp_path / "p2"
    shutil.copytree(tiny_partitions[0] / "p2", part_dir)
    x = np.load(part_dir / "part_0" / "x.npy")
    x[0, 0] += 1.0
    np.save(part_dir / "part_0" / "x.npy", x)  # rank 0 refuses it while rank 1 waits on rank 0's store
    monkeypatch.delenv("TORCH_CPP_LOG_LEVEL", raising=False)
    capfd.readouterr()
    # In this process: the ranks write to its file descriptors, which capfd reads, C++ logs included.
    assert cli_main(["train", str(part_dir), *SMALL, "--epochs", "1", "--quiet", "--policy", "none"]) == 2
    assert capfd.readouterr().err.splitlines() == [
        f"salientpp train: error: {part_dir}/part_0/x.npy does not match its checksum in meta.json, so the file is "
        "corrupt; re-partition the dataset"]


# -- a temporary directory too long for the fork server's socket -----------------------------------------


def test_training_works_with_a_temporary_directory_too_long_for_a_socket(p2, tmp_path):
    long_tmp = tmp_path / ("t" * 100)  # a Unix socket's path holds at most 107 bytes
    long_tmp.mkdir()
    run = subprocess.run([sys.executable, "-m", "salientpp", "train", p2, *UNEVALUATED, "--epochs", "1",
                          "--eval-every", "0", "--policy", "none", "--quiet"],
                         env={**os.environ, "TMPDIR": str(long_tmp)}, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def test_a_temporary_directory_too_long_for_a_socket_without_a_short_one_is_one_sentence(p2, tmp_path, capsys,
                                                                                         monkeypatch):
    from multiprocessing import process

    from salientpp.distributed import group

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / ("t" * 100)))
    monkeypatch.delitem(process.current_process()._config, "tempdir", raising=False)
    monkeypatch.setattr(group, "_SHORT_DIRS", (str(tmp_path / "absent"),))
    assert cli_main(["train", p2, *UNEVALUATED, "--epochs", "1", "--eval-every", "0", "--policy", "none"]) == 2
    assert "set TMPDIR to a writable directory of at most" in one_sentence(capsys)
