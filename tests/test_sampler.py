"""The C++ neighbour sampler: exact uniformity, MFG structure, determinism, errors; on typed graphs
the bulk node-wise sampler too (the two draw the same distribution)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from salientpp._ext import extension
from salientpp.data.csr import build_csr, build_typed_csr
from salientpp.data.schema import GraphSchema, Relation
from salientpp.errors import InputError
from salientpp.sampling import MFG, BulkSampler, NeighborSampler

# Significance level of the uniformity tests. Under an exactly uniform sampler the p-value is
# Uniform(0, 1), so a fixed seed has a 0.1% chance of being an unlucky one (and the tests are
# deterministic for that seed). The defects they guard against (Floyd's `rand % j`, which
# never draws the last neighbour with f = 1; modulo bias) give p-values below 1e-30 here.
ALPHA = 1e-3


def stars(num_stars: int, degree: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint stars: centre c * (degree + 1) with leaves c * (degree + 1) + 1 .. + degree."""
    centres = np.arange(num_stars, dtype=np.int64) * (degree + 1)
    leaves = centres[:, None] + 1 + np.arange(degree)
    edges = np.stack([np.repeat(centres, degree), leaves.ravel()])
    rowptr, col = build_csr(edges, num_stars * (degree + 1))
    return rowptr, col, centres


