"""Tasks and metrics from the labels (salientpp.train.tasks): losses, ROC-AUC, metric sums,
the cross-rank gather (gloo, 2 ranks)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from salientpp.data import MULTICLASS, MULTILABEL
from salientpp.distributed import init_distributed, launch, shutdown_distributed
from salientpp.errors import InputError
from salientpp.train.tasks import (ACCURACY, BCE_WITH_LOGITS, CROSS_ENTROPY, F1_MACRO, F1_MICRO, LINK_METRICS, METRICS, MRR,
                                   NODE_METRICS, ROC_AUC, Task, all_gather_rows, link_task, check_metric, make_task, roc_auc, roc_auc_per_task,
                                   task_from_labels, task_of)


def brute_force_auc(scores: np.ndarray, y: np.ndarray) -> float:
    """Mean over tasks with both classes of P(score_pos > score_neg) + 0.5 P(tie), pair by pair."""
    values = []
    for t in range(y.shape[1]):
        pos = [scores[i, t] for i in range(y.shape[0]) if y[i, t] == 1]
        neg = [scores[i, t] for i in range(y.shape[0]) if y[i, t] == 0]
        if not pos or not neg:
            continue
        wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
        values.append(wins / (len(pos) * len(neg)))
    return float(np.mean(values)) if values else float("nan")


@pytest.mark.parametrize("seed", range(8))
def test_roc_auc_matches_pairwise_count_with_ties_and_unknown_targets(seed):
    rng = np.random.default_rng(seed)
    n, t = int(rng.integers(5, 40)), int(rng.integers(1, 6))
    scores = rng.integers(-3, 4, size=(n, t)).astype(np.float32)   # few values: many ties
    scores[:, 0] = rng.standard_normal(n)                            # and one task without ties
    y = (rng.random((n, t)) < 0.4).astype(np.float32)
    y[rng.random((n, t)) < 0.3] = np.nan
    if t > 1:
        y[:, -1] = np.where(np.isnan(y[:, -1]), np.nan, 1.0)          # one class only: left out of the mean
    assert roc_auc(scores, y) == pytest.approx(brute_force_auc(scores, y), abs=1e-12)
    assert roc_auc(torch.from_numpy(scores), torch.from_numpy(y)) == pytest.approx(brute_force_auc(scores, y))


def test_roc_auc_edge_cases():
    assert roc_auc(np.array([[0.1], [0.9]]), np.array([[0.0], [1.0]])) == 1.0
    assert roc_auc(np.array([[0.9], [0.1]]), np.array([[0.0], [1.0]])) == 0.0
    assert roc_auc(np.array([[0.5], [0.5]]), np.array([[0.0], [1.0]])) == 0.5
    assert np.isnan(roc_auc(np.array([[0.5], [0.7]]), np.array([[1.0], [1.0]])))   # no task has both classes
    assert np.isnan(roc_auc(np.zeros((0, 3)), np.zeros((0, 3))))
    bools = np.array([[True, True], [False, True], [True, True]])
    per_task = roc_auc_per_task(np.array([[2.0, 0.0], [1.0, 1.0], [3.0, 5.0]]), bools)
    np.testing.assert_allclose(per_task, [1.0, np.nan])
    with pytest.raises(ValueError, match="finite"):
        roc_auc(np.array([[np.nan], [1.0]]), np.array([[0.0], [1.0]]))


def test_roc_auc_agrees_with_sklearn():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(5)
    scores = np.round(rng.standard_normal((500, 3)), 1)
    y = (rng.random((500, 3)) < 0.3).astype(np.float64)
    for t in range(3):
        assert roc_auc(scores[:, t:t + 1], y[:, t:t + 1]) == pytest.approx(metrics.roc_auc_score(y[:, t], scores[:, t]))


def test_task_from_labels_picks_loss_and_metric():
    multiclass = task_from_labels(np.array([0, 2, -1, 1]))
    assert multiclass == Task(MULTICLASS, 3, ACCURACY) and multiclass.loss_name == CROSS_ENTROPY
    assert multiclass.num_sums == 2
    multilabel = task_from_labels(np.array([[0, 1, np.nan]], dtype=np.float32))
    assert multilabel == Task(MULTILABEL, 3, ROC_AUC) and multilabel.loss_name == BCE_WITH_LOGITS
    assert multilabel.num_sums == 0
    assert task_from_labels(torch.ones((4, 2), dtype=torch.bool)) == Task(MULTILABEL, 2, ROC_AUC)
    assert task_from_labels(torch.tensor([0, 1]), num_outputs=5) == Task(MULTICLASS, 5, ACCURACY)
    assert task_from_labels(np.zeros((3, 2), np.float32), metric="accuracy").metric == ACCURACY
    assert task_from_labels(np.zeros((3, 2), np.float32), metric="F1_micro").metric == F1_MICRO
    assert task_from_labels(np.array([0, 1, 1]), metric="rocauc").metric == ROC_AUC   # binary multi-class
    assert check_metric("ROC_AUC") == ROC_AUC and set(NODE_METRICS) == {ACCURACY, ROC_AUC, F1_MICRO, F1_MACRO}
    assert set(METRICS) == set(NODE_METRICS) | set(LINK_METRICS)


@pytest.mark.parametrize("labels, metric, message", [
    (np.array([0, 1, 2]), "roc-auc", "roc-auc needs binary or multi-label targets but these labels have 3 classes"),
    (np.array([0, 1, 2]), "f1-micro", "f1-micro is for multi-label targets"),
    (np.array([0, 1]), "precision", "unknown metric 'precision'; choose one of accuracy, roc-auc, f1-micro"),
    (np.zeros((3, 2), np.int64), None, "define no task"),
    (np.zeros(3, np.float32), None, "define no task"),
])
def test_a_metric_that_does_not_fit_is_one_sentence(labels, metric, message):
    with pytest.raises(InputError, match=message) as info:
        task_from_labels(labels, metric)
    assert str(info.value).count(". ") == 0 and "\n" not in str(info.value)


def test_multilabel_loss_ignores_unknown_targets():
    torch.manual_seed(0)
    logits = torch.randn(6, 3, requires_grad=True)
    y = torch.tensor([[1, 0, np.nan], [np.nan, np.nan, np.nan], [0, 1, 1], [1, 1, 0], [np.nan, 0, 1], [0, 0, 0]],
                     dtype=torch.float32)
    task = task_from_labels(y)
    loss = task.loss(logits, task.targets(y))
    known = ~torch.isnan(y)
    expected = F.binary_cross_entropy_with_logits(logits[known], y[known])
    assert torch.allclose(loss, expected)
    loss.backward()
    assert torch.all(logits.grad[~known] == 0) and torch.all(logits.grad[known] != 0)
    empty = task.loss(logits, torch.full((6, 3), float("nan")))
    assert float(empty.detach()) == 0.0 and empty.requires_grad
    bool_targets = task.targets(np.array([[True, False, True]]))
    assert bool_targets.dtype == torch.float32 and bool_targets.tolist() == [[1.0, 0.0, 1.0]]


def test_multiclass_loss_and_accuracy():
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 1.0], [5.0, 0.0, 0.0]])
    y = torch.tensor([0, 2, 2, -1])
    task = make_task(MULTICLASS, 3)
    assert torch.allclose(task.loss(logits, y), F.cross_entropy(logits[:3], y[:3]))
    assert task.metric_sums(logits, y).tolist() == [2.0, 3.0]
    assert task.evaluate(logits, y) == pytest.approx(2 / 3)


def test_multilabel_accuracy_f1_and_binary_multiclass_auc():
    logits = torch.tensor([[1.0, -1.0], [1.0, 1.0], [-1.0, -2.0]])
    y = torch.tensor([[1.0, 0.0], [0.0, np.nan], [0.0, 1.0]])
    accuracy = make_task(MULTILABEL, 2, ACCURACY)
    assert accuracy.metric_sums(logits, y).tolist() == [3.0, 5.0]       # wrong: (1, 0) and (2, 1)
    f1 = make_task(MULTILABEL, 2, F1_MICRO)
    assert f1.metric_sums(logits, y).tolist() == [1.0, 1.0, 1.0]        # tp (0, 0); fp (1, 0); fn (2, 1)
    assert f1.evaluate(logits, y) == pytest.approx(0.5)
    assert make_task(MULTILABEL, 2).evaluate(logits, y) == pytest.approx(roc_auc(logits.numpy(), y.numpy()))
    binary = make_task(MULTICLASS, 2, ROC_AUC)
    two = torch.tensor([[0.0, 2.0], [1.0, 0.0], [0.0, 0.5], [3.0, 0.0]])
    assert binary.evaluate(two, torch.tensor([1, 0, 0, -1])) == 1.0


def test_task_of_a_dataset_uses_its_labels(tmp_path):
    from salientpp.data.synthetic import synthetic_dataset
    from salientpp.partition import load_partitioned, partition_dataset

    assert task_of(synthetic_dataset("tiny")) == Task(MULTICLASS, 8, ACCURACY)
    dataset = synthetic_dataset("tiny,num_tasks=5")
    assert task_of(dataset) == Task(MULTILABEL, 5, ROC_AUC)
    partition_dataset(dataset, tmp_path / "p", 2, method="random")
    assert task_of(load_partitioned(tmp_path / "p"), "accuracy") == Task(MULTILABEL, 5, ACCURACY)


def direct_f1(predicted: np.ndarray, positive: np.ndarray, known: np.ndarray) -> tuple[float, float]:
    """(micro, macro) F1 of bool ``[n, C]`` predictions and truths over the ``known`` entries,
    column by column; macro over the columns with a true or a predicted positive."""
    tp = (predicted & positive & known).sum(0)
    fp = (predicted & ~positive & known).sum(0)
    fn = (~predicted & positive & known).sum(0)
    present = tp + fp + fn > 0
    macro = np.mean([2 * a / (2 * a + b + c) for a, b, c in zip(tp[present], fp[present], fn[present])])
    return 2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum()), float(macro)


def multiclass_batch(rng, n: int = 40, classes: int = 5):
    """Random logits [n, C] and class ids [n] (some -1) where class C - 1 is never true nor predicted."""
    logits = rng.standard_normal((n, classes)).astype(np.float32)
    logits[:, -1] = -10.0
    y = rng.integers(0, classes - 1, n)
    y[rng.random(n) < 0.2] = -1
    return logits, y


@pytest.mark.parametrize("seed", range(4))
def test_macro_f1_of_class_labels_is_the_mean_over_the_classes_present_of_their_f1(seed):
    rng = np.random.default_rng(seed)
    logits, y = multiclass_batch(rng)
    classes = logits.shape[1]
    known = (y >= 0)[:, None]
    one_hot = np.eye(classes, dtype=bool)
    _, expected = direct_f1(one_hot[logits.argmax(1)], one_hot[np.maximum(y, 0)], known)
    task = make_task(MULTICLASS, classes, F1_MACRO)
    assert task.num_sums == 3 * classes   # TP, FP and FN per class
    assert task.evaluate(torch.from_numpy(logits), torch.from_numpy(y)) == pytest.approx(expected, abs=1e-12)
    metrics = pytest.importorskip("sklearn.metrics")
    labelled = y >= 0
    assert expected == pytest.approx(metrics.f1_score(y[labelled], logits.argmax(1)[labelled], average="macro"))


@pytest.mark.parametrize("seed", range(4))
def test_micro_and_macro_f1_of_multilabel_targets_count_the_known_targets(seed):
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((30, 4)).astype(np.float32)
    y = (rng.random((30, 4)) < 0.4).astype(np.float32)
    logits[:, 3], y[:, 3] = -1.0, 0.0                       # a target never true nor predicted
    y[rng.random(y.shape) < 0.25] = np.nan
    micro, macro = direct_f1(logits > 0, y == 1, ~np.isnan(y))
    for metric, expected in ((F1_MICRO, micro), (F1_MACRO, macro)):
        value = make_task(MULTILABEL, 4, metric).evaluate(torch.from_numpy(logits), torch.from_numpy(y))
        assert value == pytest.approx(expected, abs=1e-12)
    assert np.isnan(make_task(MULTILABEL, 4, F1_MACRO).evaluate(torch.full((2, 4), -1.0), torch.zeros((2, 4))))


def test_the_metrics_each_label_kind_offers_are_checked_when_the_task_is_made():
    assert make_task(MULTICLASS, 3, "macro_F1").metric == F1_MACRO
    with pytest.raises(InputError, match="f1-micro is for multi-label targets"):
        make_task(MULTICLASS, 3, F1_MICRO)
    with pytest.raises(InputError, match="unknown metric 'f2'"):
        make_task(MULTICLASS, 3, "f2")


@pytest.mark.parametrize("metric, phrase", [(F1_MICRO, "f1-micro is for multi-label targets"),
                                            ("f1-weighted", "invalid choice: 'f1-weighted'")])
def test_train_refuses_a_metric_its_labels_do_not_offer_before_any_rank_starts(tiny_partitions, capsys, no_ranks,
                                                                              metric, phrase):
    from conftest import exit_code, one_sentence

    root, _ = tiny_partitions
    assert exit_code(["train", str(root / "p2"), "--metric", metric, "--epochs", "1"]) == 2
    assert phrase in one_sentence(capsys)


# ---- across ranks -------------------------------------------------------------------------------

def _gather_worker(seed: int) -> dict:
    ctx = init_distributed("cpu", timeout_s=60)
    rng = np.random.default_rng(seed)
    sizes = [7, 0]                                   # a rank without rows
    scores = rng.standard_normal((sum(sizes), 3)).astype(np.float32)
    y = (rng.random((sum(sizes), 3)) < 0.5).astype(np.float32)
    y[rng.random(y.shape) < 0.2] = np.nan
    lo = sum(sizes[:ctx.rank])
    mine = slice(lo, lo + sizes[ctx.rank])
    rows = all_gather_rows(torch.arange(sizes[ctx.rank] * 2, dtype=torch.int64).reshape(-1, 2) + 100 * ctx.rank)
    flags = all_gather_rows(torch.ones((ctx.rank + 1, 1), dtype=torch.bool))
    task = make_task(MULTILABEL, 3)
    acc = task.accumulator()
    half = lo + sizes[ctx.rank] // 2
    acc.update(torch.from_numpy(scores[lo:half]), torch.from_numpy(y[lo:half]))
    acc.update(torch.from_numpy(scores[half:mine.stop]), torch.from_numpy(y[half:mine.stop]))
    auc = acc.compute()
    accuracy = make_task(MULTILABEL, 3, ACCURACY).accumulator()
    accuracy.update(torch.from_numpy(scores[mine]), torch.from_numpy(y[mine]))
    logits, labels = multiclass_batch(np.random.default_rng(seed), n=24)
    macro = make_task(MULTICLASS, logits.shape[1], F1_MACRO)
    own = slice(0, 6) if ctx.rank == 0 else slice(6, 24)      # ranks of different sizes and class mixes
    f1 = macro.accumulator()
    f1.update(torch.from_numpy(logits[own]), torch.from_numpy(labels[own]))
    result = {"rows": rows.tolist(), "flags": flags.tolist(), "flags_dtype": str(flags.dtype), "auc": auc,
              "f1_macro": f1.compute(), "rank_f1_macro": macro.evaluate(torch.from_numpy(logits[own]),
                                                                        torch.from_numpy(labels[own])),
              "expected_f1_macro": macro.evaluate(torch.from_numpy(logits), torch.from_numpy(labels)),
              "expected_auc": roc_auc(scores, y), "accuracy": accuracy.compute(),
              "expected_accuracy": make_task(MULTILABEL, 3, ACCURACY).evaluate(torch.from_numpy(scores),
                                                                               torch.from_numpy(y))}
    shutdown_distributed(ctx)
    return result


def test_metrics_combine_across_ranks_with_gloo():
    results = launch(_gather_worker, (3,), nprocs=2)
    for r in results:
        assert r["rows"] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13]]
        assert r["flags"] == [[True]] * 3 and r["flags_dtype"] == "torch.bool"
        assert r["auc"] == pytest.approx(r["expected_auc"], abs=1e-12)
        assert r["accuracy"] == pytest.approx(r["expected_accuracy"])
        assert r["f1_macro"] == pytest.approx(r["expected_f1_macro"], abs=1e-12)   # per-class counts summed
    assert results[0]["auc"] == results[1]["auc"]
    rank_mean = (results[0]["rank_f1_macro"] + results[1]["rank_f1_macro"]) / 2
    assert abs(rank_mean - results[0]["expected_f1_macro"]) > 1e-3       # averaging per rank would differ


def test_gather_without_a_process_group_returns_the_rows():
    rows = torch.ones((3, 2))
    assert all_gather_rows(rows) is rows


def test_the_link_task_carries_the_metric_it_was_given_and_the_kinds_refuse_each_others_metrics():
    assert link_task() == Task("link", 1, ROC_AUC) and link_task("MRR").metric == MRR
    assert link_task("hits@50").loss_name == BCE_WITH_LOGITS and link_task(MRR).num_sums == 0
    with pytest.raises(InputError, match="--task link reports roc-auc, mrr, hits@10"):
        link_task(ACCURACY)
    with pytest.raises(InputError, match="the metric mrr ranks held-out edges"):
        make_task(MULTICLASS, 3, MRR)
