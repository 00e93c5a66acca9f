"""Learnable node embeddings, partitioned like the features: :class:`DistEmbedding`.

Row ``v`` of the ``[N, D]`` table lives on ``v``'s owner. A lookup of a batch's ids gathers the
owned rows in place and fetches the others from their owners with the all-to-all of the feature
exchange (counts, ids, rows). Its backward only records the gradient of each distinct row; the
next :meth:`DistEmbedding.step` sends the gradients of remote rows back to their owners with one
all-to-all per lookup (the reverse of the fetch), and each owner sums what it got for a row and
applies a sparse optimiser (:mod:`salientpp.embedding.optim`) to the touched rows only.

**No cache.** Learnable rows are never cached: a cached copy would be stale after its owner's
next update, and a refresh rule (every N steps) would make the run depend on N and differ from a
single-process run. Every remote row a batch uses is fetched, so the embedding's traffic is the
batch's remote rows (``CommStats.remote`` of the features, before their cache). docs/embeddings.md
measures what that costs.

**Exactness.** The update of a row is a function of the summed gradient it receives, which does
not depend on how the table is partitioned: K ranks that look up the same ids as one process give
the same table, to float rounding of the sums. Gradients are averaged over the ranks, as DDP
averages the dense ones, so ``loss.backward()`` on each rank's mean loss updates the table as one
process would for the mean of the ranks' losses.

**Initial values** are a hash of ``(seed, original id, column)`` (splitmix64), so they do not
depend on the partitioning either.

**Lockstep.** :meth:`DistEmbedding.__call__` and :meth:`DistEmbedding.step` are collectives: every
rank makes the same number of lookups (with or without gradients, in the same order) and steps
together, as the loaders' lockstep batches make them. They use a process group of their own, so
they never interleave with the loaders' exchange or with DDP's all-reduces.
"""
from __future__ import annotations

import dataclasses
import io
import numbers
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
import torch.distributed as dist

from ..errors import InputError, check_int, check_keys, check_seed, shown
from ..hashing import GOLDEN, splitmix64_array
from ..io import check_torch_file, output_errors, replace_file, row_chunks
from ..resources import MemoryEstimate, check_memory
from ..sampling.convert import as_int64_tensor
from .optim import SparseOptimizer, describe, make_sparse_optimizer

Init = Callable[[np.ndarray, int], np.ndarray]
INITS = ("normal", "uniform")
# Bytes per entry of the table that initial_rows holds while it computes them (its float64
# hashes and Box-Muller temporaries; measured 48 for "normal", 32 for "uniform"): the built-in
# inits run in chunks of rows of about 16 MiB of them.
INIT_ENTRY_BYTES = 48
# The key of a shard's file that holds the run that wrote it (Checkpoint.run_id), beside the
# embedding's state.
RUN_ID = "run_id"


def hashed_uniform(seed: int, ids: np.ndarray, dim: int, stream: int = 0) -> np.ndarray:
    """float64 ``[n, dim]`` uniform in (0, 1): a hash of ``(seed, stream, ids[i], j)``, so a row is
    the same whichever process computes it."""
    counters = np.asarray(ids, dtype=np.uint64)[:, None] * np.uint64(dim) + np.arange(dim, dtype=np.uint64)
    with np.errstate(over="ignore"):
        key = splitmix64_array(np.array([int(seed) * 2 + stream], dtype=np.uint64) + GOLDEN)
        bits = splitmix64_array((counters ^ key) + GOLDEN)
    return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53


def initial_rows(name: str, seed: int, ids: np.ndarray, dim: int) -> np.ndarray:
    """float32 ``[n, dim]`` initial rows of original ids ``ids``: ``"normal"`` N(0, 1/dim) (Box-Muller
    over two hashed uniforms) or ``"uniform"`` U(-sqrt(3/dim), sqrt(3/dim)), both of variance 1/dim."""
    u = hashed_uniform(seed, ids, dim)
    if name == "uniform":
        rows = (2.0 * u - 1.0) * np.sqrt(3.0 / dim)
    else:
        rows = np.sqrt(-2.0 * np.log(u)) * np.cos(2.0 * np.pi * hashed_uniform(seed, ids, dim, 1)) / np.sqrt(dim)
    return rows.astype(np.float32)