def random_graph(num_nodes: int, num_edges: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return build_csr(rng.integers(0, num_nodes, size=(2, num_edges)), num_nodes)


def edge_counts(rowptr: np.ndarray, col: np.ndarray, batch) -> np.ndarray:
    """int64 [nnz]: how often each CSR edge (v, u) was sampled as (dst v, src u) in any hop."""
    n = rowptr.shape[0] - 1
    keys = np.repeat(np.arange(n), np.diff(rowptr)) * n + col  # sorted: rows ascend, cols sorted per row
    counts = np.zeros(col.shape[0], dtype=np.int64)
    n_id = batch.n_id.numpy()
    for mfg in batch.mfgs:
        src, dst = mfg.edge_index.numpy()
        edge = np.searchsorted(keys, n_id[dst] * n + n_id[src])
        np.add.at(counts, edge, 1)
    return counts


def without_replacement_pvalue(counts: np.ndarray, degrees: np.ndarray, fanout: int, draws: int) -> float:
    """p-value that per-position inclusion counts come from uniform f-subsets.

    ``counts[v]`` [d_v] holds how often each neighbour position of node v was picked over
    ``draws`` independent draws of ``min(f, d_v)`` of ``d_v`` positions. Each draw's inclusion
    vector has mean p = f/d and covariance p(1-p) d/(d-1) (I - J/d) (rank d-1), so
    sum_i (O_i - R p)^2 / (R p (1-p) d/(d-1)) is asymptotically chi-square with d-1 degrees of
    freedom; independent nodes add up. For f = 1 this is Pearson's statistic.
    """
    statistic, dof = 0.0, 0
    for c, d in zip(counts, degrees):
        if d <= fanout:
            continue
        p = fanout / d
        statistic += float(((c - draws * p) ** 2).sum()) / (draws * p * (1 - p) * d / (d - 1))
        dof += d - 1
    return float(stats.chi2.sf(statistic, dof))


@pytest.mark.parametrize("fanout", [1, 5])
def test_statistic_rejects_the_reference_floyd_bug(fanout):
    """The uniformity statistic has power: Floyd with t in [0, j) instead of [0, j] fails it."""
    rng = np.random.default_rng(0)
    degree, draws = 10, 2000
    counts = np.zeros(degree)
    for _ in range(draws):
        picks: list[int] = []
        for j in range(degree - fanout, degree):
            t = int(rng.integers(0, j))  # the bug: j itself is never drawn
            picks.append(j if t in picks else t)
        np.add.at(counts, picks, 1)
    assert without_replacement_pvalue([counts], [degree], fanout, draws) < 1e-20


@pytest.mark.parametrize("fanout,degree", [(1, 10), (5, 10), (70, 100)])  # 70 > 64 takes the Fisher-Yates path
def test_star_positions_uniform(fanout, degree):
    num_stars = 4000 if degree == 10 else 300  # >= 140 expected picks per position
    rowptr, col, centres = stars(num_stars, degree)
    batch = NeighborSampler(rowptr, col, [fanout]).sample(torch.from_numpy(centres), seed=11)
    src, dst = batch.mfgs[0].edge_index.numpy()
    n_id = batch.n_id.numpy()
    position = n_id[src] - n_id[dst] - 1  # leaf position 0..degree-1 within its star
    assert np.bincount(dst, minlength=num_stars).tolist() == [fanout] * num_stars
    counts = np.bincount(position, minlength=degree)
    assert counts[-1] > 0, "the last neighbour must be drawable"
    # Stars are independent and identical, so pooling positions over stars is `num_stars` draws.
    assert without_replacement_pvalue([counts], [degree], fanout, num_stars) > ALPHA


def test_star_subsets_uniform():
    """All C(8, 5) = 56 subsets equally likely (a joint test, stronger than marginals)."""
    num_stars, degree, fanout = 11200, 8, 5  # 200 expected per subset
    rowptr, col, centres = stars(num_stars, degree)
    batch = NeighborSampler(rowptr, col, [fanout]).sample(torch.from_numpy(centres), seed=5)
    src, dst = batch.mfgs[0].edge_index.numpy()
    position = batch.n_id.numpy()[src] - batch.n_id.numpy()[dst] - 1
    mask = np.zeros(num_stars, dtype=np.int64)
    np.add.at(mask, dst, 1 << position)
    _, per_subset = np.unique(mask, return_counts=True)
    assert per_subset.shape[0] == 56
    assert stats.chisquare(per_subset).pvalue > ALPHA


def test_star_with_replacement_uniform():
    num_stars, degree, fanout = 2000, 10, 5
    rowptr, col, centres = stars(num_stars, degree)
    batch = NeighborSampler(rowptr, col, [fanout], replace=True).sample(torch.from_numpy(centres), seed=3)
    src, dst = batch.mfgs[0].edge_index.numpy()
    assert np.bincount(dst, minlength=num_stars).tolist() == [fanout] * num_stars
    counts = np.bincount(batch.n_id.numpy()[src] - batch.n_id.numpy()[dst] - 1, minlength=degree)
    # With replacement every draw is an independent categorical: Pearson's test is exact.
    assert stats.chisquare(counts).pvalue > ALPHA
    pairs = np.unique(np.stack([dst, src]), axis=1).shape[1]
    assert pairs < src.shape[0], "duplicates are kept as parallel edges"


@pytest.mark.parametrize("fanout", [1, 5])
def test_random_graph_neighbours_uniform(fanout):
    rowptr, col = random_graph(200, 1500, seed=1)  # degrees ~ 5..30
    degrees = np.diff(rowptr)
    seeds = torch.from_numpy(np.flatnonzero(degrees > fanout))
    sampler = NeighborSampler(rowptr, col, [fanout])
    draws = 40 * int(degrees.max()) // fanout  # >= 40 expected picks per neighbour
    counts = sum(edge_counts(rowptr, col, sampler.sample(seeds, seed=9, batch_index=i)) for i in range(draws))
    per_node = [counts[rowptr[v]:rowptr[v + 1]] for v in seeds.tolist()]
    assert all(c[-1] > 0 for c in per_node), "the last neighbour of every node must be drawn"
    assert without_replacement_pvalue(per_node, degrees[seeds.numpy()], fanout, draws) > ALPHA


@pytest.mark.parametrize("replace", [False, True])
def test_mfg_structure(replace):
    rowptr, col = random_graph(3000, 12000, seed=2)
    fanouts = [6, 4, -1] if not replace else [6, 4, 3]
    seeds = torch.tensor([5, 17, 2999, 0, 1234], dtype=torch.int64)
    batch = NeighborSampler(rowptr, col, fanouts, replace=replace).sample(seeds, seed=1)
    n_id = batch.n_id.numpy()
    degrees = np.diff(rowptr)
    adjacency = set(zip(np.repeat(np.arange(3000), degrees).tolist(), col.tolist()))

    assert batch.batch_size == 5 and np.array_equal(n_id[:5], seeds.numpy())
    assert np.unique(n_id).shape[0] == n_id.shape[0]
    assert batch.mfgs[0].num_src == n_id.shape[0] and batch.mfgs[-1].num_dst == 5
    for outer, inner in zip(batch.mfgs[:-1], batch.mfgs[1:]):
        assert outer.num_dst == inner.num_src  # every node reached before a hop is expanded by it
    for mfg, fanout in zip(batch.mfgs, reversed(fanouts)):
        src, dst = mfg.edge_index.numpy()
        assert mfg.edge_index.dtype == torch.int64 and mfg.rowptr.shape == (mfg.num_dst + 1,)
        assert src.max() < mfg.num_src and dst.max() < mfg.num_dst
        assert np.array_equal(np.repeat(np.arange(mfg.num_dst), np.diff(mfg.rowptr.numpy())), dst)
        deg = degrees[n_id[:mfg.num_dst]]
        expected = deg if fanout == -1 else (np.where(deg > 0, fanout, 0) if replace else np.minimum(deg, fanout))
        assert np.array_equal(np.diff(mfg.rowptr.numpy()), expected)
        assert all(pair in adjacency for pair in zip(n_id[dst].tolist(), n_id[src].tolist()))
        if not replace:
            assert np.unique(np.stack([dst, src]), axis=1).shape[1] == src.shape[0], "duplicate neighbour in a hop"


def test_same_seed_same_batch_and_different_seeds_differ():
    rowptr, col = random_graph(2000, 10000, seed=3)
    sampler = NeighborSampler(rowptr, col, [5, 5])
    seeds = torch.arange(0, 2000, 7)
    a, b = sampler.sample(seeds, seed=4), sampler.sample(seeds, seed=4)
    assert torch.equal(a.n_id, b.n_id)
    assert all(torch.equal(x.edge_index, y.edge_index) for x, y in zip(a.mfgs, b.mfgs))
    assert not torch.equal(a.n_id, sampler.sample(seeds, seed=5).n_id)
    assert not torch.equal(a.n_id, sampler.sample(seeds, seed=4, batch_index=1).n_id)


def test_graph_above_the_dense_id_map_limit_samples_the_same_batches():
    # Graphs up to dense_id_map_max_nodes vertices map ids through a table of one slot per
    # vertex, larger ones through a hash map. The same edges shifted past the limit (isolated
    # vertices before them) must give the same batches, ids shifted alike.
    rowptr, col = random_graph(3000, 20000, seed=8)
    shift = extension().dense_id_map_max_nodes
    big_rowptr = np.concatenate([np.zeros(shift, dtype=np.int64), rowptr])
    small, big = NeighborSampler(rowptr, col, [6, 4, 3]), NeighborSampler(big_rowptr, col + shift, [6, 4, 3])
    for batch_index in range(3):
        seeds = torch.from_numpy(np.random.default_rng(batch_index).choice(3000, 300, replace=False))
        a = small.sample(seeds, seed=2, batch_index=batch_index)
        b = big.sample(seeds + shift, seed=2, batch_index=batch_index)
        assert torch.equal(a.n_id + shift, b.n_id)
        assert all(torch.equal(x.edge_index, y.edge_index) and torch.equal(x.rowptr, y.rowptr)
                   for x, y in zip(a.mfgs, b.mfgs))


def test_memory_mapped_csr(tmp_path):
    rowptr, col = random_graph(500, 2000, seed=4)
    np.save(tmp_path / "rowptr.npy", rowptr)
    np.save(tmp_path / "col.npy", col)
    mapped = NeighborSampler(np.load(tmp_path / "rowptr.npy", mmap_mode="r"),
                             np.load(tmp_path / "col.npy", mmap_mode="r"), [3, 2])
    seeds = torch.arange(20)
    assert torch.equal(mapped.sample(seeds).n_id, NeighborSampler(rowptr, col, [3, 2]).sample(seeds).n_id)


def test_sage_conv_on_mfg_matches_dense_reference():
    from torch_geometric.nn import SAGEConv

    rowptr, col = random_graph(400, 2000, seed=5)
    x = torch.randn(400, 8, generator=torch.Generator().manual_seed(0))
    batch = NeighborSampler(rowptr, col, [4, 3]).sample(torch.arange(0, 400, 13), seed=2)
    torch.manual_seed(0)
    conv = SAGEConv(8, 6, aggr="mean")
    for mfg in batch.mfgs:
        x_src = x[batch.n_id[:mfg.num_src]]
        out = conv((x_src, x_src[:mfg.num_dst]), mfg.edge_index)
        adjacency = torch.zeros(mfg.num_dst, mfg.num_src)
        adjacency.index_put_((mfg.edge_index[1], mfg.edge_index[0]), torch.ones(mfg.num_edges), accumulate=True)
        mean = adjacency / adjacency.sum(1, keepdim=True).clamp(min=1)
        reference = conv.lin_l(mean @ x_src) + conv.lin_r(x_src[:mfg.num_dst])
        assert out.shape == (mfg.num_dst, 6)
        torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs,match", [
    (dict(fanouts=[]), "fanouts"),
    (dict(fanouts=[5, 0]), "fanouts"),
    (dict(fanouts=[5], rowptr=np.array([0, 1, 3])), "rowptr must run"),
    (dict(fanouts=[5], col=np.zeros(4, dtype=np.int32)), "int64"),
])
def test_bad_sampler_arguments(kwargs, match):
    rowptr, col = random_graph(50, 100, seed=6)
    args = dict(rowptr=rowptr, col=col) | kwargs
    with pytest.raises(InputError, match=match):
        NeighborSampler(args["rowptr"], args["col"], args["fanouts"])


