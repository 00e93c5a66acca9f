"""Link prediction on a relation of a typed graph: the held-out edges of ``user__rates__movie`` (and
their reverses) in ``from_pyg``, ``prepare`` and the partitions."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from salientpp.cli import main
from salientpp.data import from_pyg, load_dataset
from salientpp.data.format import save_dataset
from salientpp.data.schema import Relation
from salientpp.errors import InputError
from salientpp.partition import load_partitioned, partition_dataset

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
