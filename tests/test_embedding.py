"""The partitioned learnable embedding (DistEmbedding): exact against one process, trained on
Cora without features, checkpointed per rank, and refused options."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

import salientpp
from salientpp.cli import main
from salientpp.embedding import DistEmbedding, table
from salientpp.embedding.table import initial_rows
from salientpp.errors import InputError
from salientpp.io import row_chunks
from salientpp.partition import load_partitioned

from conftest import one_sentence

# scipy.stats is imported by the tests that use it: each rank launched with a function of this
# module imports the module, and scipy.stats would add about a second to every rank's start.

DIM, ROUNDS = 8, 4


def _lookups(ids: int | np.ndarray, num_ranks: int) -> list[list[np.ndarray]]:
    """Per round, per rank, original ids to look up (with repeats) among ``ids`` (a count: every
    id below it), the same for any partitioning."""
    rng = np.random.default_rng(5)
    pool = np.arange(ids) if isinstance(ids, int) else ids
    return [[rng.choice(pool, size=40) for _ in range(num_ranks)] for _ in range(ROUNDS)]


def _train_table(part_dir: str, rounds: list[list[np.ndarray]], optimizer: str, as_one: bool,
                 node_types: tuple[str, ...] | None = None) -> dict:
    """Run the rounds on this rank: rank k looks up ``rounds[r][k]`` (or, ``as_one``, one process
    looks up every rank's ids and takes the mean of their losses), then steps; returns the table
    by original id and the fetch counters. ``node_types``: the types the embedding holds."""
    ctx = salientpp.init_distributed()
    graph = salientpp.DistGraph(part_dir, ctx)
    new_id = np.empty(graph.num_nodes, dtype=np.int64)
    new_id[np.asarray(graph.data.orig_id)] = np.arange(graph.num_nodes)
    target = torch.from_numpy(initial_rows("uniform", 99, np.arange(graph.num_nodes), DIM))  # by original id
    emb = DistEmbedding(graph, DIM, optimizer=optimizer, lr=0.05, seed=3, node_types=node_types)
    for r, per_rank in enumerate(rounds):
        mine = per_rank if as_one else [per_rank[graph.rank]]
        with torch.no_grad():  # a lookup without gradient in between changes nothing
            emb(torch.from_numpy(new_id[per_rank[0]]))
        loss = 0.0
        for ids in mine:
            rows = emb(torch.from_numpy(new_id[ids]))
            loss = loss + ((rows - target[ids]) ** 2).sum() * (r + 1)
        (loss / len(mine)).backward()
        emb.step()
    orig = graph.original_ids(emb.owned_ids())
    out = {"orig": orig, "weight": emb.weight.numpy().copy(), "received": emb.stats.received,
           "touched": emb.optimizer.touched}
    salientpp.shutdown_distributed(ctx)
    return out


def _table(results: list[dict], num_nodes: int) -> np.ndarray:
    table = np.zeros((num_nodes, DIM), dtype=np.float32)
    for out in results:
        table[out["orig"]] = out["weight"]
    return table


@pytest.mark.parametrize("optimizer", ["adam", "adagrad"])
def test_two_ranks_update_the_table_exactly_as_one_process_does(tiny_partitions, optimizer):
    root, dataset = tiny_partitions
    rounds = _lookups(dataset.num_nodes, 2)
    one = _table([_train_table(str(root / "p1"), rounds, optimizer, as_one=True)], dataset.num_nodes)
    results = salientpp.launch(_train_table, (str(root / "p2"), rounds, optimizer, False), nprocs=2)
    two = _table(results, dataset.num_nodes)
    start = initial_rows("normal", 3, np.arange(dataset.num_nodes), DIM)
    touched = np.unique(np.concatenate([ids for per_rank in rounds for ids in per_rank]))
    assert np.abs(one[touched] - start[touched]).min(axis=1).max() > 0  # every touched row moved
    np.testing.assert_allclose(two, one, rtol=0, atol=2e-6)
    untouched = np.setdiff1d(np.arange(dataset.num_nodes), touched)
    assert np.array_equal(two[untouched], start[untouched])  # the initial values do not depend on the partitioning
    assert sum(out["touched"] for out in results) == touched.shape[0]
    # every remote row a rank used was fetched: the distinct remote ids of its lookups, each round twice
    data = load_partitioned(root / "p2")
    new_id = np.empty(dataset.num_nodes, dtype=np.int64)
    new_id[np.asarray(data.orig_id)] = np.arange(dataset.num_nodes)
    for k, out in enumerate(results):
        lo, hi = data.book.offsets[k], data.book.offsets[k + 1]
        expected = 0
        for per_rank in rounds:
            for ids in (per_rank[0], per_rank[k]):
                new = np.unique(new_id[ids])
                expected += int(((new < lo) | (new >= hi)).sum())
        assert out["received"] == expected


def test_an_embedding_of_some_node_types_updates_its_rows_exactly_as_one_process_does(typed_partitions):
    """A typed graph's embedding holds the rows of its featureless types only (here authors and
    institutes: two blocks per rank), and two ranks update them as one process does."""
    root, dataset = typed_partitions
    types = ("author", "inst")
    pool = np.concatenate([np.arange(*dataset.schema.range_of(t)) for t in types])
    rounds = _lookups(pool, 2)
    one = _train_table(str(root / "p1"), rounds, "adam", as_one=True, node_types=types)
    results = salientpp.launch(_train_table, (str(root / "p2"), rounds, "adam", False, types), nprocs=2)
    assert np.array_equal(np.sort(np.concatenate([out["orig"] for out in results])), np.sort(pool))  # those rows only
    two = _table(results, dataset.num_nodes)
    np.testing.assert_allclose(two[pool], _table([one], dataset.num_nodes)[pool], rtol=0, atol=2e-6)
    touched = np.unique(np.concatenate([ids for per_rank in rounds for ids in per_rank]))
    start = initial_rows("normal", 3, touched, DIM)
    assert np.abs(two[touched] - start).min(axis=1).max() > 0  # every touched row moved


def test_an_embedding_of_some_node_types_refuses_the_id_of_another_type(typed_partitions):
    root, dataset = typed_partitions
    ctx = salientpp.init_distributed()
    try:
        graph = salientpp.DistGraph(str(root / "p1"), ctx)
        emb = DistEmbedding(graph, DIM, node_types=("author",))
        paper = int(np.asarray(graph.split("train"))[0])
        with pytest.raises(InputError, match=f"holds the node types author, but the id {paper} is of the type paper"):
            emb(torch.tensor([paper]))
    finally:
        salientpp.shutdown_distributed(ctx)


def test_initial_rows_are_normal_with_variance_one_over_dim():
    from scipy import stats

    rows = initial_rows("normal", 0, np.arange(2000), 16).ravel() * 4.0
    assert stats.kstest(rows, "norm").pvalue > 1e-3  # 32k draws: a wrong scale or shape gives p ~ 0
    uniform = initial_rows("uniform", 0, np.arange(2000), 16).ravel()
    assert abs(uniform.var() - 1 / 16) < 0.003 and np.abs(uniform).max() <= np.sqrt(3 / 16)
    assert not np.array_equal(initial_rows("normal", 1, np.arange(10), 4), initial_rows("normal", 0, np.arange(10), 4))


@pytest.fixture(scope="module")
def cora_2(tmp_path_factory, cora_npz):
    from salientpp.data.importers import load_source
    from salientpp.partition.partitioner import partition_dataset

    root = tmp_path_factory.mktemp("cora-emb")
    partition_dataset(load_source(f"npz:{cora_npz}"), root / "p2", 2)
    return root / "p2"


def _majority_accuracy(part_dir) -> float:
    """The test accuracy of the best constant prediction: no feature-less MLP can beat it."""
    data = load_partitioned(part_dir)
    y = np.concatenate([np.asarray(data.part(k).y)[np.asarray(data.part(k).test_idx) - data.book.offsets[k]]
                        for k in range(data.num_parts)])
    return float(np.bincount(y).max() / y.shape[0])


def test_learned_embeddings_without_features_beat_any_featureless_mlp_on_cora(cora_2, tmp_path):
    from salientpp.train import TrainConfig, train

    json_path = tmp_path / "run.jsonl"
    result = train(TrainConfig(str(cora_2), epochs=30, hidden=64, layers=2, fanouts=(10, 10), batch_size=64,
                               embedding_dim=64, features=False, lr=0.01, embedding_lr=0.05, dropout=0.5,
                               eval_fanouts=(-1, -1), json_path=str(json_path), progress=False))
    majority = _majority_accuracy(cora_2)
    assert result.test_at_best >= majority + 0.3, (result.test_at_best, majority)
    record = json.loads(json_path.read_text().splitlines()[-1])
    assert record["comm"]["received"] == 0 and record["embedding_comm"]["received"] > 0  # no feature is fetched


def test_a_resumed_run_restores_each_ranks_embedding_shard_and_continues_identically(cora_2, tmp_path):
    from salientpp.train import TrainConfig, train

    options = dict(hidden=16, layers=2, fanouts=(5, 5), batch_size=256, embedding_dim=8, progress=False,
                   eval_every=1)
    full = train(TrainConfig(str(cora_2), epochs=3, **options))
    ckpt = tmp_path / "ckpt"
    train(TrainConfig(str(cora_2), epochs=2, checkpoint_dir=str(ckpt), **options))
    shards = sorted(p.name for p in ckpt.glob("embedding-*"))
    last = torch.load(ckpt / "last.pt", weights_only=True)
    best = torch.load(ckpt / "best.pt", weights_only=True)
    assert set(shards) == {f"embedding-{tag}.rank{k}.pt" for tag in (last["embedding"], best["embedding"])
                           for k in range(2)}
    resumed = train(TrainConfig(str(cora_2), epochs=3, checkpoint_dir=str(ckpt), resume=True, **options))
    assert [h["train_loss"] for h in resumed.history] == pytest.approx([h["train_loss"] for h in full.history[2:]],
                                                                       rel=1e-6)
    assert resumed.final_test == pytest.approx(full.final_test)


@pytest.mark.parametrize("args, expected", [
    (["--no-features"], "--embedding-dim"),
    (["--embedding-dim", "-1"], "non-negative"),
    (["--embedding-dim", "8", "--embedding-lr", "0"], "learning rate"),
    # rows beside the features ([x || emb]) are what a model reading one input per type cannot take
    (["--embedding-dim", "8", "--model", "rsage"], "the rsage model reads one input per type"),
])
def test_bad_embedding_options_get_one_sentence_and_exit_2_before_any_rank_starts(cora_2, capsys, no_ranks, args,
                                                                                    expected):
    assert main(["train", str(cora_2), "--quiet", *args]) == 2
    assert expected in one_sentence(capsys)


# ---- misuse of the API: one sentence, as the command line gives ----------------------------------

@pytest.fixture
def one_rank(tiny_partitions):
    """This process alone as a job, with the one partition of ``tiny``."""
    ctx = salientpp.init_distributed()
    yield salientpp.DistGraph(tiny_partitions[0] / "p1", ctx)
    salientpp.shutdown_distributed(ctx)


@pytest.mark.parametrize("options, expected", [
    (dict(dim=0), "the embedding dimension must be a positive integer, got 0"),
    (dict(dim=2.5), "the embedding dimension must be a positive integer, got 2.5"),
    (dict(dim=True), "the embedding dimension must be a positive integer, got True"),
    (dict(dim=8, seed=-1), "the embedding seed must be an integer in [0, 2^63), got -1"),
    (dict(dim=2**40), "an embedding table of 2,000 rows x 1,099,511,627,776 float32 columns on rank 0 needs about "
                      "8,048.0 TiB of memory but only "),  # 8,000 TiB of table, 48 TiB for the init of one row
])
def test_an_embedding_of_a_bad_or_impossible_size_is_refused_before_anything_is_allocated(one_rank, monkeypatch,
                                                                                           options, expected):
    monkeypatch.setattr(torch, "empty", None)  # nothing reaches an allocation: calling it would be a TypeError
    with pytest.raises(InputError, match=re.escape(expected)):
        DistEmbedding(one_rank, **options)


def test_the_built_in_init_in_chunks_gives_the_rows_of_one_pass(one_rank, monkeypatch):
    whole = initial_rows("normal", 4, one_rank.original_ids(np.arange(one_rank.num_nodes)), DIM)
    monkeypatch.setattr(table, "row_chunks", lambda rows, row_bytes: row_chunks(rows, row_bytes, 300 * row_bytes))
    assert np.array_equal(DistEmbedding(one_rank, DIM, seed=4).weight.numpy(), whole)


@pytest.mark.parametrize("ids, expected", [
    (torch.tensor([0.0, 1.5]), "the embedding ids must be a 1-D int64 array, got torch.float32 of shape [2]"),
    (torch.tensor([[0, 1]]), "the embedding ids must be a 1-D int64 array, got torch.int64 of shape [1, 2]"),
    ([0, 1], "the embedding ids must be an int64 tensor of node ids, got a list"),
    (torch.tensor([0, 2000, 5]), "the embedding ids must be node ids in [0, 2000), got 2000"),
    (torch.tensor([3, -1]), "the embedding ids must be node ids in [0, 2000), got -1"),
])
def test_ids_that_are_not_node_ids_of_the_graph_are_refused_in_a_lookup(one_rank, ids, expected):
    emb = DistEmbedding(one_rank, DIM)
    with pytest.raises(InputError, match=re.escape(expected)):
        emb(ids)
    assert emb(torch.tensor([0, 1999, 0])).shape == (3, DIM) and emb.stats.owned == 2


@pytest.mark.parametrize("change, expected", [
    (lambda state: {"x": 1}, "the embedding state lacks the keys 'offset', 'weight', 'optimizer' and has the "
                             "unexpected key 'x'; pass what DistEmbedding.state_dict() returned"),
    (lambda state: state | {"weight": 1}, "the embedding shard holds rows 0.. of int, but rank 0 owns rows 0.. of "
                                          "torch.float32 [2000, 8]"),
    (lambda state: state | {"optimizer": {"x": 1}}, "the saved embedding optimizer state (SparseAdam) lacks the keys "
                                                    "'slot', 'exp_avg', 'exp_avg_sq', 'step' and has the unexpected "
                                                    "key 'x'"),
])
def test_an_embedding_state_of_another_shape_is_refused_naming_what_differs(one_rank, change, expected):
    emb = DistEmbedding(one_rank, DIM)
    before = emb.weight.clone()
    with pytest.raises(InputError, match=re.escape(expected)):
        emb.load_state_dict(change(emb.state_dict()))
    assert torch.equal(emb.weight, before)


def test_one_rule_gives_the_featureless_types_or_else_the_targets_rows_beside_its_features(tiny_partitions,
                                                                                         typed_partitions):
    """The embedding's types, its rows' place in the model's input (learned_types): a typed graph's
    featureless types (authors), its target read as its features alone; a homogeneous graph's one
    type beside its features, or alone without them."""
    from salientpp.data.learned import learned_types
    from salientpp.train.setup import embedded_types, model_in_dim

    typed = load_partitioned(typed_partitions[0] / "p2", verify=False)
    assert embedded_types(typed, features=True) == ("author",)
    assert model_in_dim(typed, True, DIM) == typed.num_features
    homogeneous = load_partitioned(tiny_partitions[0] / "p2", verify=False)
    assert embedded_types(homogeneous, features=True) == embedded_types(homogeneous, features=False) == ("node",)
    assert model_in_dim(homogeneous, True, DIM) == homogeneous.num_features + DIM
    assert model_in_dim(homogeneous, False, DIM) == DIM and model_in_dim(homogeneous, True, 0) == homogeneous.num_features
    assert learned_types(typed.schema, [3] * typed.schema.num_types) == (typed.schema.target_index,)


def test_the_memory_estimate_widens_the_models_input_only_where_the_rule_puts_the_rows(tiny_partitions,
                                                                                      typed_partitions):
    """The estimate's model input is train's (input_width): a homogeneous graph's embedding widens
    it, a typed graph's (of its featureless types) leaves the target's rows as its features."""
    from salientpp.resources import estimate_train

    common = dict(fanouts=(2, 2), batch_size=4, hidden=8, layers=2, local_ranks=1, pipeline_depth=1, policy="none")

    def parameters(part_dir, embedding_dim):
        data = load_partitioned(part_dir, verify=False)
        return estimate_train(data, embedding_dim=embedding_dim, **common).items["model and optimizer"]

    homogeneous, typed = tiny_partitions[0] / "p2", typed_partitions[0] / "p2"
    assert parameters(homogeneous, DIM) > parameters(homogeneous, 0)
    assert parameters(typed, DIM) == parameters(typed, 0)
