"""``salientpp predict``: every node's model outputs from a checkpoint, in the original node ids.

The ranks (one per partition, like ``train``) load the checkpoint's model and compute the
outputs of the nodes they own: by layer-wise full-neighbour inference for the built-in models
(exact, as ``--inference layerwise`` evaluates them), by minibatches over every neighbour
(fanout -1 per layer) for a user's model. Rank 0 writes, atomically:

* ``outputs.npy``: float32 ``[N, C]`` the model's outputs (logits) of node ``i`` of the dataset
  ``salientpp prepare`` wrote (original ids, before partitioning);
* ``predicted.npy``: int64 ``[N]`` the argmax class (class labels), or bool ``[N, T]`` targets
  with a positive logit (multi-label);
* ``meta.json``: the checkpoint, its epoch, the task and checksums.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from ..distributed import CommStats, init_distributed, launch, shutdown_distributed
from ..loader.graph import DistGraph
from ..loader.loader import DistNeighborLoader
from ..errors import InputError
from ..io import atomic_output_dir, check_output_dir, save_array, write_meta
from ..embedding import DistEmbedding
from ..embedding.table import load_shard
from ..models.gnn import SeedForward, build_model
from ..partition import load_partitioned
from .checkpoint import LAST, load_checkpoint
from .config import LAYERWISE
from .evaluation import Evaluator, supports_layerwise
from .tasks import MULTICLASS, all_gather_rows, task_of

KIND = "salientpp-predictions"
FULL_NEIGHBOURHOOD = -1


def _checkpoint_file(checkpoint: str | os.PathLike) -> Path:
    path = Path(checkpoint)
    path = path / LAST if path.is_dir() else path
    if not path.is_file():
        raise InputError(f"there is no checkpoint at {path}; pass a --checkpoint-dir of `salientpp train` or a "
                         "last.pt/best.pt file")
    return path


def _rank_outputs(part_dir: str, checkpoint: str, batch_size: int) -> dict | None:
    """One rank: the outputs of the nodes it owns; rank 0 returns everything gathered."""
    path = _checkpoint_file(checkpoint)
    ctx = init_distributed()
    try:
        graph = DistGraph(part_dir, ctx)
        ckpt = load_checkpoint(path.parent, {"dataset": graph.identity}, name=path.name, matching=("dataset",))
        options = ckpt.options
        task = task_of(graph.data, options.get("metric"))
        if options.get("task", "node") != "node":
            raise InputError(f"{path} holds a {options['task']} prediction model; `salientpp predict` writes the "
                             "outputs of node classifiers only")
        embedding_dim, features = options.get("embedding_dim", 0), options.get("features", True)
        embedding = None
        if embedding_dim:  # the learned rows of this rank, from the checkpoint's shard
            embedding = DistEmbedding(graph, embedding_dim, optimizer=options["embedding_optimizer"])
            load_shard(path.parent, ckpt.embedding, embedding)
        in_dim = (graph.num_features if features else 0) + embedding_dim
        model = build_model(options["model"], in_dim, options["hidden"], task.num_outputs,
                            options["layers"], options["dropout"])
        model.load_state_dict(ckpt.model)
        model.eval()
        owned = np.arange(graph.num_owned, dtype=np.int64)
        with torch.no_grad():
            if supports_layerwise(model) and embedding is None:
                evaluator = Evaluator(graph, model, task, LAYERWISE, None, batch_size)
                outputs = evaluator.layerwise_logits(owned, CommStats())
                ids = torch.from_numpy(owned + graph.offset)
            else:
                forward = SeedForward.of(model, embedding, features)
                loader = DistNeighborLoader(graph, owned + graph.offset, [FULL_NEIGHBOURHOOD] * options["layers"],
                                            batch_size, shuffle=False, features=features)
                rows, id_rows = [torch.empty((0, task.num_outputs))], [torch.empty(0, dtype=torch.int64)]
                for batch in loader:
                    out = forward.seed_outputs(batch)
                    if out is not None:
                        rows.append(out.cpu())
                        id_rows.append(batch.n_id[:batch.batch_size].cpu())
                outputs, ids = torch.cat(rows), torch.cat(id_rows)
        outputs, ids = outputs.float().cpu(), ids.double().unsqueeze(1)
        if ctx.distributed:
            both = all_gather_rows(torch.cat([ids, outputs.double()], dim=1), device=ctx.comm_device)
            ids, outputs = both[:, :1], both[:, 1:].float()
        if ctx.rank != 0:
            return None
        order = np.asarray(graph.data.orig_id)[ids[:, 0].long().numpy()]
        out = np.empty((graph.num_nodes, task.num_outputs), dtype=np.float32)
        out[order] = outputs.numpy()
        return {"outputs": out, "kind": task.kind, "metric": task.metric, "epoch": ckpt.epoch}
    finally:
        shutdown_distributed(ctx)


def predict(part_dir: str | os.PathLike, checkpoint: str | os.PathLike, out_dir: str | os.PathLike,
            batch_size: int = 1024) -> Path:
    """Write every node's outputs under ``out_dir`` (see the module docstring); returns it."""
    out = check_output_dir(out_dir)
    path = _checkpoint_file(checkpoint)
    num_parts = load_partitioned(part_dir, verify=False, check=False).num_parts
    if num_parts == 1:
        result = _rank_outputs(str(part_dir), str(path), batch_size)
    else:
        result = launch(_rank_outputs, (str(part_dir), str(path), batch_size), num_parts)[0]
    outputs = result["outputs"]
    predicted = outputs.argmax(1).astype(np.int64) if result["kind"] == MULTICLASS else outputs > 0
    with atomic_output_dir(out) as tmp:
        files = {"outputs": save_array(tmp, "outputs", outputs), "predicted": save_array(tmp, "predicted", predicted)}
        write_meta(tmp, {"kind": KIND, "checkpoint": str(path), "epoch": result["epoch"], "task": result["kind"],
                         "metric": result["metric"], "ids": "original (the dataset salientpp prepare wrote)",
                         "files": files})
    return out
