"""Row origins: owner split, cache resolution, the owned rows written into the batch's x."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from salientpp.data.csr import build_csr
from salientpp.errors import InputError
from salientpp.partition.book import PartitionBook
from salientpp.sampling import FetchContext, NeighborLoader, NeighborSampler

N, F, RANK = 900, 6, 1
OFFSETS = np.array([0, 250, 600, 700, 900], dtype=np.int64)  # 4 partitions of unequal size


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(0)
    rowptr, col = build_csr(rng.integers(0, N, size=(2, 4000)), N)
    x = torch.randn(N, F, generator=torch.Generator().manual_seed(1))
    book = PartitionBook(OFFSETS)
    owned = book.owned(RANK)
    # Cache a random half of the remote ids: the first 120 in the device tier, the rest in the host tier.
    remote = np.setdiff1d(np.arange(N), owned)
    cached = rng.permutation(remote)[:remote.shape[0] // 2]
    num_device = 120
    cache_slot = np.full(N, -1, dtype=np.int64)
    cache_slot[cached] = np.arange(cached.shape[0])
    gpu_cache, cpu_cache = x[cached[:num_device]], x[cached[num_device:]]
    # Owned rows stored in a shuffled order (as the trainer stores them by VIP).
    storage = rng.permutation(owned.shape[0])  # storage[r] = local index stored in row r
    local_row = np.empty_like(storage)
    local_row[storage] = np.arange(storage.shape[0])
    local_x = x[owned[storage]]
    ctx = FetchContext(book, RANK, cache_slot=cache_slot, num_device_slots=num_device, local_x=[local_x],
                       local_row=local_row, pin=False)
    return NeighborSampler(rowptr, col, [4, 3]), x, ctx, gpu_cache, cpu_cache


def complete(plan, x, gpu_cache, cpu_cache) -> torch.Tensor:
    """The plan's x with the rows of the other sources written in (the owners send ``x[remote_id]``)."""
    out = plan.x[0].clone()
    out[plan.remote_pos] = x[plan.remote_id]
    out[plan.device_pos] = gpu_cache[plan.device_slot]
    out[plan.host_pos] = cpu_cache[plan.host_slot]
    return out


def check_plan(batch, x, ctx, gpu_cache, cpu_cache):
    plan, n_id = batch.origins, batch.n_id
    owner = torch.from_numpy(ctx.book.owner(n_id.numpy()))
    cache_slot = torch.from_numpy(ctx.cache_slot)
    # Every position lands in exactly one group, and the groups are what they claim.
    positions = torch.cat([plan.owned_pos, plan.remote_pos, plan.device_pos, plan.host_pos])
    assert torch.equal(torch.sort(positions).values, torch.arange(n_id.shape[0]))
    assert (owner[plan.owned_pos] == RANK).all()
    assert torch.equal(n_id[plan.remote_pos], plan.remote_id)
    assert (owner[plan.remote_pos] != RANK).all() and (cache_slot[plan.remote_id] == -1).all()
    assert torch.equal(cache_slot[n_id[plan.device_pos]], plan.device_slot) and (plan.device_slot < ctx.num_device_slots).all()
    assert torch.equal(cache_slot[n_id[plan.host_pos]] - ctx.num_device_slots, plan.host_slot)
    # Remote ids grouped by owner, ascending, with the right counts, n_id order within an owner.
    remote_owner = owner[plan.remote_pos]
    assert torch.equal(remote_owner, torch.sort(remote_owner, stable=True).values)
    assert torch.equal(plan.remote_counts, torch.bincount(remote_owner, minlength=4))
    assert plan.remote_counts[RANK] == 0
    for k in range(4):
        assert (plan.remote_pos[remote_owner == k].diff() > 0).all()
    # The plan's x has the owned rows of x[n_id] at their positions; the other sources complete it.
    assert torch.equal(plan.x[0][plan.owned_pos], x[n_id[plan.owned_pos]])
    assert torch.equal(plan.x[0][plan.owned_pos], ctx.local_x[0][plan.owned_row])
    assert torch.equal(complete(plan, x, gpu_cache, cpu_cache), x[n_id])
    assert plan.owned_pos.numel() and plan.remote_id.numel() and plan.device_pos.numel() and plan.host_pos.numel()


def test_plan_reconstructs_features(setup):
    sampler, x, ctx, gpu_cache, cpu_cache = setup
    batch = sampler.sample(torch.arange(260, 600, 4), seed=3, fetch=ctx)
    check_plan(batch, x, ctx, gpu_cache, cpu_cache)


def test_plan_through_loader_with_two_threads(setup):
    sampler, x, ctx, gpu_cache, cpu_cache = setup
    loader = NeighborLoader(sampler, torch.arange(250, 600), 64, sampler_threads=2, fetch=ctx)
    batches = list(loader)
    assert len(batches) == 6
    for batch in batches:
        check_plan(batch, x, ctx, gpu_cache, cpu_cache)


def test_plan_without_cache_or_rows(setup):
    sampler, x, ctx, _, _ = setup
    batch = sampler.sample(torch.arange(600, 700, 2), seed=1, fetch=FetchContext(ctx.book, 2, pin=False))
    plan = batch.origins
    assert plan.x == [None] and plan.device_pos.numel() == 0 and plan.host_pos.numel() == 0
    assert torch.equal(plan.owned_row, batch.n_id[plan.owned_pos] - OFFSETS[2])  # identity row map
    assert plan.remote_counts.sum() == plan.remote_id.numel() == batch.num_nodes - plan.owned_pos.numel()