@dataclass
class _Lookup:
    """What one lookup keeps for the gradient exchange of the next step.

    Attributes:
        own: the local rows of the distinct ids this rank owns (int64 ``[o]``).
        remote_counts: int64 ``[K]`` distinct remote ids requested from each owner.
        requested: local rows the others requested from us (int64 ``[r]``), in arrival order.
        requested_counts: int64 ``[K]`` how many each peer requested.
        inverse: int64 ``[n]`` position of each looked-up id among the distinct ones (owned
            first, then remote by owner).
        grad: float32 ``[o + sum(remote_counts), D]`` gradient of each distinct id, or ``None``
            until the backward pass.
    """

    own: torch.Tensor
    remote_counts: torch.Tensor
    requested: torch.Tensor
    requested_counts: torch.Tensor
    inverse: torch.Tensor
    grad: torch.Tensor | None = None


class _Gather(torch.autograd.Function):
    """``rows[inverse]`` whose backward sums the gradient of each distinct row into the lookup record."""

    @staticmethod
    def forward(ctx, anchor: torch.Tensor, rows: torch.Tensor, lookup: _Lookup) -> torch.Tensor:
        ctx.lookup, ctx.num_rows = lookup, rows.shape[0]
        return rows[lookup.inverse]

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        lookup = ctx.lookup
        grad = torch.zeros((ctx.num_rows, grad_out.shape[1]), dtype=torch.float32, device=grad_out.device)
        grad.index_add_(0, lookup.inverse, grad_out.float())
        lookup.grad = grad if lookup.grad is None else lookup.grad + grad
        return None, None, None


