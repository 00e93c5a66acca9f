"""Lockstep batches: every rank runs S = max_k ceil(|T_k| / b) balanced batches per epoch.

The loader's ``num_batches`` and batches without seeds; uneven partitions through the public
loader (every rank trains on every step, the DDP gradient is the plain mean, evaluation ranks with
fewer seeds get batches without seeds) and through the built-in trainer.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from salientpp.data.csr import build_csr
from salientpp.distributed import launch
from salientpp.errors import InputError
from salientpp.partition import save_partitioned
from salientpp.partition.book import PartitionBook
from salientpp.partition.partitioner import partition
from salientpp.sampling import FetchContext, NeighborLoader, NeighborSampler
from salientpp.train import TrainConfig

N = 3000


@pytest.fixture(scope="module")
def graph():
    rng = np.random.default_rng(0)
    rowptr, col = build_csr(rng.integers(0, N, size=(2, 20000)), N)
    return NeighborSampler(rowptr, col, [5, 3]), rng.integers(0, 7, N).astype(np.int64)


def same_batch(a, b) -> bool:
    return (torch.equal(a.n_id, b.n_id) and a.batch_size == b.batch_size
            and all(torch.equal(x.edge_index, y.edge_index) and torch.equal(x.rowptr, y.rowptr)
                    for x, y in zip(a.mfgs, b.mfgs))
            and (a.y is None) == (b.y is None) and (a.y is None or torch.equal(a.y, b.y)))


# -- the loader -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, b, steps", [(1000, 64, 16), (1003, 64, 16), (1000, 64, 23), (64, 64, 1)])
def test_balanced_batches_cover_every_seed_once(graph, n, b, steps):
    sampler, labels = graph
    seeds = torch.arange(n) * 2
    loader = NeighborLoader(sampler, seeds, b, seed=5, sampler_threads=2, labels=labels, num_batches=steps)
    loader.set_epoch(2)
    batches = list(loader)
    sizes = [batch.batch_size for batch in batches]
    assert len(loader) == len(batches) == steps
    assert max(sizes) - min(sizes) <= 1 and max(sizes) <= b and sum(sizes) == n
    bounds = loader.batch_bounds()
    assert torch.equal(bounds, torch.tensor([i * n // steps for i in range(steps + 1)]))
    order = loader.epoch_order()
    assert torch.equal(torch.cat([batch.n_id[:batch.batch_size] for batch in batches]), order)
    assert torch.equal(torch.sort(order).values, seeds)
    for i in (0, steps - 1):  # batch i is sampler.sample(its slice) with the stream (epoch_seed, i)
        direct = sampler.sample(order[bounds[i]:bounds[i + 1]], seed=loader.epoch_seed(), batch_index=i,
                                labels=labels)
        assert same_batch(batches[i], direct)


def test_same_batches_for_any_thread_count_and_after_a_resume(graph):
    sampler, labels = graph
    seeds = torch.arange(0, N, 3)

    def epoch(threads, depth, first=0):
        loader = NeighborLoader(sampler, seeds, 100, seed=7, sampler_threads=threads, read_ahead=depth, labels=labels,
                                num_batches=13)
        loader.load_state_dict({"epoch": 4, "next_batch": first})
        return list(loader)

    one = epoch(1, 1)
    assert len(one) == 13 and all(same_batch(a, b) for a, b in zip(one, epoch(2, 3)))
    assert all(same_batch(a, b) for a, b in zip(one[6:], epoch(2, 2, first=6)))
    # state_dict mid-epoch, then a new loader continues with the same batches.
    loader = NeighborLoader(sampler, seeds, 100, seed=7, labels=labels, num_batches=13)
    loader.set_epoch(4)
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = loader.state_dict()
    assert state == {"epoch": 4, "next_batch": 5}
    again = NeighborLoader(sampler, seeds, 100, seed=7, labels=labels, num_batches=13)
    again.load_state_dict(state)
    assert all(same_batch(a, b) for a, b in zip(one[5:], list(again)))


def test_batches_without_seeds_are_valid_and_fetch_nothing(graph):
    sampler, labels = graph
    book = PartitionBook(np.array([0, 1000, N], dtype=np.int64))
    fetch = FetchContext(book, 1, pin=False)
    loader = NeighborLoader(sampler, [1, 1500, 2500], 4, shuffle=False, labels=labels, fetch=fetch, num_batches=5)
    batches = list(loader)
    assert [b.batch_size for b in batches] == [0, 1, 0, 1, 1]
    assert torch.equal(torch.cat([b.n_id[:b.batch_size] for b in batches]), torch.tensor([1, 1500, 2500]))
    for batch in (batches[0], batches[2]):
        assert batch.n_id.dtype == torch.int64 and batch.n_id.shape == (0,) and batch.num_nodes == 0
        assert batch.y.shape == (0,) and batch.num_sampled_edges == 0 and len(batch.mfgs) == 2
        for mfg in batch.mfgs:
            assert (mfg.num_src, mfg.num_dst) == (0, 0) and mfg.edge_index.shape == (2, 0)
            assert torch.equal(mfg.rowptr, torch.zeros(1, dtype=torch.int64))
        plan = batch.origins
        assert torch.equal(plan.remote_counts, torch.zeros(2, dtype=torch.int64))
        assert plan.remote_id.numel() == plan.owned_pos.numel() == 0 and plan.x == [None]
    assert batches[1].origins.remote_counts[0] >= 1  # seed 1 lives on partition 0
    # A rank without any seed still yields its S batches.
    empty = NeighborLoader(sampler, torch.empty(0, dtype=torch.int64), 4, labels=labels, fetch=fetch, num_batches=3)
    assert [b.batch_size for b in empty] == [0, 0, 0] and len(empty) == 3


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_batches=0), "num_batches must be a positive integer"),
    (dict(num_batches=2.5), "num_batches must be a positive integer"),
    (dict(num_batches=9), r"more than batch_size=10 of the 100 seeds in a batch; pass num_batches >= 10"),
    (dict(num_batches=12, drop_last=True), "drop_last applies to fixed-size batches only"),
    (dict(seeds=[]), "seeds is empty"),  # without num_batches an empty loader is a mistake
])
def test_bad_num_batches_is_one_sentence(graph, kwargs, match):
    sampler, _ = graph
    args = dict(seeds=np.arange(100), batch_size=10) | kwargs
    with pytest.raises(InputError, match=match):
        NeighborLoader(sampler, **args)


# -- uneven partitions through the public loader and the built-in trainer ------------------------------------

SMALL = dict(hidden=16, layers=2, fanouts=(4, 4), batch_size=32, eval_fanouts=(4, 4), eval_batch_size=97,
             policy="none", progress=False, dropout=0.0, timeout_s=60)


@pytest.fixture(scope="module")
def uneven(tiny_partitions, tmp_path_factory):
    """2 partitions: rank 0 keeps 70 training nodes (S = 3 at b = 32), rank 1 keeps 5; rank 1 has no
    validation and only 3 test nodes, so it runs mostly empty evaluation steps."""
    _, ds = tiny_partitions
    result = partition(ds, 2, method="random")
    parts = result.parts
    parts[0].train_idx = parts[0].train_idx[:70]
    parts[1].train_idx = parts[1].train_idx[:5]
    parts[1].valid_idx = parts[1].valid_idx[:0]
    parts[1].test_idx = parts[1].test_idx[:3]
    path = tmp_path_factory.mktemp("lockstep") / "uneven"
    save_partitioned(path, result.rowptr, result.col, result.renumbering.offsets, result.renumbering.orig_id, parts,
                     {"num_classes": ds.num_classes, "source": "test"})
    eval_seeds = parts[0].valid_idx.shape[0] + parts[0].test_idx.shape[0]
    return str(path), -(-eval_seeds // SMALL["eval_batch_size"])


def _uneven_worker(part_dir: str) -> dict:
    """A user's loop: every training step of both ranks holds data, and the DDP gradient of the
    plain loss is the mean of the two ranks' own gradients (no rescaling); an evaluation loader
    over the validation and test nodes runs S_eval steps on both ranks."""
    import salientpp
    from salientpp.models import MFGModel

    ctx = salientpp.init_distributed()
    graph = salientpp.DistGraph(part_dir, ctx)
    torch.manual_seed(0)
    model = MFGModel("sage", graph.num_features, 16, graph.num_classes, 2, 0.0)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    loader = salientpp.DistNeighborLoader(graph, "train", fanouts=[4, 4], batch_size=32)
    sizes, ok = [], True
    for batch in loader:
        sizes.append(batch.batch_size)
        model.zero_grad()
        F.cross_entropy(ddp(batch.x.float(), batch.mfgs), batch.y).backward()
        got = torch.cat([p.grad.flatten() for p in model.parameters()])
        model.zero_grad()
        F.cross_entropy(model(batch.x.float(), batch.mfgs), batch.y).backward()
        own = torch.cat([p.grad.flatten() for p in model.parameters()])
        dist.all_reduce(own)
        ok &= torch.allclose(got, own / 2, rtol=1e-5, atol=1e-7)
    seeds = np.concatenate([graph.split("valid"), graph.split("test")])
    evaluation = salientpp.DistNeighborLoader(graph, seeds, fanouts=[4, 4], batch_size=SMALL["eval_batch_size"])
    eval_sizes = [batch.batch_size for batch in evaluation]
    salientpp.shutdown_distributed(ctx)
    return {"steps": len(loader), "sizes": sizes, "grad_ok": bool(ok), "eval_steps": len(evaluation),
            "eval_sizes": eval_sizes}


def test_uneven_ranks_train_on_every_step_with_the_plain_mean_gradient(uneven):
    part_dir, eval_steps = uneven
    zero, one = launch(_uneven_worker, (part_dir,), nprocs=2)
    assert zero["steps"] == one["steps"] == 3
    assert zero["sizes"] == [23, 23, 24] and one["sizes"] == [1, 2, 2]
    assert zero["grad_ok"] and one["grad_ok"]
    # Evaluation: S_eval steps on both ranks; rank 1's 3 seeds fill 3 of them, the rest have no seeds.
    assert zero["eval_steps"] == one["eval_steps"] == len(zero["eval_sizes"]) == len(one["eval_sizes"]) == eval_steps
    assert eval_steps > 3 and min(zero["eval_sizes"]) >= 1
    assert sorted(one["eval_sizes"]) == [0] * (eval_steps - 3) + [1, 1, 1]


def test_the_trainer_runs_uneven_ranks_and_empty_evaluation_steps(uneven):
    from salientpp.train import train

    part_dir, _ = uneven
    result = train(TrainConfig(part_dir, epochs=1, eval_every=1, **SMALL))
    assert result.history[0]["steps"] == 3
    assert 0 <= result.best_valid <= 1 and 0 <= result.final_test <= 1  # evaluated over both ranks' nodes


def test_a_training_split_every_rank_can_follow_in_lockstep_is_the_one_rule_of_loader_and_run():
    from salientpp.cache.workload import check_training_seeds

    assert check_training_seeds([5, 4], 2, "P") == 3  # S = ceil(5 / 2); 4 seeds fill 3 steps
    with pytest.raises(InputError, match=r"partition 1 of P has 2 training edges but every rank runs 3 steps .* "
                                         r"\(partition 0 has 5 at batch size 2\)"):
        check_training_seeds([5, 2], 2, "P", "edges")
    with pytest.raises(InputError, match="partition 0 of P has no training nodes, so rank 0 would never train"):
        check_training_seeds([0, 7], 8, "P")
