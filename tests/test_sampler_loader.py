"""NeighborLoader: batching, shuffling, determinism across threads, shutdown."""
from __future__ import annotations

import gc
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from salientpp._ext import extension
from salientpp.data.csr import build_csr
from salientpp.data.schema import GraphSchema
from salientpp.errors import InputError
from salientpp.sampling import NeighborLoader, NeighborSampler
from salientpp.sampling.link import LinkEnds
from salientpp.sampling.link_loader import LinkNeighborLoader


@pytest.fixture(scope="module")
def graph():
    rng = np.random.default_rng(0)
    rowptr, col = build_csr(rng.integers(0, 5000, size=(2, 30000)), 5000)
    return NeighborSampler(rowptr, col, [5, 3]), rng.integers(0, 7, 5000).astype(np.int64)


def same_batch(a, b) -> bool:
    return (torch.equal(a.n_id, b.n_id) and a.batch_size == b.batch_size
            and all(torch.equal(x.edge_index, y.edge_index) and torch.equal(x.rowptr, y.rowptr)
                    for x, y in zip(a.mfgs, b.mfgs))
            and (a.y is None) == (b.y is None) and (a.y is None or torch.equal(a.y, b.y)))


@pytest.mark.parametrize("drop_last,expected", [(False, [64] * 15 + [40]), (True, [64] * 15)])
def test_len_drop_last_and_cover(graph, drop_last, expected):
    sampler, labels = graph
    seeds = np.arange(1000, dtype=np.int64) * 5
    loader = NeighborLoader(sampler, seeds, 64, drop_last=drop_last, sampler_threads=2, labels=labels)
    batches = list(loader)
    assert len(loader) == len(batches) == len(expected)
    assert [b.batch_size for b in batches] == expected
    taken = torch.cat([b.n_id[:b.batch_size] for b in batches]).numpy()
    assert np.unique(taken).shape[0] == taken.shape[0] == sum(expected)
    assert np.isin(taken, seeds).all()
    assert all(torch.equal(b.y, torch.from_numpy(labels)[b.n_id[:b.batch_size]]) for b in batches)


def test_shuffle_and_epochs(graph):
    sampler, _ = graph
    seeds = torch.arange(0, 5000, 3)
    plain = NeighborLoader(sampler, seeds, 100, shuffle=False)
    assert torch.equal(torch.cat([b.n_id[:b.batch_size] for b in plain]), seeds)
    loader = NeighborLoader(sampler, seeds, 100, shuffle=True, seed=1)
    first = torch.cat([b.n_id[:b.batch_size] for b in loader])
    again = torch.cat([b.n_id[:b.batch_size] for b in loader])
    loader.set_epoch(1)
    second = torch.cat([b.n_id[:b.batch_size] for b in loader])
    assert torch.equal(first, again)
    assert torch.equal(torch.sort(first).values, seeds) and not torch.equal(first, seeds)
    assert not torch.equal(first, second)


def test_same_batches_for_any_thread_count(graph):
    sampler, labels = graph
    seeds = torch.arange(0, 5000, 2)

    def epoch(threads, depth):
        loader = NeighborLoader(sampler, seeds, 128, seed=7, sampler_threads=threads, read_ahead=depth, labels=labels)
        loader.set_epoch(3)
        return loader, list(loader)

    loader, one = epoch(1, 1)
    _, two = epoch(2, 3)
    assert len(one) == len(two) == 20
    assert all(same_batch(a, b) for a, b in zip(one, two))
    # Batch i is exactly sampler.sample(order slice i) with the stream (epoch_seed, i).
    order = loader.epoch_order()
    for i in (0, 19):
        direct = sampler.sample(order[i * 128:(i + 1) * 128], seed=loader.epoch_seed(), batch_index=i, labels=labels)
        assert same_batch(one[i], direct)
    other = NeighborLoader(sampler, seeds, 128, seed=8)
    other.set_epoch(3)
    assert not torch.equal(next(iter(other)).n_id, one[0].n_id)


