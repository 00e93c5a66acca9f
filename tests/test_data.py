"""Dataset format, CSR construction and every ``prepare`` source (corrupt and hostile input: test_hostile_input.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from salientpp.cli import main
from salientpp.data import Dataset, build_csr, load_dataset, save_dataset
from salientpp.data.importers import ImportOptions, load_source


def edge_set(rowptr: np.ndarray, col: np.ndarray) -> set[tuple[int, int]]:
    rows = np.repeat(np.arange(rowptr.shape[0] - 1), np.diff(rowptr))
    return set(zip(rows.tolist(), col.tolist()))


def assert_csr_invariants(rowptr: np.ndarray, col: np.ndarray, self_loops: bool = False) -> None:
    assert rowptr.dtype == np.int64 and col.dtype == np.int64
    assert rowptr[0] == 0 and rowptr[-1] == col.shape[0]
    edges = edge_set(rowptr, col)
    assert len(edges) == col.shape[0], "duplicate edges"
    assert edges == {(v, u) for u, v in edges}, "not symmetric"
    for v in range(rowptr.shape[0] - 1):
        row = col[rowptr[v]:rowptr[v + 1]]
        assert np.all(np.diff(row) > 0), f"row {v} not strictly sorted"
    if not self_loops:
        assert all(u != v for u, v in edges)


def small_dataset(seed: int = 0, n: int = 50) -> Dataset:
    rng = np.random.default_rng(seed)
    rowptr, col = build_csr(rng.integers(0, n, (2, 4 * n)), n)
    y = rng.integers(0, 3, n)
    perm = rng.permutation(n)
    return Dataset(rowptr, col, rng.standard_normal((n, 8)).astype(np.float32), y,
                   np.sort(perm[:10]), np.sort(perm[10:20]), np.sort(perm[20:]), source="test")


def test_build_csr_symmetrizes_dedupes_and_sorts():
    edges = np.array([[0, 1, 1, 2, 3, 3, 2], [1, 0, 2, 2, 0, 0, 3]])
    rowptr, col = build_csr(edges, 5)
    assert_csr_invariants(rowptr, col)
    assert edge_set(rowptr, col) == {(0, 1), (1, 0), (1, 2), (2, 1), (0, 3), (3, 0), (2, 3), (3, 2)}
    assert rowptr[-2] == rowptr[-1], "isolated node 4 has no neighbours"
    rowptr, col = build_csr(edges, 5, keep_self_loops=True)
    assert (2, 2) in edge_set(rowptr, col)


def test_random_graph_csr_invariants():
    rng = np.random.default_rng(1)
    rowptr, col = build_csr(rng.integers(0, 200, (2, 3000)), 200)
    assert_csr_invariants(rowptr, col)


def test_dataset_round_trip_is_memory_mapped(tmp_path):
    dataset = small_dataset()
    save_dataset(dataset, tmp_path / "d")
    loaded = load_dataset(tmp_path / "d", verify=True, validate=True)
    for name in ("rowptr", "col", "x", "y", "train_idx", "valid_idx", "test_idx"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(dataset, name))
    assert isinstance(loaded.x, np.memmap)
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    assert meta["num_nodes"] == 50 and meta["files"]["x"]["checksum"].startswith("sha256:")


def test_npz_source_matches_cora(cora_npz, tmp_path):
    assert main(["prepare", f"npz:{cora_npz}", str(tmp_path / "cora")]) == 0
    loaded = load_dataset(tmp_path / "cora", verify=True, validate=True)
    raw = np.load(cora_npz)
    assert loaded.num_nodes == raw["x"].shape[0] == 2708
    np.testing.assert_array_equal(loaded.x, raw["x"])
    np.testing.assert_array_equal(loaded.test_idx, raw["test_idx"])
    expected = {(int(u), int(v)) for u, v in raw["edge_index"].T if u != v}
    expected |= {(v, u) for u, v in expected}
    assert edge_set(loaded.rowptr, loaded.col) == expected
    assert_csr_invariants(loaded.rowptr, loaded.col)


def test_edgelist_source_with_and_without_files(tmp_path):
    (tmp_path / "g.txt").write_text("# a comment\n0 1\n1,2\n2 3  # trailing\n3 0\n3 3\n")
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", np.array([0, 1, 0, 1, -1]))
    for name, ids in (("tr", [0, 1]), ("va", [2]), ("te", [3])):
        np.save(tmp_path / f"{name}.npy", np.array(ids))
    options = ImportOptions(features=str(tmp_path / "x.npy"), labels=str(tmp_path / "y.npy"),
                            train_idx=str(tmp_path / "tr.npy"), valid_idx=str(tmp_path / "va.npy"),
                            test_idx=str(tmp_path / "te.npy"))
    dataset = load_source(f"edgelist:{tmp_path / 'g.txt'}", options)
    assert dataset.num_nodes == 5 and dataset.num_edges == 8
    np.testing.assert_array_equal(dataset.x, x)
    np.testing.assert_array_equal(dataset.train_idx, [0, 1])
    bare = load_source(f"edgelist:{tmp_path / 'g.txt'}", ImportOptions(num_features=4, seed=3))
    assert bare.x.shape == (4, 4) and set(bare.extra_meta["generated"]) == {"features", "labels", "split"}
    again = load_source(f"edgelist:{tmp_path / 'g.txt'}", ImportOptions(num_features=4, seed=3))
    np.testing.assert_array_equal(bare.x, again.x)


@pytest.mark.parametrize("name", ["ogbn-arxiv", "ogbn-products", "ogbn-papers100M"])
def test_ogb_source_reads_ogb_raw_layout(name, tmp_path, ogb_raw_writer):
    pytest.importorskip("ogb")
    rng = np.random.default_rng(0)
    n = 30
    edge_index = rng.integers(0, n, (2, 80))
    x = rng.standard_normal((n, 4)).astype(np.float32)
    y = rng.integers(0, 3, n)
    if name == "ogbn-papers100M":
        y[25:] = -1  # papers100M labels only a subset of nodes
    splits = (np.arange(0, 10), np.arange(10, 15), np.arange(15, 25))
    ogb_raw_writer(tmp_path / "root", name, edge_index, x, y, splits)
    out = tmp_path / "out"
    assert main(["prepare", f"ogb:{name}", str(out), "--root", str(tmp_path / "root"),
                 "--feature-dtype", "float16"]) == 0
    loaded = load_dataset(out, verify=True, validate=True)
    assert loaded.x.dtype == np.float16
    np.testing.assert_allclose(loaded.x, x, atol=1e-2)
    np.testing.assert_array_equal(loaded.y, y)
    np.testing.assert_array_equal(loaded.valid_idx, splits[1])
    expected = {(int(u), int(v)) for u, v in edge_index.T if u != v}
    expected |= {(v, u) for u, v in expected}
    assert edge_set(loaded.rowptr, loaded.col) == expected


@pytest.mark.parametrize("source", ["nosuch:thing", "npz:/does/not/exist.npz", "edgelist:", "ogb:ogbn-nothing"])
def test_bad_sources_exit_2(tmp_path, capsys, source):
    assert main(["prepare", source, str(tmp_path / "out"), "--root", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("salientpp prepare: error:")
    assert not (tmp_path / "out").exists()


def test_missing_ogb_data_says_where_to_put_it(tmp_path, capsys):
    pytest.importorskip("ogb")
    assert main(["prepare", "ogb:ogbn-products", str(tmp_path / "out"), "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "ogbn_products" in err and "download" in err


def test_an_ogb_file_that_is_a_directory_is_refused_saying_so(tmp_path, capsys):
    pytest.importorskip("ogb")
    (tmp_path / "ogbn_products" / "raw" / "edge.csv.gz").mkdir(parents=True)
    assert main(["prepare", "ogb:ogbn-products", str(tmp_path / "out"), "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'ogbn_products' / 'raw' / 'edge.csv.gz'} is a directory, not a regular file; download" in err
    assert not (tmp_path / "out").exists()
