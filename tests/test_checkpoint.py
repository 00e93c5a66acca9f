"""Checkpoints that do not belong to the run: another dataset, another model, not a checkpoint at
all, a pickle that would run code, another run's embedding shards, contents no run writes, or a
last.pt that is no file. Each is refused with one sentence and exit code 2, and the checkpoint
directory is left as it was. And a resume trains with the options it was given (learning rates,
weight decay), comparing those it must match by value."""
from __future__ import annotations

import io
import os
import pickle
import re
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from salientpp.cli import main as cli_main
from salientpp.errors import InputError
from salientpp.io import check_torch_file
from salientpp.partition import load_partitioned
from salientpp.train import TrainConfig, train
from salientpp.train.state import EpochSums

TINY = ["--layers", "2", "--fanouts", "5,5", "--hidden", "32", "--batch-size", "32", "--eval-every", "0",
        "--policy", "none", "--quiet"]


@pytest.fixture(scope="module")
def trained(tiny_partitions, tmp_path_factory):
    """``(root, checkpoint dir)`` of one epoch of SAGE on the 1-partition tiny graph."""
    root, _ = tiny_partitions
    ckpt = tmp_path_factory.mktemp("ckpt") / "sage"
    train(TrainConfig(str(root / "p1"), epochs=1, hidden=32, layers=2, fanouts=(5, 5), batch_size=32, eval_every=0,
                      policy="none", checkpoint_dir=str(ckpt), progress=False))
    return root, ckpt


def _resume(part_dir, ckpt, *extra) -> int:
    return cli_main(["train", str(part_dir), "--epochs", "2", "--checkpoint-dir", str(ckpt), "--resume", *TINY,
                     *extra])


def _unchanged(ckpt, before: bytes) -> bool:
    return (ckpt / "last.pt").read_bytes() == before


def test_a_checkpoint_of_another_dataset_is_refused(trained, capsys):
    root, ckpt = trained
    before = (ckpt / "last.pt").read_bytes()
    # The 2-partition directory is the same graph partitioned differently: another dataset to resume on.
    assert _resume(root / "p2", ckpt) == 2
    err = capsys.readouterr().err
    assert "was trained on another partitioned dataset" in err and err.count("\n") == 1
    assert _unchanged(ckpt, before)


@pytest.mark.parametrize("option, expected", [(["--model", "gat"], "model='sage', not 'gat'"),
                                              (["--seed", "3"], "seed=0, not 3")])
def test_a_checkpoint_of_another_model_is_refused(trained, capsys, option, expected):
    root, ckpt = trained
    before = (ckpt / "last.pt").read_bytes()
    assert _resume(root / "p1", ckpt, *option) == 2
    assert expected in capsys.readouterr().err
    assert _unchanged(ckpt, before)


def test_a_checkpoint_whose_weights_do_not_fit_is_refused(trained, tmp_path, capsys):
    root, ckpt = trained
    state = torch.load(ckpt / "last.pt", weights_only=True)
    name = next(iter(state["model"]))
    state["model"][name] = torch.zeros(3, 3)  # a tensor of the wrong shape under a matching name
    bad = tmp_path / "bad"
    bad.mkdir()
    torch.save(state, bad / "last.pt")
    assert _resume(root / "p1", bad) == 2
    assert "does not fit this model" in capsys.readouterr().err


class _Payload:
    def __reduce__(self):
        return (shutil.rmtree, ("/definitely/not/there",))  # what a hostile pickle would run


def test_a_pickle_that_would_run_code_is_never_unpickled(trained, tmp_path, capsys, monkeypatch):
    root, _ = trained
    bad = tmp_path / "evil"
    bad.mkdir()
    torch.save({"epoch": 0, "step": 0, "model": {}, "optimizer": {}, "payload": _Payload()}, bad / "last.pt",
               pickle_module=pickle)
    called = []
    monkeypatch.setattr(shutil, "rmtree", lambda *a, **k: called.append(a))
    assert _resume(root / "p1", bad) == 2
    assert "is not a salientpp checkpoint (UnpicklingError)" in capsys.readouterr().err
    assert called == []


