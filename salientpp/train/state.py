"""What a run carries from step to step and across restarts: results, running sums, RNG state.

Metric keys of the per-epoch records (one JSON line each) are the constants below, so the
trainer, the benchmarks and the experiment scripts read the same names.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..distributed import CommStats
from ..distributed.health import Stage
from ..loader.pipeline import StageTimes

# Keys of an epoch's record (besides the stage times and exchange counters).
EPOCH, TRAIN_LOSS, METRIC = "epoch", "train_loss", "metric"
TRAIN_METRIC, VALID_METRIC, TEST_METRIC = "train_metric", "valid_metric", "test_metric"
# The splits evaluation scores, each under its key above.
EVAL_SPLITS = ("valid", "test")
# The share of the most common class among the validation nodes: the accuracy of a model that
# predicts that class for every node (recorded with the accuracy metric).
VALID_MAJORITY = "valid_majority"
# Stage-time key of the training thread's CPU seconds (beside the wall time of each Stage).
TRAIN_CPU = StageTimes.cpu_key(Stage.TRAIN.value)
# The exchange counters of a DistEmbedding's lookups in an epoch (beside "comm", the features').
EMBEDDING_COMM = "embedding_comm"


@dataclass
class TrainResult:
    """What a run produced (as seen by rank 0).

    Attributes:
        metric: the name of the validation/test metric (``accuracy``, ``roc-auc``, ...).
        history: one dict per epoch run in this call (the JSON lines).
        best_valid, best_epoch: best validation metric and its epoch (-1 when never evaluated).
        test_at_best: test metric at the best-validation epoch.
        final_test: test metric after the last epoch.
        epochs_done: total epochs completed, resumed ones included.
        resumed_from: ``(epoch, step)`` of the checkpoint this run continued from, or ``None``.
        restarts: how many times the launcher restarted the ranks after a failure.
    """

    metric: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    best_valid: float = -1.0
    best_epoch: int = -1
    test_at_best: float = -1.0
    final_test: float = -1.0
    epochs_done: int = 0
    resumed_from: tuple[int, int] | None = None
    restarts: int = 0


@dataclass
class EpochSums:
    """One rank's running sums over the steps of an epoch done so far (checkpointed mid-epoch).

    Attributes:
        metric: float64 ``[Task.num_sums]`` the task's metric counts
            (:meth:`~salientpp.train.tasks.Task.metric_sums`; ``[0]`` for a metric not computed
            from counts).
        loss: sum of batch loss times batch size; count: seeds trained on.
        seconds: wall time of the epoch so far; comm: exchange counters.
    """

    metric: torch.Tensor
    loss: float = 0.0
    count: float = 0.0
    seconds: float = 0.0
    comm: CommStats = field(default_factory=CommStats)

    @classmethod
    def zeros(cls, num_sums: int) -> "EpochSums":
        """The sums of an epoch not started, keeping ``num_sums`` metric counts."""
        return cls(torch.zeros(num_sums, dtype=torch.float64))

    @staticmethod
    def width(num_sums: int) -> int:
        """The fewest entries of :meth:`to_tensor` with ``num_sums`` metric counts (a graph of
        several node types adds its rows received per type after them)."""
        return 3 + num_sums + CommStats().to_tensor().numel()

    def to_tensor(self) -> torch.Tensor:
        """float64 ``[3 + num_sums + 7 + T]``: loss, count, seconds, the metric counts, then
        :meth:`CommStats.to_tensor`."""
        return torch.cat([torch.tensor([self.loss, self.count, self.seconds], dtype=torch.float64), self.metric,
                          self.comm.to_tensor()])

    @classmethod
    def from_tensor(cls, values: torch.Tensor, num_sums: int) -> "EpochSums":
        """What :meth:`to_tensor` wrote with ``num_sums`` metric counts (the caller checks that
        they were written with as many)."""
        loss, count, seconds = values[:3].tolist()
        return cls(values[3:3 + num_sums].clone(), loss, count, seconds, CommStats.from_tensor(values[3 + num_sums:]))


@dataclass
class RunState:
    """What a checkpoint saves besides the model: the result so far, the history, the options."""

    result: TrainResult
    history: list[dict[str, Any]]
    options: dict[str, Any]


def rng_state(device: torch.device) -> torch.Tensor:
    """uint8 ``[S]``: the CPU generator's state, then the CUDA one when ``device`` is a GPU."""
    states = [torch.get_rng_state()]
    if device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return torch.cat(states)


def set_rng_state(state: torch.Tensor, device: torch.device) -> None:
    """Restore what :func:`rng_state` returned."""
    cpu_size = torch.get_rng_state().numel()
    torch.set_rng_state(state[:cpu_size].clone())
    if device.type == "cuda":
        torch.cuda.set_rng_state(state[cpu_size:].clone(), device)
