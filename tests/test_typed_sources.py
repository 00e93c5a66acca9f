"""Typed sources read from disk: ogbn-mag (OGB's raw heterogeneous layout), MAG240M with every
type (--all-types) and IGBH's layout, each on a tiny file set that the test writes (no network);
the arrays checked against what the files say, and bad input refused through `prepare` (exit 2,
one sentence, nothing written)."""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from conftest import _write_csv_gz, exit_code, one_sentence

from salientpp.data.igbh import _from_igbh
from salientpp.data.ogb import _from_mag240m, _from_ogb
from salientpp.data.options import ImportOptions


def relation_edges(dataset, relation: str) -> set[tuple[int, int]]:
    """The edges ``u -> v`` of ``relation`` in a typed dataset, in the ids of their own types."""
    s = dataset.schema
    r = s.relation_index(relation)
    src, dst = (s.offsets[s.type_index(t)] for t in (s.relations[r].src, s.relations[r].dst))
    rows = np.repeat(np.arange(s.total_nodes), np.diff(dataset.rowptr))
    mine = dataset.edge_rel == r
    return {(int(u) - src, int(v) - dst) for u, v in zip(dataset.col[mine], rows[mine])}


def _pairs(edge_index: np.ndarray) -> set[tuple[int, int]]:
    return {(int(u), int(v)) for u, v in edge_index.T}


def _symmetric(edge_index: np.ndarray) -> set[tuple[int, int]]:
    pairs = {(u, v) for u, v in _pairs(edge_index) if u != v}
    return pairs | {(v, u) for u, v in pairs}


# ---- ogbn-mag ------------------------------------------------------------------------------------

MAG_COUNTS = {"author": 9, "field_of_study": 5, "institution": 3, "paper": 12}


