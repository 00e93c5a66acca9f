"""The learning task a dataset's labels define: its loss and its evaluation metric.

Two kinds of node labels (see :mod:`salientpp.data.format`), and link prediction:

* **multi-class**, int64 ``[N]`` class ids (-1 = unlabelled): one output per class,
  cross-entropy, metric :data:`ACCURACY` by default;
* **multi-label / binary**, float32 ``[N, T]`` targets of 0, 1 or NaN (unknown) or bool
  ``[N, T]``: one output (a logit) per target, binary cross-entropy with logits over the known
  targets, metric :data:`ROC_AUC` by default (ogbn-proteins style: the mean over the tasks that
  have both a positive and a negative known target);
* **link** prediction (``--task link``): one logit per node pair, binary cross-entropy with
  logits over ``edge_label``, metric :data:`ROC_AUC` by default, or the ranking metrics
  :data:`MRR` and ``hits@K`` (:mod:`salientpp.train.link` computes them).

Every choice of a metric, its default, and whether it fits the labels is made in one place:
:func:`make_task` with the tables below.

Metrics and ranks: :data:`ACCURACY`, :data:`F1_MICRO` and :data:`F1_MACRO` are computed from
counts (correct/count; TP/FP/FN; TP/FP/FN per class or target) that add up across batches and
ranks (one ``all_reduce``), so a distributed evaluation equals a one-process one: F1-macro is
computed from the per-class counts summed over every rank, never averaged per rank. ROC-AUC does not decompose: every
rank's scores and targets are gathered (:func:`all_gather_rows`) and the AUC is computed on
the whole set, identically on every rank. :class:`MetricAccumulator` does either.

Typical use::

    task = task_of(data, metric=None)            # data: Dataset or PartitionedDataset
    loss = task.loss(logits, task.targets(y_rows))
    acc = task.accumulator()
    acc.update(logits, task.targets(y_rows))     # per batch
    value = acc.compute()                        # a collective when torch.distributed is up
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..data.format import MULTICLASS, MULTILABEL
from ..errors import InputError
from ..sampling.link import LINK

ACCURACY = "accuracy"
ROC_AUC = "roc-auc"
F1_MICRO = "f1-micro"
F1_MACRO = "f1-macro"
MRR = "mrr"
HITS_AT = (10, 50, 100)
NODE_METRICS = (ACCURACY, ROC_AUC, F1_MICRO, F1_MACRO)
LINK_METRICS = (ROC_AUC, MRR, *(f"hits@{k}" for k in HITS_AT))
"""The metrics link prediction reports (``--metric`` picks the one that selects the best epoch)."""
METRICS = tuple(dict.fromkeys(NODE_METRICS + LINK_METRICS))
"""The metric names ``--metric`` accepts."""
DEFAULT_METRICS = {MULTICLASS: ACCURACY, MULTILABEL: ROC_AUC, LINK: ROC_AUC}
COUNTED_METRICS = frozenset({ACCURACY, F1_MICRO, F1_MACRO})
"""Metrics computed from counts over nodes (:meth:`Task.metric_sums`), so ranks combine them with one
``all_reduce``, and the training loop adds them up per step for the training split's metric."""
_ALIASES = {"acc": ACCURACY, "rocauc": ROC_AUC, "auc": ROC_AUC, "f1": F1_MICRO, "micro-f1": F1_MICRO,
            "macro-f1": F1_MACRO}

CROSS_ENTROPY = "cross-entropy"
BCE_WITH_LOGITS = "bce-with-logits"
LOSSES = {MULTICLASS: CROSS_ENTROPY, MULTILABEL: BCE_WITH_LOGITS, LINK: BCE_WITH_LOGITS}


def _counts(*masks: torch.Tensor) -> torch.Tensor:
    """float64 ``[len(masks)]`` number of true entries of each mask, on their device."""
    return torch.stack([m.sum() for m in masks]).double()


