"""Held-out edges: the split's rules, their partitioned copies, and refused options."""
from __future__ import annotations

import numpy as np
import pytest

from salientpp.cli import main
from salientpp.data import load_dataset
from salientpp.data.links import split_edges, undirected_edges
from salientpp.data.synthetic import synthetic_dataset
from salientpp.partition import load_partitioned, partition_dataset

from conftest import one_sentence


def _pairs(edges: np.ndarray) -> set[tuple[int, int]]:
    return {(min(u, v), max(u, v)) for u, v in edges.T.tolist()}


def test_held_out_edges_leave_the_graph_and_the_splits_partition_the_edges():
    ds = synthetic_dataset("tiny")
    rowptr, col, split = split_edges(ds.rowptr, ds.col, (0.8, 0.1, 0.1), seed=3)
    original = _pairs(undirected_edges(ds.rowptr, ds.col))
    remaining = _pairs(undirected_edges(rowptr, col))
    train, valid, test = _pairs(split.train), _pairs(split.valid), _pairs(split.test)
    m = len(original)
    assert len(valid) == int(0.1 * m) == split.valid.shape[1] and len(test) == int(0.1 * m)
    assert not (valid | test) & remaining  # neither direction stays in the CSR
    assert train == remaining and train | valid | test == original and not train & (valid | test)
    # each edge oriented by a fair coin: the share with source < destination is binomial(M, 1/2)
    both = np.concatenate([split.train, split.valid, split.test], axis=1)
    share = float((both[0] < both[1]).mean())
    assert abs(share - 0.5) < 4 * 0.5 / np.sqrt(both.shape[1])
    again = split_edges(ds.rowptr, ds.col, (0.8, 0.1, 0.1), seed=3)[2]
    other = split_edges(ds.rowptr, ds.col, (0.8, 0.1, 0.1), seed=4)[2]
    assert np.array_equal(again.valid, split.valid) and not np.array_equal(other.valid, split.valid)


def test_partitioned_edges_map_back_to_the_dataset_split_and_are_owned_by_their_source(tmp_path):
    assert main(["prepare", "synthetic:tiny", str(tmp_path / "ds"), "--link-split", "0.7,0.1,0.1"]) == 0
    ds = load_dataset(tmp_path / "ds")
    assert ds.has_link_split
    partition_dataset(ds, tmp_path / "p2", 2)
    data = load_partitioned(tmp_path / "p2")
    assert data.has_link_split
    orig = np.asarray(data.orig_id)
    for name, edges in ds.link_split.arrays().items():
        parts = [np.asarray(getattr(data.part(k), name)) for k in range(2)]
        for k, part in enumerate(parts):
            assert ((part[0] >= data.book.offsets[k]) & (part[0] < data.book.offsets[k + 1])).all()
        back = orig[np.concatenate(parts, axis=1)]
        assert sorted(map(tuple, back.T.tolist())) == sorted(map(tuple, edges.T.tolist()))


def test_npz_edge_keys_are_used_as_given_and_held_out_ones_leave_the_graph(tmp_path, cora_npz):
    arrays = dict(np.load(cora_npz))
    edges = undirected_edges(*_csr(arrays))
    arrays.update(train_edges=edges[:, 10:], valid_edges=edges[:, :4], test_edges=edges[:, 4:10])
    np.savez(tmp_path / "e.npz", **arrays)
    assert main(["prepare", f"npz:{tmp_path / 'e.npz'}", str(tmp_path / "ds")]) == 0
    ds = load_dataset(tmp_path / "ds")
    assert np.array_equal(ds.link_split.valid, edges[:, :4])
    assert not _pairs(edges[:, :10]) & _pairs(undirected_edges(ds.rowptr, ds.col))


def _csr(arrays):
    from salientpp.data.csr import build_csr
    return build_csr(arrays["edge_index"], arrays["x"].shape[0], False)


@pytest.mark.parametrize("split, expected", [
    ("0.9,0.1,0.1", "sum to"), ("0.9,-0.1,0.1", "[0, 1]"), ("0.9,0.1", "three fractions")])
def test_bad_link_split_fractions_get_one_sentence_and_exit_2(tmp_path, capsys, split, expected):
    assert main(["prepare", "synthetic:tiny", str(tmp_path / "ds"), "--link-split", split]) == 2
    assert expected in one_sentence(capsys)
    assert not (tmp_path / "ds").exists()


def test_an_npz_edge_array_of_the_wrong_shape_is_refused(tmp_path, cora_npz, capsys):
    arrays = dict(np.load(cora_npz))
    arrays.update(train_edges=np.zeros((3, 2), dtype=np.int64), valid_edges=np.zeros((2, 0), dtype=np.int64),
                  test_edges=np.zeros((2, 0), dtype=np.int64))
    np.savez(tmp_path / "bad.npz", **arrays)
    assert main(["prepare", f"npz:{tmp_path / 'bad.npz'}", str(tmp_path / "ds")]) == 2
    assert "[2, E]" in one_sentence(capsys)
