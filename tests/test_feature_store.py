"""The features the pipeline assembles equal the unpartitioned x[n_id], for every batch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from salientpp.data.format import load_dataset, save_dataset
from salientpp.data.synthetic import synthetic_dataset
from salientpp.distributed import CommStats, init_distributed, launch, shutdown_distributed
from salientpp.partition.partitioner import partition_dataset
from salientpp.distributed.loader import DistNeighborLoader
from salientpp.train import TrainConfig, Trainer


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fs")
    ds = synthetic_dataset("tiny")
    save_dataset(ds, root / "data")
    for k in (2, 4):
        partition_dataset(ds, root / f"p{k}", k)
    return root


def _check_batches(part_dir: str, data_dir: str, cache: str, replication: float, gpu_fraction: float,
                   depth: int) -> tuple[bool, int, dict]:
    ctx = init_distributed("cpu", timeout_s=60)
    config = TrainConfig(part_dir, epochs=1, hidden=8, layers=2, fanouts=(4, 3), batch_size=24, cache=cache,
                         replication=replication, gpu_fraction=gpu_fraction, pipeline_depth=depth,
                         eval_fanouts=(3, 3), eval_batch_size=200, progress=False).validate()
    trainer = Trainer(config, ctx)
    x_new = np.asarray(load_dataset(data_dir).x)[np.asarray(trainer.graph.data.orig_id)]
    ok, batches, stats = True, 0, CommStats()
    evaluation = DistNeighborLoader(trainer.graph, trainer.evaluator.seeds, config.eval_fanouts,
                                    config.eval_batch_size, plan=trainer.cache_info["plan"],
                                    gpu_fraction=config.gpu_fraction, pipeline_depth=depth)
    for loader in (trainer.loader, evaluation):
        for batch in loader:
            ok &= torch.equal(batch.x, torch.from_numpy(x_new[batch.n_id.numpy()]))
            batches += batch.batch_size > 0
        stats.add(loader.stats)
    shutdown_distributed(ctx)
    return ok, batches, stats.as_dict()


@pytest.mark.parametrize("nprocs,cache,alpha,gpu_fraction,depth", [
    (2, "none", 0.0, 0.0, 1),      # everything remote is fetched, stages one after another
    (4, "vip", 0.5, 0.3, 3),       # owned rows split over two tiers, half the remote rows cached
])
def test_assembled_features_equal_unpartitioned_rows(tiny_dirs, nprocs, cache, alpha, gpu_fraction, depth):
    results = launch(_check_batches, (str(tiny_dirs / f"p{nprocs}"), str(tiny_dirs / "data"), cache, alpha,
                                      gpu_fraction, depth), nprocs=nprocs)
    for ok, batches, stats in results:
        assert ok and batches > 0
        assert stats["received"] > 0  # the exchange path was exercised, not only local rows
        if cache == "none":
            assert stats["gpu_hits"] == 0
        else:
            assert stats["gpu_hits"] > 0
