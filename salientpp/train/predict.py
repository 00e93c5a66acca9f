"""``salientpp predict``: every node's model outputs from a checkpoint, in the original node ids.

The ranks (one per partition, like ``train``) load the checkpoint's model and compute the
outputs of the nodes they own: by layer-wise full-neighbour inference for the built-in models
(exact, as ``--inference layerwise`` evaluates them, a learned embedding's rows included), by
minibatches over every neighbour (fanout -1 per layer) for a user's model. Rank 0 writes,
atomically:

* ``outputs.npy``: float32 ``[N, C]`` the model's outputs (logits) of node ``i`` of the dataset
  ``salientpp prepare`` wrote (original ids, before partitioning); on a typed graph, of the
  target type's ``N`` nodes, row ``i`` its node ``i`` (the dataset's row ``i`` of ``x`` and ``y``);
* ``predicted.npy``: int64 ``[N]`` the argmax class (class labels), or bool ``[N, T]`` targets
  with a positive logit (multi-label);
* ``meta.json``: the checkpoint, its epoch, the task and checksums.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from ..cache.plan import partition_identity
from ..distributed import CommStats, init_distributed, launch, shutdown_distributed
from ..embedding import DistEmbedding
from ..embedding.table import load_shard
from ..errors import InputError, check_int, counted, shown
from ..io import (atomic_output_dir, check_input_file, check_output_dir, check_output_location, save_array,
                  write_meta)
from ..loader.graph import DistGraph
from ..loader.dist_loader import DistNeighborLoader
from ..models.gnn import SeedForward, build_model, runs_layer_by_layer
from ..partition import PartitionedDataset, load_partitioned
from ..sampling.link import NODE
from .checkpoint import LAST, PARTITION_ID, Checkpoint, check_finite_weights, load_checkpoint, weights_misfit
from .config import LAYERWISE, typed_structure
from .evaluation import Evaluator
from .setup import embedded_types, model_in_dim, model_input_of
from .tasks import MULTICLASS, Task, all_gather_rows, task_of

KIND = "salientpp-predictions"
FULL_NEIGHBOURHOOD = -1


# How to fix a --checkpoint that is not a checkpoint file.
CHECKPOINT_FIX = "pass as --checkpoint a checkpoint directory that `salientpp train` wrote, or its last.pt or best.pt"


def _checkpoint_file(checkpoint: str | os.PathLike) -> Path:
    """The checkpoint file of ``--checkpoint``: a directory's ``last.pt``, or the file itself;
    :class:`InputError` when that is not a regular file (absent, a directory, a pipe, a device)."""
    path = Path(checkpoint)
    return check_input_file(path / LAST if path.is_dir() else path, "the checkpoint", CHECKPOINT_FIX)


def _node_checkpoint(part_dir: str | os.PathLike, data: PartitionedDataset, path: Path) -> tuple[Checkpoint, Task]:
    """The checkpoint at ``path`` and its task, checked before any rank starts: trained on
    ``part_dir`` (whose partitioned dataset is ``data``), a node classifier (not a link
    predictor), its metric one the labels allow. :class:`InputError` otherwise."""
    ckpt = load_checkpoint(path.parent, {PARTITION_ID: partition_identity(data.meta)}, name=path.name,
                           fix=f"pass the PART_DIR it was trained on instead of {part_dir}, or the checkpoint of a "
                           "run on this one", unreadable=CHECKPOINT_FIX)
    check_finite_weights(ckpt, path, "every output would be NaN",
                         "pass the checkpoint of a run whose loss stayed finite")
    kind = ckpt.options.get("task", NODE)
    if kind != NODE:
        raise InputError(f"{path} holds a {shown(kind)} prediction model, but `salientpp predict` writes the "
                         "outputs of node classifiers only; pass the checkpoint of a `salientpp train` run "
                         f"with --task {NODE}")
    return ckpt, task_of(data, ckpt.options.get("metric"))


def _rank_outputs(part_dir: str, checkpoint: str, batch_size: int) -> np.ndarray | None:
    """One rank: the outputs of the nodes it owns. Rank 0 returns float32 ``[N, C]`` every node's
    outputs in the original ids; the others return ``None``. The checkpoint is the one
    :func:`_node_checkpoint` accepted."""
    path = Path(checkpoint)
    ctx = init_distributed()
    try:
        graph = DistGraph(part_dir, ctx)
        ckpt = load_checkpoint(path.parent, {}, name=path.name)  # matched before the ranks started
        options = ckpt.options
        task = task_of(graph.data, options.get("metric"))
        embedding_dim, features = options.get("embedding_dim", 0), options.get("features", True)
        embedding = None
        if embedding_dim:  # the learned rows of this rank, from the checkpoint's shard
            embedding = DistEmbedding(graph, embedding_dim, optimizer=options["embedding_optimizer"],
                                      node_types=embedded_types(graph.data, features))
            load_shard(path.parent, ckpt.embedding, embedding, ckpt.run_id,
                       "pass a checkpoint whose embedding shards, written by its run, lie whole beside it")
        in_dim = model_in_dim(graph.data, features, embedding_dim)
        model = build_model(options["model"], in_dim, options["hidden"], task.num_outputs,
                            options["layers"], options["dropout"],
                            inputs=model_input_of(graph.data, embedding_dim, features),
                            structure=typed_structure(options))
        misfit = weights_misfit(model.state_dict(), ckpt.model)
        if misfit:
            raise InputError(f"the weights in {path} do not fit the {shown(options['model'])} model its options "
                             f"describe ({misfit}); pass the checkpoint that `salientpp train` wrote, with the "
                             "model code it was trained with")
        model.load_state_dict(ckpt.model)
        model.eval()
        owned = np.arange(graph.num_owned, dtype=np.int64)  # the rank's rows of the target type
        forward = SeedForward.of(model, embedding, features, typed=graph.data.is_typed)
        with torch.no_grad():
            if runs_layer_by_layer(model):
                evaluator = Evaluator(graph, model, task, LAYERWISE, None, batch_size, forward)
                outputs = evaluator.layerwise_logits(owned, CommStats())
                ids = torch.from_numpy(owned + graph.seed_start)
            else:
                loader = DistNeighborLoader(graph, owned + graph.seed_start, [FULL_NEIGHBOURHOOD] * options["layers"],
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
        start, stop = graph.schema.target_range  # the target type's ids of the dataset
        order = np.asarray(graph.data.orig_id)[ids[:, 0].long().numpy()] - start
        out = np.empty((stop - start, task.num_outputs), dtype=np.float32)
        out[order] = outputs.numpy()
        return out
    finally:
        shutdown_distributed(ctx)


def predict(part_dir: str | os.PathLike, checkpoint: str | os.PathLike, out_dir: str | os.PathLike,
            batch_size: int = 1024) -> Path:
    """Write every node's outputs under ``out_dir`` (see the module docstring); returns it.

    The inputs are checked before any rank starts (:class:`InputError`: ``batch_size`` not a
    positive integer, ``out_dir`` existing, no checkpoint, one of another dataset or of a link
    predictor). A rank that fails raises :class:`~salientpp.distributed.WorkerError`; a failed write
    (a full disk) raises :class:`InputError` and leaves no ``out_dir``.
    """
    batch_size = check_int(batch_size, "--batch-size", hint="pass e.g. --batch-size 1024")
    check_output_location(out_dir, "--out")
    out = check_output_dir(out_dir)
    path = _checkpoint_file(checkpoint)
    data = load_partitioned(part_dir, verify=False, check=False)
    ckpt, task = _node_checkpoint(part_dir, data, path)
    rank_args = (str(part_dir), str(path), batch_size)
    if data.num_parts == 1:
        outputs = _rank_outputs(*rank_args)
    else:
        outputs = launch(_rank_outputs, rank_args, data.num_parts)[0]
    bad_rows = int((~np.isfinite(outputs)).any(axis=1).sum())
    if bad_rows:
        raise InputError(f"the model's outputs for {counted(bad_rows, 'node', spec=',')} are not finite (NaN or "
                         f"infinite), so nothing was written to {out}: look for NaN or huge values in the input "
                         "features")
    predicted = outputs.argmax(1).astype(np.int64) if task.kind == MULTICLASS else outputs > 0
    with atomic_output_dir(out) as tmp:
        files = {"outputs": save_array(tmp, "outputs", outputs), "predicted": save_array(tmp, "predicted", predicted)}
        write_meta(tmp, {"kind": KIND, "checkpoint": str(path), "epoch": ckpt.epoch, "task": task.kind,
                         "metric": task.metric, "ids": "original (the dataset salientpp prepare wrote)",
                         "files": files})
    return out
