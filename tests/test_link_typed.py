"""Link prediction on a relation of a typed graph: the held-out edges of ``user__rates__movie`` (and
their reverses) in ``from_pyg``, ``prepare`` and the partitions; negatives of the relation's types,
typed link batches, the rows they fetch against the simulator, and training on 1 and 2 ranks."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy import stats

import salientpp
from salientpp.cache import PolicyContext, Workload, simulate
from salientpp.cache.workload import EdgeSeeds
from salientpp.cli import main
from salientpp.data import from_pyg, load_dataset
from salientpp.data.format import save_dataset
from salientpp.data.schema import Relation
from salientpp.errors import InputError
from salientpp.partition import load_partitioned, partition_dataset
from salientpp.sampling.link import NodePool
from salientpp.train import TrainConfig, train

from conftest import one_sentence

RATES = ("user", "rates", "movie")
FRACTIONS = (0.8, 0.1, 0.1)


def rating_graph(num_users: int = 60, num_movies: int = 40, per_user: int = 6, seed: int = 0,
                 reverse: bool = True, labels: bool = False):
    """A user–item ``HeteroData``: featureless ``user`` nodes (``num_nodes``), ``movie`` nodes with
    8 features, ``per_user`` ratings per user and, with ``reverse``, PyG's ``ToUndirected``
    reverse ``rev_rates``. A planted signal: users and movies fall in 4 groups (a movie's group
    is its feature 0's sign pair), and a user rates movies of its own group, so a model can tell
    a rating from a random pair."""
    from torch_geometric.data import HeteroData

    g = torch.Generator().manual_seed(seed)
    group_of_movie = torch.arange(num_movies) % 4
    x = torch.randn(num_movies, 8, generator=g)
    x[:, :4] = torch.nn.functional.one_hot(group_of_movie, 4).float() * 2 + 0.3 * x[:, :4]
    group_of_user = torch.arange(num_users) % 4
    src, dst = [], []
    for u in range(num_users):
        mine = torch.nonzero(group_of_movie == group_of_user[u]).flatten()
        chosen = mine[torch.randperm(mine.shape[0], generator=g)[:per_user]]
        src += [u] * chosen.shape[0]
        dst += chosen.tolist()
    h = HeteroData()
    h["user"].num_nodes = num_users
    h["movie"].x = x
    if labels:  # node labels and splits, as a node-classification source has them
        h["movie"].y = group_of_movie
        h["movie"].train_mask, h["movie"].val_mask, h["movie"].test_mask = (torch.arange(num_movies) % 3 == i
                                                                              for i in range(3))
    h[RATES].edge_index = torch.tensor([src, dst])
    if reverse:
        h["movie", "rev_rates", "user"].edge_index = torch.tensor([dst, src])
    return h


def _entries(dataset) -> set[tuple[int, int, int]]:
    """Every CSR entry as ``(row, relation, col)``."""
    rowptr = np.asarray(dataset.rowptr)
    row = np.repeat(np.arange(rowptr.shape[0] - 1), np.diff(rowptr))
    return set(zip(row.tolist(), np.asarray(dataset.edge_rel).tolist(), np.asarray(dataset.col).tolist()))


@pytest.mark.parametrize("reverse", [True, False])
def test_from_pyg_holds_out_a_relations_edges_and_their_reverses(reverse):
    h = rating_graph(reverse=reverse)
    ds = from_pyg(h, target_edge=RATES, link_split=FRACTIONS, seed=1)
    schema, split = ds.schema, ds.link_split
    assert split.relation == Relation(*RATES) and schema.target == "movie"
    r = schema.relation_index(RATES)
    back = schema.reverse[r]
    assert back != r and schema.relations[back] == Relation("movie", "rev_rates", "user")
    users, movies = schema.range_of("user"), schema.range_of("movie")
    entries = _entries(ds)
    for name, edges in split.arrays().items():
        assert edges.dtype == np.int64 and edges.shape[0] == 2 and edges.shape[1] > 0
        assert ((edges[0] >= users[0]) & (edges[0] < users[1])).all()  # sources are users
        assert ((edges[1] >= movies[0]) & (edges[1] < movies[1])).all()  # destinations are movies
        inside = [((v, r, u) in entries, (u, back, v) in entries) for u, v in edges.T.tolist()]
        expected = name == "train_edges"  # training edges stay, both ways; held-out ones leave, both ways
        assert all(forward == expected and backward == expected for forward, backward in inside), name
    # every rating is in exactly one split, about as the fractions say
    ratings = {(u + users[0], v + movies[0]) for u, v in h[RATES].edge_index.T.tolist()}
    held = [set(map(tuple, e.T.tolist())) for e in split.arrays().values()]
    assert set().union(*held) == ratings and sum(map(len, held)) == len(ratings)
    for edges, fraction in zip(held, FRACTIONS):
        assert abs(len(edges) - fraction * len(ratings)) <= 1
    # the other entries of the graph are untouched: only the held-out ratings left it
    full = from_pyg(h, target_edge=RATES, link_split=(1.0, 0.0, 0.0), seed=1)
    removed = _entries(full) - entries
    held_out = np.concatenate([split.valid, split.test], axis=1).T.tolist()
    assert removed == {(v, r, u) for u, v in held_out} | {(u, back, v) for u, v in held_out}


def test_from_pyg_of_a_link_split_needs_no_labels_and_finds_its_target_type():
    ds = from_pyg(rating_graph(), target_edge="rates", link_split=FRACTIONS)
    assert ds.schema.target == "movie" and ds.num_classes == 1 and ds.train_idx.shape[0] == 40
    labelled = from_pyg(rating_graph(labels=True), target="movie", target_edge="user__rates__movie",
                        link_split=FRACTIONS)
    assert labelled.num_classes == 4
    same = from_pyg(rating_graph(), target_edge=RATES, link_split=FRACTIONS)
    assert all(np.array_equal(a, b) for a, b in zip(ds.link_split.arrays().values(), same.link_split.arrays().values()))


@pytest.mark.parametrize("kwargs, expected", [
    (dict(link_split=FRACTIONS, target="movie"), "the HeteroData has 2 relations, so link prediction needs the one whose edges to "
                                 "hold out; name it with target_edge=, one of user__rates__movie, movie__rev_rates__user"),
    (dict(target_edge=("user", "likes", "movie"), link_split=FRACTIONS, target="movie"),
     "unknown relation user__likes__movie; the graph's relations are user__rates__movie, movie__rev_rates__user"),
    (dict(target_edge=RATES), "target_edge= names the relation of link_split=, which is not given"),
    (dict(target_edge=RATES, link_split=(0.8, 0.3, 0.1)), "link_split= fractions sum to 1.2, more than 1"),
    (dict(target_edge=RATES, link_split=0.8), "link_split= needs three fractions TRAIN,VALID,TEST"),
])
def test_from_pyg_refuses_a_link_split_it_cannot_place_in_one_sentence(kwargs, expected):
    with pytest.raises(InputError) as refused:
        from_pyg(rating_graph(), **kwargs)
    message = str(refused.value)
    assert expected in message and "\n" not in message, message


def test_prepare_splits_a_typed_relation_and_partitions_keep_it(tmp_path, capsys, monkeypatch):
    typed = from_pyg(rating_graph(labels=True), target="movie")
    monkeypatch.setattr("salientpp.cli.prepare.load_source", lambda source, options: typed)
    assert main(["prepare", "synthetic:tiny", str(tmp_path / "ds"), "--link-split", "0.8,0.1,0.1",
                 "--link-relation", "user__rates__movie", "--seed", "3"]) == 0
    assert "held-out edges of user__rates__movie train/valid/test" in capsys.readouterr().out
    ds = load_dataset(tmp_path / "ds")
    expected = from_pyg(rating_graph(labels=True), target="movie", target_edge=RATES, link_split=(0.8, 0.1, 0.1),
                        seed=3)
    assert ds.link_split.relation == Relation(*RATES)
    assert json.loads((tmp_path / "ds" / "meta.json").read_text())["link_relation"] == "user__rates__movie"
    assert all(np.array_equal(a, b) for a, b in zip(ds.link_split.arrays().values(),
                                                    expected.link_split.arrays().values()))
    assert np.array_equal(ds.col, expected.col) and np.array_equal(ds.edge_rel, expected.edge_rel)
    partition_dataset(ds, tmp_path / "p2", 2)
    data = load_partitioned(tmp_path / "p2")
    assert data.link_relation == Relation(*RATES)
    orig, book = np.asarray(data.orig_id), data.book
    users, movies = data.schema.type_index("user"), data.schema.type_index("movie")
    for name, edges in ds.link_split.arrays().items():
        parts = [np.asarray(getattr(data.part(k), name)) for k in range(2)]
        for k, part in enumerate(parts):  # each partition holds the edges whose source (a user) it owns
            start, stop = book.block(k, users)
            assert ((part[0] >= start) & (part[0] < stop)).all()
            assert (np.asarray(book.type_of(part[1])) == movies).all()
        back = orig[np.concatenate(parts, axis=1)]
        assert sorted(map(tuple, back.T.tolist())) == sorted(map(tuple, edges.T.tolist()))


def test_a_typed_link_split_naming_an_unknown_relation_is_refused_on_load(tmp_path):
    ds = from_pyg(rating_graph(), target_edge=RATES, link_split=FRACTIONS)
    save_dataset(ds, tmp_path / "ds")
    meta = json.loads((tmp_path / "ds" / "meta.json").read_text())
    meta["link_relation"] = "user__likes__movie"
    (tmp_path / "ds" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match="unknown relation user__likes__movie.*re-create the dataset"):
        load_dataset(tmp_path / "ds")


# ---------------------------------------------------------------------------------------------
# negatives of the relation's types, and the link batches of a typed partitioning


def test_a_node_pool_draws_uniformly_over_one_types_blocks_in_every_partition():
    # 3 partitions x 2 types: type 1 owns [4, 6), [9, 16) and [18, 19): 10 ids
    blocks = np.array([0, 4, 6, 9, 16, 18, 19])
    pool = NodePool.of_type(blocks, 2, 1)
    assert pool.size == 10
    ids = pool.draw(20000, torch.Generator().manual_seed(0)).numpy()
    wanted = np.r_[4:6, 9:16, 18:19]
    assert set(np.unique(ids)) == set(wanted)
    counts = np.bincount(ids, minlength=19)[wanted]
    assert stats.chisquare(counts).pvalue > 1e-3  # uniform over the union
    assert pool.contains(np.arange(19)).tolist() == [i in set(wanted) for i in range(19)]
    one = NodePool.of_type(np.array([0, 50]), 1, 0)  # one block from 0: torch.randint(0, 50) itself
    assert torch.equal(one.draw(30, torch.Generator().manual_seed(3)),
                       torch.randint(0, 50, (30,), generator=torch.Generator().manual_seed(3)))


@pytest.fixture(scope="module")
def ratings(tmp_path_factory):
    """The rating graph with 80/10/10 held-out ratings, in 1, 2 and 4 partitions."""
    root = tmp_path_factory.mktemp("ratings")
    ds = from_pyg(rating_graph(num_users=200, num_movies=80, per_user=8), target_edge=RATES, link_split=FRACTIONS)
    for parts in (1, 2, 4):
        partition_dataset(ds, root / f"p{parts}", parts)
    return root


def _typed_epoch(part_dir: str, mode: str) -> dict:
    """One epoch of this rank's typed training edges through DistLinkNeighborLoader, checked batch by batch."""
    from salientpp.loader.dist_link_loader import DistLinkNeighborLoader

    ctx = salientpp.init_distributed()
    graph = salientpp.DistGraph(part_dir, ctx)
    data = load_partitioned(part_dir)
    users, movies = (data.schema.type_index(t) for t in ("user", "movie"))
    x = np.concatenate([np.asarray(data.part(k).x) for k in range(data.num_parts)])
    movie_ids = np.concatenate([np.arange(*data.book.block(k, movies)) for k in range(data.num_parts)])
    row_of = {int(v): i for i, v in enumerate(movie_ids)}
    loader = DistLinkNeighborLoader(graph, "train", [3, 3], 40, num_negatives=3, negative_sampling=mode)
    loader.set_epoch(0)
    positives, ok = [], {"types": True, "sources": True, "features": True, "seed_types": True}
    for batch in loader:
        n_id = batch.n_id.numpy()
        p = batch.num_positives
        pairs = n_id[batch.edge_label_index.numpy()]
        positives.append(pairs[:, :p])
        types = np.asarray(data.book.type_of(pairs))
        ok["types"] &= bool((types[0] == users).all() and (types[1] == movies).all())  # negatives too
        if mode == "per-source":
            ok["sources"] &= bool(np.array_equal(pairs[0, p:], np.repeat(pairs[0, :p], 3)))
        seeds = n_id[:batch.batch_size]
        ok["seed_types"] &= bool(np.array_equal(batch.node_type[:batch.batch_size].numpy(),
                                                np.asarray(data.book.type_of(seeds))))
        is_movie = batch.node_type.numpy() == movies
        ok["features"] &= bool(np.array_equal(batch.x_dict["movie"].numpy(),
                                              x[[row_of[int(v)] for v in n_id[is_movie]]]))
    edges = np.concatenate(positives, axis=1)
    out = {"edges_ok": sorted(map(tuple, edges.T)) == sorted(map(tuple, graph.edges("train").T)), **ok}
    salientpp.shutdown_distributed(ctx)
    return out


@pytest.mark.parametrize("mode", ["uniform", "per-source"])
def test_typed_link_batches_hold_each_owned_rating_once_with_negatives_of_the_relations_types(ratings, mode):
    for out in salientpp.launch(_typed_epoch, (str(ratings / "p2"), mode), nprocs=2):
        assert all(out.values()), out


def test_typed_link_training_fetches_exactly_the_rows_the_simulator_counts_per_type(ratings, tmp_path):
    metrics = tmp_path / "m.jsonl"
    train(TrainConfig(str(ratings / "p2"), task="link", model="rsage", embedding_dim=8, epochs=1, hidden=16,
                      layers=2, fanouts=(5, 5), batch_size=64, num_negatives=2, policy="vip", replication=0.1,
                      eval_fanouts=(5, 5), json_path=str(metrics), progress=False))
    comm = json.loads(metrics.read_text().splitlines()[0])["comm"]
    data = load_partitioned(ratings / "p2")
    workload = Workload((5, 5), 64, edges=EdgeSeeds(2, "uniform"), schema=data.schema)
    sim = simulate(PolicyContext(data, (workload,), seed=0, epochs=1), ["vip"], [0.1])
    predicted = np.rint(sim.type_rows[0, 0]).astype(int).tolist()
    assert comm["received_by_type"] == predicted and comm["received"] == sum(predicted)
    assert predicted[data.schema.type_index("user")] == 0 < predicted[data.schema.type_index("movie")]


# What the rating graph allows: a user rates movies of its own group only, and an evaluation ranks
# each held-out rating against 100 movies drawn at random, a quarter of them of the user's group
# (as likely as the rated one), so a perfect model scores 3/4 + 1/4 * 1/2 = 0.875, random scores
# 0.5, and so does a movie's popularity (every movie of a group is rated alike). Measured test
# ROC-AUC at the best validation epoch of _train_ratings, seeds 0, 1, 2: 1 partition 0.875, 0.873,
# 0.775; 2 partitions 0.876, 0.880, 0.770 (seed 2 learns its users' groups later); 4 partitions,
# seed 0: 0.879. Seed 0 must learn most of the signal, and 1, 2 and 4 ranks agree far inside the
# seeds' spread (0.10).
AUC_FLOOR = 0.8
AUC_SPREAD = 0.05


def _train_ratings(part_dir: str, seed: int) -> float:
    return train(TrainConfig(part_dir, task="link", model="rsage", embedding_dim=8, epochs=4, hidden=16, layers=2,
                             fanouts=(5, 5), batch_size=64, lr=0.01, eval_fanouts=(5, 5), seed=seed,
                             progress=False)).test_at_best


def test_typed_link_prediction_learns_and_agrees_on_one_two_and_four_ranks(ratings):
    aucs = [_train_ratings(str(ratings / f"p{parts}"), 0) for parts in (1, 2, 4)]
    assert min(aucs) >= AUC_FLOOR and max(aucs) - min(aucs) <= AUC_SPREAD, aucs


def test_train_task_link_refuses_typed_partitions_without_held_out_edges(tmp_path, capsys, no_ranks):
    partition_dataset(from_pyg(rating_graph(labels=True), target="movie"), tmp_path / "p1", 1)
    assert main(["train", str(tmp_path / "p1"), "--task", "link", "--embedding-dim", "4", "--quiet"]) == 2
    assert "--task link needs held-out edges" in one_sentence(capsys)


def test_seed_rows_put_each_seeds_row_of_its_type_in_n_id_order():
    from types import SimpleNamespace

    from salientpp.data.schema import GraphSchema
    from salientpp.models.gnn import SeedForward
    from salientpp.models.typed import seed_rows

    # seeds: movie, user, user, movie, user (types 1, 0, 0, 1, 0); each type's rows list its seeds first
    seed_type = torch.tensor([1, 0, 0, 1, 0])
    users = torch.arange(8.0).view(4, 2)  # 3 seed users, then a sampled one
    movies = 100 + torch.arange(6.0).view(3, 2)  # 2 seed movies, then a sampled one
    merged = seed_rows([users, movies], seed_type, [3, 2])
    assert torch.equal(merged, torch.stack([movies[0], users[0], users[1], movies[1], users[2]]))
    alone = seed_rows([None, movies], torch.tensor([1, 1]), [0, 2])  # one type: its first rows, no copy
    assert torch.equal(alone, movies[:2]) and alone.data_ptr() == movies.data_ptr()
    schema = GraphSchema.with_reverses(("user", "movie"), (4, 3), [RATES], "movie")
    batch = SimpleNamespace(schema=schema, node_type=torch.cat([seed_type, torch.tensor([0, 1])]), batch_size=5)
    assert torch.equal(SeedForward._seed_rows({"user": users, "movie": movies}, batch), merged)  # to_hetero's dict


@pytest.mark.parametrize("mode", ["uniform", "per-source"])
def test_typed_link_seed_probabilities_match_the_loaders_frequencies(mode):
    """p0 of a typed link workload (2 partitions x 3 types; ratings from users to movies; a third
    type no negative reaches) against the loader's procedure, batch after batch."""
    from salientpp.cache.vip import link_seed_probabilities
    from salientpp.data.schema import GraphSchema
    from salientpp.sampling.link import LinkEnds, draw_link_seeds

    schema = GraphSchema.with_reverses(("user", "movie", "tag"), (30, 24, 6), [RATES, ("movie", "has", "tag")],
                                       "movie")
    blocks = np.array([0, 16, 28, 31, 45, 57, 60])  # partition k's user, movie, tag blocks
    ends = LinkEnds.of(schema, Relation(*RATES), blocks)
    rng = np.random.default_rng(0)
    users = np.r_[0:16, 31:45]
    movies = np.r_[16:28, 45:57]
    weight = 1.0 / np.arange(1, movies.shape[0] + 1)  # popular movies: vertices of many edges
    edges = np.unique(np.stack([rng.choice(users, 260), rng.choice(movies, 260, p=weight / weight.sum())]), axis=1)
    sets = [edges[:, edges[0] < 31], edges[:, edges[0] >= 31]]
    batch_size, r, epochs = 20, 2, 300
    p0 = link_seed_probabilities(60, sets, batch_size, r, mode, ends)
    steps = max(-(-s.shape[1] // batch_size) for s in sets)
    generator, hits = torch.Generator().manual_seed(1), np.zeros((60, 2))
    for k, part in enumerate(sets):
        part = torch.from_numpy(part)
        for _ in range(epochs):
            order = torch.randperm(part.shape[1], generator=generator)
            for i in range(steps):
                batch = part[:, order[i * part.shape[1] // steps:(i + 1) * part.shape[1] // steps]]
                hits[draw_link_seeds(batch, ends, r, mode, generator).nodes.numpy(), k] += 1
    freq = hits / (epochs * steps)
    assert np.all(p0[np.r_[28:31, 57:60]] == 0) and np.all(freq[np.r_[28:31, 57:60]] == 0)  # tags: never seeds
    se = np.sqrt(np.maximum(p0 * (1 - p0), 1e-12) / (epochs * steps))
    assert np.abs((freq - p0) / se).max() < 5  # |z| > 5: 6e-7 per vertex under the null
    if mode == "per-source":  # a user is a seed only through its own ratings
        lonely = np.setdiff1d(users, edges[0])
        assert np.all(p0[lonely] == 0)
