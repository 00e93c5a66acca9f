"""Layer-wise full-neighbour inference is exact (lockstep training steps are tested in test_lockstep.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from salientpp.distributed import CommStats, init_distributed, launch, shutdown_distributed
from salientpp.errors import InputError
from salientpp.sampling import MFG
from salientpp.train import TrainConfig, Trainer
from trainers import rank_trainer

SMALL = dict(hidden=16, layers=2, fanouts=(4, 4), batch_size=32, eval_batch_size=97, policy="none", progress=False)


@pytest.fixture(scope="module")
def tiny(tiny_partitions):
    return tiny_partitions


def _dense_logits(trainer: Trainer, x: torch.Tensor | None = None) -> torch.Tensor:
    """The model over the whole (one-partition) graph at once: every layer sees every edge; its
    input rows ``x`` (``[N, in_dim]``), by default the features."""
    rowptr, col = torch.from_numpy(np.asarray(trainer.graph.data.rowptr)), torch.from_numpy(np.asarray(trainer.graph.data.col))
    n = rowptr.shape[0] - 1
    dst = torch.repeat_interleave(torch.arange(n), rowptr[1:] - rowptr[:-1])
    whole = MFG(n, n, torch.stack([col, dst]), rowptr)
    trainer.model.eval()
    if x is None:
        x = torch.from_numpy(np.asarray(trainer.graph.part.x)).float()
    with torch.no_grad():
        return trainer.model(x, [whole] * trainer.model.num_layers)


@pytest.mark.parametrize("model", ["sage", "gat", "gin"])
def test_one_rank_equals_a_dense_full_graph_forward(tiny, model):
    root, _ = tiny
    trainer = rank_trainer(TrainConfig(str(root / "p1"), model=model, **SMALL), init_distributed("cpu"))
    n = trainer.graph.part.y.shape[0]
    # Chunks of 97 destinations: many chunks, the last one partial.
    got = trainer.evaluator.layerwise_logits(np.arange(n), CommStats())
    want = _dense_logits(trainer)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # A subset at the last layer gives the same rows (earlier layers still run on every vertex).
    some = np.array([5, 0, n - 1, 17])
    torch.testing.assert_close(trainer.evaluator.layerwise_logits(some, CommStats()), want[some], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("features", [False, True], ids=["no-features", "beside-features"])
def test_one_rank_reads_the_learned_embedding_as_its_input_rows(tiny, features):
    root, _ = tiny
    config = TrainConfig(str(root / "p1"), model="sage", embedding_dim=8, features=features, epochs=1, lr=0.05, **SMALL)
    trainer = rank_trainer(config, init_distributed("cpu"))
    trainer.train_epoch(0)  # the embedding's rows as training left them, not their initial values
    rows = trainer.embedding.weight  # [N, 8], row i of id i on one rank
    x = torch.cat([torch.from_numpy(np.asarray(trainer.graph.part.x)).float(), rows], dim=1) if features else rows
    n = trainer.graph.part.y.shape[0]
    torch.testing.assert_close(trainer.evaluator.layerwise_logits(np.arange(n), CommStats()),
                               _dense_logits(trainer, x), rtol=1e-5, atol=1e-5)


def _layerwise_worker(part_dir: str, model: str) -> tuple[np.ndarray, np.ndarray, dict]:
    ctx = init_distributed("cpu", timeout_s=60)
    trainer = rank_trainer(TrainConfig(part_dir, model=model, **SMALL), ctx)
    stats = CommStats()
    logits = trainer.evaluator.layerwise_logits(np.arange(trainer.graph.part.y.shape[0]), stats)
    orig = np.asarray(trainer.graph.data.orig_id)[trainer.graph.offset:trainer.graph.offset + logits.shape[0]]
    shutdown_distributed(ctx)
    return orig, logits.numpy(), stats.as_dict()


def test_two_ranks_equal_one_rank_for_the_same_weights(tiny):
    root, ds = tiny
    # The weights depend only on the seed and the dimensions, so both runs use the same model.
    one_orig, one, _ = _layerwise_worker(str(root / "p1"), "gat")
    by_orig = np.empty_like(one)
    by_orig[one_orig] = one
    results = launch(_layerwise_worker, (str(root / "p2"), "gat"), nprocs=2)
    seen = np.concatenate([orig for orig, _, _ in results])
    assert np.array_equal(np.sort(seen), np.arange(ds.num_nodes))
    for orig, logits, stats in results:
        # Float sums run in another order after renumbering; values are O(1).
        np.testing.assert_allclose(logits, by_orig[orig], rtol=1e-4, atol=1e-5)
        assert stats["received"] > 0 and stats["sent"] > 0  # halo rows really crossed ranks


def test_layerwise_evaluation_reports_the_dense_accuracy(tiny):
    root, _ = tiny
    config = TrainConfig(str(root / "p1"), epochs=1, lr=0.01, inference="layerwise", **SMALL)
    trainer = rank_trainer(config, init_distributed("cpu"))
    trainer.train_epoch(0)
    metrics = trainer.evaluate(0)
    pred = _dense_logits(trainer).argmax(-1)
    y = torch.from_numpy(np.asarray(trainer.graph.part.y))
    for split in ("valid", "test"):
        idx = torch.from_numpy(np.asarray(getattr(trainer.graph.part, f"{split}_idx")))
        assert metrics[f"{split}_metric"] == pytest.approx(int((pred[idx] == y[idx]).sum()) / idx.shape[0], abs=1e-12)


def test_unknown_inference_is_one_sentence(tiny, capsys):
    from salientpp.cli import main as cli_main
    root, _ = tiny
    with pytest.raises(InputError, match="unknown inference 'full'; choose sampled or layerwise"):
        TrainConfig(str(root / "p1"), inference="full", **SMALL).validate()
    with pytest.raises(SystemExit) as info:  # argparse refuses it before any rank starts
        cli_main(["train", str(root / "p1"), "--inference", "full"])
    assert info.value.code == 2 and "invalid choice: 'full'" in capsys.readouterr().err