@pytest.mark.parametrize("seeds,match", [([1, 2, 1], "duplicate"), ([0, 50], "outside"), ([], "empty")])
def test_bad_seeds(seeds, match):
    rowptr, col = random_graph(50, 100, seed=6)
    with pytest.raises(InputError, match=match):
        NeighborSampler(rowptr, col, [2]).sample(seeds)


def test_corrupt_csr_is_reported_not_crashing():
    rowptr, col = random_graph(50, 100, seed=6)
    col = col.copy()
    col[rowptr[3]] = 10**9
    with pytest.raises(InputError, match="corrupt"):
        NeighborSampler(rowptr, col, [-1]).sample([3])


def test_stale_extension_build_gives_rebuild_message(monkeypatch):
    import types

    import salientpp
    from salientpp import _ext

    stale = types.ModuleType("salientpp._C")
    stale.__doc__ = "an old build: no sampler entry points"
    monkeypatch.setattr(salientpp, "_C", stale, raising=False)
    monkeypatch.setitem(__import__("sys").modules, "salientpp._C", stale)
    _ext.extension.cache_clear()
    try:
        with pytest.raises(InputError, match="lacks Sampler.*pip install --no-build-isolation"):
            _ext.extension()
    finally:
        _ext.extension.cache_clear()


# ---- typed graphs ----------------------------------------------------------------------------------------------------

