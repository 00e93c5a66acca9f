"""An iterable loader: a sampler of any kind samples an epoch's batches ahead of the consumer, in order."""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from ..errors import InputError, check_int, check_keys, check_seed
from .convert import as_int64_tensor
from .sampler import (BaseSampler, BatchStages, BatchWorker, EpochSchedule, FetchContext, SampledBatch, Workers,
                      check_labels, check_seeds)


class NeighborLoader:
    """Iterates over minibatches of ``seeds`` sampled by ``sampler`` in worker threads.

    Batch ``i`` of epoch ``e`` holds ``epoch_order()[bounds[i]:bounds[i + 1]]`` with
    ``bounds = batch_bounds()``, and is sampled with the stream ``(epoch_seed(), i)``: the same
    ``seed`` and epoch give the same batches for any ``sampler_threads``, and batches always come
    out in order. At most ``read_ahead`` batches are sampled ahead of the consumer.

    Two ways to cut an epoch into batches:

    * ``num_batches=None`` (default): fixed-size batches of ``batch_size`` seeds, the last one
      smaller (or dropped with ``drop_last``); ``len(loader) == ceil(n / batch_size)``.
    * ``num_batches=S``: exactly ``S`` balanced batches, batch ``i`` holding
      ``order[i * n // S:(i + 1) * n // S]`` (sizes differ by at most one, each at most
      ``batch_size``). Distributed ranks pass the same ``S`` (the largest
      ``ceil(n_k / batch_size)`` of any rank) so that they run the same number of steps without
      padding. With ``n < S`` some batches have no seeds: they come out as a valid
      :class:`SampledBatch` with ``batch_size == 0``, an empty ``n_id`` and MFGs without nodes or
      edges (and row origins that request nothing). ``seeds`` may then even be empty.

    Starting a new iteration (or :meth:`close`, or garbage collection) stops the workers of
    the previous one; each finishes at most the batch in hand.

    With ``prefetch_next_epoch``, taking an epoch's last batch starts the workers on epoch
    ``e + 1`` (at most ``read_ahead`` batches, as always), so the next epoch's first batches are
    sampled while the consumer still works on this one's last. The next iteration uses them when
    it starts batch 0 of epoch ``e + 1`` (a loop that calls ``set_epoch(e)`` with ``e = 0, 1, 2,
    ...``); any other start stops those workers and discards their batches, which are the same
    batches either way.

    Like torchdata's ``StatefulDataLoader``, :meth:`state_dict` says where the running epoch
    stands and :meth:`load_state_dict` makes the next iteration continue from there, with the
    same batches an uninterrupted epoch would have yielded.

    The sampler decides how its workers run (:meth:`~salientpp.sampling.sampler.BaseSampler.start_epoch`):
    a :class:`NeighborSampler` in ``sampler_threads`` C++ threads; a
    :class:`~salientpp.sampling.BulkSampler` in one background thread that samples
    ``sampler.minibatches_per_bulk`` batches at a time (torch's intra-op threads do the work, with
    the GIL released; ``sampler_threads`` does not apply). Batch ``i`` is drawn from the stream
    ``(epoch_seed(), i)`` alone either way, so the batches do not depend on the bulk size.

    Args:
        sampler: a :class:`~salientpp.sampling.sampler.BaseSampler` of any kind
            (:func:`~salientpp.sampling.make_sampler`).
        seeds: int64 ``[n]`` distinct node ids (e.g. the training split); ``n >= 1`` unless
            ``num_batches`` is given.
        batch_size: seeds per batch (with ``num_batches``: the most seeds a batch may hold, so
            ``num_batches >= ceil(n / batch_size)``).
        shuffle: permute the seeds every epoch (seeded by ``(seed, epoch)``).
        drop_last: drop the last batch when it has fewer than ``batch_size`` seeds (fixed-size
            batches only).
        seed: base random seed, an int in [0, 2^63).
        sampler_threads: sampling threads (of the C++ sampler).
        read_ahead: the most batches sampled ahead of the consumer (the sampler read-ahead; not the
            pipeline depth, which bounds the batches between sampling and the model).
        labels, labels_offset: ``y = labels[seeds - labels_offset]`` per batch (int64).
        fetch: a :class:`FetchContext`; each batch then carries a :class:`RowOrigins`.
        num_batches: ``None`` for fixed-size batches, or ``S >= 1`` balanced batches per epoch.
        low_priority: run the sampling threads at a lower scheduling priority
            (``extension().sampler_nice_offset`` = 5 nice steps below the thread that starts
            them, at most 19), so that they mostly fill the time the consumer's thread waits
            instead of taking its cores; the consumer samples a batch itself rather than wait
            for one that a starved thread has not finished. The batches are identical either
            way: batch ``i`` is sampled from the random stream ``(epoch_seed(), i)`` whichever
            thread samples it.
        prefetch_next_epoch: start sampling epoch ``e + 1`` when epoch ``e``'s last batch is taken
            (see above).

    Attributes:
        workers: the :class:`~salientpp.sampling.sampler.Workers` (threads, read-ahead, priority)
            every epoch runs with.
        stages: the :class:`~salientpp.sampling.sampler.BatchStages` (labels, row origins) every
            batch goes through.
    """

    _worker = None  # the BatchWorker of the running iteration
    _prefetched = None  # (epoch, worker) started on the epoch after the last one finished
    _next_batch = 0  # batches the running iteration has yielded (or where the next one starts)

    def __init__(self, sampler: BaseSampler, seeds: torch.Tensor | np.ndarray, batch_size: int,
                 shuffle: bool = True, drop_last: bool = False, seed: int = 0, sampler_threads: int = 1,
                 read_ahead: int = 4, labels: torch.Tensor | np.ndarray | None = None, labels_offset: int = 0,
                 fetch: FetchContext | None = None, num_batches: int | None = None, low_priority: bool = False,
                 prefetch_next_epoch: bool = False):
        if not isinstance(sampler, BaseSampler):
            raise InputError(f"sampler must be a BaseSampler such as a NeighborSampler or a BulkSampler, got "
                             f"{type(sampler).__name__}; build one with make_sampler")
        for name, value in (("batch_size", batch_size), ("sampler_threads", sampler_threads), ("read_ahead", read_ahead)):
            check_int(value, name)
        self.sampler = sampler
        if num_batches is not None and _is_empty(seeds):  # a rank without seeds still runs its S steps
            self.seeds = torch.empty(0, dtype=torch.int64)
            labels = None if labels is None else as_int64_tensor(labels, "labels")
        else:
            self.seeds = check_seeds(seeds, sampler.num_nodes, "seeds")
            labels = check_labels(labels, labels_offset, self.seeds)
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.num_batches = None if num_batches is None else self._check_num_batches(num_batches)
        self.seed = check_seed(seed, "seed")
        self.workers = Workers(int(sampler_threads), int(read_ahead), bool(low_priority))
        self.prefetch_next_epoch = bool(prefetch_next_epoch)
        self.stages = BatchStages(labels, int(labels_offset),
                                  None if fetch is None else fetch.to_extension(sampler.num_nodes))
        self.epoch = 0

    def _check_num_batches(self, num_batches) -> int:
        check_int(num_batches, "num_batches")
        if self.drop_last:
            raise InputError("drop_last applies to fixed-size batches only; leave it False with num_batches "
                             "(balanced batches use every seed)")
        n = int(self.seeds.shape[0])
        if int(num_batches) < -(-n // self.batch_size):
            raise InputError(f"num_batches={num_batches} would put more than batch_size={self.batch_size} of the "
                             f"{n} seeds in a batch; pass num_batches >= {-(-n // self.batch_size)}")
        return int(num_batches)

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle and reseed for ``epoch``, a non-negative int."""
        self.epoch = check_int(epoch, "the epoch", minimum=0, hint="pass e.g. set_epoch(0)")
        self._next_batch = 0

    def state_dict(self) -> dict[str, int]:
        """``{"epoch", "next_batch"}``: the epoch and the index of the next batch to yield."""
        return {"epoch": self.epoch, "next_batch": self._next_batch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Make the next iteration yield batches ``state["next_batch"]:`` of ``state["epoch"]``;
        ``state`` is what :meth:`state_dict` returned (:class:`InputError` for another dict)."""
        fix = "pass what the loader's state_dict() returned"
        check_keys(state, ("epoch", "next_batch"), "the loader state", fix)
        next_batch = check_int(state["next_batch"], "the loader state's next_batch", minimum=0, hint=fix)
        if next_batch > len(self):
            raise InputError(f"the loader state starts at batch {next_batch} but an epoch has {len(self)} batches; "
                             "resume with the same seeds, batch size and num_batches")
        self.epoch = check_int(state["epoch"], "the loader state's epoch", minimum=0, hint=fix)
        self._next_batch = next_batch

    def __len__(self) -> int:
        if self.num_batches is not None:
            return self.num_batches
        n = int(self.seeds.shape[0])
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def batch_bounds(self) -> torch.Tensor:
        """int64 ``[len(self) + 1]``: batch ``i`` holds ``epoch_order()[bounds[i]:bounds[i + 1]]``
        (the same in every epoch; only the order is reshuffled)."""
        return self._bounds(self.epoch)

    def _bounds(self, epoch: int) -> torch.Tensor:
        """:meth:`batch_bounds` of ``epoch``."""
        n, i = int(self.seeds.shape[0]), torch.arange(len(self) + 1, dtype=torch.int64)
        if self.num_batches is not None:
            return i * n // self.num_batches
        return torch.clamp(i * self.batch_size, max=n)

    def _epoch_keys(self, epoch: int | None = None) -> tuple[int, int]:
        """``(shuffle key, sampling seed)`` of ``epoch`` (default: the current one)."""
        epoch = self.epoch if epoch is None else epoch
        shuffle_key, sample_key = np.random.SeedSequence([self.seed % (1 << 64), epoch % (1 << 64)]
                                                         ).generate_state(2, np.uint64)
        return int(shuffle_key), int(sample_key)

    def epoch_seed(self) -> int:
        """The sampling seed of the current epoch (batch ``i`` uses the stream ``(epoch_seed(), i)``)."""
        return self._epoch_keys()[1]

    def epoch_order(self) -> torch.Tensor:
        """int64 ``[n]`` the seeds in this epoch's order."""
        return self._order(self.epoch)

    def _order(self, epoch: int) -> torch.Tensor:
        """:meth:`epoch_order` of ``epoch``."""
        if not self.shuffle:
            return self.seeds
        generator = torch.Generator().manual_seed(self._epoch_keys(epoch)[0] >> 1)
        return self.seeds[torch.randperm(self.seeds.shape[0], generator=generator)]

    def __iter__(self) -> Iterator[SampledBatch]:
        prefetched, self._prefetched = self._prefetched, None
        self.close()
        first = self._next_batch
        if prefetched is not None and (prefetched[0], first) == (self.epoch, 0):
            worker = prefetched[1]
        else:
            if prefetched is not None:
                prefetched[1].close()
            worker = self._start(self.epoch, first)
        self._worker = worker
        return self._batches(worker, first)

    def _start(self, epoch: int, first: int) -> BatchWorker:
        """The sampler's workers on batches ``first:`` of ``epoch``."""
        schedule = EpochSchedule(self._order(epoch).contiguous(), self._bounds(epoch), self._epoch_keys(epoch)[1], first)
        return self.sampler.start_epoch(schedule, self.stages, self.workers)

    def _batches(self, worker: BatchWorker, first: int) -> Iterator[SampledBatch]:
        """Yields ``worker.next()`` for batches ``first:`` and stops ``worker`` at the end; with
        ``prefetch_next_epoch``, taking the last batch starts the next epoch's workers."""
        try:
            for i in range(first, len(self)):
                try:
                    batch = worker.next()
                except ValueError as exc:
                    raise InputError(str(exc)) from None
                if batch is None:
                    raise RuntimeError("this epoch's iteration was stopped by close() or by a newer iteration "
                                       "over the same loader")
                self._next_batch = i + 1
                if i == len(self) - 1 and self.prefetch_next_epoch:  # this epoch's workers have nothing left
                    self._prefetched = (self.epoch + 1, self._start(self.epoch + 1, 0))
                yield batch
            self._next_batch = 0
        finally:
            worker.close()
            if self._worker is worker:
                self._worker = None

    def close(self) -> None:
        """Stops the worker threads of the current iteration and of a prefetched epoch, if any."""
        if self._worker is not None:
            self._worker.close()
            self._worker = None
        if self._prefetched is not None:
            self._prefetched[1].close()
            self._prefetched = None

    def __del__(self) -> None:
        self.close()


def _is_empty(seeds) -> bool:
    """Whether ``seeds`` is an empty 1-D array, tensor or sequence."""
    if isinstance(seeds, (torch.Tensor, np.ndarray)):
        return seeds.ndim == 1 and seeds.shape[0] == 0
    return isinstance(seeds, (list, tuple)) and len(seeds) == 0
