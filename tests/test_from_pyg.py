"""salientpp.data.from_pyg: a torch_geometric Data as a Dataset, equal to what `prepare npz:` makes
of the same arrays, through the same checks."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from salientpp.cli import main
from salientpp.data import MULTILABEL, from_pyg, load_dataset, save_dataset

pyg_data = pytest.importorskip("torch_geometric.data")
Data, HeteroData = pyg_data.Data, pyg_data.HeteroData

from salientpp.errors import InputError  # noqa: E402

ARRAYS = ("rowptr", "col", "x", "y", "train_idx", "valid_idx", "test_idx")


def random_arrays(n: int = 40, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    edge_index = rng.integers(0, n, (2, 5 * n))
    edge_index[:, :3] = [[1, 2, 2], [1, 2, 5]]                  # self-loops and a duplicate
    order = rng.permutation(n)
    masks = [np.zeros(n, dtype=bool) for _ in range(3)]
    for mask, ids in zip(masks, np.split(order, [8, 14])):
        mask[ids] = True
    return dict(edge_index=edge_index, x=rng.standard_normal((n, 6)).astype(np.float32), y=rng.integers(0, 4, n),
                train_mask=masks[0], val_mask=masks[1], test_mask=masks[2])


def as_data(arrays: dict[str, np.ndarray], **skip) -> Data:
    return Data(**{k: torch.from_numpy(v) for k, v in arrays.items() if k not in skip})


def prepared(tmp_path, arrays: dict[str, np.ndarray], *flags: str):
    np.savez(tmp_path / "g.npz", **arrays)
    assert main(["prepare", f"npz:{tmp_path / 'g.npz'}", str(tmp_path / "prepared"), *flags]) == 0
    return load_dataset(tmp_path / "prepared")


def assert_same_arrays(a, b) -> None:
    for name in ARRAYS:
        left, right = getattr(a, name), getattr(b, name)
        assert left.dtype == right.dtype and left.shape == right.shape, name
        np.testing.assert_array_equal(left, right, err_msg=name)


def test_masks_give_the_arrays_prepare_gives(tmp_path, capsys):
    arrays = random_arrays()
    dataset = from_pyg(as_data(arrays))
    assert_same_arrays(dataset, prepared(tmp_path, arrays))
    assert dataset.source == "pyg:Data"
    assert 1 not in dataset.col[dataset.rowptr[1]:dataset.rowptr[2]]    # self-loop dropped
    save_dataset(dataset, tmp_path / "saved")
    assert_same_arrays(load_dataset(tmp_path / "saved"), dataset)


def test_index_splits_dtype_and_self_loops(tmp_path):
    arrays = random_arrays(seed=1)
    ids = {name: np.flatnonzero(arrays[f"{key}_mask"]) for name, key in (("train", "train"), ("valid", "val"),
                                                                          ("test", "test"))}
    data = as_data(arrays, train_mask=1, val_mask=1, test_mask=1)
    dataset = from_pyg(data, train=torch.from_numpy(ids["train"]), valid=ids["valid"].tolist(),
                       test=torch.from_numpy(ids["test"]).int(), feature_dtype="float16", keep_self_loops=True,
                       source="pyg:random")
    reference = prepared(tmp_path, {**{k: v for k, v in arrays.items() if not k.endswith("mask")},
                                    "train_idx": ids["train"], "val_idx": ids["valid"], "test_idx": ids["test"]},
                         "--feature-dtype", "float16", "--self-loops")
    assert_same_arrays(dataset, reference)
    assert dataset.source == "pyg:random" and dataset.x.dtype == np.float16
    assert 1 in dataset.col[dataset.rowptr[1]:dataset.rowptr[2]]        # self-loop kept
    # An argument takes precedence over the mask attribute.
    with_masks = from_pyg(as_data(arrays), train=ids["train"][:3])
    np.testing.assert_array_equal(with_masks.train_idx, np.sort(ids["train"][:3]))


def test_cpu_tensors_are_not_copied():
    arrays = random_arrays()
    data = as_data(arrays)
    dataset = from_pyg(data)
    assert np.shares_memory(dataset.x, data.x.numpy()) and np.shares_memory(dataset.y, data.y.numpy())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn])
@pytest.mark.parametrize("feature_dtype", ["float32", "float16"])
def test_features_of_a_float_type_numpy_lacks_are_converted_like_other_float_types(dtype, feature_dtype):
    """bfloat16 goes through float32, exactly, as float64 or float16 features would: the
    dataset holds what ``x.float()`` holds, in ``feature_dtype``."""
    data = as_data(random_arrays())
    data.x = data.x.to(dtype)
    dataset = from_pyg(data, feature_dtype=feature_dtype)
    assert dataset.x.dtype == feature_dtype
    np.testing.assert_array_equal(dataset.x, data.x.float().numpy().astype(feature_dtype))


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_features_of_a_type_numpy_cannot_hold_are_refused():
    data = as_data(random_arrays())
    data.x = data.x.to(torch.complex32)
    with pytest.raises(InputError, match=re.escape("data.x has the dtype torch.complex32, which numpy cannot hold; "
                                                   "convert it, e.g. data.x.float()")):
        from_pyg(data)


def test_multilabel_targets(tmp_path):
    arrays = random_arrays(seed=2)
    y = (np.random.default_rng(3).random((40, 3)) < 0.5).astype(np.float32)
    y[5:9, 1] = np.nan
    arrays["y"] = y
    dataset = from_pyg(as_data(arrays))
    assert dataset.label_kind == MULTILABEL and dataset.num_tasks == 3
    assert_same_arrays(dataset, prepared(tmp_path, arrays))


def test_cora_equals_prepare(cora_npz, tmp_path):
    raw = np.load(cora_npz)
    reference = prepared(tmp_path, dict(raw))
    data = Data(x=torch.from_numpy(raw["x"]), edge_index=torch.from_numpy(raw["edge_index"]),
                y=torch.from_numpy(raw["y"]))
    from_ids = from_pyg(data, train=torch.from_numpy(raw["train_idx"]), valid=torch.from_numpy(raw["val_idx"]),
                        test=torch.from_numpy(raw["test_idx"]))
    assert_same_arrays(from_ids, reference)
    for key, name in (("train_idx", "train_mask"), ("val_idx", "val_mask"), ("test_idx", "test_mask")):
        mask = torch.zeros(data.num_nodes, dtype=torch.bool)
        mask[torch.from_numpy(raw[key])] = True
        data[name] = mask
    assert_same_arrays(from_pyg(data), reference)
    assert reference.num_nodes == 2708 and reference.num_classes == 7


def _refusal(tmp_path, arrays: dict, **kwargs) -> str:
    """The message of from_pyg, checked to be the one `prepare` prints for the same npz (when
    the case is expressible as an npz)."""
    with pytest.raises(InputError) as info:
        from_pyg(as_data(arrays), **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("change, expected", [
    (dict(val_mask=lambda a: a["val_mask"] | a["train_mask"]), "the train and valid splits of {src} share 8 node id"),
    (dict(x=lambda a: np.zeros((40, 0), np.float32)), "the features (x) of {src} have no columns"),
    (dict(x=lambda a: np.where(np.arange(40)[:, None] == 3, np.nan, a["x"]).astype(np.float32)),
     "contain NaN or infinite values (first in the row of node 3)"),
    (dict(y=lambda a: np.where(a["train_mask"], -1, a["y"])), "train_idx of {src} holds unlabelled nodes"),
    (dict(edge_index=lambda a: np.array([[0, 1], [1, 40]])), "edge ids must lie in [0, 40)"),
    (dict(train_mask=lambda a: np.zeros(40, dtype=bool)), "the training split of {src} is empty"),
], ids=["overlap", "no_features", "nan_feature", "unlabelled", "edge_out_of_range", "empty_train"])
def test_same_refusals_as_prepare(tmp_path, capsys, change, expected):
    arrays = random_arrays()
    for key, make in change.items():
        arrays[key] = make(arrays)
    message = _refusal(tmp_path, arrays)
    assert expected.format(src="pyg:Data") in message
    np.savez(tmp_path / "g.npz", **arrays)
    assert main(["prepare", f"npz:{tmp_path / 'g.npz'}", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert expected.format(src=f"npz:{(tmp_path / 'g.npz').resolve()}") in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kwargs, skip, expected", [
    (dict(train=torch.tensor([0, 3, 3])), (), "holds node 3 more than once"),
    (dict(), ("test_mask",), "the test split is missing: pass test=<node ids or boolean mask> or give the Data a "
                             "boolean test_mask attribute"),
    (dict(valid=torch.zeros((40, 2), dtype=torch.bool)), (), "several splits (one per column); pass one column"),
    (dict(test=torch.zeros(39, dtype=torch.bool)), (), "must have one entry per node (40)"),
    (dict(train=torch.tensor([0.5])), (), "must be a 1-D integer array"),
    (dict(), ("x",), "the Data has no node features (x)"),
    (dict(), ("edge_index",), "the Data has no edge_index"),
    (dict(), ("y",), "the Data has no labels (y)"),
])
def test_refusals_of_pyg_input(tmp_path, kwargs, skip, expected):
    arrays = random_arrays()
    with pytest.raises(InputError, match=re.escape(expected)):
        from_pyg(as_data(arrays, **{k: 1 for k in skip}), **kwargs)


def test_sparse_and_heterogeneous_graphs_are_refused():
    arrays = random_arrays()
    data = as_data(arrays)
    data.x = data.x.to_sparse()
    with pytest.raises(InputError, match=re.escape("data.x is a sparse tensor")):
        from_pyg(data)
    with pytest.raises(InputError, match="got a HeteroData; convert it with data.to_homogeneous()"):
        from_pyg(HeteroData())