# Papers cite papers (one symmetric relation), authors write papers and are affiliated with
# institutions (each with its reverse): 3 node types, 5 relations.
TYPED_RELATIONS = [("paper", "cites", "paper"), ("author", "writes", "paper"),
                   ("author", "affiliated_with", "institution")]


def typed_graph(sizes=(300, 200, 30), seed=0):
    """(schema, rowptr, col, edge_rel) of a random graph of TYPED_RELATIONS whose relation
    degrees range from 0 to about 20, so that fanouts both bind and exceed them."""
    schema = GraphSchema.with_reverses(("paper", "author", "institution"), sizes, TYPED_RELATIONS, "paper")
    offsets = schema.offsets
    rng = np.random.default_rng(seed)

    def between(src_type, dst_type, count):
        src = rng.integers(offsets[src_type], offsets[src_type + 1], count)
        dst = rng.integers(offsets[dst_type], offsets[dst_type + 1], count)
        return np.stack([src, dst])

    edges = {"cites": between(0, 0, 900), "writes": between(1, 0, 700), "affiliated_with": between(1, 2, 250)}
    per_relation = [edges.get(r.name, np.empty((2, 0), dtype=np.int64)) for r in schema.relations]
    rowptr, col, edge_rel = build_typed_csr(per_relation, schema.reverse, schema.total_nodes)
    return schema, rowptr, col, edge_rel


