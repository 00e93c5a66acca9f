"""`salientpp predict` on bad input and in a bad environment. A batch size that is not positive,
a link predictor's checkpoint and one of another partitioning are one sentence before any rank
starts, weights that do not fit the model one sentence from the ranks (exit code 2); a rank that
fails is one line per failed rank (exit code 1); a full disk is one sentence (exit code 2). No
case prints a traceback or leaves an output behind."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch
from conftest import one_sentence, refuse_ranks

from salientpp.cache.plan import partition_identity
from salientpp.cli import main
from salientpp.data import load_dataset
from salientpp.models.gnn import build_model
from salientpp.partition import load_partitioned, partition_dataset
from salientpp.train import TrainConfig, train
from salientpp.train.checkpoint import LAST, Checkpoint, save_checkpoint

SMALL = {"hidden": 16, "layers": 2, "fanouts": (3, 3), "batch_size": 64, "epochs": 1, "eval_every": 0,
         "progress": False}

# A user's model whose forward fails: it builds and loads its weights, then every rank raises.
BROKEN_MODULE = '''
import torch

class Broken(torch.nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.lin = torch.nn.Linear(in_dim, out_dim)

    def forward(self, x, edge_index):
        raise RuntimeError("the forward of this model is broken\\nand its message has a second line")

def make(in_dim, hidden, out_dim, num_layers):
    return Broken(in_dim, out_dim)
'''


@pytest.fixture(scope="module")
def node_checkpoint(tiny_partitions, tmp_path_factory) -> Path:
    """A node classifier's checkpoint directory, trained (in this process) on tiny's one partition."""
    ckpt = tmp_path_factory.mktemp("predict-node") / "ckpt"
    train(TrainConfig(str(tiny_partitions[0] / "p1"), checkpoint_dir=str(ckpt), **SMALL))
    return ckpt


@pytest.fixture(scope="module")
def link_run(tmp_path_factory) -> tuple[Path, Path]:
    """``(part_dir, checkpoint_dir)``: tiny with held-out edges in one partition, and a link
    predictor trained on it (in this process)."""
    root = tmp_path_factory.mktemp("predict-link")
    assert main(["prepare", "synthetic:tiny", str(root / "ds"), "--link-split", "0.8,0.1,0.1"]) == 0
    partition_dataset(load_dataset(root / "ds"), root / "p1", 1)
    train(TrainConfig(str(root / "p1"), task="link", checkpoint_dir=str(root / "ckpt"), **SMALL))
    return root / "p1", root / "ckpt"


@pytest.fixture
def no_ranks(monkeypatch):
    """Fail the test if `salientpp predict` would start any rank: the input must be refused before."""
    refuse_ranks(monkeypatch, "salientpp.train.predict.launch", "salientpp.train.predict._rank_outputs")


def left_behind(out: Path) -> list[str]:
    """The output and its temporaries (``.NAME.tmp-PID``) that exist beside ``out``."""
    return sorted(p.name for p in out.parent.iterdir() if p.name == out.name or p.name.startswith(f".{out.name}."))


@pytest.mark.parametrize("batch_size", ["0", "-1"])
def test_a_batch_size_below_one_is_refused_before_any_rank_starts(tiny_partitions, node_checkpoint, tmp_path,
                                                                  capsys, no_ranks, batch_size):
    out = tmp_path / "pred"
    assert main(["predict", str(tiny_partitions[0] / "p1"), "--checkpoint", str(node_checkpoint), "--out", str(out),
                 "--batch-size", batch_size]) == 2
    err = one_sentence(capsys)
    assert err.startswith("salientpp predict: error: --batch-size must be a positive integer"), err
    assert left_behind(out) == []


def test_a_link_predictors_checkpoint_is_refused_before_any_rank_starts(link_run, tmp_path, capsys, no_ranks):
    part_dir, ckpt = link_run
    out = tmp_path / "pred"
    assert main(["predict", str(part_dir), "--checkpoint", str(ckpt), "--out", str(out)]) == 2
    err = one_sentence(capsys)
    assert "holds a link prediction model" in err and "node classifiers only" in err, err
    assert "roc-auc" not in err, err
    assert left_behind(out) == []


def test_a_checkpoint_of_another_partitioning_is_refused_before_any_rank_starts(tiny_partitions, node_checkpoint,
                                                                                 tmp_path, capsys, no_ranks):
    out = tmp_path / "pred"
    assert main(["predict", str(tiny_partitions[0] / "p2"), "--checkpoint", str(node_checkpoint),
                 "--out", str(out)]) == 2
    err = one_sentence(capsys)
    assert "was trained on another partitioned dataset; pass the PART_DIR it was trained on" in err and "resume" not in err, err
    assert left_behind(out) == []


def test_weights_that_do_not_fit_the_model_are_one_sentence(tiny_partitions, node_checkpoint, tmp_path, capsys):
    state = torch.load(node_checkpoint / LAST, map_location="cpu", weights_only=True)
    name = next(iter(state["model"]))
    state["model"][name] = torch.zeros(state["model"][name].shape[0] + 1, *state["model"][name].shape[1:])
    (tmp_path / "ckpt").mkdir()
    torch.save(state, tmp_path / "ckpt" / LAST)
    out = tmp_path / "pred"
    assert main(["predict", str(tiny_partitions[0] / "p1"), "--checkpoint", str(tmp_path / "ckpt"),
                 "--out", str(out)]) == 2
    err = one_sentence(capsys)
    assert "do not fit the sage model" in err and name in err, err
    assert left_behind(out) == []


def test_a_rank_that_fails_is_one_line_per_failed_rank_and_exit_code_1(tiny_partitions, tmp_path, monkeypatch,
                                                                       capsys):
    (tmp_path / "broken_predict_gnn.py").write_text(BROKEN_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # for the spawned ranks
    part_dir = tiny_partitions[0] / "p2"
    # The checkpoint `salientpp train` writes for this model before its first step (no step is
    # taken: the forward fails), on the two partitions.
    data = load_partitioned(part_dir, verify=False, check=False)
    config = TrainConfig(str(part_dir), model="broken_predict_gnn:make", **SMALL)
    model = build_model(config.model, data.num_features, config.hidden, data.num_outputs, config.layers)
    options = {**config.to_dict(), "partition_id": partition_identity(data.meta)}
    save_checkpoint(tmp_path / "ckpt", Checkpoint(0, 0, model.state_dict(), {}, options=options), best=False)
    out = tmp_path / "pred"
    assert main(["predict", str(part_dir), "--checkpoint", str(tmp_path / "ckpt"), "--out", str(out)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(lines) and 1 <= len(lines) <= 2, lines  # two ranks
    assert lines[0].startswith("salientpp predict: error: rank "), lines
    assert "RuntimeError: the forward of this model is broken" in lines[0] and "second line" not in lines[0], lines
    assert left_behind(out) == []


def test_a_full_disk_while_writing_the_outputs_is_one_sentence_and_leaves_no_output(
        tiny_partitions, node_checkpoint, tmp_path, monkeypatch, capsys):
    def full_disk(directory, name, array):  # the disk fills up half-way through the first array
        (Path(directory) / f"{name}.npy").write_bytes(b"\x93NUMPY")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a failed write() raises it: no file name
    monkeypatch.setattr("salientpp.train.predict.save_array", full_disk)
    out = tmp_path / "pred"
    assert main(["predict", str(tiny_partitions[0] / "p1"), "--checkpoint", str(node_checkpoint),
                 "--out", str(out)]) == 2
    err = one_sentence(capsys)
    assert err.startswith(f"salientpp predict: error: cannot write {out}: no space left on device"), err
    assert left_behind(out) == []
