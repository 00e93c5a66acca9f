"""The baseline of ``salientpp bench train``: PyG's ``NeighborLoader`` + DDP, features replicated.

Every rank holds all of ``x`` (no fetch, no cache) and samples its partition's training vertices
with PyG's ``NeighborLoader`` (sampling and the ``x[n_id]`` gather in the training process, as
in PyG's examples). The model is the trainer's :class:`~salientpp.models.MFGModel`, same
layers and widths. With pyg-lib, PyG reports the nodes and edges of each hop and each layer
runs on its own hop's MFG, as ours do; with torch_sparse alone it does not, and every layer
runs on the whole sampled subgraph (PyG's usual ``model(x, edge_index)[:batch_size]``).
Ranks with fewer batches run empty steps so that DDP's all-reduces stay in lockstep.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from ..dist import init_distributed, launch, shutdown_distributed
from ..models import EmptyBlock, MFGModel
from ..partition import load_partitioned


def unavailable_reason() -> str | None:
    """``None`` when PyG's NeighborLoader can sample here, else why not (one sentence)."""
    import torch_geometric.typing as pyg_typing
    if pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE:
        return None
    return "PyG's NeighborLoader needs pyg-lib or torch_sparse, and neither is importable here"


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


@dataclass(frozen=True)
class _Block:
    num_dst: int
    edge_index: torch.Tensor


def _blocks(batch, num_layers: int) -> list[_Block]:
    """The MFG of each layer (model order) of a PyG subgraph batch."""
    nodes, edges = getattr(batch, "num_sampled_nodes", None), getattr(batch, "num_sampled_edges", None)
    if nodes is None or edges is None:
        return [_Block(int(batch.num_nodes), batch.edge_index)] * num_layers
    # PyG lists nodes and edges hop by hop; layer i drops the last i hops.
    node_ends, edge_ends = np.cumsum(nodes), np.cumsum(edges)
    return [_Block(int(node_ends[num_layers - 1 - i]), batch.edge_index[:, :int(edge_ends[num_layers - 1 - i])])
            for i in range(num_layers)]


def _rank(config: BaselineConfig) -> list[dict[str, float]]:
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    ctx = init_distributed(config.device, config.timeout_s)
    try:
        data = load_partitioned(config.part_dir)
        parts = [data.part(k) for k in range(data.num_parts)]
        x = torch.from_numpy(np.concatenate([np.asarray(p.x) for p in parts])).float()
        y = torch.from_numpy(np.concatenate([np.asarray(p.y) for p in parts]))
        rowptr, col = torch.from_numpy(np.asarray(data.rowptr)), torch.from_numpy(np.asarray(data.col))
        dst = torch.repeat_interleave(torch.arange(data.num_nodes), rowptr[1:] - rowptr[:-1])
        graph = Data(x=x, y=y, edge_index=torch.stack([col, dst]), num_nodes=data.num_nodes)
        seeds = torch.from_numpy(np.asarray(parts[ctx.rank].train_idx))
        torch.manual_seed(config.seed + ctx.rank)
        loader = NeighborLoader(graph, num_neighbors=list(config.fanouts), input_nodes=seeds,
                                batch_size=config.batch_size, shuffle=True)
        torch.manual_seed(config.seed)
        model = MFGModel("sage", data.num_features, config.hidden, data.num_classes, len(config.fanouts),
                         config.dropout).to(ctx.device)
        ddp = DistributedDataParallel(model) if ctx.distributed else model
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
        empty_x = torch.empty((0, data.num_features), device=ctx.device)
        empty = [EmptyBlock(edge_index=torch.empty((2, 0), dtype=torch.int64, device=ctx.device))] * model.num_layers
        mine = torch.zeros(ctx.world_size, dtype=torch.float64)
        mine[ctx.rank] = len(loader)
        if ctx.distributed:
            dist.all_reduce(mine)
        per_rank = [int(n) for n in mine.tolist()]
        history, trimmed = [], False
        for _ in range(config.epochs):
            times = {"sample": 0.0, "train": 0.0}
            start = time.perf_counter()
            batches = iter(loader)
            for step in range(max(per_rank)):
                t0 = time.perf_counter()
                batch = next(batches, None)
                t1 = time.perf_counter()
                optimizer.zero_grad(set_to_none=True)
                if batch is None:
                    loss = ddp(empty_x, empty).sum() * 0.0
                else:
                    batch = batch.to(ctx.device)
                    trimmed = getattr(batch, "num_sampled_nodes", None) is not None
                    out = ddp(batch.x, _blocks(batch, model.num_layers))[:batch.batch_size]
                    ranks_with_data = sum(n > step for n in per_rank)
                    loss = F.cross_entropy(out, batch.y[:batch.batch_size]) * (len(per_rank) / ranks_with_data)
                loss.backward()
                optimizer.step()
                times["sample"] += t1 - t0
                times["train"] += time.perf_counter() - t1
            epoch_s = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
            if ctx.distributed:
                dist.all_reduce(epoch_s, op=dist.ReduceOp.MAX)
            history.append({"epoch_s": float(epoch_s), "stage_s": times, "steps": max(per_rank), "trimmed": trimmed})
        return history
    finally:
        shutdown_distributed(ctx)


def run_baseline(config: BaselineConfig) -> list[dict[str, float]]:
    """Train the baseline on one local rank per partition; rank 0's history, one dict per epoch
    (``epoch_s``: the slowest rank's epoch; ``stage_s``: rank 0's sampling and compute seconds)."""
    num_parts = load_partitioned(config.part_dir).num_parts
    if num_parts == 1:
        return _rank(config)
    return launch(_rank, (config,), num_parts)[0]