def typed_keys(rowptr, col, edge_rel, num_relations):
    """int64 [nnz], increasing: the key (v * R + r) * N + u of each CSR entry u of relation r in row v."""
    n = rowptr.shape[0] - 1
    row = np.repeat(np.arange(n), np.diff(rowptr))
    return (row * num_relations + edge_rel) * n + col


def relation_degrees(rowptr, edge_rel, num_relations):
    """int64 [N, R]: the entries of each relation in each row."""
    n = rowptr.shape[0] - 1
    row = np.repeat(np.arange(n), np.diff(rowptr))
    return np.bincount(row * num_relations + edge_rel, minlength=n * num_relations).reshape(n, num_relations)


# The node-wise samplers of typed graphs: the C++ one and the bulk one (on the CPU).
TYPED_SAMPLERS = [NeighborSampler, BulkSampler]


@pytest.mark.parametrize("sampler_class", TYPED_SAMPLERS)
@pytest.mark.parametrize("replace", [False, True])
def test_a_typed_batch_draws_each_relations_fanout_among_that_relations_neighbours(replace, sampler_class):
    schema, rowptr, col, edge_rel = typed_graph()
    R = schema.num_relations
    # Hop 0 draws some relations, none (0) or all (-1) of others; hop 1 one list for every relation would
    # not say 0, so the per-relation form is used throughout.
    fanouts = {"cites": [3, -1], "writes": [2, 0], "rev_writes": [0, 4], "affiliated_with": [1, 1],
               "institution__rev_affiliated_with__author": [-1, 5]}
    if replace:
        fanouts["cites"], fanouts["rev_affiliated_with"] = [3, 2], [6, 5]
        del fanouts["institution__rev_affiliated_with__author"]
    sampler = sampler_class(rowptr, col, fanouts, replace=replace, edge_rel=edge_rel, schema=schema)
    table = sampler.fanouts
    assert table.shape == (2, R) and table.dtype == np.int64
    keys = typed_keys(rowptr, col, edge_rel, R)
    degrees = relation_degrees(rowptr, edge_rel, R)
    seeds = torch.arange(0, 300, 7)
    batch = sampler.sample(seeds, seed=3)
    n_id = batch.n_id.numpy()
    node_type = schema.type_of(n_id)
    assert batch.node_type.dtype == torch.int64 and np.array_equal(batch.node_type.numpy(), node_type)
    into = np.array([schema.node_types.index(r.dst) for r in schema.relations])
    for mfg, hop in zip(batch.mfgs, reversed(range(2))):
        src, dst = mfg.edge_index.numpy()
        edge_type = mfg.edge_type.numpy()
        assert mfg.edge_type.dtype == torch.int64 and edge_type.shape == src.shape
        # Every sampled edge is an edge of the graph with that relation, into its destination's type.
        key = (n_id[dst] * R + edge_type) * (rowptr.shape[0] - 1) + n_id[src]
        found = np.searchsorted(keys, key)
        assert np.all(found < keys.shape[0]) and np.array_equal(keys[np.minimum(found, keys.shape[0] - 1)], key)
        assert np.array_equal(into[edge_type], node_type[dst])
        # Grouped by destination, then relation.
        assert np.all(np.diff(dst) >= 0) and np.all(np.diff(edge_type)[np.diff(dst) == 0] >= 0)
        # Per (destination, relation): min(f, deg) without replacement, f (when deg > 0) with it, all
        # with -1, none with 0.
        counts = np.bincount(dst * R + edge_type, minlength=mfg.num_dst * R).reshape(mfg.num_dst, R)
        deg = degrees[n_id[:mfg.num_dst]]
        f = table[hop][None, :]
        bounded = np.where(deg > 0, f, 0) if replace else np.minimum(f, deg)
        assert np.array_equal(counts, np.where(f == -1, deg, bounded))
        if not replace:
            assert np.unique(np.stack([dst, src]), axis=1).shape[1] == src.shape[0], "duplicate neighbour in a hop"


