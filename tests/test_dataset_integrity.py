"""A dataset directory keeps what meta.json promises: class ids below its num_classes (also after
a hand edit that updated the checksum), features that fit their dtype, a typed graph's files and
schema, and a failed write leaves nothing behind; a homogeneous directory stays as it was."""
from __future__ import annotations

import errno
import hashlib
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from conftest import file_size_limit, typed_dataset
from salientpp.cli import main
from salientpp.data import format as data_format
from salientpp.data.format import load_dataset, save_dataset
from salientpp.data.importers import load_source
from salientpp.data.schema import GraphSchema, Relation
from salientpp.errors import InputError
from salientpp.io import file_checksum
from salientpp.partition.format import load_partitioned


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def refused(capsys, command: str, args: list[str], root: Path, *expected: str) -> str:
    """Run ``salientpp COMMAND ARGS``; assert exit code 2, one sentence on one line of stderr
    holding ``expected``, and nothing under ``root`` created or changed."""
    before = snapshot(root)
    assert main([command, *args]) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.startswith(f"salientpp {command}: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err + captured.out
    assert not re.search(r"[.!?] +[A-Z]", err.replace("e.g.", "eg")), err
    for text in expected:
        assert text in err, (text, err)
    assert snapshot(root) == before
    return err


def small_npz(path: Path, **changes) -> Path:
    """20 nodes, 2 classes, 3 float32 features; ``changes`` replace arrays."""
    rng = np.random.default_rng(0)
    arrays = {"edge_index": rng.integers(0, 20, (2, 40)), "x": rng.standard_normal((20, 3)).astype(np.float32),
              "y": rng.integers(0, 2, 20), "train_idx": np.arange(5), "val_idx": np.arange(5, 8),
              "test_idx": np.arange(8, 20)}
    arrays.update(changes)
    np.savez(path, **arrays)
    return path


def replace_labels(directory: Path, edit) -> None:
    """Apply ``edit`` to y.npy and record the new checksum, as a careful hand edit would."""
    y = np.load(directory / "y.npy")
    edit(y)
    np.save(directory / "y.npy", y)
    meta = json.loads((directory / "meta.json").read_text())
    meta["files"]["y"]["checksum"] = file_checksum(directory / "y.npy")
    (directory / "meta.json").write_text(json.dumps(meta))


@pytest.fixture
def cora_dir(tmp_path, cora_npz) -> Path:
    return save_dataset(load_source(f"npz:{cora_npz}"), tmp_path / "cora")


# ---- class ids against meta.json's num_classes ------------------------------------------------

def test_partition_refuses_labels_outside_num_classes(tmp_path, capsys, cora_dir):
    replace_labels(cora_dir, lambda y: y.__setitem__(5, 99))
    refused(capsys, "partition", [str(cora_dir), str(tmp_path / "cora-2"), "--parts", "2"], tmp_path,
            str(cora_dir), "labels outside [-1, 7) for num_classes 7", "99 at node 5")


@pytest.mark.parametrize("value", [0, "7", None, True, 1e25, 10**25, 2**63])
def test_partition_refuses_a_meta_json_without_a_positive_num_classes_below_2_to_the_63(tmp_path, capsys, cora_dir,
                                                                                         value):
    meta = json.loads((cora_dir / "meta.json").read_text())
    meta["num_classes"] = value
    (cora_dir / "meta.json").write_text(json.dumps(meta))
    refused(capsys, "partition", [str(cora_dir), str(tmp_path / "cora-2"), "--parts", "2"], tmp_path,
            "gives num_classes as", "not a positive integer below 2^63; re-create the dataset directory")


def test_a_partitioned_directory_whose_num_classes_is_past_int64_is_refused(tmp_path, tiny_partitions):
    part = tmp_path / "p2"
    shutil.copytree(tiny_partitions[0] / "p2", part)
    meta = json.loads((part / "meta.json").read_text())
    meta["num_classes"] = 10**25
    (part / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match=r"gives num_classes as 1000.*, not a positive integer below 2\^63; re-partition"):
        load_partitioned(part)


def test_a_dataset_file_that_is_a_directory_is_refused_saying_so(tmp_path, capsys, cora_dir):
    (cora_dir / "y.npy").unlink()
    (cora_dir / "y.npy").mkdir()
    refused(capsys, "partition", [str(cora_dir), str(tmp_path / "cora-2"), "--parts", "2"], tmp_path,
            f"{cora_dir / 'y.npy'} is a directory, not a regular file; re-create the dataset directory")


def test_labels_are_checked_in_chunks_naming_the_node(tmp_path, monkeypatch):
    dataset = load_source(f"npz:{small_npz(tmp_path / 'd.npz')}")
    d = save_dataset(dataset, tmp_path / "d")
    replace_labels(d, lambda y: y.__setitem__(17, 2))  # meta.json says 2 classes
    monkeypatch.setattr(data_format, "_FINITE_CHUNK_BYTES", 3 * 8)  # chunks of 3 labels
    with pytest.raises(InputError, match=r"outside \[-1, 2\) for num_classes 2, such as 2 at node 17;"):
        load_dataset(d)


def test_prepare_refuses_labels_at_or_above_num_classes(tmp_path, capsys):
    (tmp_path / "g.txt").write_text("0 1\n1 2\n2 3\n3 0\n")
    np.save(tmp_path / "y.npy", np.array([0, 3, 1, -1]))
    refused(capsys, "prepare", [f"edgelist:{tmp_path / 'g.txt'}", "--labels", str(tmp_path / "y.npy"),
                                "--num-classes", "3", "--num-features", "2", str(tmp_path / "out")], tmp_path,
            "hold the class id 3, outside [-1, 3) for --num-classes 3", "pass --num-classes 4 or more")


def test_num_classes_above_the_largest_label_is_recorded_through_partition(tmp_path, capsys):
    source = f"npz:{small_npz(tmp_path / 'd.npz')}"
    assert main(["prepare", source, str(tmp_path / "d"), "--num-classes", "5"]) == 0
    assert "5 classes" in capsys.readouterr().out
    assert json.loads((tmp_path / "d" / "meta.json").read_text())["num_classes"] == 5
    assert main(["partition", str(tmp_path / "d"), str(tmp_path / "p"), "--parts", "2", "--method", "random"]) == 0
    assert json.loads((tmp_path / "p" / "meta.json").read_text())["num_classes"] == 5


# ---- float16 features --------------------------------------------------------------------------

def test_prepare_says_finite_features_overflow_float16(tmp_path, capsys):
    x = np.random.default_rng(1).standard_normal((20, 3)).astype(np.float32)
    x[4, 2], x[9, 0] = 70000.0, -1.25e5
    source = f"npz:{small_npz(tmp_path / 'd.npz', x=x)}"
    err = refused(capsys, "prepare", [source, "--feature-dtype", "float16", str(tmp_path / "out")], tmp_path,
                  "as large as 125000 in magnitude", "overflow float16", "--feature-dtype float32")
    assert "NaN" not in err
    assert main(["prepare", source, str(tmp_path / "out")]) == 0  # float32 holds them


# ---- a full disk -------------------------------------------------------------------------------


def test_prepare_on_a_full_disk_says_so_and_leaves_no_output(tmp_path, capsys, monkeypatch):
    x = np.ones((20, 8192), dtype=np.float32)  # a 640 KiB x.npy
    source = f"npz:{small_npz(tmp_path / 'd.npz', x=x)}"
    out = tmp_path / "out"
    with file_size_limit(256 << 10):
        refused(capsys, "prepare", [source, str(out)], tmp_path, f"cannot write {out}: ",
                "the file grew larger than the file system allows")

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(data_format, "write_meta", no_space)
    refused(capsys, "prepare", [source, str(out)], tmp_path, f"cannot write {out}: no space left on device",
            "free space or choose another output path")


# ---- typed graphs: edge_rel.npy, x_T.npy and the schema in meta.json ---------------------------

def test_a_typed_dataset_round_trips_with_its_schema_and_every_array(tmp_path):
    dataset, _ = typed_dataset()
    back = load_dataset(save_dataset(dataset, tmp_path / "typed"))
    assert back.schema == dataset.schema and back.is_typed
    for name in ("rowptr", "col", "edge_rel", "x", "y", "train_idx", "valid_idx", "test_idx"):
        assert getattr(back, name).dtype == getattr(dataset, name).dtype, name
        np.testing.assert_array_equal(getattr(back, name), getattr(dataset, name), err_msg=name)
    assert list(back.features) == ["inst"]
    np.testing.assert_array_equal(back.features["inst"], dataset.features["inst"])
    meta = json.loads((tmp_path / "typed" / "meta.json").read_text())
    assert sorted(meta["files"]) == ["col", "edge_rel", "rowptr", "test_idx", "train_idx", "valid_idx", "x", "x_2", "y"]
    assert meta["node_types"] == [{"name": "author", "num_nodes": 20},
                                  {"name": "paper", "num_nodes": 30, "num_features": 5},
                                  {"name": "inst", "num_nodes": 4, "num_features": 2}]
    assert meta["target_type"] == "paper" and meta["num_features"] == 5 and meta["num_nodes"] == 54
    assert [r["reverse"] for r in meta["relations"]] == list(dataset.schema.reverse)
    assert set(back.extra_meta).isdisjoint({"node_types", "relations", "target_type"})


def test_feature_files_are_named_by_the_position_of_their_type_whatever_its_name(tmp_path):
    dataset, _ = typed_dataset()
    names = {"author": "au/thor", "paper": "pa per", "inst": "../inst\n"}
    schema = dataset.schema
    renamed = replace(schema, node_types=tuple(names[t] for t in schema.node_types), target=names["paper"],
                      relations=tuple(Relation(names[r.src], r.name, names[r.dst]) for r in schema.relations))
    dataset = replace(dataset, schema=renamed, features={names["inst"]: dataset.features["inst"]})
    back = load_dataset(save_dataset(dataset, tmp_path / "typed"))
    assert sorted(p.name for p in (tmp_path / "typed").iterdir()) == sorted(
        ["col.npy", "edge_rel.npy", "meta.json", "rowptr.npy", "test_idx.npy", "train_idx.npy", "valid_idx.npy",
         "x.npy", "x_2.npy", "y.npy"])
    assert back.schema == renamed and list(back.features) == ["../inst\n"]


@pytest.mark.parametrize("name", ["edge_rel", "x_2"])
def test_a_flipped_byte_in_a_typed_file_is_refused_by_its_checksum(tmp_path, name):
    directory = save_dataset(typed_dataset()[0], tmp_path / "typed")
    path = directory / f"{name}.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match=re.escape(f"{name}.npy does not match its checksum in meta.json, so the "
                                                   "file is corrupt; re-create the dataset directory")):
        load_dataset(directory)


