"""Dataset format, CSR construction and every ``prepare`` source (corrupt and hostile input: test_hostile_input.py)."""
from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest

from conftest import typed_dataset
from salientpp.cli import main
from salientpp.data import Dataset, build_csr, load_dataset, save_dataset
from salientpp.data import csr as csr_module
from salientpp.data.importers import ImportOptions, load_source
from salientpp.data.links import LinkSplit
from salientpp.errors import InputError


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


# ---- typed graphs: what Dataset.validate refuses, one sentence per rule --------------------------

def _typed_fault(fault: str):
    """:func:`conftest.typed_dataset` with one fault."""
    dataset, _ = typed_dataset()
    schema = dataset.schema
    rel = np.array(dataset.edge_rel)
    writes, cites = schema.relation_index("writes"), schema.relation_index("cites")
    # a paper row holding writes then cites entries
    row = next(v for v in range(20, 50) if {writes, cites} <= set(rel[dataset.rowptr[v]:dataset.rowptr[v + 1]]))
    lo, hi = int(dataset.rowptr[row]), int(dataset.rowptr[row + 1])
    if fault == "counts":
        return replace(dataset, schema=replace(schema, num_nodes=(20, 30, 5)))
    if fault == "no_edge_rel":
        return replace(dataset, edge_rel=None)
    if fault == "edge_rel_dtype":
        return replace(dataset, edge_rel=rel.astype(np.int64))
    if fault == "relation_out_of_range":
        rel[7] = schema.num_relations
        return replace(dataset, edge_rel=rel)
    if fault == "wrong_types":  # the last writes entry of the row (an author) said to be a citation
        rel[lo + int(np.flatnonzero(rel[lo:hi] == writes)[-1])] = cites
        return replace(dataset, edge_rel=rel)
    if fault == "not_grouped":  # the row reversed: cites entries before writes entries, types still right
        col = np.array(dataset.col)
        col[lo:hi], rel[lo:hi] = col[lo:hi][::-1], rel[lo:hi][::-1]
        return replace(dataset, col=col, edge_rel=rel)
    if fault == "x_rows":
        return replace(dataset, x=np.zeros((54, 5), np.float32))
    if fault == "features_of_target":
        return replace(dataset, features={"paper": np.zeros((30, 2), np.float32)})
    if fault == "features_of_unknown_type":
        return replace(dataset, features={"venue": np.zeros((4, 2), np.float32)})
    if fault == "features_rows":
        return replace(dataset, features={"inst": np.zeros((5, 2), np.float32)})
    if fault == "features_no_columns":
        return replace(dataset, features={"inst": np.zeros((4, 0), np.float32)})
    if fault == "features_dtype":
        return replace(dataset, features={"inst": np.zeros((4, 2), np.float64)})
    if fault == "features_nan":
        x = np.zeros((4, 2), np.float32)
        x[2, 1] = np.nan
        return replace(dataset, features={"inst": x})
    if fault == "y_rows":
        return replace(dataset, y=np.zeros(54, np.int64))
    if fault == "split_outside_target":
        return replace(dataset, train_idx=np.array([5, 21], np.int64))
    if fault == "link_split":
        edges = np.array([[20], [21]], np.int64)
        return replace(dataset, link_split=LinkSplit(edges, edges, edges, dataset.schema.relations[0]))
    raise AssertionError(fault)


@pytest.mark.parametrize("fault, expected", [
    ("counts", "the node types of typed-test count 55 nodes but its graph has 54"),
    ("no_edge_rel", "typed-test is a typed graph (5 relations) without the relation of each entry (edge_rel"),
    ("edge_rel_dtype", "edge_rel of typed-test must be int8 [nnz=244], got int64 [244]"),
    ("relation_out_of_range", "edge_rel of typed-test holds the relation 5 at entry 7, outside [0, 5)"),
    ("wrong_types", "has the relation paper__cites__paper but joins a node of type author to one of type paper"),
    ("not_grouped", "of typed-test is not grouped by relation (relation 0 follows 2)"),
    ("x_rows", "the features (x) of typed-test must have shape [N=30, F], got [54, 5]; pass one feature row per "
               "paper node"),
    ("features_of_target", "the features of typed-test are keyed by paper, which is not a node type other than "
                           "the target paper"),
    ("features_of_unknown_type", "keyed by venue, which is not a node type other than the target paper (x holds "
                                 "the target's features); key them by the names of the other types (author, inst)"),
    ("features_rows", "the features of the inst nodes of typed-test must have shape [N=4, F], got [5, 2]"),
    ("features_no_columns", "have no columns (shape [4, 0]); at least one feature column is needed; leave the type "
                            "out of the features"),
    ("features_dtype", "the features of the inst nodes of typed-test must be float32 or float16, got float64"),
    ("features_nan", "the features of the inst nodes of typed-test contain NaN or infinite values (first in the "
                     "row of inst node 2)"),
    ("y_rows", "the labels (y) of typed-test must have shape [N=30]"),
    ("split_outside_target", "train_idx of typed-test holds node ids outside [20, 50) such as 5"),
    ("link_split", "train_edges of typed-test holds the node 20 in row 0, which is not of the type author of the "
                   "relation author__writes__paper"),
])
def test_a_typed_dataset_with_a_fault_is_refused_in_one_sentence(fault, expected):
    with pytest.raises(InputError) as refused:
        _typed_fault(fault).validate()
    message = str(refused.value)
    assert expected in message and "\n" not in message, message


def test_a_homogeneous_dataset_relates_every_entry_by_relation_0_without_memory_or_file(tmp_path):
    dataset = small_dataset()
    given = replace(dataset, edge_rel=np.ones(dataset.num_edges, np.int8))  # never read: the one relation wins
    fewer = replace(dataset, rowptr=np.minimum(dataset.rowptr, 3), col=dataset.col[:3])  # a copy with another CSR
    for d in (dataset, given, fewer):
        assert d.edge_rel.dtype == np.int8 and d.edge_rel.shape == d.col.shape
        assert d.edge_rel.strides == (0,) and not d.edge_rel.any()
    save_dataset(given, tmp_path / "d")
    assert not (tmp_path / "d" / "edge_rel.npy").exists()
    assert load_dataset(tmp_path / "d").edge_rel.strides == (0,)


def test_relations_are_checked_in_chunks_across_which_a_row_may_run(monkeypatch):
    one_entry_chunks = lambda n, row_bytes: ((i, i + 1) for i in range(n))  # noqa: E731
    monkeypatch.setattr(csr_module, "row_chunks", one_entry_chunks)
    typed_dataset()[0].validate()  # every boundary inside a row: a valid graph passes
    with pytest.raises(InputError, match=re.escape("is not grouped by relation (relation 0 follows 2)")):
        _typed_fault("not_grouped").validate()
    with pytest.raises(InputError, match="joins a node of type author to one of type paper"):
        _typed_fault("wrong_types").validate()
