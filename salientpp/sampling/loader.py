"""An iterable loader: the C++ thread pool samples an epoch's batches, in order."""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from .._ext import extension
from ..errors import InputError
from .fetch import fetch_to_extension
from .sampler import NeighborSampler, check_labels, check_seeds
from .types import FetchContext, SampledBatch, batch_from_extension


class NeighborLoader:
    """Iterates over minibatches of ``seeds`` sampled by ``sampler`` in C++ worker threads.

    Batch ``i`` of epoch ``e`` holds ``epoch_order()[i * batch_size:(i + 1) * batch_size]`` and
    is sampled with the stream ``(epoch_seed(), i)``: the same ``seed`` and epoch give the same
    batches for any ``num_threads``, and batches always come out in order. At most
    ``queue_depth`` batches are sampled ahead of the consumer.

    Starting a new iteration (or :meth:`close`, or garbage collection) stops the workers of
    the previous one; each finishes at most the batch in hand.

    Like torchdata's ``StatefulDataLoader``, :meth:`state_dict` says where the running epoch
    stands and :meth:`load_state_dict` makes the next iteration continue from there, with the
    same batches an uninterrupted epoch would have yielded.

    Args:
        sampler: the :class:`NeighborSampler`.
        seeds: int64 ``[n]`` distinct node ids (e.g. the training split).
        batch_size: seeds per batch.
        shuffle: permute the seeds every epoch (seeded by ``(seed, epoch)``).
        drop_last: drop the last batch when it has fewer than ``batch_size`` seeds.
        seed: base random seed.
        num_threads: C++ sampling threads.
        queue_depth: batches sampled ahead.
        labels, labels_offset: ``y = labels[seeds - labels_offset]`` per batch (int64).
        fetch: a :class:`FetchContext`; each batch then carries a :class:`FetchPlan`.
    """

    _core = None  # the C++ BatchLoader of the running iteration
    _next_batch = 0  # batches the running iteration has yielded (or where the next one starts)

    def __init__(self, sampler: NeighborSampler, seeds: torch.Tensor | np.ndarray, batch_size: int,
                 shuffle: bool = True, drop_last: bool = False, seed: int = 0, num_threads: int = 1,
                 queue_depth: int = 4, labels: torch.Tensor | np.ndarray | None = None, labels_offset: int = 0,
                 fetch: FetchContext | None = None):
        if not isinstance(sampler, NeighborSampler):
            raise InputError(f"sampler must be a NeighborSampler, got {type(sampler).__name__}")
        for name, value in (("batch_size", batch_size), ("num_threads", num_threads), ("queue_depth", queue_depth)):
            if int(value) < 1:
                raise InputError(f"{name} must be >= 1, got {value}")
        self.sampler = sampler
        self.seeds = check_seeds(seeds, sampler.num_nodes, "seeds")
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.seed = int(seed)
        self.num_threads = int(num_threads)
        self.queue_depth = int(queue_depth)
        self.labels = check_labels(labels, labels_offset, self.seeds)
        self.labels_offset = int(labels_offset)
        self._fetch = None if fetch is None else fetch_to_extension(fetch, sampler.num_nodes)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        self._next_batch = 0

    def state_dict(self) -> dict[str, int]:
        """``{"epoch", "next_batch"}``: the epoch and the index of the next batch to yield."""
        return {"epoch": self.epoch, "next_batch": self._next_batch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Make the next iteration yield batches ``state["next_batch"]:`` of ``state["epoch"]``."""
        next_batch = int(state["next_batch"])
        if not 0 <= next_batch <= len(self):
            raise InputError(f"the loader state starts at batch {next_batch} but an epoch has {len(self)} batches; "
                             "resume with the same seeds and batch size")
        self.epoch = int(state["epoch"])
        self._next_batch = next_batch

    def __len__(self) -> int:
        n = int(self.seeds.shape[0])
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _epoch_keys(self) -> tuple[int, int]:
        shuffle_key, sample_key = np.random.SeedSequence([self.seed % (1 << 64), self.epoch % (1 << 64)]
                                                         ).generate_state(2, np.uint64)
        return int(shuffle_key), int(sample_key)

    def epoch_seed(self) -> int:
        """The sampling seed of the current epoch (batch ``i`` uses the stream ``(epoch_seed(), i)``)."""
        return self._epoch_keys()[1]

    def epoch_order(self) -> torch.Tensor:
        """int64 ``[n]`` the seeds in this epoch's order."""
        if not self.shuffle:
            return self.seeds
        generator = torch.Generator().manual_seed(self._epoch_keys()[0] >> 1)
        return self.seeds[torch.randperm(self.seeds.shape[0], generator=generator)]

    def __iter__(self) -> Iterator[SampledBatch]:
        self.close()
        order = self.epoch_order().contiguous()
        first = self._next_batch
        core = extension().BatchLoader(self.sampler._core, order, self.batch_size, self.drop_last, self.epoch_seed(),
                                       self.labels, self.labels_offset, self._fetch, self.num_threads,
                                       self.queue_depth, first)
        self._core = core
        return self._batches(core, order.shape[0], first)

    def _batches(self, core, num_seeds: int, first: int) -> Iterator[SampledBatch]:
        try:
            for i in range(first, len(core)):
                try:
                    raw = core.next()
                except ValueError as exc:
                    raise InputError(str(exc)) from None
                if raw is None:
                    raise RuntimeError("this epoch's iteration was stopped by close() or by a newer iteration "
                                       "over the same loader")
                self._next_batch = i + 1
                yield batch_from_extension(raw, min(self.batch_size, num_seeds - i * self.batch_size))
            self._next_batch = 0
        finally:
            core.close()
            if self._core is core:
                self._core = None

    def close(self) -> None:
        """Stops the worker threads of the current iteration, if any."""
        if self._core is not None:
            self._core.close()
            self._core = None

    def __del__(self) -> None:
        self.close()
