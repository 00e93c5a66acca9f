"""salientpp.data.from_pyg: a torch_geometric Data as a Dataset, equal to what `prepare npz:` makes
of the same arrays, through the same checks."""
from __future__ import annotations

import contextlib
import re

import numpy as np
import pytest
import torch

from salientpp.cli import main
from salientpp.data import MULTILABEL, from_pyg, load_dataset, save_dataset

pyg_data = pytest.importorskip("torch_geometric.data")
Data, HeteroData = pyg_data.Data, pyg_data.HeteroData

from salientpp.data.schema import Relation  # noqa: E402
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


def test_a_sparse_feature_tensor_is_refused():
    data = as_data(random_arrays())
    data.x = data.x.to_sparse()
    with pytest.raises(InputError, match=re.escape("data.x is a sparse tensor")):
        from_pyg(data)


# ---- HeteroData: a typed dataset ------------------------------------------------------------------

def random_hetero(seed: int = 0) -> HeteroData:
    """Node types author (20, no features), paper (30, the target, with labels and masks) and inst
    (4, 2 features); edge types author-writes-paper, paper-cites-paper and author-at-inst."""
    rng = np.random.default_rng(seed)
    data = HeteroData()
    data["author"].num_nodes = 20
    data["paper"].x = torch.from_numpy(rng.standard_normal((30, 5)).astype(np.float32))
    data["paper"].y = torch.from_numpy(rng.integers(0, 3, 30))
    order = rng.permutation(30)
    for mask, ids in zip(("train_mask", "val_mask", "test_mask"), np.split(order, [10, 15])):
        data["paper"][mask] = torch.from_numpy(np.isin(np.arange(30), ids))
    data["inst"].x = torch.from_numpy(rng.standard_normal((4, 2)))
    data["author", "writes", "paper"].edge_index = torch.from_numpy(
        np.stack([rng.integers(0, 20, 60), rng.integers(0, 30, 60)]))
    data["paper", "cites", "paper"].edge_index = torch.from_numpy(rng.integers(0, 30, (2, 50)))
    data["author", "at", "inst"].edge_index = torch.from_numpy(np.stack([np.arange(20), rng.integers(0, 4, 20)]))
    return data


def relation_pairs(dataset, relation) -> set[tuple[int, int]]:
    """The edges (u, v) of ``relation`` in the CSR (entry u of that relation in row v), ids local to their types."""
    schema = dataset.schema
    r = schema.relation_index(relation)
    rows = np.repeat(np.arange(dataset.num_nodes), np.diff(dataset.rowptr))
    mine = np.asarray(dataset.edge_rel) == r
    src, dst = (schema.offsets[schema.type_index(t)] for t in (schema.relations[r].src, schema.relations[r].dst))
    return set(zip((np.asarray(dataset.col)[mine] - src).tolist(), (rows[mine] - dst).tolist()))


def given_pairs(data, edge_type) -> set[tuple[int, int]]:
    u, v = data[edge_type].edge_index.numpy()
    keep = u != v if edge_type[0] == edge_type[2] else np.ones(u.shape[0], bool)  # self-loops are dropped
    return set(zip(u[keep].tolist(), v[keep].tolist()))


def test_a_hetero_data_becomes_a_typed_dataset_holding_its_arrays():
    data = random_hetero()
    dataset = from_pyg(data, target="paper")
    schema = dataset.schema
    assert schema.node_types == ("author", "paper", "inst") and schema.num_nodes == (20, 30, 4)
    assert schema.target == "paper" and schema.target_range == (20, 50)
    assert [str(r) for r in schema.relations] == ["author__writes__paper", "paper__rev_writes__author",
                                                  "paper__cites__paper", "author__at__inst", "inst__rev_at__author"]
    assert dataset.edge_rel.dtype == np.int8 and dataset.edge_rel.shape == dataset.col.shape
    for edge_type in data.edge_types:
        pairs = given_pairs(data, edge_type)
        if edge_type[0] == edge_type[2]:  # a relation within one type is made symmetric
            assert relation_pairs(dataset, edge_type) == pairs | {(v, u) for u, v in pairs}
        else:
            assert relation_pairs(dataset, edge_type) == pairs
            reverse = (edge_type[2], "rev_" + edge_type[1], edge_type[0])
            assert relation_pairs(dataset, reverse) == {(v, u) for u, v in pairs}
    np.testing.assert_array_equal(dataset.x, data["paper"].x.numpy())
    np.testing.assert_array_equal(dataset.y, data["paper"].y.numpy())
    assert list(dataset.features) == ["inst"] and dataset.features["inst"].dtype == np.float32
    np.testing.assert_array_equal(dataset.features["inst"], data["inst"].x.numpy().astype(np.float32))
    for split, mask in (("train_idx", "train_mask"), ("valid_idx", "val_mask"), ("test_idx", "test_mask")):
        np.testing.assert_array_equal(getattr(dataset, split), 20 + np.flatnonzero(data["paper"][mask].numpy()))