def _nice_values() -> dict[int, int]:
    """The nice value of every thread of this process (field 19 of /proc/self/task/TID/stat)."""
    values = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        values[int(task.name)] = int(fields[16])
    return values


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_low_priority_workers_run_some_nice_steps_below_the_consumer_and_yield_the_same_batches(graph):
    """With low_priority the workers run the extension's ``sampler_nice_offset`` (5) nice steps
    below the consumer (at most 19) and the consumer samples a batch itself when
    it is not ready (also one a worker has started, whose copy is then dropped): whichever thread
    samples batch i, it is the same batch. A consumer that sometimes waits and sometimes does not
    exercises both paths."""
    sampler, labels = graph
    seeds = torch.arange(0, 5000, 2)
    reference = NeighborLoader(sampler, seeds, 64, seed=3, sampler_threads=1, read_ahead=1, labels=labels)
    expected = list(reference)
    before = _nice_values()
    low = min(19, before[threading.get_native_id()] + extension().sampler_nice_offset)
    for threads, depth in ((1, 1), (2, 4), (3, 2)):
        loader = NeighborLoader(sampler, seeds, 64, seed=3, sampler_threads=threads, read_ahead=depth, labels=labels,
                                low_priority=True)
        got, niced = [], set()
        for i, batch in enumerate(loader):
            if i == 1:
                niced = {tid for tid, nice in _nice_values().items() if nice == low and tid not in before}
            if i % 3 == 0:
                time.sleep(0.01)  # let the workers finish some batches first
            got.append(batch)
        assert len(got) == len(expected) and all(same_batch(a, b) for a, b in zip(got, expected))
        assert len(niced) >= 1, (threads, depth)  # the worker threads, not the consumer
    assert _nice_values()[threading.get_native_id()] == before[threading.get_native_id()]


def test_abandoned_epochs_shut_down(graph):
    sampler, _ = graph
    seeds = torch.arange(5000)
    loader = NeighborLoader(sampler, seeds, 50, sampler_threads=2, read_ahead=2)
    first = iter(loader)
    next(first)
    second = iter(loader)  # stops the workers of the first iteration
    with pytest.raises(RuntimeError, match="stopped"):
        next(first)
    assert next(second).batch_size == 50
    del first, second
    for _ in range(3):  # abandon with a full queue, then drop the loader entirely
        it = iter(NeighborLoader(sampler, seeds, 50, sampler_threads=2, read_ahead=4))
        next(it)
        del it
        gc.collect()
    assert threading.active_count() >= 1  # reaching this line means nothing hung


def _epochs(loader, starts):
    """The batches of each ``(epoch, first batch)`` in ``starts``, iterated in turn."""
    out = []
    for epoch, first in starts:
        loader.load_state_dict({"epoch": epoch, "next_batch": first})
        out.append(list(loader))
    return out


@pytest.mark.parametrize("low_priority", [False, True])
def test_prefetching_the_next_epoch_gives_the_batches_a_fresh_loader_gives(graph, low_priority):
    """Taking an epoch's last batch starts the workers on the next epoch; the next epoch uses
    them, and any other start (an epoch skipped, the same epoch again, a resumed epoch) discards
    them. Every iteration yields what a loader without prefetching yields."""
    sampler, labels = graph
    seeds = torch.arange(0, 5000, 4)
    options = dict(seed=11, sampler_threads=2, read_ahead=3, labels=labels, low_priority=low_priority)
    starts = [(0, 0), (1, 0), (2, 0), (4, 0), (4, 0), (5, 3), (6, 0)]
    plain = _epochs(NeighborLoader(sampler, seeds, 100, **options), starts)
    loader = NeighborLoader(sampler, seeds, 100, prefetch_next_epoch=True, **options)
    used = []
    for (epoch, first), expected in zip(starts, plain):
        loader.load_state_dict({"epoch": epoch, "next_batch": first})
        prefetched = loader._prefetched
        used.append(prefetched is not None and (prefetched[0], first) == (epoch, 0))
        batches = list(loader)
        assert len(batches) == len(expected) and all(same_batch(a, b) for a, b in zip(batches, expected))
        assert loader._prefetched is not None and loader._prefetched[0] == epoch + 1
    assert used == [False, True, True, False, False, False, True]
    loader.close()
    assert loader._prefetched is None


