"""Link prediction in the built-in trainer: decoders, ranking metrics and the evaluator.

The encoder (any model of :mod:`salientpp.models.gnn`, output width ``hidden``) embeds a
batch's node seeds; a decoder scores node pairs from their embeddings; the loss is binary
cross-entropy with logits over ``edge_label`` (positives 1, negatives 0).

Metrics (:data:`~salientpp.train.tasks.LINK_METRICS`; ``--metric`` picks the link task's,
:func:`~salientpp.train.tasks.link_task`), over a split's positive edges, each ranked against
its own ``r`` negatives (the same source, random destinations; OGB's protocol):

* MRR: the mean of ``1 / rank``, with ``rank = 1 + (#negatives scored above + #negatives
  scored at least as high) / 2`` (ties count one half);
* ``hits@K``: the fraction of positives whose rank is at most K;
* ROC-AUC over every positive and negative score of the split.

Hits and MRR are sums over positives, so ranks combine them with one ``all_reduce``; ROC-AUC
gathers the scores (:class:`~salientpp.train.tasks.MetricAccumulator`).
"""
from __future__ import annotations

import time
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn

from ..distributed import CommStats
from ..loader.dist_link_loader import DistLinkNeighborLoader
from ..errors import InputError
from ..models.gnn import SeedForward
from .state import EVAL_SPLITS, TEST_METRIC, VALID_METRIC
from .tasks import HITS_AT, MRR, ROC_AUC, link_task

DOT, MLP = "dot", "mlp"
DECODERS = (DOT, MLP)


class DotDecoder(nn.Module):
    """``score(u, v) = <h_u, h_v>``: no parameters."""

    def forward(self, h: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        """``h`` float ``[n, d]`` seed embeddings, ``pairs`` int64 ``[2, m]`` indices into ``h``; returns float ``[m, 1]``."""
        return (h[pairs[0]] * h[pairs[1]]).sum(-1, keepdim=True)


class MLPDecoder(nn.Module):
    """``score(u, v) = MLP(h_u * h_v)`` with one hidden layer of width d (symmetric in u and v)."""

    def __init__(self, dim: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, 1))

    def forward(self, h: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        return self.mlp(h[pairs[0]] * h[pairs[1]])


def build_decoder(name: str, dim: int) -> nn.Module:
    if name not in DECODERS:
        raise InputError(f"unknown decoder {name!r}; choose {' or '.join(DECODERS)}")
    return DotDecoder() if name == DOT else MLPDecoder(dim)


class LinkModel(nn.Module):
    """The encoder and the decoder of link prediction as one module (one state dict in checkpoints)."""

    def __init__(self, encoder: nn.Module, decoder: nn.Module):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder


def ranking_sums(scores: torch.Tensor, num_positives: int) -> torch.Tensor:
    """float64 ``[2 + len(HITS_AT)]``: ``[sum of 1/rank, positives, hits@K counts...]`` of a batch.

    ``scores`` float ``[P + P r]``: the P positives, then positive i's r negatives at
    ``P + i r .. P + (i + 1) r - 1`` (per-source negatives, :func:`~salientpp.sampling.link.draw_link_seeds`).
    """
    p = num_positives
    if p == 0:
        return torch.zeros(2 + len(HITS_AT), dtype=torch.float64)
    positive = scores[:p].double().unsqueeze(1)
    negative = scores[p:].double().view(p, -1)
    rank = 1.0 + ((negative > positive).sum(1) + (negative >= positive).sum(1)).double() / 2.0
    hits = [(rank <= k).sum().double() for k in HITS_AT]
    return torch.stack([(1.0 / rank).sum(), torch.tensor(float(p), dtype=torch.float64), *hits]).cpu()


def metrics_from_sums(sums: torch.Tensor) -> dict[str, float]:
    """MRR and hits@K from the (rank-summed) :func:`ranking_sums`."""
    count = max(float(sums[1]), 1.0)
    return {MRR: float(sums[0]) / count, **{f"hits@{k}": float(sums[2 + i]) / count for i, k in enumerate(HITS_AT)}}


class LinkEvaluator:
    """Scores the validation and test edges of every rank (a collective, like :class:`~salientpp.train.evaluation.Evaluator`).

    Args:
        graph: this rank's DistGraph; forward: embeds a batch's seeds; decoder: scores pairs.
        loader: ``loader(split)`` builds the loader of a split's edges with per-source negatives.
        metric: the metric returned as the validation and test metric (of
            :data:`~salientpp.train.tasks.LINK_METRICS`: the link task's).
        splits: the splits to score (of :data:`~salientpp.train.state.EVAL_SPLITS`), those with
            edges on some rank.

    Every evaluation draws the same negatives (the loaders' epoch 0), so epochs compare alike.
    """

    def __init__(self, graph, forward: SeedForward, decoder: nn.Module,
                 loader: Callable[[str], DistLinkNeighborLoader], metric: str,
                 splits: tuple[str, ...] = EVAL_SPLITS):
        self.graph, self.forward, self.decoder, self.metric, self.splits = graph, forward, decoder, metric, splits
        self._make_loader, self._loaders = loader, {}

    def _split(self, split: str, stats: CommStats) -> dict[str, float]:
        if split not in self._loaders:
            self._loaders[split] = self._make_loader(split)
        loader = self._loaders[split]
        loader.set_epoch(0)
        sums = torch.zeros(2 + len(HITS_AT), dtype=torch.float64)
        auc = link_task(ROC_AUC).accumulator()
        for batch in loader:
            h = self.forward.seed_outputs(batch)
            if h is None:
                continue
            scores = self.decoder(h.float(), batch.edge_label_index).float()
            sums += ranking_sums(scores[:, 0], batch.num_positives)
            auc.update(scores, batch.edge_label.unsqueeze(1))
        stats.add(loader.stats)
        ctx = self.graph.ctx
        if ctx.distributed:
            sums = sums.to(ctx.comm_device)
            dist.all_reduce(sums)
        return {ROC_AUC: auc.compute(device=ctx.comm_device, distributed=ctx.distributed),
                **metrics_from_sums(sums.cpu())}

    @torch.no_grad()
    def __call__(self, epoch: int) -> dict[str, Any]:
        start = time.perf_counter()
        self.forward.model.eval()
        self.decoder.eval()
        stats = CommStats()
        record: dict[str, Any] = {}
        for split, key in (("valid", VALID_METRIC), ("test", TEST_METRIC)):
            if split in self.splits:
                scores = self._split(split, stats)
                record.update({key: scores[self.metric], f"{split}_link": scores})
        return {**record, "eval_comm": stats.summed(self.graph.ctx).as_dict(), "eval_s": time.perf_counter() - start}