class DistEmbedding:
    """A learnable ``[N, dim]`` float32 node table, row ``v`` on ``v``'s owner (module docstring).

    Args:
        graph: the :class:`~salientpp.loader.graph.DistGraph` whose nodes it embeds.
        dim: D, the width of a row (>= 1).
        node_types: the names of the node types it embeds (a typed graph's featureless types);
            ``None``: every node. A rank holds a row for each node it owns of those types.
        init: ``"normal"`` or ``"uniform"`` (variance 1/D, hashed from the original ids; see
            :func:`initial_rows`) or ``init(original_ids int64 [n], dim) -> float32 [n, dim]``.
        optimizer: ``"adam"`` or ``"adagrad"``: the sparse optimiser of the owned rows
            (:data:`~salientpp.embedding.optim.SPARSE_OPTIMIZERS`); lr: its learning rate.
        seed: seeds the hashed initial values.

    Constructing it is a collective (it creates its own process group): do it on every rank in
    the same order. Use::

        emb = DistEmbedding(graph, 64)
        h = emb(batch.n_id)              # [num_nodes, 64], differentiable
        loss.backward(); emb.step()      # every rank, every step

    Attributes:
        weight: float32 ``[num_owned, dim]`` the owned rows: those of the rank's block of each
            embedded type, in id order (with one type, row i is global id ``graph.offset + i``).
        types: int64 ``[T']`` the indices of the node types it embeds (ascending), or ``None`` for
            every node.
        optimizer: the :class:`~salientpp.embedding.optim.SparseOptimizer` of ``weight``.
        stats: counters of the rows the lookups fetched since :meth:`reset_stats`
            (:class:`~salientpp.distributed.exchange.CommStats`; ``owned`` counts the owned ones).
    """

    def __init__(self, graph, dim: int, init: str | Init = "normal", optimizer: str = "adam", lr: float = 0.01,
                 seed: int = 0, node_types: Sequence[str] | None = None):
        from ..distributed.exchange import CommStats, RowExchange

        dim = check_int(dim, "the embedding dimension", hint="pass e.g. 64")
        seed = check_seed(seed, "the embedding seed")
        if isinstance(init, str) and init not in INITS:
            raise InputError(f"unknown embedding init {init!r}; choose {' or '.join(INITS)} or pass a function "
                             "init(original_ids, dim) -> float32 [n, dim]")
        self.graph, self.dim = graph, dim
        book = graph.book
        types = range(book.num_types) if node_types is None else [graph.schema.type_index(t) for t in node_types]
        self.types = None if len(types) == book.num_types else torch.tensor(sorted(types), dtype=torch.int64)
        blocks = [book.block(graph.rank, t) for t in sorted(types)]
        # the first id of each embedded block of this rank, and its first row in weight
        self._starts = torch.tensor([start for start, _ in blocks], dtype=torch.int64)
        self._rows = torch.tensor(np.cumsum([0] + [stop - start for start, stop in blocks])[:-1], dtype=torch.int64)
        self.offset, self.num_owned = graph.offset, sum(stop - start for start, stop in blocks)
        self._check_memory(graph.rank, isinstance(init, str))
        self.offsets = torch.tensor(np.asarray(book.offsets), dtype=torch.int64)
        orig = graph.original_ids(self.owned_ids())
        if isinstance(init, str):  # row by row the same values, in chunks of bounded temporaries
            self.weight = torch.empty((self.num_owned, dim), dtype=torch.float32)
            for lo, hi in row_chunks(self.num_owned, dim * INIT_ENTRY_BYTES):
                self.weight[lo:hi] = torch.from_numpy(initial_rows(init, seed, orig[lo:hi], dim))
        else:
            rows = np.asarray(init(orig, dim))
            if rows.shape != (self.num_owned, dim):
                raise InputError(f"the embedding init returned shape {list(rows.shape)}, not [{self.num_owned}, {dim}]")
            self.weight = torch.tensor(rows, dtype=torch.float32)
        self.optimizer: SparseOptimizer = make_sparse_optimizer(optimizer, self.weight, lr)
        ctx = graph.ctx
        if ctx.distributed:  # a group of its own (rows) and, under NCCL, a gloo one for the counts
            timeout = timedelta(seconds=ctx.timeout_s)
            rows_group = dist.new_group(backend=ctx.backend, timeout=timeout)
            counts_group = dist.new_group(backend="gloo", timeout=timeout) if ctx.backend == "nccl" else rows_group
            ctx = dataclasses.replace(ctx, exchange_group=rows_group, count_group=counts_group)
        self.ctx = ctx
        self.exchange = RowExchange(ctx, self._serve, dim, torch.float32)
        self.stats = self.exchange.stats = CommStats()
        self._anchor = torch.zeros((), requires_grad=True)  # makes a lookup's output part of the graph
        self._lookups: list[_Lookup] = []

    def _check_memory(self, rank: int, built_in_init: bool) -> None:
        """:class:`InputError` unless this rank's table and its initial values fit in the available
        memory: the float32 ``[num_owned, dim]`` table, and a built-in init's chunk of temporaries
        or the array a user's init returns (float32 assumed)."""
        entries = self.num_owned * self.dim
        chunk_rows = next(((hi - lo) for lo, hi in row_chunks(self.num_owned, self.dim * INIT_ENTRY_BYTES)), 0)
        check_memory(MemoryEstimate(
            f"an embedding table of {self.num_owned:,} rows x {self.dim:,} float32 columns on rank {rank}",
            {"embedding table": 4 * entries,
             "initial values": chunk_rows * self.dim * INIT_ENTRY_BYTES if built_in_init else 4 * entries},
            advice="use a smaller embedding dimension (or more partitions)"), None)

    def owned_ids(self) -> np.ndarray:
        """int64 ``[num_owned]`` the global id of each row of :attr:`weight`."""
        return np.concatenate([np.arange(start, start + rows) for start, rows in
                               zip(self._starts.tolist(), np.diff(self._rows.tolist() + [self.num_owned]).tolist())])

    def _local(self, ids: torch.Tensor) -> torch.Tensor:
        """int64 row in :attr:`weight` of each of the owned ids ``ids`` (CPU)."""
        if self._starts.shape[0] == 1:
            return ids - self._starts[0]
        block = torch.searchsorted(self._starts, ids, right=True) - 1
        return ids - self._starts[block] + self._rows[block]

    def _serve(self, ids: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:  # one width: counts unread
        return self.weight[self._local(ids.cpu())].to(self.ctx.comm_device)

    def reset_stats(self) -> None:
        from ..distributed.exchange import CommStats

        self.stats = self.exchange.stats = CommStats()

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        """float32 ``[n, dim]`` rows of global ids ``ids`` (int64 ``[n]`` in ``[0, num_nodes)``, any
        device, repeats allowed), on ``ids``' device; differentiable when gradients are enabled (a
        collective). Other ids are refused with :class:`InputError`."""
        if not isinstance(ids, torch.Tensor):
            raise InputError(f"the embedding ids must be an int64 tensor of node ids, got a {type(ids).__name__}; "
                             "pass e.g. batch.n_id")
        device = ids.device
        uniq, inverse = torch.unique(as_int64_tensor(ids.cpu(), "the embedding ids"), return_inverse=True)
        # sorted, so grouped by owner, and its ends are the smallest and the largest id
        if uniq.shape[0] and (int(uniq[0]) < 0 or int(uniq[-1]) >= self.graph.num_nodes):
            bad = int(uniq[0]) if int(uniq[0]) < 0 else int(uniq[-1])
            raise InputError(f"the embedding ids must be node ids in [0, {self.graph.num_nodes}), got {bad}; pass "
                             "ids of this graph, e.g. batch.n_id")
        if self.types is not None and uniq.shape[0]:
            outside = ~torch.isin(self.graph.book.type_of(uniq), self.types)
            if bool(outside.any()):
                names = self.graph.schema.node_types
                raise InputError(f"the embedding holds the node types {', '.join(names[t] for t in self.types)}, but "
                                 f"the id {int(uniq[outside][0])} is of the type "
                                 f"{names[int(self.graph.book.type_of(uniq[outside][:1])[0])]}; look up ids of those "
                                 "types only")
        bounds = torch.searchsorted(uniq, self.offsets)
        rank = self.ctx.rank
        lo, hi = int(bounds[rank]), int(bounds[rank + 1])
        remote_counts = bounds.diff()
        remote_counts[rank] = 0
        remote = torch.cat([uniq[:lo], uniq[hi:]])
        own = self._local(uniq[lo:hi])
        requested_counts = self.exchange.counts(remote_counts).wait()
        requested = self.exchange.ids(remote, remote_counts, requested_counts).wait()
        fetched = self.exchange.rows(requested, requested_counts, remote_counts).wait().cpu().view(-1, self.dim)
        self.stats.owned += int(own.shape[0])
        rows = torch.cat([self.weight[own], fetched])  # owned first, then remote by owner
        # uniq's order is [before | own | after]; rows' is [own | before | after]
        position = torch.cat([torch.arange(lo, hi), torch.arange(lo), torch.arange(hi, uniq.shape[0])])
        where = torch.empty_like(position)
        where[position] = torch.arange(position.shape[0])
        lookup = _Lookup(own, remote_counts, self._local(requested.cpu()), requested_counts, where[inverse])
        if not torch.is_grad_enabled():
            return rows[lookup.inverse].to(device)
        self._lookups.append(lookup)
        return _Gather.apply(self._anchor, rows, lookup).to(device)

    def step(self) -> None:
        """Send the gradients of the lookups since the last step to the rows' owners and apply the
        sparse optimiser to the owned rows they touched (a collective; a lookup whose output got
        no gradient counts as zero)."""
        rows, grads = [], []
        for lookup in self._lookups:
            num_own = lookup.own.shape[0]
            grad = lookup.grad
            if grad is None:
                grad = torch.zeros((num_own + int(lookup.remote_counts.sum()), self.dim), dtype=torch.float32)
            back = self.exchange.send_back(grad[num_own:], lookup.remote_counts, lookup.requested_counts).wait()
            rows += [lookup.own, lookup.requested]
            grads += [grad[:num_own].cpu(), back.cpu()]
        self._lookups = []
        if not rows:
            return
        rows_all = torch.cat(rows)
        touched, inverse = torch.unique(rows_all, return_inverse=True)
        summed = torch.zeros((touched.shape[0], self.dim), dtype=torch.float32)
        summed.index_add_(0, inverse, torch.cat(grads))
        if self.ctx.world_size > 1:
            summed /= self.ctx.world_size
        self.optimizer.step(touched, summed)

    def zero_grad(self) -> None:
        """Forget the lookups since the last step without updating (every rank together)."""
        self._lookups = []

    # -- checkpoints -------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The owned rows and their optimiser state (tensors and numbers only)."""
        return {"offset": self.offset, "weight": self.weight.clone(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` of the same rank of the same partitioning (:class:`InputError`
        for another dict)."""
        check_keys(state, ("offset", "weight", "optimizer"), "the embedding state",
                   "pass what DistEmbedding.state_dict() returned")
        offset, weight = state["offset"], state["weight"]
        if (not isinstance(weight, torch.Tensor) or tuple(weight.shape) != tuple(self.weight.shape)
                or isinstance(offset, bool) or not isinstance(offset, numbers.Integral) or offset != self.offset):
            raise InputError(f"the embedding shard holds rows {offset!r}.. of {describe(weight)}, but rank "
                             f"{self.ctx.rank} owns rows {self.offset}.. of {describe(self.weight)}; resume with the "
                             "same partitioning, ranks and --embedding-dim")
        self.weight.copy_(weight)
        self.optimizer.load_state_dict(state["optimizer"])


def shard_name(tag: str, rank: int) -> str:
    """The file of ``rank``'s embedding shard of checkpoint ``tag`` (e.g. ``"e3s0"``)."""
    return f"embedding-{tag}.rank{rank}.pt"


def save_shard(directory: str | os.PathLike, tag: str, emb: DistEmbedding, run_id: str) -> None:
    """Write this rank's shard of checkpoint ``tag`` of the run ``run_id`` atomically (a temporary
    name, then a rename): ``emb.state_dict()`` and, under :data:`RUN_ID`, the run's identity."""
    path = Path(directory) / shard_name(tag, emb.ctx.rank)
    with output_errors(path):
        path.parent.mkdir(exist_ok=True)
    buffer = io.BytesIO()
    torch.save({**emb.state_dict(), RUN_ID: run_id}, buffer)
    replace_file(path, buffer.getvalue())


def load_shard(directory: str | os.PathLike, tag: str, emb: DistEmbedding, run_id: str, fix: str) -> None:
    """Load this rank's shard of checkpoint ``tag`` of the run ``run_id`` (the checkpoint's
    ``run_id``) into ``emb``. :class:`InputError` ending in ``fix`` when the shard is missing,
    damaged or written by another run (a shard without a run id belongs to a checkpoint without one)."""
    path = Path(directory) / shard_name(tag, emb.ctx.rank)
    if not path.is_file():
        raise InputError(f"the checkpoint in {directory} has no embedding shard {path.name} for rank {emb.ctx.rank}; "
                         f"{fix}")
    check_torch_file(path, fix)
    try:
        state = torch.load(path, weights_only=True)
    except Exception as exc:  # a damaged archive directory that no record's checksum covers
        raise InputError(f"{path} is not a readable embedding shard ({type(exc).__name__}); {fix}") from None
    written_by = state.pop(RUN_ID, "") if isinstance(state, dict) else ""
    if written_by != run_id:
        raise InputError(f"the embedding shard {path} was written by another run ({shown(written_by or 'unnamed')}) "
                         f"than the checkpoint in {directory} ({shown(run_id or 'unnamed')}); {fix}")
    emb.load_state_dict(state)


def remove_stale_shards(directory: str | os.PathLike, keep: set[str], rank: int) -> None:
    """Delete this rank's shards of checkpoints other than the tags in ``keep``."""
    for path in Path(directory).glob(f"embedding-*.rank{rank}.pt"):
        if path.name not in {shard_name(tag, rank) for tag in keep}:
            path.unlink(missing_ok=True)
