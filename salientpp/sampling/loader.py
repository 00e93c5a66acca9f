"""An iterable loader: the C++ thread pool (or a bulk sampler) samples an epoch's batches, in order."""
from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import numpy as np
import torch

from .._ext import extension
from ..errors import InputError, check_int
from .convert import as_int64_tensor
from .bulk import BulkSampler, attach
from .sampler import FetchContext, NeighborSampler, SampledBatch, batch_from_extension, check_labels, check_seeds


class NeighborLoader:
    """Iterates over minibatches of ``seeds`` sampled by ``sampler`` in C++ worker threads.

    Batch ``i`` of epoch ``e`` holds ``epoch_order()[bounds[i]:bounds[i + 1]]`` with
    ``bounds = batch_bounds()``, and is sampled with the stream ``(epoch_seed(), i)``: the same
    ``seed`` and epoch give the same batches for any ``num_threads``, and batches always come
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
      edges (and a fetch plan that requests nothing). ``seeds`` may then even be empty.

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

    With a :class:`~salientpp.sampling.BulkSampler`, one background thread samples
    ``sampler.minibatches_per_bulk`` batches at a time (torch's intra-op threads do the work, with
    the GIL released) and keeps at most ``read_ahead`` batches ahead; ``low_priority`` lowers that
    thread's priority, and ``num_threads`` does not apply. Batch ``i`` is still drawn from the
    stream ``(epoch_seed(), i)`` alone, so the batches do not depend on the bulk size.

    Args:
        sampler: a :class:`NeighborSampler` or a :class:`~salientpp.sampling.BulkSampler`.
        seeds: int64 ``[n]`` distinct node ids (e.g. the training split); ``n >= 1`` unless
            ``num_batches`` is given.
        batch_size: seeds per batch (with ``num_batches``: the most seeds a batch may hold, so
            ``num_batches >= ceil(n / batch_size)``).
        shuffle: permute the seeds every epoch (seeded by ``(seed, epoch)``).
        drop_last: drop the last batch when it has fewer than ``batch_size`` seeds (fixed-size
            batches only).
        seed: base random seed.
        num_threads: C++ sampling threads.
        read_ahead: the most batches sampled ahead of the consumer (the sampler read-ahead; not the
            pipeline depth, which bounds the batches between sampling and the model).
        labels, labels_offset: ``y = labels[seeds - labels_offset]`` per batch (int64).
        fetch: a :class:`FetchContext`; each batch then carries a :class:`FetchPlan`.
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
    """

    _core = None  # the C++ BatchLoader of the running iteration
    _prefetched = None  # (epoch, worker, wrap) started on the epoch after the last one finished
    _next_batch = 0  # batches the running iteration has yielded (or where the next one starts)

    def __init__(self, sampler: NeighborSampler | BulkSampler, seeds: torch.Tensor | np.ndarray, batch_size: int,
                 shuffle: bool = True, drop_last: bool = False, seed: int = 0, num_threads: int = 1,
                 read_ahead: int = 4, labels: torch.Tensor | np.ndarray | None = None, labels_offset: int = 0,
                 fetch: FetchContext | None = None, num_batches: int | None = None, low_priority: bool = False,
                 prefetch_next_epoch: bool = False):
        if not isinstance(sampler, (NeighborSampler, BulkSampler)):
            raise InputError(f"sampler must be a NeighborSampler or a BulkSampler, got {type(sampler).__name__}")
        for name, value in (("batch_size", batch_size), ("num_threads", num_threads), ("read_ahead", read_ahead)):
            check_int(value, name)
        self.sampler = sampler
        if num_batches is not None and _is_empty(seeds):  # a rank without seeds still runs its S steps
            self.seeds = torch.empty(0, dtype=torch.int64)
            self.labels = None if labels is None else as_int64_tensor(labels, "labels")
        else:
            self.seeds = check_seeds(seeds, sampler.num_nodes, "seeds")
            self.labels = check_labels(labels, labels_offset, self.seeds)
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.num_batches = None if num_batches is None else self._check_num_batches(num_batches)
        self.seed = int(seed)
        self.num_threads = int(num_threads)
        self.read_ahead = int(read_ahead)
        self.low_priority = bool(low_priority)
        self.prefetch_next_epoch = bool(prefetch_next_epoch)
        self.labels_offset = int(labels_offset)
        self._fetch = None if fetch is None else fetch.to_extension(sampler.num_nodes)
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
                             "resume with the same seeds, batch size and num_batches")
        self.epoch = int(state["epoch"])
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
            core, wrap = prefetched[1:]
        else:
            if prefetched is not None:
                prefetched[1].close()
            core, wrap = self._start(self.epoch, first)
        self._core = core
        return self._batches(core, self.batch_bounds().tolist(), first, wrap)

    def _start(self, epoch: int, first: int) -> tuple:
        """Workers sampling batches ``first:`` of ``epoch`` (a C++ ``BatchLoader`` or a
        :class:`_BulkWorker`: ``next()`` and ``close()``), and ``wrap(raw, size)``, which makes
        the :class:`SampledBatch` of what ``next()`` returns."""
        order, bounds = self._order(epoch).contiguous(), self._bounds(epoch)
        seed = self._epoch_keys(epoch)[1]
        if isinstance(self.sampler, BulkSampler):
            worker = _BulkWorker(self._bulks(order, bounds.tolist(), first, seed), self.read_ahead, self.low_priority)
            return worker, lambda batch, size: batch
        return extension().BatchLoader(self.sampler._core, order, bounds, seed, self.labels, self.labels_offset,
                                       self._fetch, self.num_threads, self.read_ahead, first,
                                       self.low_priority), batch_from_extension

    def _batches(self, core, bounds: list[int], first: int, wrap) -> Iterator[SampledBatch]:
        """Yields ``wrap(core.next(), batch size)`` for batches ``first:`` and stops ``core`` at
        the end; with ``prefetch_next_epoch``, taking the last batch starts the next epoch's workers."""
        try:
            for i in range(first, len(self)):
                try:
                    raw = core.next()
                except ValueError as exc:
                    raise InputError(str(exc)) from None
                if raw is None:
                    raise RuntimeError("this epoch's iteration was stopped by close() or by a newer iteration "
                                       "over the same loader")
                self._next_batch = i + 1
                if i == len(self) - 1 and self.prefetch_next_epoch:  # this epoch's workers have nothing left
                    self._prefetched = (self.epoch + 1, *self._start(self.epoch + 1, 0))
                yield wrap(raw, bounds[i + 1] - bounds[i])
            self._next_batch = 0
        finally:
            core.close()
            if self._core is core:
                self._core = None

    def _bulks(self, order: torch.Tensor, bounds: list[int], first: int, seed: int) -> Iterator[SampledBatch]:
        """The batches ``first:`` of an epoch with sampling seed ``seed``, ``minibatches_per_bulk`` at a time."""
        step = self.sampler.minibatches_per_bulk
        for start in range(first, len(self), step):
            stop = min(start + step, len(self))
            bulk = self.sampler.sample_bulk([order[bounds[i]:bounds[i + 1]] for i in range(start, stop)], seed, start)
            for batch in bulk:
                yield attach(batch, self.labels, self.labels_offset, self._fetch)

    def close(self) -> None:
        """Stops the worker threads of the current iteration and of a prefetched epoch, if any."""
        if self._core is not None:
            self._core.close()
            self._core = None
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


class _BulkWorker:
    """Runs ``batches`` (a generator of sampled batches) in a background thread, at most ``depth``
    batches ahead; ``next()`` and ``close()`` as the C++ ``BatchLoader``: ``None`` once closed,
    and the thread's exception (``ValueError`` from a corrupt graph too) raised in the consumer."""

    def __init__(self, batches: Iterator[SampledBatch], depth: int, low_priority: bool):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(batches, low_priority), name="salientpp-bulk",
                                        daemon=True)
        self._thread.start()

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, batches: Iterator[SampledBatch], low_priority: bool) -> None:
        if low_priority:  # as the C++ workers; the intra-op threads this thread starts inherit it
            extension().lower_thread_priority()
        try:
            for batch in batches:
                if not self._put(batch):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            self._put(exc)

    def next(self) -> SampledBatch | None:
        while not self._stop.is_set():
            try:
                item = self._queue.get(timeout=0.05)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    raise RuntimeError("the bulk sampling thread ended before its epoch did") from None
                continue
            if isinstance(item, BaseException):
                raise item
            return item
        return None

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
