"""Validation and test metrics over every rank's nodes: sampled through the distributed loader,
or exact by layer-wise full-neighbour inference."""
from __future__ import annotations

import time
from typing import Any, Callable, Iterator

import numpy as np
import torch

from ..distributed import CommStats
from ..loader.graph import DistGraph
from ..loader.dist_loader import DistNeighborLoader
from ..models.gnn import SeedForward
from .config import LAYERWISE
from .layerwise import LayerwiseInference
from .state import EVAL_SPLITS, TEST_METRIC, VALID_MAJORITY, VALID_METRIC
from .tasks import ACCURACY, MULTICLASS, Task



class Evaluator:
    """Scores the model on this rank's validation and test nodes in one pass over both.

    Every call is a collective: all ranks evaluate at the same epochs. Sampled inference uses a
    :class:`DistNeighborLoader` over the validation and test nodes with the evaluation fanouts
    and batch size, through the same cache; layer-wise inference computes every layer over all
    neighbours (exact; built-in models only, typed ones included, with their learned rows).

    Args:
        graph: this rank's :class:`DistGraph`; model: the (non-DDP) model; task: labels and metric.
        inference: :data:`~salientpp.train.config.SAMPLED` or :data:`~salientpp.train.config.LAYERWISE`.
        loader: a callable building the sampled-inference loader over given seed ids (called
            once, on the first evaluation).
        chunk_size: destinations per chunk of layer-wise inference.
        forward: how sampled inference calls the model on a batch (its input rows included:
            features fed or not, a learned embedding), and so which input rows layer-wise
            inference reads; default ``SeedForward.of(model)``.
        splits: the splits to score (of :data:`~salientpp.train.state.EVAL_SPLITS`), those with
            nodes on some rank; the result has the metric of each.
    """

    def __init__(self, graph: DistGraph, model: torch.nn.Module, task: Task, inference: str,
                 loader: Callable[[np.ndarray], DistNeighborLoader], chunk_size: int,
                 forward: SeedForward | None = None, splits: tuple[str, ...] = EVAL_SPLITS):
        self.graph, self.model, self.task, self.inference = graph, model, task, inference
        self.forward = SeedForward.of(model) if forward is None else forward
        self.splits = splits
        self.seeds = np.concatenate([np.empty(0, dtype=np.int64), *(graph.split(split) for split in splits)])
        self.is_valid = torch.zeros(graph.num_owned, dtype=torch.bool)
        self.is_valid[torch.from_numpy(graph.split("valid") - graph.seed_start)] = True
        self._make_loader, self._loader = loader, None
        self._chunk_size, self._layerwise = chunk_size, None
        self._majority: float | None = None

    def layerwise_logits(self, local_ids: np.ndarray, stats: CommStats) -> torch.Tensor:
        """``[len(local_ids), C]`` full-neighbour outputs for owned local ids (rows of
        :attr:`~salientpp.loader.graph.DistGraph.x`: global id ``seed_start + i``; a collective)."""
        if self._layerwise is None:
            forward = self.forward  # the input rows the model reads: its features, its embedding's rows
            self._layerwise = LayerwiseInference(self.graph.ctx, self.graph.data, self._chunk_size, forward.features,
                                                 forward.embedding)
        return self._layerwise(self.model, local_ids, stats)

    def _outputs(self, epoch: int, stats: CommStats) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """``(logits [n, C], labels, local ids [n])`` over this rank's validation and test nodes."""
        if self.inference == LAYERWISE:
            local = self.seeds - self.graph.seed_start
            yield (self.layerwise_logits(local, stats), self.graph.labels(torch.from_numpy(self.seeds)),
                   torch.from_numpy(local))
            return
        if self._loader is None:
            self._loader = self._make_loader(self.seeds)
        forward = self.forward
        self._loader.set_epoch(epoch)
        for batch in self._loader:
            logits = forward.seed_outputs(batch)
            if logits is not None:
                yield logits, batch.y, batch.n_id[:batch.batch_size].cpu() - self.graph.seed_start
        stats.add(self._loader.stats)

    def majority_rate(self) -> float:
        """The share of the most common class among every rank's validation nodes (a collective,
        computed on the first call): the accuracy of predicting that class for every node."""
        if self._majority is None:
            labels = self.graph.labels(torch.from_numpy(self.graph.split("valid")))
            counts = torch.bincount(labels, minlength=self.task.num_outputs).double()
            ctx = self.graph.ctx
            if ctx.distributed:
                counts = counts.to(ctx.comm_device)
                torch.distributed.all_reduce(counts)
            self._majority = float(counts.max() / counts.sum().clamp(min=1))
        return self._majority

    @torch.no_grad()
    def __call__(self, epoch: int) -> dict[str, Any]:
        start = time.perf_counter()
        self.model.eval()
        stats = CommStats()
        valid, test = self.task.accumulator(), self.task.accumulator()
        for logits, labels, local in self._outputs(epoch, stats):
            in_valid = self.is_valid[local].to(logits.device)
            targets = self.task.targets(labels).to(logits.device)
            valid.update(logits[in_valid], targets[in_valid])
            test.update(logits[~in_valid], targets[~in_valid])
        ctx = self.graph.ctx
        scores = {key: accumulator.compute(device=ctx.comm_device, distributed=ctx.distributed)
                  for split, key, accumulator in (("valid", VALID_METRIC, valid), ("test", TEST_METRIC, test))
                  if split in self.splits}
        if self.task.metric == ACCURACY and self.task.kind == MULTICLASS and "valid" in self.splits:
            scores[VALID_MAJORITY] = self.majority_rate()
        return {**scores, "eval_comm": stats.summed(ctx).as_dict(), "eval_s": time.perf_counter() - start}
