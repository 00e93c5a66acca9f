"""Held-out edges: the split's rules, the npz keys, their partitioned copies, and refused input."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from salientpp.cli import main
from salientpp.data import load_dataset
from salientpp.data.csr import build_csr
from salientpp.data.format import save_dataset
from salientpp.data.links import LinkSplit, edge_positions, relation_edges, split_edges
from salientpp.data.schema import GraphSchema
from salientpp.data.synthetic import synthetic_dataset
from salientpp.errors import InputError
from salientpp.partition import load_partitioned, partition_dataset

from conftest import one_sentence

SPEC = "tiny,num_nodes=600"


@pytest.fixture(scope="module")
def tiny():
    return synthetic_dataset(SPEC)


def undirected_edges(rowptr: np.ndarray, col: np.ndarray) -> np.ndarray:
    """Each undirected edge of a homogeneous CSR once (its one relation, 0)."""
    return relation_edges(rowptr, col, np.zeros(col.shape[0], dtype=np.int8), 0, 0)


def _split(rowptr, col, fractions, seed):
    """``(rowptr, col, split)`` of :func:`split_edges` on a homogeneous CSR."""
    schema = GraphSchema.homogeneous(rowptr.shape[0] - 1)
    new_rowptr, new_col, _, split = split_edges(rowptr, col, np.zeros(col.shape[0], dtype=np.int8), schema,
                                                schema.relations[0], fractions, seed)
    return new_rowptr, new_col, split


def _pairs(edges: np.ndarray) -> set[tuple[int, int]]:
    """Undirected edges ``{u, v}`` as ``(min, max)`` pairs."""
    return {(min(u, v), max(u, v)) for u, v in np.asarray(edges).T.tolist()}


def _csr_pairs(rowptr: np.ndarray, col: np.ndarray) -> set[tuple[int, int]]:
    """Every directed edge of a CSR."""
    src = np.repeat(np.arange(rowptr.shape[0] - 1), np.diff(rowptr))
    return set(zip(src.tolist(), np.asarray(col).tolist()))


def _npz(tmp_path, cora_npz, name="e.npz", **extra) -> str:
    arrays = dict(np.load(cora_npz))
    arrays.update(extra)
    np.savez(tmp_path / name, **arrays)
    return f"npz:{tmp_path / name}"


def _cora_edges(cora_npz) -> np.ndarray:
    with np.load(cora_npz) as data:
        return undirected_edges(*build_csr(data["edge_index"], data["x"].shape[0]))


def test_held_out_edges_leave_the_csr_in_both_directions_and_the_rest_is_unchanged(tiny):
    rowptr, col, split = _split(tiny.rowptr, tiny.col, (0.8, 0.1, 0.1), seed=3)
    directed = _csr_pairs(rowptr, col)
    for u, v in np.concatenate([split.valid, split.test], axis=1).T.tolist():
        assert (u, v) not in directed and (v, u) not in directed
    # the remaining graph is exactly the symmetric, sorted CSR of the training edges
    expected = build_csr(split.train, tiny.num_nodes)
    assert np.array_equal(rowptr, expected[0]) and np.array_equal(col, expected[1])


def test_the_three_splits_are_disjoint_cover_every_edge_and_match_the_fractions(tiny):
    split = _split(tiny.rowptr, tiny.col, (0.7, 0.1, 0.2), seed=0)[2]
    original = _pairs(undirected_edges(tiny.rowptr, tiny.col))
    train, valid, test = _pairs(split.train), _pairs(split.valid), _pairs(split.test)
    m = len(original)
    assert len(train) + len(valid) + len(test) == split.train.shape[1] + split.valid.shape[1] + split.test.shape[1]
    assert not train & valid and not train & test and not valid & test
    assert train | valid | test == original
    for edges, fraction in ((train, 0.7), (valid, 0.1), (test, 0.2)):
        assert abs(len(edges) - fraction * m) <= 1


def test_leftover_edges_stay_in_the_graph_but_are_not_training_targets(tiny):
    rowptr, col, split = _split(tiny.rowptr, tiny.col, (0.5, 0.1, 0.1), seed=1)
    original = _pairs(undirected_edges(tiny.rowptr, tiny.col))
    remaining = _pairs(undirected_edges(rowptr, col))
    train = _pairs(split.train)
    assert train < remaining and remaining == original - _pairs(split.valid) - _pairs(split.test)
    assert abs(len(train) - 0.5 * len(original)) <= 1 and len(remaining - train) > 0.25 * len(original)


def test_the_same_seed_gives_the_same_split_and_another_seed_another(tiny):
    first = _split(tiny.rowptr, tiny.col, (0.8, 0.1, 0.1), seed=3)[2]
    again = _split(tiny.rowptr, tiny.col, (0.8, 0.1, 0.1), seed=3)[2]
    other = _split(tiny.rowptr, tiny.col, (0.8, 0.1, 0.1), seed=4)[2]
    assert all(np.array_equal(a, b) for a, b in zip(first.arrays().values(), again.arrays().values()))
    assert _pairs(other.valid) != _pairs(first.valid)


def test_each_edge_is_oriented_by_a_fair_coin(tiny):
    split = _split(tiny.rowptr, tiny.col, (0.8, 0.1, 0.1), seed=5)[2]
    both = np.concatenate([split.train, split.valid, split.test], axis=1)
    share = float((both[0] < both[1]).mean())
    assert abs(share - 0.5) < 4 * 0.5 / np.sqrt(both.shape[1])  # binomial(M, 1/2): 4 standard deviations


def test_self_loops_stay_in_the_graph_and_in_no_split():
    edge_index = np.array([[0, 0, 1, 1, 2, 3], [1, 2, 2, 1, 3, 3]])  # 4 edges and 2 self loops
    rowptr, col = build_csr(edge_index, 4, keep_self_loops=True)
    new_rowptr, new_col, split = _split(rowptr, col, (0.25, 0.25, 0.5), seed=0)
    loops = {(1, 1), (3, 3)}
    trained = _pairs(split.train)  # training edges stay in the graph, both ways
    assert _csr_pairs(new_rowptr, new_col) == loops | trained | {(v, u) for u, v in trained}
    assert split.train.shape == (2, 1) and len(_pairs(split.train) | _pairs(split.valid) | _pairs(split.test)) == 4


def test_edge_positions_finds_every_edge_of_the_csr_and_nothing_else(tiny):
    rng = np.random.default_rng(0)
    queries = rng.integers(0, tiny.num_nodes, size=(2, 3000))
    queries[:, :1000] = undirected_edges(tiny.rowptr, tiny.col)[:, :1000]
    found = edge_positions(tiny.rowptr, tiny.col, tiny.edge_rel, queries, 0)
    directed = _csr_pairs(tiny.rowptr, tiny.col)
    assert ((found >= 0) == np.array([(u, v) in directed for u, v in queries.T.tolist()])).all()
    hits = found >= 0
    assert np.array_equal(np.asarray(tiny.col)[found[hits]], queries[1, hits])
    rowptr = np.asarray(tiny.rowptr)
    assert ((rowptr[queries[0, hits]] <= found[hits]) & (found[hits] < rowptr[queries[0, hits] + 1])).all()


def test_prepare_writes_the_split_and_load_checks_it(tmp_path, capsys):
    assert main(["prepare", f"synthetic:{SPEC}", str(tmp_path / "ds"), "--link-split", "0.85,0.05,0.10",
                 "--seed", "7"]) == 0
    assert "held-out edges of node__to__node train/valid/test" in capsys.readouterr().out
    ds = load_dataset(tmp_path / "ds")
    original = synthetic_dataset(SPEC)
    expected = _split(original.rowptr, original.col, (0.85, 0.05, 0.10), seed=7)
    assert ds.has_link_split and np.array_equal(ds.col, expected[1])
    assert all(np.array_equal(a, b) for a, b in zip(ds.link_split.arrays().values(), expected[2].arrays().values()))
    meta = json.loads((tmp_path / "ds" / "meta.json").read_text())
    del meta["files"]["test_edges"]
    (tmp_path / "ds" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match="test_edges"):
        load_dataset(tmp_path / "ds")


def test_a_held_out_edge_still_in_the_graph_is_refused(tmp_path, tiny):
    edges = undirected_edges(tiny.rowptr, tiny.col)
    leaking = replace(tiny, link_split=LinkSplit(edges[:, 2:], edges[:, :1], edges[:, 1:2], tiny.schema.relations[0]))
    with pytest.raises(InputError, match=r"valid_edges .* is still in the graph"):
        save_dataset(leaking, tmp_path / "ds")
    assert not (tmp_path / "ds").exists()


def test_datasets_without_held_out_edges_round_trip_as_before(tmp_path, tiny):
    save_dataset(tiny, tmp_path / "ds")
    assert not list((tmp_path / "ds").glob("*_edges.npy"))
    ds = load_dataset(tmp_path / "ds")
    assert not ds.has_link_split and ds.link_split is None and np.array_equal(ds.col, tiny.col)
    partition_dataset(ds, tmp_path / "p2", 2)
    data = load_partitioned(tmp_path / "p2")
    assert not data.has_link_split
    assert data.part(0).train_edges is None and data.part(1).test_edges is None


def test_partitioned_edges_map_back_to_the_dataset_split_and_are_owned_by_their_source(tmp_path):
    assert main(["prepare", f"synthetic:{SPEC}", str(tmp_path / "ds"), "--link-split", "0.7,0.1,0.1"]) == 0
    ds = load_dataset(tmp_path / "ds")
    partition_dataset(ds, tmp_path / "p2", 2)
    data = load_partitioned(tmp_path / "p2")
    assert data.has_link_split
    orig = np.asarray(data.orig_id)
    for name, edges in ds.link_split.arrays().items():
        parts = [np.asarray(getattr(data.part(k), name)) for k in range(2)]
        for k, part in enumerate(parts):
            assert part.dtype == np.int64 and part.shape[1] > 0
            assert ((part[0] >= data.book.offsets[k]) & (part[0] < data.book.offsets[k + 1])).all()
            assert (np.lexsort((part[1], part[0])) == np.arange(part.shape[1])).all()
        back = orig[np.concatenate(parts, axis=1)]  # same orientation as in the dataset
        assert sorted(map(tuple, back.T.tolist())) == sorted(map(tuple, edges.T.tolist()))
    # a partition holding an edge whose source another partition owns is refused
    foreign = np.array(data.part(0).test_edges)
    foreign[0, 0] = data.book.offsets[2] - 1 if foreign[1, 0] != data.book.offsets[2] - 1 else data.book.offsets[1]
    np.save(tmp_path / "p2" / "part_0" / "test_edges.npy", foreign)
    with pytest.raises(InputError, match="does not own"):
        load_partitioned(tmp_path / "p2", verify=False).part(0)


def test_npz_edge_keys_are_used_as_given_and_held_out_ones_leave_the_graph(tmp_path, cora_npz):
    edges = _cora_edges(cora_npz)
    edges[:, ::2] = edges[::-1, ::2]  # both orientations are taken as given
    source = _npz(tmp_path, cora_npz, train_edges=edges[:, 10:], valid_edges=edges[:, :4].astype(np.int32),
                  test_edges=edges[:, 4:10])
    assert main(["prepare", source, str(tmp_path / "ds")]) == 0
    ds = load_dataset(tmp_path / "ds")
    assert np.array_equal(ds.link_split.train, edges[:, 10:]) and np.array_equal(ds.link_split.valid, edges[:, :4])
    assert np.array_equal(ds.link_split.test, edges[:, 4:10])
    directed = _csr_pairs(ds.rowptr, ds.col)
    assert all((u, v) not in directed and (v, u) not in directed for u, v in edges[:, :10].T.tolist())
    assert _pairs(undirected_edges(ds.rowptr, ds.col)) == _pairs(edges[:, 10:])


@pytest.mark.parametrize("split, expected", [
    ("0.9,0.1,0.1", "sum to"), ("0.9,-0.1,0.1", "[0, 1]"), ("0.9,0.1", "three fractions"),
    ("0.5,a,0.1", "comma-separated numbers"), ("0,0,0", "--link-split 0,0,0 keeps no training edges"),
    ("0,0.5,0.5", "keeps no training edges, so link prediction would have nothing to train on"),
    ("0.00001,0.1,0.1", "a training fraction of 1e-05 of the graph's")])
def test_bad_link_split_fractions_get_one_sentence_and_exit_2(tmp_path, capsys, split, expected):
    assert main(["prepare", f"synthetic:{SPEC}", str(tmp_path / "ds"), "--link-split", split]) == 2
    assert expected in one_sentence(capsys)
    assert not (tmp_path / "ds").exists()


def test_link_split_with_npz_edge_keys_is_refused(tmp_path, cora_npz, capsys):
    edges = _cora_edges(cora_npz)
    source = _npz(tmp_path, cora_npz, train_edges=edges[:, 2:], valid_edges=edges[:, :1], test_edges=edges[:, 1:2])
    assert main(["prepare", source, str(tmp_path / "ds"), "--link-split", "0.8,0.1,0.1"]) == 2
    assert "already holds held-out edges" in one_sentence(capsys)
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("keys, expected", [
    ({"train_edges": np.zeros((3, 2), dtype=np.int64)}, "[2, E]"),
    ({"train_edges": np.zeros((2, 1), dtype=np.float32)}, "integer [2, E]"),
    ({"valid_edges": np.array([[0], [99999]])}, "outside [0, 2708)"),
    ({"test_edges": np.array([[5], [5]])}, "self loop"),
    ({"train_edges": np.array([[0], [1]])}, "must be in edge_index"),
    ({"test_edges": None}, "not every one of"),
])
def test_bad_npz_edge_arrays_get_one_sentence_and_exit_2(tmp_path, cora_npz, capsys, keys, expected):
    edges = _cora_edges(cora_npz)
    arrays = {"train_edges": edges[:, 2:], "valid_edges": edges[:, :1], "test_edges": edges[:, 1:2], **keys}
    source = _npz(tmp_path, cora_npz, **{k: v for k, v in arrays.items() if v is not None})
    assert main(["prepare", source, str(tmp_path / "ds")]) == 2
    assert expected in one_sentence(capsys)