@pytest.mark.parametrize("sampler_class", TYPED_SAMPLERS)
@pytest.mark.parametrize("replace", [False, True])
def test_a_typed_sampler_draws_each_neighbour_of_a_relation_uniformly(replace, sampler_class):
    """Over B independent batches each entry u of relation r in row v is drawn f/deg_r(v) times
    per batch on average (without replacement: in each batch with probability p = f/deg; with
    replacement: Binomial(f, 1/deg) times), so its count has mean B p and standard error
    sqrt(B p (1 - p)) (without replacement) or sqrt(B p (1 - 1/deg)) (with). A normal count lies
    beyond 5 standard errors with probability 5.7e-7, so over the ~1,500 entries tested a
    uniform sampler fails with probability ~1e-3 (and the seed is fixed). An entry never drawn
    (mean >= 600/20 = 30, 5 SE <= 27) or drawn for another relation fails it."""
    schema, rowptr, col, edge_rel = typed_graph(seed=1)
    R = schema.num_relations
    table = {"cites": [2], "writes": [3], "rev_writes": [1], "affiliated_with": [1], "rev_affiliated_with": [4]}
    sampler = sampler_class(rowptr, col, table, replace=replace, edge_rel=edge_rel, schema=schema)
    fanout = sampler.fanouts[0]
    keys = typed_keys(rowptr, col, edge_rel, R)
    n = schema.total_nodes
    seeds = torch.arange(n)
    batches = 600
    counts = np.zeros(keys.shape[0], dtype=np.int64)
    for i in range(batches):
        batch = sampler.sample(seeds, seed=21, batch_index=i)
        mfg = batch.mfgs[0]
        src, dst = mfg.edge_index.numpy()
        n_id = batch.n_id.numpy()
        np.add.at(counts, np.searchsorted(keys, (n_id[dst] * R + mfg.edge_type.numpy()) * n + n_id[src]), 1)
    row = np.repeat(np.arange(n), np.diff(rowptr))
    deg = relation_degrees(rowptr, edge_rel, R)[row, edge_rel]
    f = fanout[edge_rel]
    tested = deg > f if not replace else deg > 1
    assert tested.sum() > 1000
    p = f[tested] / deg[tested]
    mean = batches * p
    se = np.sqrt(batches * p * ((1 - 1 / deg[tested]) if replace else (1 - p)))
    assert np.all(np.abs(counts[tested] - mean) <= 5 * se), np.max(np.abs(counts[tested] - mean) / se)
    # The entries of a relation with deg <= f are drawn in every batch (without replacement).
    if not replace:
        assert np.all(counts[deg <= f] == batches)


def test_a_typed_sampler_of_one_relation_draws_the_untyped_batches():
    """With one relation the typed inner loop draws the same random numbers as the untyped one,
    for every algorithm (Floyd below 65, partial Fisher-Yates above, with replacement, all)."""
    rowptr, col = random_graph(3000, 60000, seed=11)  # degrees ~ 20..70
    zeros = np.zeros(col.shape[0], dtype=np.int8)
    for fanouts, replace in (([5, 3, -1], False), ([70, 2], False), ([4, 4], True)):
        table = torch.tensor(fanouts, dtype=torch.int64)[:, None]
        untyped = extension().Sampler(torch.from_numpy(rowptr), torch.from_numpy(col), None, table, replace)
        typed = extension().Sampler(torch.from_numpy(rowptr), torch.from_numpy(col), torch.from_numpy(zeros), table,
                                    replace)
        assert typed.typed and not untyped.typed
        for batch_index in range(3):
            seeds = torch.from_numpy(np.random.default_rng(batch_index).choice(3000, 200, replace=False))
            a_n_id, a_hops, _, _ = untyped.sample(seeds, 8, batch_index, None, 0, None)
            b_n_id, b_hops, _, _ = typed.sample(seeds, 8, batch_index, None, 0, None)
            assert torch.equal(a_n_id, b_n_id)
            for (a_src, a_dst, a_rowptr, a_edges, a_type), (b_src, b_dst, b_rowptr, b_edges, b_type) in zip(
                    a_hops, b_hops):
                assert (a_src, a_dst) == (b_src, b_dst) and a_type is None
                assert torch.equal(a_rowptr, b_rowptr) and torch.equal(a_edges, b_edges)
                assert torch.equal(b_type, torch.zeros(a_edges.shape[1], dtype=torch.int64))