@pytest.mark.parametrize("change,match", [
    (dict(rank=4), "rank 4"),
    (dict(cache_slot=np.full(10, -1, dtype=np.int64)), "one entry per node"),
    (dict(cache_slot=np.full(N, -2, dtype=np.int64)), "below -1"),
    (dict(book=PartitionBook(np.array([0, 500], dtype=np.int64))), "cover ids"),
    (dict(local_row=None, local_x=[torch.zeros(300, F)]), "local_x has"),
    (dict(local_x=torch.zeros(350, F)), "one array or None per node type"),
    (dict(local_x=[torch.zeros(350)]), "2-D"),
    (dict(local_row=np.zeros(5, dtype=np.int64)), "one entry per owned id"),
    (dict(pin=True), "pinned memory"),
])
def test_bad_fetch_context(setup, change, match):
    sampler, _, ctx, _, _ = setup
    if change.get("pin") and torch.cuda.is_available():
        pytest.skip("pinning is valid where CUDA exists")
    fields = dict(book=ctx.book, rank=ctx.rank, cache_slot=ctx.cache_slot, num_device_slots=ctx.num_device_slots,
                  local_x=ctx.local_x, local_row=ctx.local_row, pin=False) | change
    with pytest.raises(InputError, match=match):
        sampler.sample([300], fetch=FetchContext(**fields))


def test_a_typed_batch_gets_its_row_origins_per_node_type_and_none_for_a_type_without_features():
    """Three partitions of three node types, type 1 without features: positions are ranks among
    the batch nodes of the type, each array is grouped by type (remote ones by (owner, type)
    block), the cache rows are the type's own tiers, and type 1's nodes have no origin at all."""
    from salientpp._ext import extension
    from salientpp.sampling import RowOrigins

    num_nodes, rank, featured, widths = 300, 1, [True, False, True], {0: 4, 2: 7}
    book = PartitionBook(np.array([0, 100, 200, 300]), np.array([0, 40, 60, 100, 150, 170, 200, 230, 260, 300]))
    rng = np.random.default_rng(5)
    types = book.type_of(np.arange(num_nodes))
    x = {t: torch.randn(num_nodes, w, generator=torch.Generator().manual_seed(t)) for t, w in widths.items()}
    # owned rows stored shuffled within each type; local_row gives each one's row among its type's
    local_row, storage = np.zeros(book.part_size(rank), dtype=np.int64), {}
    for t in widths:
        start, stop = book.block(rank, t)
        ids = rng.permutation(np.arange(start, stop))
        local_row[ids - book.offsets[rank]] = np.arange(ids.shape[0])
        storage[t] = x[t][ids]
    remote = np.setdiff1d(np.arange(num_nodes), book.owned(rank))
    cached = rng.choice(remote, 80, replace=False)
    device_slots, tiers, cache_slot = [3, 0, 2], {}, np.full(num_nodes, -1, dtype=np.int64)
    for t in range(3):
        mine = cached[types[cached] == t]
        cache_slot[mine] = np.arange(mine.shape[0])  # type 1's too: a type without features ignores them
        tiers[t] = (x[t][mine[:device_slots[t]]], x[t][mine[device_slots[t]:]]) if t in widths else None
    ctx = FetchContext(book, rank, cache_slot=cache_slot, num_device_slots=device_slots, local_row=local_row,
                       pin=False, featured=featured)
    n_id = torch.from_numpy(rng.permutation(num_nodes)[:170])
    o = RowOrigins(**extension().row_origins(ctx.to_extension(num_nodes), n_id))

    node_type = types[n_id.numpy()]
    assert o.num_rows.tolist() == np.bincount(node_type, minlength=3).tolist()
    blocks = o.remote_counts.view(3, 3)
    assert blocks[rank].sum() == 0 and blocks[:, 1].sum() == 0 and o.remote_counts.sum() > 0
    for counts in (o.owned_counts, o.device_counts, o.host_counts):
        assert counts[1] == 0 and counts[[0, 2]].min() > 0
    remote_block = torch.repeat_interleave(torch.arange(9), o.remote_counts)
    assert torch.equal(book.block_of(o.remote_id), remote_block)  # grouped by block, ascending
    for t, w in widths.items():
        expected = x[t][n_id[torch.from_numpy(node_type == t)]]
        rows = torch.full((int(o.num_rows[t]), w), float("nan"))
        pick = lambda name, counts: getattr(o, name).split(counts.tolist())[t]  # noqa: E731
        rows[pick("owned_pos", o.owned_counts)] = storage[t][pick("owned_row", o.owned_counts)]
        rows[pick("device_pos", o.device_counts)] = tiers[t][0][pick("device_slot", o.device_counts)]
        rows[pick("host_pos", o.host_counts)] = tiers[t][1][pick("host_slot", o.host_counts)]
        mine = remote_block % 3 == t
        rows[o.remote_pos[mine]] = x[t][o.remote_id[mine]]
        assert torch.equal(rows, expected), f"type {t}'s rows differ"


@pytest.mark.parametrize("local_x,match", [
    ([torch.zeros(60, 3)], "one array or None per node type"),  # one entry for two types
    ([torch.zeros(60, 3), torch.zeros(40, 2)], "None for a type without features"),  # type 1 has none
    ([torch.zeros(50, 3), None], "local_x has"),  # rank 0 owns 60 ids of type 0
])
def test_a_typed_local_x_needs_one_entry_per_type_none_for_a_type_without_features_and_its_types_rows(local_x, match):
    book = PartitionBook(np.array([0, 100, 200]), np.array([0, 60, 100, 150, 200]))
    with pytest.raises(InputError, match=match):
        FetchContext(book, 0, local_x=local_x, pin=False, featured=[True, False]).to_extension(200)
