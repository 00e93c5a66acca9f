"""The baseline of ``salientpp bench train``: PyG's ``NeighborLoader`` + DDP, features replicated.

Every rank holds all of ``x`` (no fetch, no cache) and samples its partition's training vertices
with PyG's ``NeighborLoader`` (sampling and the ``x[n_id]`` gather in the training process, as
in PyG's examples). The model (``BaselineConfig.model``) is
either :class:`PyGReferenceModel`, the trainer's SAGE as PyG builds it (PyG's ``SAGEConv``
and torch's ReLU and dropout), or :data:`OURS`, the trainer's own :class:`~salientpp.models.MFGModel`
(CSR aggregation, fused dropout) on MFGs built from PyG's batches, so that one row shows what
the sampling and fetching gain and the other what the model step gains. Like ours, each layer
runs on its own hop's MFG (PyG's "hierarchical" trimming; the seeds' outputs equal those of
``model(x, edge_index)[:batch_size]`` over the whole subgraph, at a fraction of the compute).
Ranks with fewer batches run empty steps so that DDP's all-reduces stay in lockstep, as in the
trainer. Every rank runs under the same :class:`~salientpp.host.ThreadBudget` as
the trainer's (PyG's loader samples on the training thread).
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from ..distributed import init_distributed, launch, shutdown_distributed
from ..distributed.health import Stage
from ..host import ThreadBudget, local_world_size
from ..models import MFGModel
from ..partition import load_partitioned
from ..sampling import MFG
from ..train.state import TRAIN_CPU

# BaselineConfig.model: PyG's SAGE (PyGReferenceModel) or salientpp's MFGModel.
PYG, OURS = "pyg", "salientpp"


class PyGReferenceModel(MFGModel):
    """The built-in SAGE/GAT/GIN as PyG runs them: PyG's convolutions (scatter over a gathered
    ``[E, F]`` message tensor) with torch's ReLU and dropout, whatever the blocks carry."""

    def layer(self, i: int, h: torch.Tensor, block) -> torch.Tensor:
        out = self.convs[i]((h, h[:block.num_dst]), block.edge_index)
        return F.dropout(torch.relu(out), self.dropout, self.training) if i < self.num_layers - 1 else out


def sampling_backend() -> str | None:
    """What PyG's NeighborLoader samples with here (``pyg-lib`` or ``torch_sparse``), or ``None``."""
    import torch_geometric.typing as pyg_typing
    if pyg_typing.WITH_PYG_LIB:
        return "pyg-lib"
    return "torch_sparse" if pyg_typing.WITH_TORCH_SPARSE else None


def unavailable_reason() -> str | None:
    """``None`` when PyG's NeighborLoader can sample here, else why not (one sentence)."""
    if sampling_backend() is None:
        return "PyG's NeighborLoader needs pyg-lib or torch_sparse, and neither is importable here"
    return None


def sampling_workers(budget: ThreadBudget) -> int:
    """PyG's ``num_workers``: on a GPU the budget's sampler threads, as worker processes (PyG's
    GPU examples sample in workers, and salientpp's sampler gets those cores); on the CPU 0, so
    that PyG samples on the training thread, whose cores the model's threads hold."""
    return budget.sampler_threads if budget.gpu else 0


@dataclass(frozen=True)
class BaselineConfig:
    """What the baseline trains: the same options as the compared ``salientpp train`` runs."""

    part_dir: str
    epochs: int
    fanouts: tuple[int, ...]
    batch_size: int
    hidden: int
    lr: float = 0.003
    dropout: float = 0.5
    device: str = "cpu"
    seed: int = 0
    timeout_s: float = 300.0
    model: str = PYG
    torch_threads: int | None = None  # as the compared runs' --torch-threads (None: the budget's)


def _hop_ends(edge_index: torch.Tensor, batch_size: int, num_hops: int) -> tuple[list[int], list[int]]:
    """Where each hop ends in PyG's node and edge lists, from the edges alone (torch_sparse's
    sampler does not report it): ``node_ends[h]`` = nodes reached within ``h`` hops (``[0]`` =
    the seeds), ``edge_ends[h]`` = edges of hops ``1..h+1``.

    PyG appends nodes in discovery order and the edges of hop ``h`` target the nodes found at
    hop ``h - 1``, in order (so edge targets ascend): hop ``h``'s edges are those whose target
    lies below the end of hop ``h - 1``'s nodes, and its new nodes end after the largest source.
    """
    src, tgt = edge_index
    node_ends, edge_ends = [batch_size], []
    for _ in range(num_hops):
        e = int(torch.searchsorted(tgt, node_ends[-1]))
        edge_ends.append(e)
        node_ends.append(max(node_ends[-1], int(src[:e].max()) + 1 if e else 0))
    return node_ends, edge_ends