def test_reverses_given_by_to_undirected_or_before_their_relation_are_recognised():
    transforms = pytest.importorskip("torch_geometric.transforms")
    data = random_hetero()
    plain = from_pyg(data, target="paper")
    undirected = transforms.ToUndirected()(random_hetero())
    assert ("paper", "rev_writes", "author") in undirected.edge_types
    for other in (from_pyg(undirected, target="paper"), from_pyg(reordered(undirected), target="paper")):
        assert sorted(map(str, other.schema.relations)) == sorted(map(str, plain.schema.relations))
        for relation in plain.schema.relations:
            assert relation_pairs(other, relation) == relation_pairs(plain, relation), relation


def reordered(data: HeteroData) -> HeteroData:
    """``data`` with its edge types in reverse order (each rev_NAME before NAME)."""
    out = HeteroData()
    for node_type in data.node_types:
        for key, value in data[node_type].items():
            out[node_type][key] = value
    for edge_type in reversed(data.edge_types):
        out[edge_type].edge_index = data[edge_type].edge_index
    return out


def test_fake_hetero_dataset_round_trips_through_a_dataset_directory(tmp_path):
    datasets = pytest.importorskip("torch_geometric.datasets")
    data = datasets.FakeHeteroDataset(num_graphs=1, num_node_types=3, num_edge_types=5, avg_num_nodes=60,
                                      num_classes=4)[0]
    target = next(t for t in data.node_types if "y" in data[t])
    n = data[target].num_nodes
    dataset = from_pyg(data, target=target, train=torch.arange(0, n // 2), valid=torch.arange(n // 2, n - 5),
                       test=torch.arange(n - 5, n), feature_dtype="float16")
    assert dataset.is_typed and dataset.x.dtype == np.float16
    assert all(x.dtype == np.float16 for x in dataset.features.values())
    assert set(dataset.features) == {t for t in data.node_types if t != target}
    start = dataset.schema.target_range[0]
    np.testing.assert_array_equal(dataset.test_idx, start + np.arange(n - 5, n))
    back = load_dataset(save_dataset(dataset, tmp_path / "fake"))
    assert back.schema == dataset.schema
    for name in ARRAYS + ("edge_rel",):
        np.testing.assert_array_equal(getattr(back, name), getattr(dataset, name), err_msg=name)
    for node_type, x in dataset.features.items():
        np.testing.assert_array_equal(back.features[node_type], x)


def test_a_hetero_data_with_one_type_and_one_relation_is_homogeneous():
    arrays = random_arrays()
    data = HeteroData()
    data["paper"].x = torch.from_numpy(arrays["x"])
    data["paper"].y = torch.from_numpy(arrays["y"])
    for mask in ("train_mask", "val_mask", "test_mask"):
        data["paper"][mask] = torch.from_numpy(arrays[mask])
    data["paper", "cites", "paper"].edge_index = torch.from_numpy(arrays["edge_index"])
    dataset = from_pyg(data, target="paper")
    assert not dataset.is_typed and dataset.edge_rel.strides == (0,) and dataset.schema.node_types == ("paper",)
    assert_same_arrays(dataset, from_pyg(as_data(arrays)))


def _hetero_with(change: str) -> HeteroData:
    data = random_hetero()
    if change == "author_id_past_its_type":
        data["author", "writes", "paper"].edge_index[0, 3] = 20
    elif change == "no_target_x":
        del data["paper"].x
    elif change == "no_edge_index":
        del data["author", "at", "inst"].edge_index
        data["author", "at", "inst"].adj_t = torch.zeros(1)
    elif change == "no_count":
        del data["author"].num_nodes
        data["author"].label = "unused"
    return data


@pytest.mark.parametrize("change, kwargs, expected", [
    ("", dict(), "from_pyg of a HeteroData got no target=; pass target=TYPE, the node type that carries the labels "
                 "and splits, one of author, paper, inst"),
    ("", dict(target="venue"), "from_pyg of a HeteroData got the unknown target=venue; pass target=TYPE"),
    ("", dict(target="paper", train=torch.tensor([0, 30])), "train holds ids outside [0, 30) of the paper nodes, such "
                                                             "as 30; give ids of target nodes counted from 0"),
    ("", dict(target="author"), "the HeteroData's node type author has no node features (x)"),
    ("no_target_x", dict(target="paper"), "the HeteroData's node type paper has no node features (x)"),
    ("no_edge_index", dict(target="paper"), "the HeteroData's edge type ('author', 'at', 'inst') has no edge_index"),
    ("no_count", dict(target="paper"), "the HeteroData's node type author has neither features (x) nor num_nodes; "
                                       "set data['author'].num_nodes"),
    ("author_id_past_its_type", dict(target="paper"), "row 0 of data[('author', 'writes', 'paper')].edge_index holds "
                                                      "author ids from 0 to 20, outside [0, 20) of that node type"),
])
def test_refusals_of_hetero_data(change, kwargs, expected):
    data = _hetero_with(change)
    with pytest.raises(InputError) as refused:
        from_pyg(data, **kwargs)
    assert expected in str(refused.value) and "\n" not in str(refused.value)


def test_a_target_for_a_homogeneous_data_is_refused():
    with pytest.raises(InputError, match=re.escape("target=paper applies to a HeteroData but this is a Data of one "
                                                   "node type; drop target=")):
        from_pyg(as_data(random_arrays()), target="paper")


# ---- reverses given under any name, odd counts and tensors ---------------------------------------

def with_edge_type(data: HeteroData, edge_type: tuple[str, str, str], edge_index: torch.Tensor) -> HeteroData:
    data[edge_type].edge_index = edge_index
    return data


def assert_same_graph(a, b) -> None:
    assert a.schema.num_relations == b.schema.num_relations and a.schema.reverse == b.schema.reverse
    for name in ("rowptr", "col", "edge_rel"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.parametrize("name", ["written_by", "rev_writes"])
def test_a_reverse_relation_under_any_name_is_merged_not_doubled(name):
    """(paper, written_by, author) holding exactly writes' edges reversed (shuffled, one repeated)
    is writes' reverse, as rev_writes is: the dataset is the one of writes alone, its reverse named."""
    plain = from_pyg(random_hetero(), target="paper")
    writes = random_hetero()["author", "writes", "paper"].edge_index
    reverse = writes.flip(0)[:, torch.randperm(writes.shape[1], generator=torch.Generator().manual_seed(0))]
    data = with_edge_type(random_hetero(), ("paper", name, "author"), torch.cat([reverse, reverse[:, :1]], dim=1))
    dataset = from_pyg(data, target="paper")
    assert_same_graph(dataset, plain)
    r = dataset.schema.relation_index(("author", "writes", "paper"))
    assert dataset.schema.relations[dataset.schema.reverse[r]] == Relation("paper", name, "author")


def test_pyg_generic_to_naming_given_both_ways_equals_to_undirected():
    """data['author', 'paper'] and data['paper', 'author'] are both named 'to'; the second is the
    first reversed, so the graph is the one ToUndirected makes (with 'rev_to')."""
    transforms = pytest.importorskip("torch_geometric.transforms")
    one_way = random_hetero()
    del one_way["author", "writes", "paper"]
    one_way["author", "paper"].edge_index = random_hetero()["author", "writes", "paper"].edge_index
    both_ways = with_edge_type(reordered(one_way), ("paper", "to", "author"),
                               one_way["author", "to", "paper"].edge_index.flip(0))
    undirected = transforms.ToUndirected()(reordered(one_way))
    assert ("paper", "rev_to", "author") in undirected.edge_types
    assert_same_graph(from_pyg(both_ways, target="paper"), from_pyg(undirected, target="paper"))


def test_to_undirected_without_merge_pairs_a_relation_within_one_type_with_its_rev():
    """ToUndirected(merge=False) adds (paper, rev_cites, paper): cites and rev_cites become each
    other's reverse, each holding one direction, where before both held both directions."""
    transforms = pytest.importorskip("torch_geometric.transforms")
    data = transforms.ToUndirected(merge=False)(random_hetero())
    dataset = from_pyg(data, target="paper")
    schema = dataset.schema
    cites, rev_cites = (schema.relation_index(("paper", name, "paper")) for name in ("cites", "rev_cites"))
    assert schema.reverse[cites] == rev_cites and schema.reverse[rev_cites] == cites
    pairs = given_pairs(data, ("paper", "cites", "paper"))
    assert relation_pairs(dataset, ("paper", "cites", "paper")) == pairs
    assert relation_pairs(dataset, ("paper", "rev_cites", "paper")) == {(v, u) for u, v in pairs}


def test_a_partial_reverse_named_rev_is_refused_naming_the_pair():
    writes = random_hetero()["author", "writes", "paper"].edge_index
    all_but_the_first = (writes != writes[:, :1]).any(dim=0)      # every copy of the first edge left out
    data = with_edge_type(random_hetero(), ("paper", "rev_writes", "author"), writes.flip(0)[:, all_but_the_first])
    with pytest.raises(InputError, match=re.escape(
            "the relation paper__rev_writes__author is named as the reverse of author__writes__paper but its edges "
            "are not exactly those of author__writes__paper reversed")) as refused:
        from_pyg(data, target="paper")
    assert "\n" not in str(refused.value)


def test_a_partial_reverse_under_another_name_is_a_relation_of_its_own():
    """(paper, has_first_author, author) shares some of writes' edges reversed but not all: it is
    a relation with its own reverse, and writes keeps rev_writes."""
    plain = from_pyg(random_hetero(), target="paper")
    writes = random_hetero()["author", "writes", "paper"].edge_index
    data = with_edge_type(random_hetero(), ("paper", "has_first_author", "author"), writes.flip(0)[:, :10])
    dataset = from_pyg(data, target="paper")
    assert dataset.schema.num_relations == plain.schema.num_relations + 2
    assert relation_pairs(dataset, ("author", "rev_has_first_author", "paper")) == set(
        zip(*writes[:, :10].tolist()))
    assert relation_pairs(dataset, ("paper", "rev_writes", "author")) == relation_pairs(
        plain, ("paper", "rev_writes", "author"))


def with_attributes(data: HeteroData, node_type: str, **attributes) -> HeteroData:
    for key, value in attributes.items():
        data[node_type][key] = value
    return data


@pytest.mark.parametrize("change, expected", [
    (dict(node_type="author", num_nodes=2**70), "more than int64 ids can number"),
    (dict(node_type="author", num_nodes=6.7), "data['author'].num_nodes is 6.7, not an integer; give the number of "
                                              "nodes as an int"),
    (dict(node_type="author", num_nodes=torch.tensor(20.0)), "not an integer"),
    (dict(node_type="inst", num_nodes=100), "data['inst'].num_nodes is 100 but data['inst'].x has 4 rows"),
    (dict(node_type="inst", x=torch.empty(4, 2, device="meta")),
     "data['inst'].x is a tensor on the meta device, which holds no values"),
    (dict(node_type="paper", x=torch.empty(30, 5, device="meta")), "data['paper'].x is a tensor on the meta device"),
], ids=["count_past_int64", "fractional_count", "float_tensor_count", "count_and_rows_disagree", "meta_features",
        "meta_target_features"])
def test_odd_node_counts_and_meta_tensors_are_refused_in_one_sentence(change, expected):
    with pytest.raises(InputError) as refused:
        from_pyg(with_attributes(random_hetero(), **change), target="paper")
    assert expected in str(refused.value) and "\n" not in str(refused.value)


def test_a_count_that_disagrees_with_the_rows_of_x_is_refused_for_a_data_too():
    data = as_data(random_arrays())
    data.num_nodes = 100
    with pytest.raises(InputError, match=re.escape("data.num_nodes is 100 but data.x has 40 rows")):
        from_pyg(data)
    data.num_nodes = 40
    assert from_pyg(data).num_nodes == 40


def test_a_nan_feature_is_cited_by_its_type_and_its_row_within_the_type():
    data = random_hetero()
    data["inst"].x[2, 1] = float("nan")
    with pytest.raises(InputError, match=re.escape("(first in the row of inst node 2)")):
        from_pyg(data, target="paper")


def test_a_feature_row_count_off_by_one_names_x_and_y_not_a_mask():
    arrays = random_arrays()
    arrays["x"] = arrays["x"][:39]
    with pytest.raises(InputError, match=re.escape("data.y has 40 rows but data.x has 39; give one row of each per "
                                                   "node")):
        from_pyg(as_data(arrays))


@pytest.mark.parametrize("edge_type", [("author", "writes__to", "paper"), ("author", "writes_", "paper"),
                                       ("author_", "writes", "paper")])
def test_a_name_that_does_not_read_back_from_src__name__dst_is_refused(edge_type):
    data = with_attributes(random_hetero(), edge_type[0], num_nodes=20)
    with pytest.warns(UserWarning) if "__" in edge_type[1] else contextlib.nullcontext():  # PyG's own warning
        data[edge_type].edge_index = data["author", "writes", "paper"].edge_index
    with pytest.raises(InputError, match=r"name \S+ (holds '__'|begins or ends with '_'), so a relation written "
                                         r"src__name__dst .* would not read back; rename it"):
        from_pyg(data, target="paper")
