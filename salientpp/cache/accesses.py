"""Empirical access counts: run the real sampler over whole epochs and count, per vertex, the
minibatches that touch it. The oracle and vip-simulation policies and the simulator use this.

Seeding: workload i of partition k samples stream s with the loader seed
:func:`~salientpp.streams.loader_seed` ``(seed, k, s, i)`` and calls ``loader.set_epoch(e)`` for
``e = 0 .. epochs-1``. :data:`~salientpp.streams.RUN_STREAM` is the training run's own batches
(the trainer seeds rank k's training loader the same way); other streams are independent of it.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ..sampling import NeighborLoader
from ..sampling.link import LinkEnds
from ..sampling.link_loader import LinkNeighborLoader
from ..streams import loader_seed
from .workload import Workload

def access_counts(dataset, workloads: Sequence[Workload], samplers: Sequence, k: int, *, epochs: int,
                  seed: int, stream: int, sampler_threads: int = 1, progress: bool = False) -> np.ndarray:
    """Weighted number of minibatches of partition ``k`` that contain each vertex, over ``epochs`` epochs.

    Every workload runs ``epochs`` epochs of the trainer's loader over partition k's seeds:
    shuffled, cut into ``S = workload.lockstep_steps(dataset)`` balanced batches (the batches
    per epoch of every rank in lockstep; ``NeighborLoader(..., num_batches=S)``; an edge workload
    runs the ``LinkNeighborLoader`` of the trainer's link prediction). A minibatch adds
    the workload's weight to each vertex of its ``n_id`` (the ids are unique within a minibatch,
    so this is the number of rows it would fetch); a batch without seeds adds nothing.

    Args:
        samplers: one sampler per workload (the trainer's: :func:`~salientpp.sampling.make_sampler`
            of its sampler kind, fanouts and replacement mode).

    Returns:
        float64 ``[N]`` summed over the epochs (divide by ``epochs`` for a per-epoch mean).
    """
    counts = np.zeros(dataset.num_nodes, dtype=np.float64)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=epochs * len(workloads), desc=f"sampling partition {k}", unit="epoch", leave=False)
    for i, (workload, sampler) in enumerate(zip(workloads, samplers)):
        seeds = workload.seeds(dataset, k)
        if seeds.size == 0:
            if bar is not None:
                bar.update(epochs)
            continue
        options = dict(batch_size=workload.batch_size, shuffle=True, seed=loader_seed(seed, k, stream, i),
                       sampler_threads=sampler_threads, num_batches=workload.lockstep_steps(dataset))
        if workload.edges is not None:  # the link loader: edges, negatives, then their endpoints sampled
            loader = LinkNeighborLoader(sampler, torch.from_numpy(seeds), num_negatives=workload.edges.num_negatives,
                                        negative_sampling=workload.edges.negative_sampling,
                                        ends=LinkEnds.of_partitions(dataset), **options)
        else:
            loader = NeighborLoader(sampler, seeds=torch.from_numpy(seeds), **options)
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            for batch in loader:
                counts[batch.n_id.numpy()] += workload.weight
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return counts