def _write_csv_gz_header(path: Path, header: str, row: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write(f"{header}\n{row}\n")


def write_ogbn_mag(root: Path, seed: int = 0) -> dict:
    """ogbn-mag in OGB's raw heterogeneous layout under ``root/ogbn_mag``; returns what it wrote."""
    rng = np.random.default_rng(seed)
    folder = root / "ogbn_mag"
    raw = folder / "raw"
    types = sorted(MAG_COUNTS)
    _write_csv_gz_header(raw / "num-node-dict.csv.gz", ",".join(types), ",".join(str(MAG_COUNTS[t]) for t in types))
    _write_csv_gz_header(raw / "nodetype-has-label.csv.gz", ",".join(types),
                         ",".join("True" if t == "paper" else "False" for t in types))
    triplets = [("author", "affiliated_with", "institution"), ("author", "writes", "paper"), ("paper", "cites", "paper"),
                ("paper", "has_topic", "field_of_study")]
    with gzip.open(raw / "triplet-type-list.csv.gz", "wt") as f:
        f.writelines(",".join(t) + "\n" for t in triplets)
    edges = {}
    for src, name, dst in triplets:
        e = np.stack([rng.integers(0, MAG_COUNTS[src], 20), rng.integers(0, MAG_COUNTS[dst], 20)])
        edges[(src, name, dst)] = e
        _write_csv_gz(raw / "relations" / f"{src}___{name}___{dst}" / "edge.csv.gz", e.T)
        _write_csv_gz(raw / "relations" / f"{src}___{name}___{dst}" / "num-edge-list.csv.gz", np.array([20]))
    x = rng.standard_normal((MAG_COUNTS["paper"], 4)).astype(np.float32)
    y = rng.integers(0, 5, MAG_COUNTS["paper"])
    _write_csv_gz(raw / "node-feat" / "paper" / "node-feat.csv.gz", x)
    _write_csv_gz(raw / "node-label" / "paper" / "node-label.csv.gz", y)
    splits = (np.arange(0, 6), np.arange(6, 9), np.arange(9, 12))
    for name, ids in zip(("train", "valid", "test"), splits):
        _write_csv_gz(folder / "split" / "time" / "paper" / f"{name}.csv.gz", ids)
    (folder / "RELEASE_v2.txt").write_text("written by the salientpp tests\n")
    return {"edges": edges, "x": x, "y": y, "splits": splits}


def test_ogbn_mag_is_read_from_ogb_raw_heterogeneous_layout_as_a_typed_graph(tmp_path):
    pytest.importorskip("ogb")
    wrote = write_ogbn_mag(tmp_path)
    d = _from_ogb("ogbn-mag", ImportOptions(root=str(tmp_path)))
    s = d.schema
    assert d.source == "ogb:ogbn-mag" and s.target == "paper"
    assert s.node_types == ("paper", "author", "institution", "field_of_study")
    assert s.num_nodes == (12, 9, 3, 5)
    assert [str(r) for r in s.relations] == [
        "author__affiliated_with__institution", "institution__rev_affiliated_with__author", "author__writes__paper",
        "paper__rev_writes__author", "paper__cites__paper", "paper__has_topic__field_of_study",
        "field_of_study__rev_has_topic__paper"]
    for (src, name, dst), e in wrote["edges"].items():
        if src == dst:
            assert relation_edges(d, f"{src}__{name}__{dst}") == _symmetric(e)
        else:
            assert relation_edges(d, f"{src}__{name}__{dst}") == _pairs(e)
            assert relation_edges(d, f"{dst}__rev_{name}__{src}") == {(v, u) for u, v in _pairs(e)}
    np.testing.assert_allclose(d.x, wrote["x"], rtol=1e-6)
    np.testing.assert_array_equal(d.y, wrote["y"])
    assert d.features == {}  # only papers have features: the other types need --embedding-dim
    for got, expected in zip((d.train_idx, d.valid_idx, d.test_idx), wrote["splits"]):
        np.testing.assert_array_equal(got, expected)  # papers come first: global ids = paper ids


def test_missing_ogbn_mag_files_say_where_to_put_them(tmp_path, capsys):
    pytest.importorskip("ogb")
    write_ogbn_mag(tmp_path)
    (tmp_path / "ogbn_mag" / "split" / "time" / "paper" / "valid.csv.gz").unlink()
    assert exit_code(["prepare", "ogb:ogbn-mag", str(tmp_path / "out"), "--root", str(tmp_path)]) == 2
    err = one_sentence(capsys)
    assert "valid.csv.gz does not exist" in err and "ogbn_mag/split exist" in err and "download" in err
    assert not (tmp_path / "out").exists()


def test_an_ogbn_mag_edge_that_names_a_missing_node_is_refused_naming_its_relation(tmp_path, capsys):
    pytest.importorskip("ogb")
    write_ogbn_mag(tmp_path)
    rel = tmp_path / "ogbn_mag" / "raw" / "relations" / "paper___has_topic___field_of_study"
    _write_csv_gz(rel / "edge.csv.gz", np.array([[0, 1], [2, 7]]))  # fos 7 of 5
    _write_csv_gz(rel / "num-edge-list.csv.gz", np.array([2]))
    assert exit_code(["prepare", "ogb:ogbn-mag", str(tmp_path / "out"), "--root", str(tmp_path)]) == 2
    assert "the paper__has_topic__field_of_study edges of ogb:ogbn-mag holds field_of_study ids from 1 to 7, " \
           "outside [0, 5)" in one_sentence(capsys)
    assert not (tmp_path / "out").exists()


# ---- MAG240M with every type ------------------------------------------------------------------------

def write_mag240m(root: Path) -> dict:
    """A tiny MAG240M on disk as ogb.lsc.MAG240MDataset reads it (meta.pt, split_dict.pt, processed/)."""
    import torch

    rng = np.random.default_rng(1)
    counts = {"paper": 10, "author": 7, "institution": 2}
    folder = root / "mag240m_kddcup2021"
    (folder / "processed" / "paper").mkdir(parents=True)
    (folder / "RELEASE_v1.txt").write_text("written by the salientpp tests\n")
    torch.save({**counts, "num_classes": 3}, folder / "meta.pt")
    splits = {"train": np.arange(0, 5), "valid": np.arange(5, 8), "test": np.arange(8, 10)}
    torch.save(splits, folder / "split_dict.pt")
    x = rng.standard_normal((10, 6)).astype(np.float16)
    y = rng.integers(0, 3, 10).astype(np.float32)
    y[8:] = np.nan
    np.save(folder / "processed" / "paper" / "node_feat.npy", x)
    np.save(folder / "processed" / "paper" / "node_label.npy", y)
    edges = {}
    for src, name, dst in (("paper", "cites", "paper"), ("author", "writes", "paper"),
                           ("author", "affiliated_with", "institution")):
        e = np.stack([rng.integers(0, counts[src], 15), rng.integers(0, counts[dst], 15)])
        (folder / "processed" / f"{src}___{name}___{dst}").mkdir()
        np.save(folder / "processed" / f"{src}___{name}___{dst}" / "edge_index.npy", e)
        edges[(src, name, dst)] = e
    return {"edges": edges, "x": x, "y": y, "splits": splits}


def test_mag240m_all_types_imports_papers_authors_and_institutions(tmp_path):
    pytest.importorskip("ogb")
    wrote = write_mag240m(tmp_path)
    d = _from_mag240m("mag240m", ImportOptions(root=str(tmp_path), all_types=True))
    s = d.schema
    assert s.node_types == ("paper", "author", "institution") and s.num_nodes == (10, 7, 2)
    assert [str(r) for r in s.relations] == ["author__writes__paper", "paper__rev_writes__author",
                                             "author__affiliated_with__institution",
                                             "institution__rev_affiliated_with__author", "paper__cites__paper"]
    assert relation_edges(d, "paper__cites__paper") == _symmetric(wrote["edges"][("paper", "cites", "paper")])
    assert relation_edges(d, "writes") == _pairs(wrote["edges"][("author", "writes", "paper")])
    assert relation_edges(d, "affiliated_with") == _pairs(wrote["edges"][("author", "affiliated_with", "institution")])
    assert d.x.dtype == np.float16 and np.array_equal(d.x, wrote["x"]) and d.features == {}
    np.testing.assert_array_equal(d.y, np.where(np.isnan(wrote["y"]), -1, wrote["y"]).astype(np.int64))
    np.testing.assert_array_equal(d.train_idx, wrote["splits"]["train"])
    assert d.test_idx.shape == (0,) and "test_split" in d.extra_meta


def test_mag240m_stays_papers_only_by_default(tmp_path):
    pytest.importorskip("ogb")
    wrote = write_mag240m(tmp_path)
    d = _from_mag240m("mag240m", ImportOptions(root=str(tmp_path)))
    assert not d.is_typed and d.edge_rel.strides == (0,) and d.num_nodes == 10
    rows = np.repeat(np.arange(10), np.diff(d.rowptr))
    assert set(zip(d.col.tolist(), rows.tolist())) == _symmetric(wrote["edges"][("paper", "cites", "paper")])


def test_mag240m_all_types_without_the_author_files_says_where_to_put_them(tmp_path, capsys):
    pytest.importorskip("ogb")
    write_mag240m(tmp_path)
    (tmp_path / "mag240m_kddcup2021" / "processed" / "author___writes___paper" / "edge_index.npy").unlink()
    assert exit_code(["prepare", "ogb-lsc:mag240m", str(tmp_path / "out"), "--root", str(tmp_path),
                      "--all-types"]) == 2
    err = one_sentence(capsys)
    assert "author___writes___paper/edge_index.npy does not exist" in err and "unzip it in" in err
    assert not (tmp_path / "out").exists()


def test_all_types_applies_only_to_mag240m(tmp_path, capsys):
    assert exit_code(["prepare", "synthetic:tiny", str(tmp_path / "out"), "--all-types"]) == 2
    assert "--all-types applies only with ogb-lsc: sources" in one_sentence(capsys)
    assert not (tmp_path / "out").exists()


# ---- IGBH's on-disk layout --------------------------------------------------------------------------

IGBH_COUNTS = {"paper": 20, "author": 15, "institute": 4, "fos": 6, "journal": 3, "conference": 2}


def write_igbh(path: Path, venues: bool = False, raw: bool = False) -> dict:
    """An IGBH size directory (``path/processed/...``) as IGB's download scripts lay it out;
    ``raw``: the paper features and labels without a .npy header, as the large and full sizes ship them."""
    rng = np.random.default_rng(2)
    processed = path / "processed"
    types = ["paper", "author", "institute", "fos"] + (["journal", "conference"] if venues else [])
    features = {}
    for t in types:
        (processed / t).mkdir(parents=True)
        features[t] = rng.standard_normal((IGBH_COUNTS[t], 1024 if raw and t == "paper" else 3)).astype(np.float32)
        if raw and t == "paper":
            features[t].tofile(processed / t / "node_feat.npy")
        else:
            np.save(processed / t / "node_feat.npy", features[t])
    labels = {19: rng.integers(0, 19, 16).astype(np.float32), 2983: rng.integers(0, 2983, 12).astype(np.float32)}
    for classes, name in ((19, "node_label_19.npy"), (2983, "node_label_2K.npy")):
        if raw:
            labels[classes].tofile(processed / "paper" / name)
        else:
            np.save(processed / "paper" / name, labels[classes])
    relations = [("paper", "cites", "paper"), ("paper", "written_by", "author"), ("author", "affiliated_to", "institute"),
                 ("paper", "topic", "fos")]
    relations += [("paper", "published", "journal"), ("paper", "venue", "conference")] if venues else []
    edges = {}
    for src, name, dst in relations:
        e = np.stack([rng.integers(0, IGBH_COUNTS[src], 25), rng.integers(0, IGBH_COUNTS[dst], 25)])
        (processed / f"{src}__{name}__{dst}").mkdir()
        np.save(processed / f"{src}__{name}__{dst}" / "edge_index.npy", e.T)  # [E, 2], as IGB stores them
        edges[(src, name, dst)] = e
    return {"features": features, "labels": labels, "edges": edges}


def test_igbh_layout_is_read_as_a_typed_graph_with_features_for_every_type(tmp_path):
    wrote = write_igbh(tmp_path / "igbh" / "tiny")
    d = _from_igbh(tmp_path / "igbh" / "tiny", ImportOptions())
    s = d.schema
    assert s.node_types == ("paper", "author", "institute", "fos") and s.num_nodes == (20, 15, 4, 6)
    assert [str(r) for r in s.relations] == [
        "paper__cites__paper", "paper__written_by__author", "author__rev_written_by__paper",
        "author__affiliated_to__institute", "institute__rev_affiliated_to__author", "paper__topic__fos",
        "fos__rev_topic__paper"]
    for (src, name, dst), e in wrote["edges"].items():
        expected = _symmetric(e) if src == dst else _pairs(e)
        assert relation_edges(d, f"{src}__{name}__{dst}") == expected
    np.testing.assert_array_equal(d.x, wrote["features"]["paper"])
    assert set(d.features) == {"author", "institute", "fos"}
    for t, f in d.features.items():
        np.testing.assert_array_equal(f, wrote["features"][t])
    # the 16 labelled papers (the first ones) split 60/20/20 in id order, as IGB splits them
    np.testing.assert_array_equal(d.y[:16], wrote["labels"][19].astype(np.int64))
    assert np.all(d.y[16:] == -1)
    assert (d.train_idx.tolist(), d.valid_idx.tolist(), d.test_idx.tolist()) == (
        list(range(9)), list(range(9, 12)), list(range(12, 16)))


def test_igbh_venues_2983_classes_and_headerless_files_of_the_large_sizes(tmp_path):
    wrote = write_igbh(tmp_path / "full", venues=True, raw=True)
    d = _from_igbh(tmp_path / "full", ImportOptions(num_classes=2983))
    assert d.schema.node_types[4:] == ("journal", "conference")
    assert relation_edges(d, "venue") == _pairs(wrote["edges"][("paper", "venue", "conference")])
    np.testing.assert_array_equal(d.x, wrote["features"]["paper"])  # mapped as raw float32 rows of 1024
    np.testing.assert_array_equal(d.y[:12], wrote["labels"][2983].astype(np.int64))
    assert d.train_idx.tolist() == list(range(7))


@pytest.mark.parametrize("damage, flags, words", [
    (lambda p: (p / "processed" / "fos" / "node_feat.npy").unlink(), [], "fos/node_feat.npy does not exist"),
    (lambda p: np.save(p / "processed" / "paper__topic__fos" / "edge_index.npy", np.zeros((3, 3), dtype=np.int64)),
     [], "shape [E, 2]"),
    (lambda p: np.save(p / "processed" / "paper__topic__fos" / "edge_index.npy", np.array([[0, 6]])), [],
     "the paper__topic__fos edges of igbh:"),
    (lambda p: (p / "processed" / "paper" / "node_label_19.npy").write_bytes(b"\x93NUMPY broken"), [],
     "not a readable array"),
    (lambda p: None, ["--num-classes", "20"], "pass --num-classes 19 or 2983"),
    (lambda p: (p / "processed" / "journal").mkdir(), [], "journal/node_feat.npy does not exist"),
])
def test_bad_igbh_input_is_refused_in_one_sentence(tmp_path, capsys, damage, flags, words):
    write_igbh(tmp_path / "small")
    damage(tmp_path / "small")
    assert exit_code(["prepare", f"igbh:{tmp_path / 'small'}", str(tmp_path / "out"), *flags]) == 2
    assert words in one_sentence(capsys)
    assert not (tmp_path / "out").exists()