def _damaged(data: bytes, how: str) -> bytes:
    if how == "truncated":
        return data[:len(data) // 2]
    # One flipped byte in the model's weights: the record holding the first weight tensor's bytes.
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = next(i for i in archive.infolist() if "/data/" in i.filename and i.file_size > 0)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    flipped = bytearray(data)
    flipped[start + info.file_size // 2] ^= 0x01
    return bytes(flipped)


@pytest.mark.parametrize("how, message", [("flipped", "is corrupt: its record .* does not match its checksum"),
                                          ("truncated", "is not a whole checkpoint file")])
def test_a_damaged_checkpoint_is_refused_by_resume_and_predict(trained, tmp_path, capsys, how, message):
    root, ckpt = trained
    damaged = tmp_path / "ck"
    shutil.copytree(ckpt, damaged)
    (damaged / "last.pt").write_bytes(_damaged((ckpt / "last.pt").read_bytes(), how))
    before = (damaged / "last.pt").read_bytes()
    assert _resume(root / "p1", damaged) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err), err
    assert cli_main(["predict", str(root / "p1"), "--checkpoint", str(damaged), "--out", str(tmp_path / "pred")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err), err
    assert _unchanged(damaged, before) and not (tmp_path / "pred").exists()


def test_a_damaged_embedding_shard_is_one_sentence(tmp_path):
    shard = tmp_path / "embedding-e1s0.rank0.pt"
    torch.save({"weight": torch.randn(50, 8)}, shard)
    check_torch_file(shard, "fix")
    for how, message in (("flipped", "does not match its checksum; fix"), ("truncated", "not a whole checkpoint")):
        damaged = tmp_path / f"{how}.pt"
        damaged.write_bytes(_damaged(shard.read_bytes(), how))
        with pytest.raises(InputError, match=message):
            check_torch_file(damaged, "fix")


# ---- a resume trains with the options it was given ---------------------------------------------------

def _resumed_copy(trained, tmp_path, name: str, *extra: str) -> dict:
    """The ``last.pt`` (loaded) of a resume of a copy of ``trained``'s checkpoint with ``extra`` options."""
    root, ckpt = trained
    copy = tmp_path / name
    shutil.copytree(ckpt, copy)
    assert _resume(root / "p1", copy, *extra) == 0
    return torch.load(copy / "last.pt", weights_only=True)


@pytest.mark.parametrize("flag, key, value", [("--lr", "lr", 0.5), ("--weight-decay", "weight_decay", 0.25)])
def test_resume_applies_a_changed_optimizer_option(trained, tmp_path, flag, key, value):
    stored = torch.load(trained[1] / "last.pt", weights_only=True)
    assert all(group[key] != value for group in stored["optimizer"]["param_groups"])
    resumed = _resumed_copy(trained, tmp_path, "ck", flag, str(value))
    assert resumed["options"][key] == value
    assert [group[key] for group in resumed["optimizer"]["param_groups"]] == \
        [value] * len(stored["optimizer"]["param_groups"])


def test_two_resumes_with_different_learning_rates_end_with_different_weights(trained, tmp_path):
    slow = _resumed_copy(trained, tmp_path, "slow", "--lr", "1e-6")["model"]
    fast = _resumed_copy(trained, tmp_path, "fast", "--lr", "0.5")["model"]
    assert any(not torch.equal(slow[name], fast[name]) for name in slow)


TYPED = ["--model", "rsage", "--layers", "2", "--hidden", "8", "--batch-size", "4", "--embedding-dim", "4",
         "--eval-every", "0", "--policy", "none", "--quiet"]


@pytest.fixture(scope="module")
def typed_trained(typed_partitions, tmp_path_factory):
    """``(part_dir, checkpoint dir)``: one epoch of R-SAGE with fanouts 3,2 for every relation and
    an embedding of the featureless authors, on the 1-partition typed graph."""
    part = typed_partitions[0] / "p1"
    ckpt = tmp_path_factory.mktemp("typed") / "ck"
    assert cli_main(["train", str(part), "--epochs", "1", "--fanouts", "3,2", "--checkpoint-dir", str(ckpt),
                     *TYPED]) == 0
    return part, ckpt


def _typed_resume(typed_trained, copy, *extra) -> int:
    part, ckpt = typed_trained
    shutil.copytree(ckpt, copy)
    return cli_main(["train", str(part), "--epochs", "2", "--checkpoint-dir", str(copy), "--resume", *TYPED, *extra])


def test_a_typed_resume_applies_changed_learning_rates_to_the_model_and_the_embedding(typed_trained, tmp_path):
    ends = {}
    for name, lr in (("slow", "1e-6"), ("fast", "0.5")):
        assert _typed_resume(typed_trained, tmp_path / name, "--fanouts", "3,2", "--lr", lr, "--embedding-lr", lr) == 0
        last = torch.load(tmp_path / name / "last.pt", weights_only=True)
        assert {group["lr"] for group in last["optimizer"]["param_groups"]} == {float(lr)}
        ends[name] = torch.load(tmp_path / name / f"embedding-{last['embedding']}.rank0.pt", weights_only=True)
    assert not torch.equal(ends["slow"]["weight"], ends["fast"]["weight"])


def test_a_resume_compares_fanouts_by_value_not_by_spelling(typed_trained, tmp_path, capsys):
    relations = load_partitioned(typed_trained[0], verify=False, check=False).schema.relations
    same = ";".join(f"{relation}=3,2" for relation in relations)
    assert _typed_resume(typed_trained, tmp_path / "same", "--fanouts", same) == 0
    other = ";".join(f"{relation}={'2,2' if i == 0 else '3,2'}" for i, relation in enumerate(relations))
    assert _typed_resume(typed_trained, tmp_path / "other", "--fanouts", other) == 2
    assert "was trained with fanouts=[3, 2], not {" in capsys.readouterr().err


# ---- embedding shards belong to their checkpoint -----------------------------------------------------

@pytest.fixture(scope="module")
def two_embedding_runs(tiny_partitions, tmp_path_factory):
    """``(part_dir, [checkpoint dir, checkpoint dir])``: two runs with the same options (so their
    shards have the same names and shapes) that learn an embedding on the 1-partition tiny graph."""
    part = tiny_partitions[0] / "p1"
    root = tmp_path_factory.mktemp("embedding-runs")
    for name in ("a", "b"):
        assert cli_main(["train", str(part), "--epochs", "1", "--checkpoint-dir", str(root / name),
                         "--embedding-dim", "4", *TINY]) == 0
    return part, [root / "a", root / "b"]


def test_another_runs_embedding_shards_are_refused_by_predict_and_resume(two_embedding_runs, tmp_path, capsys):
    part, (a, b) = two_embedding_runs
    mixed = tmp_path / "mixed"
    shutil.copytree(a, mixed)
    for shard in b.glob("embedding-*.pt"):
        shutil.copy(shard, mixed / shard.name)  # the same names: the same tag and rank
    before = {p.name: p.read_bytes() for p in mixed.iterdir()}
    assert cli_main(["predict", str(part), "--checkpoint", str(mixed), "--out", str(tmp_path / "pred")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "was written by another run" in err and "embedding-e1s0.rank0.pt" in err, err
    assert not (tmp_path / "pred").exists()
    assert _resume(part, mixed, "--embedding-dim", "4") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "was written by another run" in err and "--checkpoint-dir" in err, err
    assert {p.name: p.read_bytes() for p in mixed.iterdir()} == before
    # the run's own shards are accepted by both
    assert cli_main(["predict", str(part), "--checkpoint", str(a), "--out", str(tmp_path / "pred")]) == 0


def test_a_resume_with_another_embedding_optimizer_is_refused_before_any_rank(two_embedding_runs, tmp_path, capsys,
                                                                              no_ranks):
    part, (a, _) = two_embedding_runs
    before = {p.name: p.read_bytes() for p in a.iterdir()}
    assert _resume(part, a, "--embedding-dim", "4", "--embedding-optimizer", "adagrad") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "embedding_optimizer='adam', not 'adagrad'" in err, err
    assert {p.name: p.read_bytes() for p in a.iterdir()} == before


def test_predict_without_an_embedding_shard_says_to_put_it_back_not_to_resume(two_embedding_runs, tmp_path, capsys):
    part, (a, _) = two_embedding_runs
    lacking = tmp_path / "lacking"
    shutil.copytree(a, lacking)
    for shard in lacking.glob("embedding-*.pt"):
        shard.unlink()
    assert cli_main(["predict", str(part), "--checkpoint", str(lacking), "--out", str(tmp_path / "pred")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no embedding shard" in err and "resume" not in err, err


# ---- checkpoints that are not what a run writes ------------------------------------------------------

def _tampered(trained, tmp_path, change) -> Path:
    """A copy of ``trained``'s checkpoint directory whose ``last.pt`` ``change(state)`` altered
    (written by torch.save, so every record's checksum is valid)."""
    copy = tmp_path / "tampered"
    shutil.copytree(trained[1], copy)
    state = torch.load(copy / "last.pt", weights_only=True)
    change(state)
    torch.save(state, copy / "last.pt")
    return copy


def _first_weight(state) -> str:
    return next(name for name, t in state["model"].items() if t.is_floating_point())


def _mid_epoch(rng_bytes: int | None = None, sums: int | None = None):
    """A change that makes a checkpoint one rank's at step 1 of its epoch, with RNG states of
    ``rng_bytes`` (default: this process's CPU generator's) and running sums ``sums`` wide
    (default: the width a run writes)."""
    def change(state):
        state["step"] = 1
        state["rng"] = torch.zeros((1, rng_bytes or torch.get_rng_state().numel()), dtype=torch.uint8)
        state["partial"] = torch.zeros((1, sums or EpochSums.width(state["metric_sums"])), dtype=torch.float64)
    return change


def _unrecorded_sums(state):
    """A step checkpoint as salientpp wrote it before recording its number of metric sums (3 then)."""
    _mid_epoch()(state)
    del state["metric_sums"]
    state["partial"] = torch.zeros((1, EpochSums.width(3)), dtype=torch.float64)


@pytest.mark.parametrize("change, metric, message", [
    (_mid_epoch(), "f1-macro", "was written mid-epoch with 2 running metric sums per rank, but the metric f1-macro "
                               "keeps 24; resume with the --metric"),
    (_unrecorded_sums, "accuracy", "was written mid-epoch with an unrecorded number of running metric sums per rank, "
                                   "but the metric accuracy keeps 2"),
])
def test_a_step_checkpoint_of_another_number_of_metric_sums_is_refused_in_one_sentence(trained, tmp_path, capsys,
                                                                                       change, metric, message):
    """The running sums of an epoch are as wide as the metric's counts (accuracy 2, F1-macro 3 per
    class): a row of another width would be read as other counts, so ``--resume`` refuses it."""
    copy = _tampered(trained, tmp_path, change)
    before = {p.name: p.read_bytes() for p in copy.iterdir()}
    assert _resume(trained[0] / "p1", copy, "--metric", metric) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert {p.name: p.read_bytes() for p in copy.iterdir()} == before


@pytest.mark.parametrize("change, message", [
    (lambda state: state.update(epoch=-1), "its epoch is -1, not a non-negative integer"),
    (lambda state: state.update(metric_sums=-2), "its metric_sums is -2, not a count of metric sums (or -1)"),
    (lambda state: state.update(step=1), "its step 1 is mid-epoch, but it holds no RNG states"),
    (_mid_epoch(sums=2), "its running sums are torch.float64 [1, 2] mid-epoch, not [1, "),
    (_mid_epoch(rng_bytes=7), "was written mid-epoch with RNG states of 7 bytes, but a rank training on cpu keeps"),
    (lambda state: state["model"][_first_weight(state)].fill_(float("nan")),
     "are not finite (.*), so training cannot continue from them"),
])
def test_a_checkpoint_with_valid_checksums_but_impossible_contents_is_one_sentence(trained, tmp_path, capsys,
                                                                                   change, message):
    copy = _tampered(trained, tmp_path, change)
    before = {p.name: p.read_bytes() for p in copy.iterdir()}
    assert _resume(trained[0] / "p1", copy) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(re.escape(message).replace(re.escape("(.*)"), r"\(.*\)"), err), err
    assert {p.name: p.read_bytes() for p in copy.iterdir()} == before


def test_the_weights_check_of_resume_is_the_one_predict_makes(trained, tmp_path, capsys):
    copy = _tampered(trained, tmp_path, lambda state: state["model"][_first_weight(state)].fill_(float("inf")))
    assert cli_main(["predict", str(trained[0] / "p1"), "--checkpoint", str(copy), "--out", str(tmp_path / "o")]) == 2
    predict_err = capsys.readouterr().err
    assert _resume(trained[0] / "p1", copy) == 2
    resume_err = capsys.readouterr().err
    # the same sentence up to its consequence
    assert predict_err.split("error: ")[1].split(", so ")[0] == resume_err.split("error: ")[1].split(", so ")[0]


def test_predict_given_a_file_that_is_no_checkpoint_says_to_pass_one(trained, tmp_path, capsys):
    npy = next((trained[0] / "p1").rglob("*.npy"))
    before = npy.read_bytes()
    assert cli_main(["predict", str(trained[0] / "p1"), "--checkpoint", str(npy), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pass as --checkpoint a checkpoint directory" in err, err
    assert "delete" not in err and "--checkpoint-dir" not in err, err
    assert npy.read_bytes() == before


def _not_a_file(kind: str, path) -> None:
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.parametrize("kind, what", [("directory", "a directory"), ("fifo", "a named pipe (FIFO)"),
                                        ("device", "a character device")])
def test_a_last_pt_that_is_not_a_file_is_named_by_what_it_is_with_one_fix(trained, tmp_path, capsys, kind, what):
    ck = tmp_path / "ck"
    ck.mkdir()
    _not_a_file(kind, ck / "last.pt")
    sentence = f"the checkpoint {ck / 'last.pt'} is {what}, not a regular file; remove it, or choose another"
    for resume in (["--resume"], []):
        assert cli_main(["train", str(trained[0] / "p1"), "--epochs", "2", "--checkpoint-dir", str(ck), *resume,
                         *TINY]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and sentence in err, err
    assert cli_main(["predict", str(trained[0] / "p1"), "--checkpoint", str(ck), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"is {what}, not a regular file; pass as --checkpoint" in err, err
    assert [p.name for p in ck.iterdir()] == ["last.pt"] and not (tmp_path / "o").exists()
