"""A background thread that samples an epoch's batches ahead of the consumer: how a sampler that
draws in Python runs in a loader (:meth:`~salientpp.sampling.sampler.BaseSampler.start_epoch`)."""
from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from .._ext import extension


class ThreadWorker:
    """Runs ``batches`` (a generator of sampled batches) in a background thread, at most ``depth``
    batches ahead; ``next()`` and ``close()`` as the C++ ``BatchLoader``: ``None`` once closed,
    and the thread's exception (``ValueError`` from a corrupt graph too) raised in the consumer."""

    def __init__(self, batches: Iterator, depth: int, low_priority: bool):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(batches, low_priority), name="salientpp-sampler",
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

    def _run(self, batches: Iterator, low_priority: bool) -> None:
        if low_priority:  # as the C++ workers; the intra-op threads this thread starts inherit it
            extension().lower_thread_priority()
        try:
            for batch in batches:
                if not self._put(batch):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            self._put(exc)

    def next(self):
        """The next batch, ``None`` once closed; raises what the thread raised."""
        while not self._stop.is_set():
            try:
                item = self._queue.get(timeout=0.05)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    raise RuntimeError("the sampling thread ended before its epoch did") from None
                continue
            if isinstance(item, BaseException):
                raise item
            return item
        return None

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
