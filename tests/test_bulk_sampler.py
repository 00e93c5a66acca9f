"""The bulk sampler: node-wise draws distributed as the C++ sampler's, LADIES probabilities and
unbiased weights, batches independent of the bulk size, MFG structure, the loader, errors."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from salientpp._ext import extension
from salientpp.data.csr import build_csr
from salientpp.errors import InputError
from salientpp.partition.book import PartitionBook
from salientpp.sampling import BulkSampler, FetchContext, NeighborLoader, NeighborSampler
from salientpp.sampling.bulk import select_rows
from test_sampler import ALPHA, edge_counts, random_graph, stars, typed_graph, without_replacement_pvalue
from test_sampler_fetch import complete


def bulk_batches(sampler: BulkSampler, seed_lists, seed: int, chunk: int = 250) -> list:
    """``sample_bulk`` over ``seed_lists`` (minibatch ``j`` = stream ``(seed, j)``), ``chunk`` at a time."""
    out = []
    for start in range(0, len(seed_lists), chunk):
        out += sampler.sample_bulk(seed_lists[start:start + chunk], seed, start)
    return out


def star_positions(batch) -> tuple[np.ndarray, np.ndarray]:
    """(destination local index, leaf position 0..degree-1) of every edge of a one-hop star batch."""
    src, dst = batch.mfgs[0].edge_index.numpy()
    n_id = batch.n_id.numpy()
    return dst, n_id[src] - n_id[dst] - 1


def centre_chunks(centres: np.ndarray, k: int = 4) -> list[torch.Tensor]:
    return list(torch.from_numpy(centres).chunk(k))


def hop_sizes(batch) -> list[int]:
    """Sizes of the nested node sets after hop 0 (the seeds), 1, ..., L."""
    return [batch.batch_size] + [m.num_src for m in reversed(batch.mfgs)]


def assert_same_batch(a, b) -> None:
    assert a.batch_size == b.batch_size
    assert torch.equal(a.n_id, b.n_id)
    assert len(a.mfgs) == len(b.mfgs)
    for x, y in zip(a.mfgs, b.mfgs):
        assert (x.num_src, x.num_dst) == (y.num_src, y.num_dst)
        assert torch.equal(x.edge_index, y.edge_index) and torch.equal(x.rowptr, y.rowptr)
        assert (x.edge_weight is None) == (y.edge_weight is None)
        if x.edge_weight is not None:
            assert torch.equal(x.edge_weight, y.edge_weight)


def ladies_q(rowptr: np.ndarray, col: np.ndarray, dst_nodes: np.ndarray) -> np.ndarray:
    """float64 ``[N]``: the LADIES probabilities by their definition, with dense matrices.

    ``A_hat = D^-1 A``; ``q_j = ||A_hat[S, j]||^2 / ||A_hat[S, :]||_F^2`` (0 off the candidates).
    """
    n = rowptr.shape[0] - 1
    dense = np.zeros((n, n))
    dense[np.repeat(np.arange(n), np.diff(rowptr)), col] = 1.0
    a_hat = dense / np.maximum(dense.sum(1, keepdims=True), 1)
    rows = a_hat[dst_nodes]
    return (rows ** 2).sum(0) / (rows ** 2).sum()


# --- 1. Node-wise bulk draws: exactly the C++ sampler's distribution --------------------------------------------


@pytest.mark.parametrize("fanout,degree", [(1, 10), (5, 10), (70, 100)])
def test_bulk_nodewise_star_positions_are_uniform(fanout, degree):
    num_stars = 4000 if degree == 10 else 300  # >= 140 expected picks per position, as the C++ test
    rowptr, col, centres = stars(num_stars, degree)
    # Four minibatches in one bulk: keys of all of them are ranked by one vectorised sort.
    batches = BulkSampler(rowptr, col, [fanout], minibatches_per_bulk=4).sample_bulk(centre_chunks(centres), 11, 0)
    counts = np.zeros(degree, dtype=np.int64)
    for batch in batches:
        dst, position = star_positions(batch)
        assert np.bincount(dst, minlength=batch.batch_size).tolist() == [fanout] * batch.batch_size
        assert all(np.unique(position[dst == d]).shape[0] == fanout for d in range(min(batch.batch_size, 50)))
        counts += np.bincount(position, minlength=degree)
    assert counts[-1] > 0, "the last neighbour must be drawable"
    assert without_replacement_pvalue([counts], [degree], fanout, num_stars) > ALPHA


def test_bulk_nodewise_star_subsets_are_equally_likely():
    """All C(8, 5) = 56 subsets equally likely (joint, stronger than the marginals)."""
    num_stars, degree, fanout = 11200, 8, 5  # 200 expected per subset: Pearson's chi-square is accurate
    rowptr, col, centres = stars(num_stars, degree)
    batches = BulkSampler(rowptr, col, [fanout], minibatches_per_bulk=4).sample_bulk(centre_chunks(centres), 5, 0)
    masks = []
    for batch in batches:
        dst, position = star_positions(batch)
        mask = np.zeros(batch.batch_size, dtype=np.int64)
        np.add.at(mask, dst, 1 << position)
        masks.append(mask)
    _, per_subset = np.unique(np.concatenate(masks), return_counts=True)
    assert per_subset.shape[0] == 56
    assert stats.chisquare(per_subset).pvalue > ALPHA


def test_bulk_nodewise_with_replacement_is_uniform_and_keeps_parallel_edges():
    num_stars, degree, fanout = 2000, 10, 5
    rowptr, col, centres = stars(num_stars, degree)
    sampler = BulkSampler(rowptr, col, [fanout], replace=True, minibatches_per_bulk=4)
    counts, parallel = np.zeros(degree, dtype=np.int64), 0
    for batch in sampler.sample_bulk(centre_chunks(centres), 3, 0):
        dst, position = star_positions(batch)
        assert np.bincount(dst, minlength=batch.batch_size).tolist() == [fanout] * batch.batch_size
        counts += np.bincount(position, minlength=degree)
        parallel += dst.shape[0] - np.unique(np.stack([dst, position]), axis=1).shape[1]
    # With replacement every draw is an independent categorical: Pearson's test is exact (200 per cell).
    assert stats.chisquare(counts).pvalue > ALPHA
    # P(5 draws of 10 all distinct) = 0.3024, so ~70% of the 2000 stars have a repeat.
    assert parallel > 0, "duplicates are kept as parallel edges"


@pytest.mark.parametrize("fanout", [1, 5])
def test_bulk_nodewise_random_graph_neighbours_are_uniform(fanout):
    rowptr, col = random_graph(200, 1500, seed=1)  # degrees ~ 5..30
    degrees = np.diff(rowptr)
    seeds = torch.from_numpy(np.flatnonzero(degrees > fanout))
    sampler = BulkSampler(rowptr, col, [fanout], minibatches_per_bulk=100)
    draws = 40 * int(degrees.max()) // fanout  # >= 40 expected picks per neighbour
    counts = sum(edge_counts(rowptr, col, b) for b in bulk_batches(sampler, [seeds] * draws, 9, chunk=100))
    per_node = [counts[rowptr[v]:rowptr[v + 1]] for v in seeds.tolist()]
    assert all(c[-1] > 0 for c in per_node), "the last neighbour of every node must be drawn"
    assert all(c.sum() == draws * fanout for c in per_node)
    assert without_replacement_pvalue(per_node, degrees[seeds.numpy()], fanout, draws) > ALPHA


# --- 2. Two-sample comparison with the C++ sampler ------------------------------------------------------------


def typed_hop_sizes(batch, num_types: int) -> np.ndarray:
    """int64 ``[L + 1, T]``: the nodes of each type reached after hop 0 (the seeds), 1, ..., L."""
    node_type = batch.node_type.numpy()
    return np.stack([np.bincount(node_type[:n], minlength=num_types) for n in hop_sizes(batch)])


def homogeneous_case():
    rowptr, col = random_graph(1500, 6000, seed=7)  # mean degree 8
    return rowptr, col, {}, [4, 3], [4, 2], torch.arange(0, 1500, 50)  # 30 seeds; one neighbour fewer at hop 2


def typed_case():
    schema, rowptr, col, edge_rel = typed_graph(seed=3)  # relation degrees 0 .. ~20
    fanouts = {"cites": [3, 2], "writes": [2, 3], "rev_writes": [2, 2], "affiliated_with": [1, 1],
               "rev_affiliated_with": [2, 2]}
    fewer = {**fanouts, "writes": [2, 2]}  # papers draw one author fewer at hop 2
    return rowptr, col, {"edge_rel": edge_rel, "schema": schema}, fanouts, fewer, torch.arange(0, 300, 10)


@pytest.mark.parametrize("case", [homogeneous_case, typed_case])
def test_bulk_nodewise_reaches_as_many_nodes_of_each_type_per_hop_as_cpp_sampler(case):
    """Both samplers give the same distribution of the nodes of each type reached after hop h.

    This is where the semantics matter (every node reached so far draws again at every hop, along
    each relation into its type with that relation's fanout): a sampler that expanded only the
    newest frontier, or mixed the relations' fanouts, would reach other numbers at hop 2.
    """
    rowptr, col, typed, fanouts, fewer_fanouts, seeds = case()
    runs = 600
    num_types = typed["schema"].num_types if typed else 1
    cpp_sampler = NeighborSampler(rowptr, col, fanouts, **typed)
    cpp = np.array([typed_hop_sizes(cpp_sampler.sample(seeds, seed=21, batch_index=i), num_types)
                    for i in range(runs)])
    ours, fewer = (np.array([typed_hop_sizes(b, num_types)
                             for b in bulk_batches(BulkSampler(rowptr, col, f, **typed), [seeds] * runs, s)])
                   for f, s in ((fanouts, 22), (fewer_fanouts, 23)))
    # Every (hop >= 1, type) whose size varies, x 2 tests, Bonferroni: a correct sampler fails with
    # probability <= ALPHA overall. Welch's t on means (600 iid sizes each: the CLT holds) and KS on
    # the whole distribution (conservative with ties, so it never rejects a correct sampler more
    # often than its level).
    tested = [(h, t) for h in range(1, cpp.shape[1]) for t in range(num_types) if cpp[:, h, t].std() > 0]
    assert len(tested) >= (2 if not typed else 4)
    level = ALPHA / (2 * len(tested))
    for h, t in tested:
        assert stats.ttest_ind(ours[:, h, t], cpp[:, h, t], equal_var=False).pvalue > level
        assert stats.ks_2samp(ours[:, h, t], cpp[:, h, t]).pvalue > level
        assert np.array_equal(ours[:, 0, t], cpp[:, 0, t])  # the seeds
    # The test has power: one neighbour fewer at hop 2 (along one relation) is rejected by far.
    reached = fewer[:, 2].sum(1), cpp[:, 2].sum(1)
    assert stats.ttest_ind(*reached, equal_var=False).pvalue < 1e-10


# --- 3. Batches do not depend on the bulk ---------------------------------------------------------------------


@pytest.mark.parametrize("method,fanouts", [("nodewise", [4, 3, -1]), ("ladies", [30, 40])])
def test_batches_do_not_depend_on_bulk_size(method, fanouts):
    rowptr, col = random_graph(3000, 12000, seed=2)
    generator = torch.Generator().manual_seed(0)
    lists = [torch.arange(0, 3000, 97), torch.tensor([5]), torch.empty(0, dtype=torch.int64),
             torch.randperm(3000, generator=generator)[:200], torch.tensor([2999, 0, 17])]
    sampler = BulkSampler(rowptr, col, fanouts, method=method, minibatches_per_bulk=len(lists))
    first = 7
    together = sampler.sample_bulk(lists, 42, first)
    assert [b.batch_size for b in together] == [len(s) for s in lists]
    for j, seeds in enumerate(lists):
        assert_same_batch(together[j], sampler.sample_bulk([seeds], 42, first + j)[0])
        if len(seeds):
            assert_same_batch(together[j], sampler.sample(seeds, seed=42, batch_index=first + j))
    big = lists[3]
    assert not torch.equal(together[3].n_id, sampler.sample(big, seed=43, batch_index=first + 3).n_id)
    assert not torch.equal(together[3].n_id, sampler.sample(big, seed=42, batch_index=first + 4).n_id)
    twins = sampler.sample_bulk([big, big], 42, 0)  # the same seeds in one bulk draw independently
    assert not torch.equal(twins[0].n_id, twins[1].n_id)


# --- 4. MFG structure -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("method,fanouts,replace", [
    ("nodewise", [6, 4, -1], False), ("nodewise", [6, 4, 3], True), ("ladies", [50, 80, 120], False)])
def test_mfg_structure(method, fanouts, replace):
    rowptr, col = random_graph(3000, 12000, seed=2)
    degrees = np.diff(rowptr)
    adjacency = set(zip(np.repeat(np.arange(3000), degrees).tolist(), col.tolist()))
    lists = [torch.tensor([5, 17, 2999, 0, 1234]), torch.arange(100, 3000, 131), torch.tensor([77])]
    sampler = BulkSampler(rowptr, col, fanouts, method=method, replace=replace, minibatches_per_bulk=3)
    for seeds, batch in zip(lists, sampler.sample_bulk(lists, 1, 0)):
        n_id = batch.n_id.numpy()
        assert batch.batch_size == len(seeds) and np.array_equal(n_id[:len(seeds)], seeds.numpy())
        assert np.unique(n_id).shape[0] == n_id.shape[0]
        assert batch.mfgs[0].num_src == n_id.shape[0] and batch.mfgs[-1].num_dst == batch.batch_size
        for outer, inner in zip(batch.mfgs[:-1], batch.mfgs[1:]):
            assert outer.num_dst == inner.num_src
        for mfg, fanout in zip(batch.mfgs, reversed(fanouts)):
            src, dst = mfg.edge_index.numpy()
            assert mfg.edge_index.dtype == torch.int64 and mfg.rowptr.shape == (mfg.num_dst + 1,)
            assert src.shape[0] > 0 and src.max() < mfg.num_src and dst.max() < mfg.num_dst
            assert np.array_equal(np.repeat(np.arange(mfg.num_dst), np.diff(mfg.rowptr.numpy())), dst)
            assert all(pair in adjacency for pair in zip(n_id[dst].tolist(), n_id[src].tolist()))
            deg = degrees[n_id[:mfg.num_dst]]
            if method == "nodewise":
                assert mfg.edge_weight is None
                expected = deg if fanout == -1 else (np.where(deg > 0, fanout, 0) if replace
                                                     else np.minimum(deg, fanout))
                assert np.array_equal(np.diff(mfg.rowptr.numpy()), expected)
                if not replace:
                    assert np.unique(np.stack([dst, src]), axis=1).shape[1] == src.shape[0], "duplicate neighbour"
                continue
            # LADIES: all edges between the destinations and the drawn set D, each once.
            assert mfg.edge_weight.dtype == torch.float32 and mfg.edge_weight.shape == (src.shape[0],)
            weight = mfg.edge_weight.numpy().astype(np.float64)
            assert (weight > 0).all()
            assert np.unique(np.stack([dst, src]), axis=1).shape[1] == src.shape[0]
            drawn = np.unique(n_id[src])
            assert drawn.shape[0] <= fanout
            assert set(n_id[mfg.num_dst:mfg.num_src].tolist()) <= set(drawn.tolist()), "a new node without an edge"
            for d in range(mfg.num_dst):
                v = n_id[d]
                assert set(n_id[src[dst == d]].tolist()) == set(np.intersect1d(col[rowptr[v]:rowptr[v + 1]], drawn))
            # w_ij = c_j / (d_i s q_j) with q from the dense definition: c_j integer >= 1, summing to s.
            q = ladies_q(rowptr, col, n_id[:mfg.num_dst])
            times = weight * deg[dst] * fanout * q[n_id[src]]
            assert np.allclose(times, np.round(times), atol=1e-4) and (np.round(times) >= 1).all()
            per_node = {j: t for j, t in zip(n_id[src].tolist(), np.round(times).tolist())}
            assert all(per_node[j] == t for j, t in zip(n_id[src].tolist(), np.round(times).tolist()))
            assert sum(per_node.values()) == fanout


# --- 5. select_rows is the sparse product -------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_select_rows_equals_sparse_selection_product():
    rng = np.random.default_rng(3)
    n = 60  # nodes 50..59 isolated: empty rows
    rowptr, col = build_csr(rng.integers(0, 50, size=(2, 150)), n)
    rows = torch.from_numpy(np.concatenate([rng.integers(0, n, 80), [4, 4, 4, 55, 0, 59, 4]]))  # with repeats
    nnz, r = col.shape[0], rows.shape[0]
    values = torch.arange(1, nnz + 1, dtype=torch.float64)  # distinct: a misplaced entry changes the product
    a_rows = torch.repeat_interleave(torch.arange(n), torch.from_numpy(np.diff(rowptr)))
    a = torch.sparse_coo_tensor(torch.stack([a_rows, torch.from_numpy(col)]), values, (n, n), check_invariants=True)
    q = torch.sparse_coo_tensor(torch.stack([torch.arange(r), rows]), torch.ones(r, dtype=torch.float64), (r, n),
                                check_invariants=True)
    expected = torch.sparse.mm(q, a).to_dense()
    assert torch.equal(torch.sparse.mm(q.to_sparse_csr(), a.to_sparse_csr()).to_dense(), expected)

    ptr, entry = select_rows(torch.from_numpy(rowptr), rows)
    assert ptr.shape == (r + 1,) and int(ptr[-1]) == entry.shape[0]
    assert torch.equal(ptr.diff(), torch.from_numpy(np.diff(rowptr))[rows])
    got = torch.zeros(r, n, dtype=torch.float64)
    row_of_entry = torch.repeat_interleave(torch.arange(r), ptr.diff())
    got.index_put_((row_of_entry, torch.from_numpy(col)[entry]), values[entry], accumulate=True)
    assert torch.equal(got, expected)
    ptr, entry = select_rows(torch.from_numpy(rowptr), torch.empty(0, dtype=torch.int64))
    assert ptr.tolist() == [0] and entry.shape == (0,)


# --- 6. LADIES: probabilities and unbiased weights --------------------------------------------------------------

# A small graph (degrees 2 .. 4): q is far from uniform (1/12 .. 5/12 for {0, 5}).
TINY_EDGES = np.array([[0, 0, 0, 0, 1, 1, 2, 3, 3, 4, 5, 6, 2],
                       [1, 2, 3, 7, 2, 4, 5, 6, 7, 7, 6, 7, 6]])
TINY_SETS = [np.array([0, 5]), np.array([1, 6, 3])]


def test_ladies_draws_follow_q_and_weights_are_unbiased():
    rowptr, col = build_csr(TINY_EDGES, 8)
    degrees = np.diff(rowptr)
    layer_size, per_set = 3, 2000
    sampler = BulkSampler(rowptr, col, [layer_size], method="ladies", minibatches_per_bulk=500)
    # The two seed sets alternate within every bulk: each minibatch must use its own q.
    lists = [torch.from_numpy(TINY_SETS[j % 2]) for j in range(2 * per_set)]
    batches = bulk_batches(sampler, lists, 17, chunk=500)
    x = np.random.default_rng(0).normal(size=8)
    for which, seeds in enumerate(TINY_SETS):
        q = ladies_q(rowptr, col, seeds)
        counts = np.zeros(8)
        estimates = np.zeros((per_set, seeds.shape[0]))
        for run, batch in enumerate(batches[which::2]):
            mfg, n_id = batch.mfgs[0], batch.n_id.numpy()
            src, dst = mfg.edge_index.numpy()
            j, weight = n_id[src], mfg.edge_weight.numpy().astype(np.float64)
            # Recover how often each node was drawn from w_ij = c_j / (d_i s q_j).
            times = weight * degrees[seeds[dst]] * layer_size * q[j]
            assert np.allclose(times, np.round(times), atol=1e-4)
            drawn, first = np.unique(j, return_index=True)
            assert np.round(times[first]).sum() == layer_size
            counts[drawn] += np.round(times[first])
            np.add.at(estimates[run], dst, weight * x[j])
        # Draws are iid from q, so the totals are multinomial(3 * 2000, q): Pearson's test is
        # exact asymptotically; the smallest q here is 3/44, > 400 expected draws.
        candidates = q > 0
        assert (counts[~candidates] == 0).all()
        assert stats.chisquare(counts[candidates], per_set * layer_size * q[candidates]).pvalue > ALPHA
        # Unbiasedness: E[sum_j w_ij x_j] = mean of x over N(i). 5 standard errors of the mean of
        # 2000 iid estimates: a correct sampler fails with probability < 1e-6 per node.
        truth = np.array([x[col[rowptr[i]:rowptr[i + 1]]].mean() for i in seeds])
        error = np.abs(estimates.mean(0) - truth)
        standard_error = estimates.std(0, ddof=1) / np.sqrt(per_set)
        assert (standard_error > 0).all() and (error < 5 * standard_error).all(), (error, standard_error)


def test_ladies_probabilities_favour_nodes_shared_by_low_degree_seeds():
    """q on the tiny graph is the enumerated one: a spot check against hand-computed values."""
    rowptr, col = build_csr(TINY_EDGES, 8)
    q = ladies_q(rowptr, col, np.array([0, 5]))
    # d_0 = 4 (1, 2, 3, 7), d_5 = 2 (2, 6): ||A_hat_S||^2 = 1/4 + 1/2 = 3/4.
    expected = np.zeros(8)
    expected[[1, 3, 7]] = (1 / 16) / (3 / 4)
    expected[2] = (1 / 16 + 1 / 4) / (3 / 4)
    expected[6] = (1 / 4) / (3 / 4)
    np.testing.assert_allclose(q, expected)
    sampler = BulkSampler(rowptr, col, [1], method="ladies", minibatches_per_bulk=1000)
    batches = sampler.sample_bulk([torch.tensor([0, 5])] * 3000, 8, 0)
    # s = 1: the single drawn node is the source of every edge of the batch.
    drawn = np.array([np.unique(b.n_id.numpy()[b.mfgs[0].edge_index[0].numpy()]).item() for b in batches])
    counts = np.bincount(drawn, minlength=8)
    assert counts[[0, 4, 5]].sum() == 0
    assert stats.chisquare(counts[[1, 2, 3, 6, 7]], 3000 * expected[[1, 2, 3, 6, 7]]).pvalue > ALPHA


# --- 7. The loader ---------------------------------------------------------------------------------------------

N, RANK = 900, 1
OFFSETS = np.array([0, 250, 600, 700, 900], dtype=np.int64)


@pytest.fixture(scope="module")
def loader_setup():
    rng = np.random.default_rng(0)
    rowptr, col = build_csr(rng.integers(0, N, size=(2, 4000)), N)
    x = torch.randn(N, 4, generator=torch.Generator().manual_seed(1))
    labels = torch.from_numpy(rng.integers(0, 7, N))
    book = PartitionBook(OFFSETS)
    owned = book.owned(RANK)
    remote = np.setdiff1d(np.arange(N), owned)
    cached = rng.permutation(remote)[:remote.shape[0] // 2]  # first 80 in the device tier, the rest CPU
    cache_slot = np.full(N, -1, dtype=np.int64)
    cache_slot[cached] = np.arange(cached.shape[0])
    ctx = FetchContext(book, RANK, cache_slot=cache_slot, num_device_slots=80, local_x=[x[owned]], pin=False)
    return rowptr, col, x, labels, ctx, (x[cached[:80]], x[cached[80:]])


def check_plan(batch, x, ctx, caches) -> None:
    """The row origins covers every position once, by the right source, and rebuilds x[n_id]."""
    plan, n_id = batch.origins, batch.n_id
    owner = torch.from_numpy(ctx.book.owner(n_id.numpy()))
    positions = torch.cat([plan.owned_pos, plan.remote_pos, plan.device_pos, plan.host_pos])
    assert torch.equal(torch.sort(positions).values, torch.arange(n_id.shape[0]))
    assert (owner[plan.owned_pos] == RANK).all() and (owner[plan.remote_pos] != RANK).all()
    assert torch.equal(n_id[plan.remote_pos], plan.remote_id)
    assert int(plan.remote_counts.sum()) == plan.remote_id.shape[0] and plan.remote_counts[RANK] == 0
    assert torch.equal(complete(plan, x, *caches), x[n_id])


def test_a_bulk_loader_prefetching_the_next_epoch_yields_the_same_batches(loader_setup):
    rowptr, col, x, labels, ctx, caches = loader_setup
    sampler = BulkSampler(rowptr, col, [4, 3], minibatches_per_bulk=4)
    plain = NeighborLoader(sampler, torch.arange(250, 600), 64, seed=5, labels=labels, fetch=ctx)
    loader = NeighborLoader(sampler, torch.arange(250, 600), 64, seed=5, labels=labels, fetch=ctx,
                            prefetch_next_epoch=True)
    for epoch in (0, 1, 3):
        plain.set_epoch(epoch)
        loader.set_epoch(epoch)
        prefetched = loader._prefetched is not None and loader._prefetched[0] == epoch
        assert prefetched == (epoch == 1)
        for got, expected in zip(list(loader), list(plain), strict=True):
            assert_same_batch(got, expected)
            assert torch.equal(got.origins.owned_pos, expected.origins.owned_pos)
            assert torch.equal(got.origins.x[0][got.origins.owned_pos], expected.origins.x[0][expected.origins.owned_pos])
    loader.close()


@pytest.mark.parametrize("method,fanouts", [("nodewise", [4, 3]), ("ladies", [40, 60])])
def test_loader_with_bulk_sampler_yields_the_per_batch_samples(loader_setup, method, fanouts):
    rowptr, col, x, labels, ctx, caches = loader_setup
    sampler = BulkSampler(rowptr, col, fanouts, method=method, minibatches_per_bulk=3)
    loader = NeighborLoader(sampler, torch.arange(250, 600), 64, seed=5, labels=labels, fetch=ctx)
    loader.set_epoch(2)
    order, bounds = loader.epoch_order(), loader.batch_bounds().tolist()
    batches = list(loader)
    assert len(batches) == len(loader) == 6  # bulks of 3 and 3
    assert loader.state_dict() == {"epoch": 2, "next_batch": 0}
    for i, batch in enumerate(batches):
        seeds = order[bounds[i]:bounds[i + 1]]
        expected = sampler.sample(seeds, seed=loader.epoch_seed(), batch_index=i, labels=labels, fetch=ctx)
        assert_same_batch(batch, expected)
        assert torch.equal(batch.y, labels[seeds])
        for field in ("owned_pos", "owned_row", "remote_id", "remote_pos", "device_pos", "host_pos"):
            assert torch.equal(getattr(batch.origins, field), getattr(expected.origins, field))
        check_plan(batch, x, ctx, caches)

    # Stop mid-bulk (after batch 3 of bulk [3, 4, 5]) and resume in a fresh loader.
    stopped = iter(loader)
    for _ in range(4):
        next(stopped)
    state = loader.state_dict()
    assert state == {"epoch": 2, "next_batch": 4}
    resumed = NeighborLoader(sampler, torch.arange(250, 600), 64, seed=5, labels=labels, fetch=ctx)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == 2
    for a, b in zip(rest, batches[4:]):
        assert_same_batch(a, b)
        assert torch.equal(a.y, b.y)


@pytest.mark.parametrize("method", ["nodewise", "ladies"])
def test_loader_with_more_batches_than_seeds_yields_valid_empty_batches(loader_setup, method):
    rowptr, col, x, labels, ctx, caches = loader_setup
    sampler = BulkSampler(rowptr, col, [3, 5], method=method, minibatches_per_bulk=3)
    loader = NeighborLoader(sampler, torch.tensor([300, 10, 650]), 1, num_batches=8, labels=labels, fetch=ctx)
    batches = list(loader)
    assert [b.batch_size for b in batches].count(0) == 5 and len(batches) == 8
    assert sorted(int(s) for b in batches for s in b.n_id[:b.batch_size]) == [10, 300, 650]
    for batch in batches:
        check_plan(batch, x, ctx, caches)
        assert batch.y.shape == (batch.batch_size,) and len(batch.mfgs) == 2
        if batch.batch_size:
            assert torch.equal(batch.y, labels[batch.n_id[:batch.batch_size]])
            assert batch.mfgs[-1].num_dst == batch.batch_size and batch.mfgs[0].num_src == batch.num_nodes
            continue
        assert batch.n_id.shape == (0,)
        for mfg in batch.mfgs:
            assert (mfg.num_src, mfg.num_dst) == (0, 0)
            assert mfg.edge_index.shape == (2, 0) and mfg.rowptr.tolist() == [0]
            assert (mfg.edge_weight is None) == (method == "nodewise")


# --- 8. Errors -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,match", [
    (dict(minibatches_per_bulk=0), "minibatches_per_bulk"),
    (dict(method="ladies", fanouts=[5, 0]), "fanouts"),
    (dict(method="ladies", fanouts=[-1, 5]), "LADIES"),
    (dict(method="layerwise"), "unknown bulk sampling method"),
    (dict(method="ladies", replace=True), "replace"),
    (dict(fanouts=[3, -2]), "fanouts"),
])
def test_bad_bulk_options_are_refused(kwargs, match):
    rowptr, col = random_graph(50, 100, seed=6)
    args = dict(fanouts=[3, 2]) | kwargs
    with pytest.raises(InputError, match=match):
        BulkSampler(rowptr, col, **args)


@pytest.mark.parametrize("change,match", [
    (lambda rel: rel[:-1], "one entry per entry of col"),
    (lambda rel: np.where(rel == rel.max(), 9, rel).astype(np.int8), "relations outside"),
    (lambda rel: rel[::-1].copy(), "group each row's entries by relation"),
])
def test_a_typed_graph_with_bad_relations_is_refused(change, match):
    schema, rowptr, col, edge_rel = typed_graph()
    with pytest.raises(InputError, match=match):
        BulkSampler(rowptr, col, [3, 2], edge_rel=change(edge_rel), schema=schema)
    with pytest.raises(InputError, match="needs the graph's schema"):
        BulkSampler(rowptr, col, [3, 2], edge_rel=edge_rel)
    with pytest.raises(InputError, match="draws homogeneous graphs only"):
        BulkSampler(rowptr, col, [30, 30], method="ladies", schema=schema)


def test_a_typed_partitioning_trains_on_two_ranks_with_the_bulk_sampler_and_reports_macro_f1(typed_partitions,
                                                                                            tmp_path):
    """The typed bulk sampler in a run: per-relation fanouts, a featureless type's embedding, the
    batches' node and edge types read by R-SAGE; the typed node task reports --metric f1-macro."""
    import json

    from conftest import exit_code

    root, _ = typed_partitions
    log = tmp_path / "log.jsonl"
    argv = ["train", str(root / "p2"), "--sampler", "bulk", "--bulk-size", "2", "--metric", "f1-macro",
            "--embedding-dim", "4", "--layers", "2", "--fanouts", "cites=3,2;writes=2,2;rev_writes=2,0;at=1,1;"
            "rev_at=1,1", "--batch-size", "4", "--epochs", "3", "--json", str(log), "--quiet"]
    assert exit_code(argv) == 0
    history = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(history) == 3 and all(h["metric"] == "f1-macro" for h in history)
    assert all(0.0 <= h[key] <= 1.0 for h in history for key in ("valid_metric", "test_metric"))
    assert all(h["comm"]["received"] > 0 and h["embedding_comm"]["received"] > 0 for h in history)


def _nice(tid: int) -> int:
    """The nice value of thread ``tid`` of this process (field 19 of /proc/self/task/TID/stat)."""
    return int(Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[16])


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_a_low_priority_bulk_worker_runs_some_nice_steps_below_the_consumer_and_yields_the_same_batches(
        loader_setup):
    rowptr, col, _, labels, _, _ = loader_setup
    sampler = BulkSampler(rowptr, col, [4, 3], minibatches_per_bulk=2)
    expected = list(NeighborLoader(sampler, torch.arange(250, 600), 64, seed=5, labels=labels))
    loader = NeighborLoader(sampler, torch.arange(250, 600), 64, seed=5, labels=labels, read_ahead=1,
                            low_priority=True)
    batches = iter(loader)
    got = [next(batches)]  # the worker now waits to put the next batches, so it is alive
    workers = [t for t in threading.enumerate() if t.name == "salientpp-sampler" and t.is_alive()]
    low = min(19, _nice(threading.get_native_id()) + extension().sampler_nice_offset)
    assert workers and all(_nice(t.native_id) == low for t in workers)
    got += list(batches)
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert_same_batch(a, b)
    loader.close()
