"""Multi-label / binary labels (float32 with NaN = unknown, or bool, [N, T]) through the dataset
format, `prepare`, the synthetic generator, partitioning and load_partitioned."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from salientpp.cli import main
from salientpp.data import MULTICLASS, MULTILABEL, Dataset, build_csr, load_dataset, save_dataset
from salientpp.data.importers import ImportOptions, load_source
from salientpp.data.synthetic import synthetic_dataset
from salientpp.errors import InputError
from salientpp.partition import load_partitioned, partition_dataset
from salientpp.train.tasks import roc_auc


def multilabel_dataset(dtype=np.float32, n: int = 40, t: int = 3, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    rowptr, col = build_csr(rng.integers(0, n, (2, 4 * n)), n)
    y = rng.random((n, t)) < 0.4
    if dtype == np.float32:
        y = y.astype(np.float32)
        y[rng.random((n, t)) < 0.3] = np.nan
        y[:, 0] = np.where(np.isnan(y[:, 0]), 1.0, y[:, 0])    # every node keeps a known target
    perm = rng.permutation(n)
    return Dataset(rowptr, col, rng.standard_normal((n, 4)).astype(np.float32), y,
                   np.sort(perm[:10]), np.sort(perm[10:15]), np.sort(perm[15:]), source="test")


@pytest.mark.parametrize("dtype", [np.float32, np.bool_])
def test_multilabel_dataset_round_trip(tmp_path, dtype):
    dataset = multilabel_dataset(dtype)
    assert dataset.label_kind == MULTILABEL and dataset.num_tasks == dataset.num_outputs == 3
    with pytest.raises(ValueError, match="num_tasks or num_outputs"):
        dataset.num_classes
    save_dataset(dataset, tmp_path / "d")
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    assert meta["label_kind"] == MULTILABEL and meta["num_tasks"] == 3 and "num_classes" not in meta
    assert meta["label_dtype"] == np.dtype(dtype).name == meta["files"]["y"]["dtype"]
    assert meta["files"]["y"]["shape"] == [40, 3] and meta["files"]["y"]["checksum"].startswith("sha256:")
    loaded = load_dataset(tmp_path / "d", verify=True, validate=True)
    assert isinstance(loaded.y, np.memmap) and loaded.y.dtype == dtype
    np.testing.assert_array_equal(loaded.y, dataset.y)      # NaN in the same places
    assert loaded.extra_meta == {}


def test_multiclass_meta_names_its_kind(tmp_path):
    rng = np.random.default_rng(0)
    rowptr, col = build_csr(rng.integers(0, 20, (2, 60)), 20)
    dataset = Dataset(rowptr, col, np.ones((20, 2), np.float32), rng.integers(0, 4, 20), np.arange(5),
                      np.arange(5, 8), np.arange(8, 20))
    save_dataset(dataset, tmp_path / "d")
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    assert (meta["label_kind"], meta["label_dtype"], meta["num_classes"]) == (MULTICLASS, "int64", 4)
    assert "num_tasks" not in meta
    loaded = load_dataset(tmp_path / "d")
    assert loaded.label_kind == MULTICLASS and loaded.num_outputs == loaded.num_classes == 4
    with pytest.raises(ValueError, match="num_classes or num_outputs"):
        loaded.num_tasks


def _with_y(dataset: Dataset, y: np.ndarray) -> Dataset:
    dataset.y = y
    return dataset


@pytest.mark.parametrize("make_y, message", [
    (lambda y: np.where(np.arange(40)[:, None] == 7, 0.5, y).astype(np.float32),
     "target value 0.5 in the row of node 7, but multi-label targets must be 0, 1 or NaN"),
    (lambda y: np.where(np.arange(40)[:, None] == 3, np.inf, y).astype(np.float32), "target value inf"),
    (lambda y: y.astype(np.float64), "float64 [40, 3] but multi-label targets must be float32"),
    (lambda y: np.zeros((40, 3), np.int64), "int64 [40, 3] but multi-label targets must be float32"),
    (lambda y: np.zeros((40, 0), np.float32), "T >= 1"),
    (lambda y: np.zeros((39, 3), np.float32), "must have shape [N=40] (class ids) or [N=40, T]"),
    (lambda y: np.zeros(40, np.float32), "one-dimensional labels must be int64 class ids"),
    (lambda y: np.zeros((40, 3, 1), np.float32), "must have shape"),
])
def test_bad_multilabel_targets_are_refused_in_one_sentence(make_y, message):
    dataset = multilabel_dataset()
    dataset = _with_y(dataset, make_y(np.nan_to_num(dataset.y)))
    with pytest.raises(InputError, match=re.escape(message)):
        dataset.validate()


def test_split_ids_must_have_a_known_target():
    dataset = multilabel_dataset()
    y = dataset.y.copy()
    y[dataset.test_idx[2]] = np.nan
    with pytest.raises(InputError, match=rf"test_idx of test holds unlabelled nodes \(every target NaN\) such as "
                                         rf"{dataset.test_idx[2]}"):
        _with_y(dataset, y).validate()


def test_load_dataset_refuses_meta_that_lies_about_the_label_kind(tmp_path):
    save_dataset(multilabel_dataset(), tmp_path / "d")
    meta_path = tmp_path / "d" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["label_kind"] = MULTICLASS
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(InputError, match="says the labels are multiclass but y.npy holds multilabel labels"):
        load_dataset(tmp_path / "d")


# ---- prepare --------------------------------------------------------------------------------------

def write_npz(tmp_path: Path, y: np.ndarray, n: int = 30) -> str:
    rng = np.random.default_rng(0)
    path = tmp_path / "g.npz"
    np.savez(path, edge_index=rng.integers(0, n, (2, 90)), x=rng.standard_normal((n, 3)).astype(np.float32), y=y,
             train_mask=np.arange(n) < 10, val_mask=(np.arange(n) >= 10) & (np.arange(n) < 15),
             test_mask=np.arange(n) >= 15)
    return f"npz:{path}"


@pytest.mark.parametrize("y, dtype, tasks", [
    (np.where(np.random.default_rng(1).random((30, 4)) < 0.2, np.nan,
              np.random.default_rng(2).random((30, 4)) < 0.5).astype(np.float64), "float32", 4),
    (np.random.default_rng(3).random((30, 2)) < 0.5, "bool", 2),
    (np.random.default_rng(4).integers(0, 2, (30, 112)), "bool", 112),      # ogbn-proteins: int64 0/1
    (np.random.default_rng(5).random((30, 1)) < 0.5, "bool", 1),           # one binary target
])
def test_prepare_npz_accepts_multilabel_targets(tmp_path, capsys, y, dtype, tasks):
    y = y.copy()
    if y.dtype == np.float64:
        y[:, 0] = 1.0
    out = tmp_path / "out"
    assert main(["prepare", write_npz(tmp_path, y), str(out)]) == 0
    assert f"{tasks} binary target" in capsys.readouterr().out
    loaded = load_dataset(out)
    assert loaded.label_kind == MULTILABEL and loaded.y.dtype == dtype and loaded.y.shape == (30, tasks)
    np.testing.assert_array_equal(loaded.y, y.astype(dtype))


@pytest.mark.parametrize("y, message", [
    (np.zeros(30, dtype=bool), "1-D boolean array, which could be one binary target or two classes"),
    (np.full((30, 2), 2, dtype=np.int64), "integer multi-label targets other than 0 and 1"),
    (np.full((30, 2), 0.3), "target value 0.3"),
    (np.zeros((30, 0)), "no targets per node"),
])
def test_prepare_refuses_bad_targets(tmp_path, capsys, y, message):
    assert main(["prepare", write_npz(tmp_path, y), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("salientpp prepare: error:") and message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_prepare_refuses_a_training_node_without_known_targets(tmp_path, capsys):
    y = np.ones((30, 2), np.float32)
    y[4] = np.nan
    assert main(["prepare", write_npz(tmp_path, y), str(tmp_path / "out")]) == 2
    assert "train_idx of npz:" in capsys.readouterr().err


def test_edgelist_labels_may_be_multilabel(tmp_path):
    (tmp_path / "g.txt").write_text("0 1\n1 2\n2 3\n3 4\n4 0\n")
    y = np.array([[1, 0], [0, np.nan], [np.nan, np.nan], [1, 1], [0, 0]], dtype=np.float32)
    np.save(tmp_path / "y.npy", y)
    dataset = load_source(f"edgelist:{tmp_path / 'g.txt'}", ImportOptions(labels=str(tmp_path / "y.npy"), seed=1))
    np.testing.assert_array_equal(dataset.y, y)
    assert dataset.num_nodes == 5 and "labels" not in dataset.extra_meta["generated"]
    split = np.concatenate([dataset.train_idx, dataset.valid_idx, dataset.test_idx])
    assert 2 not in split and set(split) <= {0, 1, 3, 4}                 # node 2 has no known target


# ---- synthetic ------------------------------------------------------------------------------------

def test_synthetic_multilabel_targets_follow_classes_and_are_learnable():
    dataset = synthetic_dataset("tiny,num_tasks=5")
    plain = synthetic_dataset("tiny")
    y = dataset.y
    assert y.dtype == np.bool_ and y.shape == (2000, 5) and dataset.label_kind == MULTILABEL
    assert np.all(y.any(axis=0)) and np.all(~y.all(axis=0))              # every task has both values
    for name in ("rowptr", "col", "x", "train_idx", "valid_idx", "test_idx"):
        np.testing.assert_array_equal(getattr(dataset, name), getattr(plain, name))
    # Nodes of one class mostly share their targets: the class's pattern, 5% flips.
    for c in range(plain.num_classes):
        rows = y[plain.y == c]
        majority = rows.mean(axis=0) > 0.5
        assert (rows == majority).mean() > 0.9
    # A least-squares scorer on features, then on features + neighbour mean, tested on other nodes.
    x = dataset.x.astype(np.float64)
    rows = np.repeat(np.arange(2000), np.diff(dataset.rowptr))
    mean = np.zeros_like(x)
    np.add.at(mean, rows, x[dataset.col])
    mean /= np.maximum(np.diff(dataset.rowptr), 1)[:, None]
    half = np.arange(2000) % 2 == 0
    scores = []
    for features in (x, np.hstack([x, mean])):
        f = np.hstack([features, np.ones((2000, 1))])
        w = np.linalg.solve(f[half].T @ f[half] + 1e-2 * np.eye(f.shape[1]), f[half].T @ y[half].astype(np.float64))
        scores.append(roc_auc(f[~half] @ w, y[~half]))
    assert 0.7 < scores[0] < scores[1] - 0.05 and scores[1] > 0.85


def test_synthetic_unknown_targets():
    dataset = synthetic_dataset("tiny,num_tasks=4,unknown_fraction=0.4,seed=2")
    y = dataset.y
    assert y.dtype == np.float32 and 0.3 < np.isnan(y).mean() < 0.4
    assert np.all(~np.isnan(y).all(axis=1))                               # every node keeps a known target
    assert set(np.unique(y[~np.isnan(y)])) == {0.0, 1.0}


@pytest.mark.parametrize("spec, message", [
    ("tiny,num_tasks=-1", "num_tasks"),
    ("tiny,unknown_fraction=0.2", "unknown_fraction applies to multi-label targets only"),
    ("tiny,num_tasks=3,unknown_fraction=1", "unknown_fraction must lie in"),
])
def test_synthetic_multilabel_parameters_are_checked(spec, message):
    with pytest.raises(InputError, match=message):
        synthetic_dataset(spec)


def test_multiclass_synthetic_arrays_do_not_depend_on_the_new_seed_child():
    import numpy.random as npr
    for seed in (0, 7):
        old = npr.SeedSequence(seed).spawn(7)
        new = npr.SeedSequence(seed).spawn(8)[:7]
        assert all(np.array_equal(a.generate_state(4), b.generate_state(4)) for a, b in zip(old, new))


# ---- partitioning ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def multilabel_parts(tmp_path_factory):
    root = tmp_path_factory.mktemp("multilabel")
    dataset = synthetic_dataset("tiny,num_tasks=5,unknown_fraction=0.2")
    partition_dataset(dataset, root / "p2", 2)
    return root / "p2", dataset


def test_partitioning_copies_target_rows(multilabel_parts):
    path, dataset = multilabel_parts
    parts = load_partitioned(path)
    assert parts.label_kind == MULTILABEL and parts.num_tasks == parts.num_outputs == 5
    assert parts.label_dtype == np.float32 and parts.meta["num_tasks"] == 5 and "num_classes" not in parts.meta
    with pytest.raises(ValueError, match="num_tasks or num_outputs"):
        parts.num_classes
    for k in range(2):
        lo, hi = parts.book.offsets[k:k + 2]
        part = parts.part(k)
        assert isinstance(part.y, np.memmap) and part.y.shape == (hi - lo, 5)
        np.testing.assert_array_equal(part.y, dataset.y[parts.orig_id[lo:hi]])
    train = np.sort(parts.orig_id[parts.train_idx()])
    np.testing.assert_array_equal(train, dataset.train_idx)


def _copy_with(src: Path, dst: Path, part_y: np.ndarray | None = None, meta_changes: dict | None = None) -> Path:
    import shutil
    shutil.copytree(src, dst)
    if part_y is not None:
        np.save(dst / "part_0" / "y.npy", part_y)
    if meta_changes:
        meta = json.loads((dst / "meta.json").read_text())
        meta.update(meta_changes)
        (dst / "meta.json").write_text(json.dumps(meta))
    return dst


def test_a_corrupt_partition_of_targets_is_refused(multilabel_parts, tmp_path):
    path, _ = multilabel_parts
    y = np.load(path / "part_0" / "y.npy")
    bad = y.copy()
    bad[5, 1] = 3.0
    d = _copy_with(path, tmp_path / "values", part_y=bad)
    with pytest.raises(InputError, match=r"part_0/y\.npy hold the target value 3\.0 in the row of node 5"):
        load_partitioned(d, verify=False).part(0)
    train = np.load(path / "part_0" / "train_idx.npy")
    unlabelled = y.copy()
    unlabelled[train[0]] = np.nan
    d = _copy_with(path, tmp_path / "unlabelled", part_y=unlabelled)
    with pytest.raises(InputError, match=r"train_idx\.npy holds unlabelled nodes \(every target NaN\)"):
        load_partitioned(d, verify=False).part(0)
    d = _copy_with(path, tmp_path / "tasks", meta_changes={"num_tasks": 4})
    with pytest.raises(InputError, match="5 targets per node but meta.json gives num_tasks 4"):
        load_partitioned(d).part(0)
    d = _copy_with(path, tmp_path / "kind", meta_changes={"label_kind": "regression"})
    with pytest.raises(InputError, match="label kind as regression"):
        load_partitioned(d)
    d = _copy_with(path, tmp_path / "dtype", meta_changes={"label_dtype": "int64"})
    with pytest.raises(InputError, match="label dtype of its multilabel labels as int64"):
        load_partitioned(d)
    d = _copy_with(path, tmp_path / "missing", meta_changes={"num_tasks": None})
    with pytest.raises(InputError, match="num_tasks as None"):
        load_partitioned(d)


def test_partitioned_directories_without_label_kind_are_multiclass(tiny_partitions, tmp_path):
    root, dataset = tiny_partitions
    meta = json.loads((root / "p2" / "meta.json").read_text())
    d = _copy_with(root / "p2", tmp_path / "old")
    for key in ("label_kind", "label_dtype"):
        meta.pop(key, None)
    (d / "meta.json").write_text(json.dumps(meta))
    parts = load_partitioned(d)
    assert parts.label_kind == MULTICLASS and parts.num_classes == parts.num_outputs == dataset.num_classes
    parts.check_parts()


def test_the_sampler_says_how_to_gather_target_rows():
    from salientpp.sampling import NeighborSampler

    dataset = multilabel_dataset()
    sampler = NeighborSampler(dataset.rowptr, dataset.col, [2])
    with pytest.raises(InputError, match=r"multi-label targets of shape \[40, 3\]; pass labels=None and take the rows"):
        sampler.sample(np.array([0, 1]), labels=dataset.y)
    batch = sampler.sample(np.array([0, 1]))
    seeds = batch.n_id[:batch.batch_size].numpy()
    np.testing.assert_array_equal(dataset.y[seeds], dataset.y[[0, 1]])
