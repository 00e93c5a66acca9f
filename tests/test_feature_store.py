"""The features the pipeline assembles equal the unpartitioned x[n_id], for every batch."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from salientpp.data.format import load_dataset, save_dataset
from salientpp.data.synthetic import synthetic_dataset
from salientpp.distributed import CommStats, init_distributed, launch, shutdown_distributed
from salientpp.distributed.feature_store import FeatureStore
from salientpp.distributed.group import DistContext
from salientpp.partition.book import PartitionBook
from salientpp.distributed.device import DeviceOps, Event, HostOps
from salientpp.partition.partitioner import partition_dataset
from salientpp.loader.dist_loader import DistNeighborLoader
from salientpp.train import TrainConfig
from trainers import rank_trainer


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fs")
    ds = synthetic_dataset("tiny")
    save_dataset(ds, root / "data")
    for k in (2, 4):
        partition_dataset(ds, root / f"p{k}", k)
    return root


def _check_batches(part_dir: str, data_dir: str, cache: str, replication: float, device_fraction: float,
                   depth: int, deferred: bool = False) -> tuple[bool, int, dict]:
    ctx = init_distributed("cpu", timeout_s=60)
    config = TrainConfig(part_dir, epochs=1, hidden=8, layers=2, fanouts=(4, 3), batch_size=24, policy=cache,
                         replication=None if cache == "none" else replication, device_fraction=device_fraction,
                         pipeline_depth=depth,
                         eval_fanouts=(3, 3), eval_batch_size=200, progress=False).validate()
    trainer = rank_trainer(config, ctx)
    x_new = np.asarray(load_dataset(data_dir).x)[np.asarray(trainer.graph.data.orig_id)]
    ok, batches, stats = True, 0, CommStats()
    evaluation = DistNeighborLoader(trainer.graph, trainer.evaluator.seeds, config.eval_fanouts,
                                    config.eval_batch_size, plan=trainer.cache_info["plan"],
                                    device_fraction=config.device_fraction, pipeline_depth=depth)
    for loader in (trainer.loader, evaluation):
        if deferred:  # the side stream's work runs only when the loader waits for it
            loader.ops = DeferredOps()
        for batch in loader:
            ok &= torch.equal(batch.x, torch.from_numpy(x_new[batch.n_id.numpy()]))
            batches += batch.batch_size > 0
        stats.add(loader.stats)
    shutdown_distributed(ctx)
    return ok, batches, stats.as_dict()


@pytest.mark.parametrize("nprocs,cache,alpha,device_fraction,depth,deferred", [
    (2, "none", 0.0, 0.0, 1, False),  # everything remote is fetched, stages one after another
    (4, "vip", 0.5, 0.3, 3, False),   # owned rows split over two tiers, half the remote rows cached
    (2, "vip", 0.5, 0.3, 3, True),    # the same with the side stream's work deferred until waited for
])
def test_assembled_features_equal_unpartitioned_rows(tiny_dirs, nprocs, cache, alpha, device_fraction, depth,
                                                     deferred):
    results = launch(_check_batches, (str(tiny_dirs / f"p{nprocs}"), str(tiny_dirs / "data"), cache, alpha,
                                      device_fraction, depth, deferred), nprocs=nprocs)
    for ok, batches, stats in results:
        assert ok and batches > 0
        assert stats["received"] > 0  # the exchange path was exercised, not only local rows
        if cache == "none":
            assert stats["device_hits"] == 0
        else:
            assert stats["device_hits"] > 0


class DeferredOps(DeviceOps):
    """A side stream simulated on the CPU: uploads and launches queue up and run, in order, only
    when an event recorded after them is waited for; until then uploads and buffers hold garbage.
    A consumer that used a batch before waiting would see the garbage."""

    def __init__(self):
        super().__init__(torch.device("cpu"))
        self.queue, self.done = [], 0

    def empty(self, shape, dtype):
        return torch.full(shape, float("nan")).to(dtype)

    def upload(self, t):
        out = torch.full_like(t, -1 if not t.is_floating_point() else float("nan"))
        self.queue.append(lambda: out.copy_(t))
        return out

    def launch(self, fn):
        self.queue.append(lambda: fn(0))

    def receive(self, pending):
        return pending.wait()

    def record(self):
        return Event(len(self.queue))

    def wait(self, event):
        for work in self.queue[self.done:event.handle]:
            work()
        self.done = max(self.done, event.handle)


def _origins(**fields) -> SimpleNamespace:
    """Hand-built row origins of one type on rank 0 of 2 (its remote rows all from rank 1)."""
    count = lambda name: torch.tensor([fields[name].shape[0]])  # noqa: E731
    num_rows = sum(fields[name].shape[0] for name in ("owned_pos", "remote_pos", "device_pos", "host_pos"))
    return SimpleNamespace(**fields, num_rows=torch.tensor([num_rows]), owned_counts=count("owned_pos"),
                           device_counts=count("device_pos"), host_counts=count("host_pos"),
                           remote_counts=torch.tensor([0, fields["remote_pos"].shape[0]]))


def test_assembly_is_complete_only_after_the_consumer_waits_for_its_event():
    """All four sources (owned rows in two tiers, received rows, both cache tiers) land at their
    positions, and the result is there once the event is waited for, not before."""
    gen = torch.Generator().manual_seed(3)
    book = PartitionBook(np.array([0, 40, 100], dtype=np.int64))
    local_x = torch.randn(40, 6, generator=gen).numpy()
    ctx = DistContext(0, 2, 0, torch.device("cpu"), torch.device("cpu"), None)
    store = FeatureStore(ctx, book, local_x, np.random.default_rng(0).permutation(40), num_device_owned=15)
    store.cache_device[0], store.cache_host[0] = torch.randn(5, 6, generator=gen), torch.randn(7, 6, generator=gen)
    received = torch.randn(9, 6, generator=gen)
    pos = torch.randperm(12 + 9 + 4 + 6, generator=gen)
    owned_local = torch.randint(0, 40, (12,), generator=gen)
    plan = _origins(x=[None], owned_pos=pos[:12], owned_row=store.local_row[owned_local],
                    remote_pos=pos[12:21], device_pos=pos[21:25], device_slot=torch.tensor([4, 0, 0, 2]),
                    host_pos=pos[25:], host_slot=torch.tensor([6, 5, 1, 0, 3, 3]))
    expected = torch.empty(31, 6)
    expected[plan.owned_pos] = torch.from_numpy(local_x)[owned_local]
    expected[plan.remote_pos] = received
    expected[plan.device_pos] = store.cache_device[0][plan.device_slot]
    expected[plan.host_pos] = store.cache_host[0][plan.host_slot]

    assert torch.equal(store.assemble(plan, received, CommStats(), HostOps())[0], expected)
    ops = DeferredOps()
    x = store.assemble(plan, received, CommStats(), ops)[0]
    ready = ops.record()
    assert torch.isnan(x).all()  # nothing has run on the simulated side stream yet
    ops.wait(ready)
    assert torch.equal(x, expected)


def test_assembly_completes_the_x_the_sampler_threads_started_in_place():
    """On CPU runs the plan carries x with the owned rows written; the assembly writes the other
    sources into that same tensor and leaves the owned rows as they are."""
    gen = torch.Generator().manual_seed(4)
    book = PartitionBook(np.array([0, 40, 100], dtype=np.int64))
    ctx = DistContext(0, 2, 0, torch.device("cpu"), torch.device("cpu"), None)
    store = FeatureStore(ctx, book, torch.randn(40, 6, generator=gen).numpy())
    store.cache_device[0], store.cache_host[0] = torch.randn(5, 6, generator=gen), torch.randn(7, 6, generator=gen)
    received = torch.randn(9, 6, generator=gen)
    pos = torch.randperm(12 + 9 + 4 + 6, generator=gen)
    started = torch.full((31, 6), float("nan"))
    started[pos[:12]] = torch.randn(12, 6, generator=gen)
    plan = _origins(x=[started.clone()], owned_pos=pos[:12], owned_row=torch.zeros(12, dtype=torch.int64),
                    remote_pos=pos[12:21], device_pos=pos[21:25], device_slot=torch.tensor([4, 0, 0, 2]),
                    host_pos=pos[25:], host_slot=torch.tensor([6, 5, 1, 0, 3, 3]))
    expected = started.clone()
    expected[plan.remote_pos] = received
    expected[plan.device_pos] = store.cache_device[0][plan.device_slot]
    expected[plan.host_pos] = store.cache_host[0][plan.host_slot]

    x = store.assemble(plan, received, CommStats(), HostOps())[0]
    assert x.data_ptr() == plan.x[0].data_ptr()
    assert torch.equal(x, expected)


def test_homogeneous_exchange_counters_keep_their_seven_fields_and_a_typed_one_adds_rows_per_type():
    stats = CommStats(owned=3, received=2)
    assert stats.to_tensor().shape == (7,) and "received_by_type" not in stats.as_dict()  # as before typed graphs
    assert CommStats.from_tensor(stats.to_tensor()) == stats
    typed = CommStats(received=5, received_by_type=[0, 4, 1])
    typed.add(CommStats(received=2, received_by_type=[0, 1, 1]))
    assert typed.received_by_type == [0, 5, 2] and typed.as_dict()["received_by_type"] == [0, 5, 2]
    assert CommStats.from_tensor(typed.to_tensor()) == typed  # summed over ranks and checkpointed whole


# ---- typed graphs: one store, per-type tiers ----------------------------------------------------------

TYPED_BOOK = PartitionBook(np.array([0, 100, 200, 300]), np.array([0, 40, 60, 100, 150, 170, 200, 230, 260, 300]))


def test_a_typed_store_numbers_each_types_cache_rows_and_caches_nothing_of_a_type_without_features():
    """The plan's global cache slots become rows of each type's tiers (device tier first, the
    plan's slot order within a tier); type 1 has no features, so none of its ids is cached."""
    ctx = DistContext(0, 3, 0, torch.device("cpu"), torch.device("cpu"), None)
    features = {0: np.zeros((40, 4), np.float32), 2: np.zeros((40, 7), np.float32)}
    rng = np.random.default_rng(2)
    cached = rng.choice(np.arange(100, 300), 90, replace=False)
    plan_slot = np.full(300, -1, dtype=np.int64)
    plan_slot[cached] = rng.permutation(90)
    store = FeatureStore(ctx, TYPED_BOOK, features, cache_slot=plan_slot, num_device_slots=30)
    types = TYPED_BOOK.type_of(np.arange(300))
    slot = store.cache_slot.numpy()
    assert (slot[types == 1] == -1).all() and store.widths == [4, 0, 7] and store.featured == [0, 2]
    assert store.num_cached == int(np.count_nonzero(types[cached] != 1))
    for t in (0, 2):
        mine = cached[types[cached] == t]
        device, host = mine[plan_slot[mine] < 30], mine[plan_slot[mine] >= 30]
        assert store.device_slots[t] == device.shape[0]
        assert np.array_equal(slot[device[np.argsort(plan_slot[device])]], np.arange(device.shape[0]))
        assert np.array_equal(slot[host[np.argsort(plan_slot[host])]], device.shape[0] + np.arange(host.shape[0]))


def test_on_cpu_the_sampler_threads_write_every_featured_types_owned_rows_and_the_assembly_equals_the_slow_path():
    """A typed store on CPU gives the fetch context one slice source per type with features (None
    for type 1, which has none): the sampler threads write each such type's owned rows into the
    batch's x[t], and the assembled rows equal those of the same batches without that fast path
    (local_x=None) and the unpartitioned rows, received and cached rows included."""
    from salientpp.data.csr import build_csr
    from salientpp.sampling import FetchContext, NeighborLoader, NeighborSampler

    rank, num_nodes, widths = 1, 300, {0: 4, 2: 7}
    rng = np.random.default_rng(7)
    types = TYPED_BOOK.type_of(np.arange(num_nodes))
    x = {t: torch.randn(num_nodes, w, generator=torch.Generator().manual_seed(t)) for t, w in widths.items()}
    features = {t: x[t][slice(*TYPED_BOOK.block(rank, t))].numpy() for t in widths}
    remote = np.setdiff1d(np.arange(num_nodes), TYPED_BOOK.owned(rank))
    plan_slot = np.full(num_nodes, -1, dtype=np.int64)
    plan_slot[rng.choice(remote, 60, replace=False)] = rng.permutation(60)
    ctx = DistContext(rank, 3, rank, torch.device("cpu"), torch.device("cpu"), None)
    store = FeatureStore(ctx, TYPED_BOOK, features, rng.permutation(100), 30, plan_slot, 20)
    for t in widths:  # the cache tiers as fill_cache leaves them
        ids = np.flatnonzero((store.cache_slot.numpy() >= 0) & (types == t))
        table = torch.empty(ids.shape[0], widths[t])
        table[store.cache_slot[ids]] = x[t][ids]
        store.cache_device[t], store.cache_host[t] = table[:store.device_slots[t]], table[store.device_slots[t]:]
    fast = FetchContext(**store.fetch_context_args())
    assert [s is not None for s in fast.local_x] == [True, False, True]
    slow = FetchContext(**store.fetch_context_args() | dict(local_x=None))
    rowptr, col = build_csr(rng.integers(0, num_nodes, size=(2, 1500)), num_nodes)
    sampler = NeighborSampler(rowptr, col, [4, 3])

    def assembled(fetch):
        for batch in NeighborLoader(sampler, torch.arange(100, 200), 25, seed=3, sampler_threads=2, fetch=fetch):
            o = batch.origins
            received = torch.cat([x[int(types[i])][i].flatten() for i in o.remote_id.tolist()])
            yield batch.n_id, o, store.assemble(o, received, CommStats(), HostOps())

    for (n_id, o, got), (_, plain, expected) in zip(assembled(fast), assembled(slow), strict=True):
        assert o.x[1] is None and plain.x == [None, None, None]
        node_type = types[n_id.numpy()]
        for t in widths:
            owned_pos, owned_row = (a.split(o.owned_counts.tolist())[t] for a in (o.owned_pos, o.owned_row))
            assert owned_pos.numel() and got[t].data_ptr() == o.x[t].data_ptr()  # completed in place
            assert torch.equal(o.x[t][owned_pos], store.slice_source[t][owned_row])  # the threads wrote them
            assert torch.equal(got[t], expected[t]) and torch.equal(got[t], x[t][n_id[torch.from_numpy(node_type == t)]])


def test_row_runs_merge_the_consecutive_blocks_of_one_type_and_skip_empty_ones():
    from salientpp.distributed.exchange import RowRun, row_runs

    widths = [4, 0, 7]
    counts = torch.tensor([2, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0, 2])  # (owner, type) blocks of 4 owners
    assert row_runs(counts, widths) == [RowRun(0, 0, 2, 0, 8), RowRun(2, 2, 5, 8, 29), RowRun(0, 5, 6, 29, 33),
                                        RowRun(2, 6, 8, 33, 47)]
    assert row_runs(torch.tensor([2, 0, 0, 0, 0, 0, 3, 0, 0]), widths) == [RowRun(0, 0, 5, 0, 20)]
    assert row_runs(torch.tensor([3, 0, 5]), [6]) == [RowRun(0, 0, 8, 0, 48)]  # one type: one run


# ---- the device tier's size: what fits ----------------------------------------------------------------

def test_owned_rows_go_to_the_device_in_owned_order_while_they_fit_the_budget_after_the_cache():
    """Rank 0 of the typed book owns 40 rows of 4 floats (16 bytes), 20 without features (0
    bytes) and 40 of 7 floats (28 bytes). Its device tiers may take 30 rows' worth of the cache
    plus a budget: the owned rows on the device are the longest prefix of the owned order whose
    bytes fit in what the cache leaves, and every type's rows keep their place in that order."""
    ctx = DistContext(0, 3, 0, torch.device("cpu"), torch.device("cpu"), None)
    rng = np.random.default_rng(5)
    features = {0: rng.normal(size=(40, 4)).astype(np.float32), 2: rng.normal(size=(40, 7)).astype(np.float32)}
    order = rng.permutation(100)
    plan_slot = np.full(300, -1, dtype=np.int64)
    plan_slot[[100, 101, 260]] = [0, 1, 2]  # device tier: two rows of type 0 (rank 1), one of type 2 (rank 2)
    cache_bytes = 2 * 16 + 28
    row_bytes = np.array([16, 0, 28])[TYPED_BOOK.type_of(order)]
    for budget in (None, 0, cache_bytes - 1, cache_bytes + 300, cache_bytes + int(row_bytes[:70].sum()), 10**9):
        store = FeatureStore(ctx, TYPED_BOOK, features, order, 70, plan_slot, 3, device_budget=budget)
        fits = 70 if budget is None else int(np.searchsorted(np.cumsum(row_bytes[:70]), max(budget - cache_bytes, 0),
                                                               side="right"))
        assert store.num_device_owned_wanted == 70 and store.num_device_owned == fits, budget
        on_device = order[:fits]
        for t in (0, 2):
            start = TYPED_BOOK.block(0, t)[0]
            mine = on_device[TYPED_BOOK.type_of(on_device) == t] - start
            assert torch.equal(store.owned_device[t], torch.from_numpy(features[t][mine]))
            assert store.owned_device[t].shape[0] + store.owned_host[t].shape[0] == 40
    assert 0 < FeatureStore(ctx, TYPED_BOOK, features, order, 70, plan_slot, 3,
                            device_budget=cache_bytes + 300).num_device_owned < 70  # the budget cut it


def test_the_device_budget_is_half_the_free_gpu_memory_split_among_the_ranks_sharing_a_gpu(monkeypatch):
    from salientpp.distributed.device import DEVICE_ROWS_SHARE, device_row_budget

    assert device_row_budget(torch.device("cpu")) is None  # both tiers are host memory
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (80 * 2**30, 96 * 2**30))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    for ranks, sharing in (("1", 1), ("2", 1), ("3", 2), ("8", 4)):
        monkeypatch.setenv("LOCAL_WORLD_SIZE", ranks)
        assert device_row_budget(torch.device("cuda", 0)) == int(80 * 2**30 * DEVICE_ROWS_SHARE) // sharing


def test_train_keeps_every_owned_row_on_a_gpu_and_15_percent_on_the_cpu_unless_told(tiny_dirs):
    from salientpp.cache.plan import DEVICE_FRACTION, GPU_DEVICE_FRACTION

    part_dir = str(tiny_dirs / "p2")
    assert TrainConfig(part_dir).resolved().device_fraction == DEVICE_FRACTION == 0.15
    assert TrainConfig(part_dir, device="cuda").resolved().device_fraction == GPU_DEVICE_FRACTION == 1.0
    assert TrainConfig(part_dir, device="cuda", device_fraction=0.3).resolved().device_fraction == 0.3