def test_a_link_loader_prefetching_the_next_epoch_yields_the_same_batches_and_links(graph):
    sampler, _ = graph
    edges = torch.from_numpy(np.random.default_rng(5).integers(0, 5000, size=(2, 700)))
    schema = GraphSchema.homogeneous(sampler.num_nodes)
    ends = LinkEnds.of(schema, schema.relations[0], schema.offsets)
    loaders = [LinkNeighborLoader(sampler, edges, 128, num_negatives=2, seed=4, sampler_threads=2, prefetch_next_epoch=p,
                                  ends=ends) for p in (False, True)]
    for epoch in (0, 1, 2, 5):
        got = []
        for loader in loaders:
            loader.set_epoch(epoch)
            got.append((list(loader), loader.links()))
        (plain, plain_links), (batches, links) = got
        assert all(same_batch(a, b) for a, b in zip(plain, batches, strict=True))
        assert all(torch.equal(a.edge_label_index, b.edge_label_index) and torch.equal(a.nodes, b.nodes)
                   for a, b in zip(plain_links, links, strict=True))
    loaders[1].close()


def test_a_loader_without_prefetching_starts_no_workers_after_an_epoch(graph):
    sampler, _ = graph
    loader = NeighborLoader(sampler, torch.arange(500), 100, sampler_threads=2)
    assert len(list(loader)) == 5
    assert loader._prefetched is None and loader._worker is None


def test_worker_error_reaches_the_consumer():
    rowptr, col = build_csr(np.array([[0, 1, 2], [1, 2, 3]]), 4)
    col = col.copy()
    col[-1] = 99  # corrupt neighbour of node 3
    loader = NeighborLoader(NeighborSampler(rowptr, col, [-1]), [0, 1, 2, 3], 1, shuffle=False, sampler_threads=2)
    batches = iter(loader)
    assert [next(batches).batch_size for _ in range(3)] == [1, 1, 1]
    with pytest.raises(InputError, match="corrupt"):
        next(batches)


@pytest.mark.parametrize("kwargs,match", [
    (dict(batch_size=0), "batch_size"),
    (dict(sampler_threads=0), "sampler_threads"),
    (dict(read_ahead=0), "read_ahead"),
    (dict(seeds=[1, 1]), "duplicate"),
    (dict(labels=np.zeros(10, dtype=np.int64)), "labels cover"),
    (dict(seed=1.5), r"seed must be an integer in \[0, 2\^63\), got 1.5"),
    (dict(seed=2**63), r"seed must be an integer in \[0, 2\^63\), got 9223372036854775808"),
])
def test_bad_loader_arguments(graph, kwargs, match):
    sampler, _ = graph
    args = dict(seeds=np.arange(100), batch_size=10) | kwargs
    with pytest.raises(InputError, match=match):
        NeighborLoader(sampler, **args)


def test_a_typed_loader_gives_the_batches_of_the_typed_sampler_with_their_types():
    from test_sampler import typed_graph

    schema, rowptr, col, edge_rel = typed_graph()
    sampler = NeighborSampler(rowptr, col, {"cites": [4, 2], "writes": [3, 1], "rev_writes": [0, 2],
                                            "affiliated_with": [1, 1], "rev_affiliated_with": [2, 0]},
                              edge_rel=edge_rel, schema=schema)
    loader = NeighborLoader(sampler, np.arange(0, 300, 2), 32, sampler_threads=2, seed=5, num_batches=6)
    loader.set_epoch(1)
    order, bounds = loader.epoch_order(), loader.batch_bounds()
    for i, batch in enumerate(loader):
        expected = sampler.sample(order[bounds[i]:bounds[i + 1]], loader.epoch_seed(), i)
        assert same_batch(batch, expected) and torch.equal(batch.node_type, expected.node_type)
        assert all(torch.equal(x.edge_type, y.edge_type) for x, y in zip(batch.mfgs, expected.mfgs))
        assert np.array_equal(batch.node_type.numpy(), schema.type_of(batch.n_id.numpy()))