def _mfgs(batch, num_layers: int) -> list[MFG]:
    """The MFG of each layer (model order) of a PyG subgraph batch: layer ``i`` drops the last
    ``i`` hops. PyG's edge targets ascend, so each layer's edges are already grouped by
    destination and its ``rowptr`` counts them."""
    nodes, edges = getattr(batch, "num_sampled_nodes", None), getattr(batch, "num_sampled_edges", None)
    if nodes is None or edges is None:
        node_ends, edge_ends = _hop_ends(batch.edge_index, int(batch.batch_size), num_layers)
    else:
        node_ends, edge_ends = np.cumsum(nodes).tolist(), np.cumsum(edges).tolist()
    mfgs = []
    for i in range(num_layers):
        num_src, num_dst = int(node_ends[num_layers - i]), int(node_ends[num_layers - 1 - i])
        edge_index = batch.edge_index[:, :int(edge_ends[num_layers - 1 - i])]
        counts = torch.bincount(edge_index[1], minlength=num_dst)
        rowptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
        mfgs.append(MFG(num_src, num_dst, edge_index, rowptr))
    return mfgs


def _rank(config: BaselineConfig) -> list[dict[str, float]]:
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    budget = ThreadBudget.for_rank(local_world_size(), config.torch_threads, device=config.device)
    budget.apply()
    ctx = init_distributed(config.device, config.timeout_s)
    try:
        data = load_partitioned(config.part_dir)
        parts = [data.part(k) for k in range(data.num_parts)]
        x = torch.from_numpy(np.concatenate([np.asarray(p.x) for p in parts])).float()
        y = torch.from_numpy(np.concatenate([np.asarray(p.y) for p in parts]))
        # Edges (source, destination) grouped by ascending destination: sorted by column, as
        # is_sorted below tells PyG, which then skips the sort of its CSC conversion (a sort of
        # every edge would hold several copies of E in every rank's memory).
        rowptr = torch.from_numpy(np.array(data.rowptr))
        edge_index = torch.empty((2, int(rowptr[-1])), dtype=torch.int64)
        edge_index[0].numpy()[:] = data.col  # straight from the memory map, no intermediate copy
        edge_index[1] = torch.repeat_interleave(torch.arange(data.num_nodes), rowptr[1:] - rowptr[:-1])
        graph = Data(x=x, y=y, edge_index=edge_index, num_nodes=data.num_nodes)
        seeds = torch.from_numpy(np.array(parts[ctx.rank].train_idx))
        torch.manual_seed(config.seed + ctx.rank)
        with warnings.catch_warnings():  # PyG deprecates sampling without pyg-lib; the bench names the backend
            warnings.simplefilter("ignore", UserWarning)
            workers = sampling_workers(budget)
            loader = NeighborLoader(graph, num_neighbors=list(config.fanouts), input_nodes=seeds,
                                    batch_size=config.batch_size, shuffle=True, is_sorted=True,
                                    num_workers=workers, persistent_workers=workers > 0)
        torch.manual_seed(config.seed)
        model = (PyGReferenceModel if config.model == PYG else MFGModel)("sage", data.num_features, config.hidden, data.num_classes, len(config.fanouts),
                         config.dropout).to(ctx.device)
        ddp = DistributedDataParallel(model) if ctx.distributed else model
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
        empty_x = torch.empty((0, data.num_features), device=ctx.device)
        empty = [MFG.empty(ctx.device)] * model.num_layers
        mine = torch.zeros(ctx.world_size, dtype=torch.float64)
        mine[ctx.rank] = len(loader)
        if ctx.distributed:
            dist.all_reduce(mine)
        per_rank = [int(n) for n in mine.tolist()]
        history = []
        sample, train = Stage.SAMPLE.value, Stage.TRAIN.value  # the stage-time keys of our trainer
        for _ in range(config.epochs):
            times = {sample: 0.0, train: 0.0, TRAIN_CPU: 0.0}
            start = time.perf_counter()
            batches = iter(loader)
            for step in range(max(per_rank)):
                t0 = time.perf_counter()
                batch = next(batches, None)
                t1, c1 = time.perf_counter(), time.thread_time()
                optimizer.zero_grad(set_to_none=True)
                if batch is None:
                    loss = ddp(empty_x, empty).sum() * 0.0
                else:
                    batch = batch.to(ctx.device)
                    out = ddp(batch.x, _mfgs(batch, model.num_layers))[:batch.batch_size]
                    ranks_with_data = sum(n > step for n in per_rank)
                    loss = F.cross_entropy(out, batch.y[:batch.batch_size]) * (len(per_rank) / ranks_with_data)
                loss.backward()
                optimizer.step()
                times[sample] += t1 - t0
                times[train] += time.perf_counter() - t1
                times[TRAIN_CPU] += time.thread_time() - c1
            epoch_s = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
            if ctx.distributed:
                dist.all_reduce(epoch_s, op=dist.ReduceOp.MAX)
            history.append({"epoch_s": float(epoch_s), "stage_s": times, "steps": max(per_rank)})
        return history
    finally:
        shutdown_distributed(ctx)


def run_baseline(config: BaselineConfig) -> list[dict[str, float]]:
    """Train the baseline on one local rank per partition; rank 0's history, one dict per epoch
    (``epoch_s``: the slowest rank's epoch; ``stage_s``: rank 0's sampling and compute seconds)."""
    num_parts = load_partitioned(config.part_dir, verify=False, check=False).num_parts  # the ranks check it
    if num_parts == 1:
        return _rank(config)
    return launch(_rank, (config,), num_parts)[0]