@pytest.mark.parametrize("edit, expected", [
    (lambda meta: meta["files"].pop("edge_rel"), "does not list edge_rel.npy; re-create the dataset directory"),
    (lambda meta: meta.update(target_type="venue"), "records an inconsistent schema: the target node type venue is "
                                                    "not one of the graph's"),
    (lambda meta: meta["node_types"][0].update(num_nodes=21), "the node types in meta.json in"),
])
def test_a_typed_meta_json_that_disagrees_with_its_files_is_refused(tmp_path, edit, expected):
    directory = save_dataset(typed_dataset()[0], tmp_path / "typed")
    meta = json.loads((directory / "meta.json").read_text())
    edit(meta)
    (directory / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match=re.escape(expected)):
        load_dataset(directory)


# meta.json of `prepare npz:cora.npz` as salientpp wrote it before typed graphs (commit 5ed122a), its
# source and version replaced: the sha256 of its JSON with sorted keys.
CORA_META_BEFORE_TYPES = "0dbfa06919c1ace2710702c3630151ed989c1e4b65db8b11fd49417f2fc55b4a"


def test_a_homogeneous_dataset_directory_is_the_one_written_before_typed_graphs(tmp_path, cora_npz):
    assert main(["prepare", f"npz:{cora_npz}", str(tmp_path / "cora")]) == 0
    assert sorted(p.name for p in (tmp_path / "cora").iterdir()) == sorted(
        ["col.npy", "meta.json", "rowptr.npy", "test_idx.npy", "train_idx.npy", "valid_idx.npy", "x.npy", "y.npy"])
    meta = json.loads((tmp_path / "cora" / "meta.json").read_text())
    assert not {"node_types", "relations", "target_type"} & set(meta)
    meta.update(source="SOURCE", salientpp_version="VERSION")
    assert hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest() == CORA_META_BEFORE_TYPES
    dataset = load_dataset(tmp_path / "cora")  # read as homogeneous: no schema in meta.json
    assert dataset.schema == GraphSchema.homogeneous(2708) and dataset.edge_rel.strides == (0,) and not dataset.features