@dataclass(frozen=True)
class Task:
    """What the model learns and how it is scored.

    Attributes:
        kind: :data:`~salientpp.data.format.MULTICLASS`, :data:`~salientpp.data.format.MULTILABEL`
            or :data:`~salientpp.sampling.link.LINK`.
        num_outputs: outputs of the model: classes C (multi-class), targets T (multi-label), or
            1 (a logit per node pair).
        metric: one of :data:`METRICS`, the one that selects the best epoch and that the
            records name.

    Build it with :func:`task_of`, :func:`task_from_labels` or :func:`make_task`, which check
    that the metric fits the labels.
    """

    kind: str
    num_outputs: int
    metric: str

    @property
    def outputs_meaning(self) -> str:
        """What the model's outputs per node are, for a message: ``"a score per class of 7"``."""
        if self.kind == LINK:
            return "a logit per node pair"
        return f"a {'score per class' if self.kind == MULTICLASS else 'logit per target'} of {self.num_outputs}"

    @property
    def loss_name(self) -> str:
        """:data:`CROSS_ENTROPY` (multi-class) or :data:`BCE_WITH_LOGITS` (multi-label, link)."""
        return LOSSES[self.kind]

    @property
    def num_sums(self) -> int:
        """The counts of :meth:`metric_sums`: 2 (:data:`ACCURACY`), 3 (:data:`F1_MICRO`),
        ``3 * num_outputs`` (:data:`F1_MACRO`), or 0 for a metric that needs every score
        (ROC-AUC and the link ranking metrics: :meth:`scores_and_targets`). It sizes every running
        sum of the metric: :class:`MetricAccumulator`'s, the training loop's (which reports the
        training split's metric when it is not 0) and a step checkpoint's
        (:class:`~salientpp.train.state.EpochSums`)."""
        if self.metric not in COUNTED_METRICS:
            return 0
        return {ACCURACY: 2, F1_MICRO: 3, F1_MACRO: 3 * self.num_outputs}[self.metric]

    def targets(self, y: torch.Tensor | np.ndarray) -> torch.Tensor:
        """The label rows ``y`` of a batch as the tensor :meth:`loss` and the metrics take.

        Args:
            y: multi-class: integer ``[b]`` class ids (-1 = unlabelled); multi-label: float
                ``[b, T]`` (NaN = unknown) or bool ``[b, T]``. numpy or torch; a torch tensor
                keeps its device.

        Returns:
            multi-class: int64 ``[b]``; multi-label: float32 ``[b, T]`` of 0., 1. and NaN.
        """
        if isinstance(y, np.ndarray) and not y.flags.writeable:
            y = np.array(y)                      # rows of a read-only memory map: torch wants writable memory
        t = torch.as_tensor(y)
        if self.kind == MULTICLASS:
            return t.long()
        return t.float()

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean loss of a batch, a scalar tensor with gradient.

        Args:
            logits: float ``[b, num_outputs]`` model outputs (unnormalised).
            targets: :meth:`targets` of the batch's labels: int64 ``[b]`` (multi-class; -1 rows
                are ignored) or float32 ``[b, T]`` (multi-label; NaN targets are ignored, bool
                is accepted too).

        Multi-class: cross-entropy over the labelled rows. Multi-label: binary cross-entropy with
        logits averaged over the known targets; a batch without any gives a zero that still
        reaches every parameter (so DDP's gradient all-reduce sees them all).
        """
        if self.kind == MULTICLASS:
            return F.cross_entropy(logits, targets, ignore_index=-1)
        targets = targets.float()
        known = ~torch.isnan(targets)
        if not bool(known.any()):
            return logits.sum() * 0.0
        return F.binary_cross_entropy_with_logits(logits[known], targets[known])

    def metric_sums(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """float64 ``[num_sums]`` counts of a batch that add up across batches and ranks, on the
        logits' device (so that a GPU step does not wait for them; counted metrics only,
        :data:`COUNTED_METRICS`; :meth:`metric_from_sums` turns their total into the metric).

        :data:`ACCURACY`: ``[correct, count]`` (multi-class: argmax equals the class, over the
        labelled rows; multi-label: ``logit > 0`` equals the target, over the known targets).
        :data:`F1_MICRO`: ``[true positives, false positives, false negatives]`` over the known
        targets, predicting ``logit > 0``. :data:`F1_MACRO`: the same three per class (multi-class,
        predicting the argmax, over the labelled rows) or per target (multi-label), ``[3, C]``
        flattened: ``[TP_0 .. TP_{C-1}, FP_0 .., FN_0 ..]``.
        """
        if not self.num_sums:
            raise ValueError(f"{self.metric} is not computed from counts; use scores_and_targets")
        logits = logits.detach()
        if self.kind == MULTICLASS:
            known = targets >= 0
            predicted = logits.argmax(-1)
            if self.metric == ACCURACY:
                return _counts((predicted == targets) & known, known)
            # one-hot [b, C] of the labelled rows' prediction and class: the per-class counts below
            predicted = F.one_hot(predicted, self.num_outputs).bool() & known.unsqueeze(1)
            positive = F.one_hot(targets.clamp(min=0), self.num_outputs).bool() & known.unsqueeze(1)
            known = known.unsqueeze(1).expand_as(positive)
        else:
            targets = targets.float()
            known = ~torch.isnan(targets)
            predicted = logits > 0
            positive = targets == 1
            if self.metric == ACCURACY:
                return _counts((predicted == positive) & known, known)
        confusion = (predicted & positive & known, predicted & ~positive & known, ~predicted & positive & known)
        if self.metric == F1_MICRO:
            return _counts(*confusion)
        return torch.cat([m.sum(0) for m in confusion]).double()

    def metric_from_sums(self, sums: torch.Tensor | list[float]) -> float:
        """The metric from :meth:`metric_sums` added over batches and ranks; NaN without any
        labelled node (or, for F1, without any positive target or prediction).

        :data:`F1_MACRO` is the unweighted mean over classes (targets) of ``2 TP / (2 TP + FP + FN)``,
        leaving out a class with no true and no predicted positive (``TP + FP + FN = 0``, where F1
        is 0/0): ``sklearn.metrics.f1_score(average="macro")``'s default on class labels (its
        ``labels`` are the classes present), and its ``zero_division=np.nan`` on multi-label
        targets (whose default counts such a target as 0)."""
        s = torch.as_tensor(sums, dtype=torch.float64).cpu()
        if self.metric == ACCURACY:
            return float(s[0] / s[1]) if s[1] else float("nan")
        tp, fp, fn = s.view(3, -1)
        denominator = 2 * tp + fp + fn
        present = denominator > 0
        if not bool(present.any()):
            return float("nan")
        if self.metric == F1_MICRO:
            return float(2 * tp[0] / denominator[0])
        return float((2 * tp[present] / denominator[present]).mean())

    def scores_and_targets(self, logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """float32 CPU ``([b, T'], [b, T'])`` scores and 0/1/NaN targets for :func:`roc_auc`.

        Multi-label (and link): the logits and the targets (``T' = T``). Binary multi-class (two classes):
        the log-odds ``logits[:, 1] - logits[:, 0]`` and the class as a 0/1 target (-1 = NaN),
        ``T' = 1``.
        """
        logits = logits.detach()
        if self.kind != MULTICLASS:
            return logits.float().cpu(), targets.float().cpu()
        scores = (logits[:, 1] - logits[:, 0]).float().unsqueeze(1)
        target = torch.where(targets >= 0, targets.float(), torch.full_like(targets, float("nan"), dtype=torch.float))
        return scores.cpu(), target.unsqueeze(1).cpu()

    def evaluate(self, logits: torch.Tensor, targets: torch.Tensor) -> float:
        """The metric of one set of rows in this process (no collective)."""
        acc = self.accumulator()
        acc.update(logits, targets)
        return acc.compute(distributed=False)

    def accumulator(self) -> "MetricAccumulator":
        """An empty :class:`MetricAccumulator` for this task."""
        return MetricAccumulator(self)

    def describe(self) -> str:
        """``"multilabel, 5 targets, bce-with-logits, roc-auc"`` for logs."""
        unit = "classes" if self.kind == MULTICLASS else "targets"
        return f"{self.kind}, {self.num_outputs} {unit}, {self.loss_name}, {self.metric}"


class MetricAccumulator:
    """Collects a task's metric over batches (and ranks).

    Counted metrics keep float64 sums (:attr:`sums`, ``[Task.num_sums]``); ROC-AUC keeps every batch's scores
    and targets on the CPU (``4 * 2 * T'`` bytes per row) until :meth:`compute`.
    """

    def __init__(self, task: Task):
        self.task = task
        self.reset()

    def reset(self) -> None:
        """Forget every batch."""
        self.sums = torch.zeros(self.task.num_sums, dtype=torch.float64)
        self._scores: list[torch.Tensor] = []
        self._targets: list[torch.Tensor] = []

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        """Add a batch: ``logits`` float ``[b, num_outputs]``, ``targets`` from :meth:`Task.targets`."""
        if self.task.num_sums:
            self.sums += self.task.metric_sums(logits, targets).cpu()
        else:
            scores, target = self.task.scores_and_targets(logits, targets)
            self._scores.append(scores)
            self._targets.append(target)

    def compute(self, group: Any = None, device: torch.device | str | None = None,
                distributed: bool | None = None) -> float:
        """The metric over every batch of every rank.

        A collective when ``distributed`` (default: ``torch.distributed`` is initialised with more
        than one rank): every rank of ``group`` must call it. Sums are all-reduced; ROC-AUC's rows
        are gathered with :func:`all_gather_rows`, so every rank returns the same value.

        Args:
            group: the process group (default: the world).
            device: where the collective's tensors live (``"cuda"`` with NCCL; default CPU).
        """
        if distributed is None:
            distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1
        width = self.task.num_outputs if self.task.kind == MULTILABEL else 1
        if self.task.num_sums:
            sums = self.sums
            if distributed:
                sums = sums.to(device or "cpu")
                dist.all_reduce(sums, group=group)
            return self.task.metric_from_sums(sums.cpu())
        scores = torch.cat(self._scores) if self._scores else torch.empty((0, width))
        targets = torch.cat(self._targets) if self._targets else torch.empty((0, width))
        if distributed:
            both = all_gather_rows(torch.cat([scores, targets], dim=1), group=group, device=device)
            scores, targets = both[:, :width], both[:, width:]
        return roc_auc(scores, targets)


# ---- construction ------------------------------------------------------------------------------

def check_metric(name: str, kind: str | None = None) -> str:
    """The canonical metric name for ``name`` (case and ``_``/``-`` ignored; ``rocauc`` and
    ``auc`` mean :data:`ROC_AUC`, ``acc`` :data:`ACCURACY`, ``f1`` :data:`F1_MICRO`, ``macro-f1``
    :data:`F1_MACRO`), one of
    the metrics of a task of ``kind`` (default: any task's), or :class:`InputError`."""
    key = str(name).strip().lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    if kind == LINK and key not in LINK_METRICS:
        raise InputError(f"--task link reports {', '.join(LINK_METRICS)}, not {name!r}; pick one of them with --metric")
    if key not in METRICS:
        raise InputError(f"unknown metric {name!r}; choose one of {', '.join(METRICS if kind is None else NODE_METRICS)}")
    if kind not in (None, LINK) and key not in NODE_METRICS:
        raise InputError(f"the metric {key} ranks held-out edges (--task link); node classification reports "
                         f"{', '.join(NODE_METRICS)}")
    return key


def make_task(kind: str, num_outputs: int, metric: str | None = None) -> Task:
    """The task of labels of ``kind`` with ``num_outputs`` classes or targets (link prediction:
    ``kind`` :data:`~salientpp.sampling.link.LINK`, one output).

    ``metric`` (see :func:`check_metric`) overrides the default (:data:`DEFAULT_METRICS`:
    :data:`ACCURACY` for multi-class, :data:`ROC_AUC` for multi-label and link). Raises
    :class:`InputError` with one sentence when it does not fit: a link metric for node labels
    or a node metric for link prediction; ROC-AUC needs binary or multi-label targets
    (multi-class labels with exactly two classes are scored by their log-odds); F1-micro needs
    multi-label targets (on one class per node it equals accuracy); F1-macro fits both.
    """
    if kind not in DEFAULT_METRICS:
        raise ValueError(f"unknown task kind {kind!r}; expected one of {', '.join(DEFAULT_METRICS)}")
    if num_outputs < 1:
        raise InputError(f"the labels define {num_outputs} {'classes' if kind == MULTICLASS else 'targets'}; "
                         "a task needs at least one, so check the labels")
    chosen = DEFAULT_METRICS[kind] if metric is None else check_metric(metric, kind)
    if kind == MULTICLASS and chosen == ROC_AUC and num_outputs != 2:
        raise InputError(f"the metric {ROC_AUC} needs binary or multi-label targets but these labels have "
                         f"{num_outputs} classes; use {ACCURACY}, or give [N, T] multi-label targets")
    if kind == MULTICLASS and chosen == F1_MICRO:
        raise InputError(f"the metric {F1_MICRO} is for multi-label targets and equals {ACCURACY} when every node "
                         f"has one class, as these multi-class labels do; use {ACCURACY}")
    return Task(kind=kind, num_outputs=int(num_outputs), metric=chosen)


def link_task(metric: str | None = None) -> Task:
    """The task of link prediction: one logit per node pair, binary cross-entropy, ``metric``
    (default :data:`ROC_AUC`) selecting the best epoch."""
    return make_task(LINK, 1, metric)


def task_from_labels(y: torch.Tensor | np.ndarray, metric: str | None = None,
                     num_outputs: int | None = None) -> Task:
    """The task of the labels ``y``.

    Args:
        y: integer ``[N]`` class ids (-1 = unlabelled) → multi-class, cross-entropy,
            :data:`ACCURACY`; float ``[N, T]`` (NaN = unknown) or bool ``[N, T]`` targets →
            multi-label, BCE with logits, :data:`ROC_AUC`.
        metric: overrides the default metric (see :func:`make_task`).
        num_outputs: the number of classes when ``y`` is only part of the labels (a partition
            may lack the largest class); default: ``y.max() + 1`` or T.

    Raises :class:`InputError` for labels of another shape or dtype, or a metric that does not fit.
    """
    t = torch.as_tensor(y) if not isinstance(y, np.ndarray) else None
    ndim, shape = (t.dim(), tuple(t.shape)) if t is not None else (y.ndim, y.shape)
    is_float = t.is_floating_point() if t is not None else np.issubdtype(y.dtype, np.floating)
    is_bool = (t.dtype == torch.bool) if t is not None else y.dtype == np.bool_
    if ndim == 1 and not is_float and not is_bool:
        count = num_outputs if num_outputs is not None else (int(y.max()) + 1 if shape[0] else 0)
        return make_task(MULTICLASS, count, metric)
    if ndim == 2 and (is_float or is_bool):
        if num_outputs is not None and num_outputs != shape[1]:
            raise InputError(f"the labels have {shape[1]} targets per node but {num_outputs} outputs were asked for; "
                             "check the labels")
        return make_task(MULTILABEL, int(shape[1]), metric)
    dtype = t.dtype if t is not None else y.dtype
    raise InputError(f"labels of dtype {dtype} and shape {list(shape)} define no task; give integer class ids [N] "
                     "or float/bool multi-label targets [N, T]")


def task_of(data: Any, metric: str | None = None) -> Task:
    """The task of a :class:`~salientpp.data.Dataset` or
    :class:`~salientpp.partition.PartitionedDataset`, from its ``label_kind`` and
    ``num_outputs`` (the whole dataset's class count, not one partition's)."""
    return make_task(data.label_kind, data.num_outputs, metric)


# ---- ROC-AUC ------------------------------------------------------------------------------------

def _as_numpy(a: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        return a.detach().cpu().numpy()
    return np.asarray(a)


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """float64 ``[n]`` 1-based ranks of ``values``, tied values sharing their average rank."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    first = np.empty(values.shape[0], dtype=bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], values.shape[0])      # positions starts..ends-1 hold ranks starts+1..ends
    ranks = np.empty(values.shape[0], dtype=np.float64)
    ranks[order] = ((starts + 1 + ends) / 2.0)[group]
    return ranks


def roc_auc_per_task(scores: torch.Tensor | np.ndarray, y: torch.Tensor | np.ndarray) -> np.ndarray:
    """float64 ``[T]`` ROC-AUC of each task; NaN for a task without both a positive and a
    negative known target.

    Args:
        scores: float ``[n, T]`` (or ``[n]``) finite scores, higher = more likely positive (logits
            or probabilities: only their order matters).
        y: ``[n, T]`` (or ``[n]``) targets: 0/1 floats with NaN = unknown, or bool.

    The AUC of task t is the probability that a random positive scores above a random negative,
    ties counting one half: the Mann-Whitney U statistic with average ranks for ties,
    ``(sum of positive ranks - P (P + 1) / 2) / (P N)``. O(n log n) per task.
    """
    s = _as_numpy(scores).astype(np.float64, copy=False)
    t = _as_numpy(y)
    if s.ndim == 1:
        s, t = s[:, None], t[:, None]
    if s.shape != t.shape or s.ndim != 2:
        raise ValueError(f"scores {list(s.shape)} and targets {list(t.shape)} must both be [n, T]")
    t = t.astype(np.float64, copy=False)
    result = np.full(s.shape[1], np.nan)
    for task in range(s.shape[1]):
        known = ~np.isnan(t[:, task])
        target = t[known, task] == 1
        positives = int(target.sum())
        negatives = int(target.shape[0]) - positives
        if not positives or not negatives:
            continue
        values = s[known, task]
        if not np.isfinite(values).all():
            raise ValueError(f"the scores of task {task} hold NaN or infinite values; ROC-AUC needs finite scores")
        ranks = _average_ranks(values)
        result[task] = (ranks[target].sum() - positives * (positives + 1) / 2.0) / (positives * negatives)
    return result


def roc_auc(scores: torch.Tensor | np.ndarray, y: torch.Tensor | np.ndarray) -> float:
    """Mean ROC-AUC over the tasks that have both a positive and a negative known target
    (ogbn-proteins' rocauc), or NaN when no task has both.

    Args:
        scores: float ``[n, T]`` finite scores (only their order per task matters).
        y: ``[n, T]`` 0/1 targets, float with NaN = unknown or bool.

    Ties are counted one half (average ranks), as ``sklearn.metrics.roc_auc_score`` does.
    See :func:`roc_auc_per_task`.
    """
    per_task = roc_auc_per_task(scores, y)
    defined = per_task[~np.isnan(per_task)]
    return float(defined.mean()) if defined.shape[0] else float("nan")


# ---- collectives ----------------------------------------------------------------------------------

def all_gather_rows(rows: torch.Tensor, group: Any = None, device: torch.device | str | None = None) -> torch.Tensor:
    """Concatenate every rank's ``rows`` (``[n_k, *trailing]``, ``n_k`` may differ, 0 included)
    in rank order: ``[sum_k n_k, *trailing]`` on every rank, on ``rows``' device.

    A collective over ``group`` (default: the world): every rank calls it with the same trailing
    shape and dtype. It all-gathers the row counts, then the rows padded to the longest. With
    one process (or without ``torch.distributed`` initialised) it returns ``rows`` as they are.

    Args:
        device: where the collective's tensors live: CPU for gloo (the default: ``rows``' own
            device), ``"cuda"`` for NCCL. bool rows travel as uint8.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) == 1:
        return rows
    home, dtype = rows.device, rows.dtype
    local = rows.to(torch.device(device) if device is not None else home)
    if dtype == torch.bool:
        local = local.to(torch.uint8)
    local = local.contiguous()
    world = dist.get_world_size(group)
    count = torch.tensor([local.shape[0]], dtype=torch.int64, device=local.device)
    counts = [torch.empty_like(count) for _ in range(world)]
    dist.all_gather(counts, count, group=group)
    sizes = [int(c) for c in counts]
    longest = max(sizes)
    if longest == 0:
        return rows
    padded = local.new_zeros((longest, *local.shape[1:]))
    padded[:local.shape[0]] = local
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded, group=group)
    gathered = torch.cat([part[:size] for part, size in zip(parts, sizes)])
    return gathered.to(device=home, dtype=dtype)