@pytest.mark.parametrize("sampler_class", TYPED_SAMPLERS)
def test_a_typed_graph_of_one_relation_samples_like_the_homogeneous_graph(sampler_class):
    """Two node types, the second isolated, one relation: a typed sampler takes the typed path and
    gives the homogeneous sampler's batches, with edge and node types."""
    rowptr, col = random_graph(400, 3000, seed=12)
    rowptr = np.concatenate([rowptr, np.full(10, rowptr[-1])])  # 10 isolated nodes of type "b"
    schema = GraphSchema(("a", "b"), (400, 10), (Relation("a", "to", "a"),), (0,), "a")
    typed = sampler_class(rowptr, col, [4, 3], edge_rel=np.zeros(col.shape[0], dtype=np.int8), schema=schema)
    plain = sampler_class(rowptr, col, [4, 3])
    seeds = torch.tensor([0, 5, 405, 77])
    a, b = plain.sample(seeds, seed=1), typed.sample(seeds, seed=1)
    assert torch.equal(a.node_type, torch.zeros(a.num_nodes, dtype=torch.int64)) and a.node_type.stride() == (0,)
    assert all(torch.equal(m.edge_type, torch.zeros(m.num_edges, dtype=torch.int64)) for m in a.mfgs)
    assert torch.equal(a.n_id, b.n_id)
    assert torch.equal(b.node_type, torch.from_numpy(schema.type_of(b.n_id.numpy())))
    assert b.node_type.tolist()[:4] == [0, 0, 1, 0]
    for x, y in zip(a.mfgs, b.mfgs):
        assert torch.equal(x.edge_index, y.edge_index) and torch.equal(x.rowptr, y.rowptr)
        assert torch.equal(y.edge_type, torch.zeros(y.num_edges, dtype=torch.int64))


def test_typed_mfgs_and_batches_move_their_types():
    schema, rowptr, col, edge_rel = typed_graph()
    batch = NeighborSampler(rowptr, col, [2, 2], edge_rel=edge_rel, schema=schema).sample(torch.arange(10))
    moved = batch.to("cpu")
    assert torch.equal(moved.node_type, batch.node_type)
    assert all(torch.equal(m.edge_type, b.edge_type) for m, b in zip(moved.mfgs, batch.mfgs))
    assert MFG.empty().edge_type.shape == MFG.empty().to("cpu").edge_type.shape == (0,)


@pytest.mark.parametrize("sampler_class", TYPED_SAMPLERS)
def test_a_typed_batch_takes_its_node_types_from_the_given_type_of_where_ids_are_renumbered(sampler_class):
    schema, rowptr, col, edge_rel = typed_graph()
    blocks = lambda ids: (np.asarray(ids) * 7) % schema.num_types  # noqa: E731  (any renumbering's lookup)
    sampler = sampler_class(rowptr, col, [3, 2], edge_rel=edge_rel, schema=schema, type_of=blocks)
    batch = sampler.sample(torch.arange(0, 300, 7), seed=3)
    assert np.array_equal(batch.node_type.numpy(), blocks(batch.n_id.numpy()))
    assert not np.array_equal(batch.node_type.numpy(), schema.type_of(batch.n_id.numpy()))
