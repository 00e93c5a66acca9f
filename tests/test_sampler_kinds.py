"""Sampler kinds: a new kind is its own module (a ``BaseSampler`` and a ``register_sampler`` call),
and the rules of a kind (fanouts, replace) are one function wherever they apply."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from salientpp.cache.vip import default_method, inclusion_probabilities
from salientpp.cache.workload import Workload
from salientpp.cli import main
from salientpp.errors import InputError
from salientpp.partition.book import PartitionBook
from salientpp.data.schema import GraphSchema, Relation
from salientpp.sampling import (BULK, LADIES, NODEWISE, BaseSampler, BulkSampler, FetchContext, NeighborLoader, NeighborSampler, SamplerKind,
                                check_fanouts, check_replace, check_sampler, check_typed_graph, fanout_table, kinds,
                                make_sampler, parse_fanouts, parse_typed_fanouts, register_sampler)
from salientpp.sampling.kinds import sampler_names
from salientpp.train import TrainConfig

from test_bulk_sampler import assert_same_batch
from test_sampler import random_graph


@pytest.fixture
def registry(monkeypatch):
    """Kinds registered in a test are forgotten after it."""
    monkeypatch.setattr(kinds, "_REGISTERED", dict(kinds._REGISTERED))


# ---- a new kind, as its own module would define it ---------------------------------------------------------------

# Node-wise draws whose fanouts must all be >= 1 (the layer-size rule), drawn one batch at a time
# by the C++ sampler's ``_draw`` in the thread that BaseSampler.start_epoch runs by default.
TINY = SamplerKind("tiny", "TINY", "nodewise", layer_sizes=True)


class TinySampler(BaseSampler):
    def __init__(self, rowptr, col, fanouts, *, replace):  # TINY reads no other builder option
        self.fanouts = fanout_table(fanouts, kind=TINY)
        self.inner = NeighborSampler(rowptr, col, self.fanouts, replace=check_replace(replace, TINY))
        self.num_nodes = self.inner.num_nodes

    def _draw(self, seeds, seed, batch_index):
        return self.inner._draw(seeds, seed, batch_index)


def test_a_new_kind_takes_its_own_module_and_the_loader_iterates_it(registry):
    assert register_sampler(TINY, TinySampler) is TINY
    assert check_sampler("tiny") is TINY and check_sampler(TINY) is TINY and sampler_names()[-1] == "tiny"
    with pytest.raises(InputError, match="TINY samples a number of nodes per layer"):
        parse_fanouts("4,-1", TINY)
    with pytest.raises(InputError, match="TINY samples a number of nodes per layer"):
        make_sampler(*random_graph(50, 200, seed=1), [4, -1], "tiny")
    with pytest.raises(ValueError, match="registered already"):
        register_sampler(SamplerKind("tiny", "TINY 2", "nodewise"), TinySampler)

    rowptr, col = random_graph(200, 1200, seed=3)
    sampler = make_sampler(rowptr, col, [4, 3], "tiny")
    assert isinstance(sampler, TinySampler)
    labels = torch.from_numpy(np.random.default_rng(0).integers(0, 5, 200))
    fetch = FetchContext(PartitionBook(np.array([0, 100, 200])), 0, pin=False)
    options = dict(seeds=torch.arange(0, 200, 3), batch_size=10, seed=7, labels=labels, fetch=fetch, num_batches=9,
                   sampler_threads=2, read_ahead=2)
    tiny = NeighborLoader(sampler, **options)
    cpp = NeighborLoader(NeighborSampler(rowptr, col, [4, 3]), **options)
    # Batch i of an epoch comes from the stream (epoch seed, i) whichever worker draws it.
    for epoch in (0, 1):
        tiny.set_epoch(epoch)
        cpp.set_epoch(epoch)
        ours, theirs = list(tiny), list(cpp)
        assert len(ours) == len(theirs) == 9
        for a, b in zip(ours, theirs):
            assert_same_batch(a, b)
            assert torch.equal(a.y, b.y) and torch.equal(a.origins.remote_id, b.origins.remote_id)
    tiny.load_state_dict({"epoch": 1, "next_batch": 6})  # resumed: the same batches 6, 7, 8
    for a, b in zip(list(tiny), theirs[6:], strict=True):
        assert_same_batch(a, b)

    # Its distribution is node-wise: the VIP analysis models it as it does the C++ sampler.
    assert default_method("tiny") == "exact"
    seeds = [np.arange(0, 100, 7), np.arange(100, 200, 7)]
    assert np.array_equal(inclusion_probabilities(rowptr, col, seeds, [4, 3], 4, sampler="tiny"),
                          inclusion_probabilities(rowptr, col, seeds, [4, 3], 4, sampler="nodewise"))


def test_a_kind_is_built_with_only_the_options_its_fields_say_it_reads(registry):
    received = {}

    def builder(name):
        def build(rowptr, col, fanouts, **options):
            received[name] = set(options)
            return NeighborSampler(rowptr, col, fanouts)
        return build

    register_sampler(SamplerKind("plain", "PLAIN", "nodewise"), builder("plain"))
    register_sampler(SamplerKind("bulky", "BULKY", "nodewise", draws_in_bulk=True, gpu=True), builder("bulky"))
    rowptr, col = random_graph(30, 90, seed=5)
    for name in ("plain", "bulky"):
        make_sampler(rowptr, col, [3], name, minibatches_per_bulk=5, device="cpu")
    assert received == {"plain": {"replace"}, "bulky": {"replace", "minibatches_per_bulk", "device"}}
    # A kind that draws on the CPU only refuses another device instead of ignoring it.
    with pytest.raises(InputError, match="sampling on meta applies only with --sampler bulk or ladies or bulky"):
        make_sampler(rowptr, col, [3], "plain", device="meta")
    with pytest.raises(InputError, match="sampling on cuda applies only with"):
        make_sampler(rowptr, col, [3], "nodewise", device="cuda")


def test_the_registry_forgets_a_kind_after_its_test():
    assert "tiny" not in sampler_names()
    with pytest.raises(InputError, match="unknown sampler 'tiny'; choose one of nodewise, bulk, ladies"):
        check_sampler("tiny")


def test_a_kind_of_a_distribution_without_a_vip_model_is_refused_by_the_vip_analysis(registry):
    register_sampler(SamplerKind("fancy", "FANCY", "fancy"), TinySampler)
    with pytest.raises(InputError, match="no model of the fancy distribution that the fancy sampler draws"):
        inclusion_probabilities(*random_graph(20, 60, seed=2), [np.array([0])], [2], 1, sampler="fancy")


def test_a_loader_refuses_what_is_not_a_sampler():
    with pytest.raises(InputError, match="sampler must be a BaseSampler"):
        NeighborLoader(object(), [0], 1)


# ---- one rule, wherever it applies ----------------------------------------------------------------------------------

def _message(call) -> str:
    with pytest.raises(InputError) as info:
        call()
    return str(info.value)


def test_the_replace_rule_is_one_sentence_wherever_it_applies():
    rowptr, col = random_graph(50, 200, seed=4)
    sentence = _message(lambda: check_replace(True, LADIES))
    assert sentence == "LADIES always draws its nodes with replacement; drop --replace"
    assert _message(lambda: Workload((64, 64), 8, replace=True, sampler="ladies")) == sentence
    assert _message(lambda: BulkSampler(rowptr, col, [64, 64], method="ladies", replace=True)) == sentence
    assert _message(lambda: make_sampler(rowptr, col, [64, 64], "ladies", replace=True)) == sentence
    assert _message(lambda: inclusion_probabilities(rowptr, col, [np.array([0])], [64, 64], 1, replace=True,
                                                    sampler="ladies")) == sentence
    # The kinds that draw without replacement take the flag.
    assert Workload((4, 4), 8, replace=True, sampler="bulk").replace is True
    assert make_sampler(rowptr, col, [4, 4], "bulk", replace=True).replace is True


def test_the_fanout_rule_is_one_sentence_wherever_it_applies(tmp_path, capsys):
    rowptr, col = random_graph(50, 200, seed=5)
    sentence = _message(lambda: check_fanouts([64, 0], LADIES))
    assert sentence.startswith("LADIES samples a number of nodes per layer, so every entry of fanouts must be >= 1")
    assert _message(lambda: Workload((64, 0), 8, sampler="ladies")) == sentence
    assert _message(lambda: BulkSampler(rowptr, col, [64, 0], method="ladies")) == sentence
    assert _message(lambda: make_sampler(rowptr, col, [64, 0], "ladies")) == sentence
    assert _message(lambda: inclusion_probabilities(rowptr, col, [np.array([0])], [64, 0], 1,
                                                    sampler="ladies")) == sentence
    # Where the list is an option's value, the same sentence names the option.
    flagged = sentence.replace("every entry of fanouts", "every entry of --fanouts")
    assert _message(lambda: parse_fanouts("64,0", LADIES)) == flagged
    assert _message(lambda: TrainConfig(str(tmp_path), layers=2, fanouts=(64, 0), sampler="ladies").validate()
                    ) == flagged

    # bench sampler checks its --ladies-fanouts by the same rule, named by its option, and their
    # number by the same rule too: one per hop of --fanouts.
    for ladies, values in (("0,64,64", [0, 64, 64]), ("64,64", [64, 64])):
        expected = _message(lambda: check_fanouts(values, LADIES, 3, "--ladies-fanouts"))
        assert main(["bench", "sampler", str(tmp_path / "absent"), "--samplers", "ladies", "--fanouts", "4,3,2",
                     "--ladies-fanouts", ladies]) == 2
        assert capsys.readouterr().err.strip() == f"salientpp bench: error: {expected}"
    assert expected == "--ladies-fanouts gives 2 hops but 3 layers are sampled; pass one fanout per layer"


# ---- typed graphs: the kinds that draw them and the fanout rule ------------------------------------------------------

def test_a_kind_that_draws_homogeneous_graphs_only_refuses_a_typed_graph():
    from test_sampler import typed_graph

    schema, rowptr, col, edge_rel = typed_graph()
    kind = check_sampler("ladies")
    assert not kind.typed
    sentence = "the ladies sampler draws homogeneous graphs only; use --sampler nodewise or bulk"
    assert _message(lambda: check_typed_graph(kind, schema)) == sentence
    assert _message(lambda: make_sampler(rowptr, col, [4, 4], "ladies", edge_rel=edge_rel, schema=schema)) == sentence
    assert _message(lambda: fanout_table([4, 4], schema, kind)) == sentence
    check_typed_graph(kind, GraphSchema.homogeneous(10))  # a homogeneous schema is every kind's
    for name, sampler_class in (("nodewise", NeighborSampler), ("bulk", BulkSampler)):
        assert check_sampler(name).typed
        sampler = make_sampler(rowptr, col, {"cites": [3], "writes": [2], "rev_writes": [0], "affiliated_with": [1],
                                             "rev_affiliated_with": [-1]}, name, edge_rel=edge_rel, schema=schema)
        assert isinstance(sampler, sampler_class) and sampler.fanouts.tolist() == [[3, 2, 0, 1, -1]]


def _typed_schema() -> GraphSchema:
    from test_sampler import TYPED_RELATIONS

    return GraphSchema.with_reverses(("paper", "author", "institution"), (3, 2, 1), TYPED_RELATIONS, "paper")


def test_the_fanout_table_of_one_list_gives_every_relation_that_list():
    schema = _typed_schema()
    table = fanout_table([15, 10, 5], schema)
    assert table.dtype == np.int64 and table.shape == (3, 5)
    assert table.tolist() == [[15] * 5, [10] * 5, [5] * 5]
    assert fanout_table((4, -1)).tolist() == [[4], [-1]]  # homogeneous: [L, 1]
    assert fanout_table([4, -1], GraphSchema.homogeneous(5)).tolist() == [[4], [-1]]
    # One list keeps today's rule: 0 (a hop that draws nothing) is refused there.
    assert _message(lambda: fanout_table([5, 0], schema)) == _message(lambda: check_fanouts([5, 0]))


def test_the_fanout_table_of_a_list_per_relation_takes_relations_as_the_schema_names_them():
    schema = _typed_schema()
    table = fanout_table({"cites": [15, 10], ("author", "writes", "paper"): [5, 0], "rev_writes": [0, 3],
                          Relation("author", "affiliated_with", "institution"): [-1, -1],
                          "institution__rev_affiliated_with__author": [1, 2]}, schema)
    assert table.tolist() == [[15, 5, 0, -1, 1], [10, 0, 3, -1, 2]]
    # A homogeneous graph's one relation may be named too; 0 stays refused there.
    assert fanout_table({"to": [3, 2]}, GraphSchema.homogeneous(5)).tolist() == [[3], [2]]
    assert "must be an integer in [1, 2^31 - 1]" in _message(
        lambda: fanout_table({"node__to__node": [3, 0]}, GraphSchema.homogeneous(5)))


@pytest.mark.parametrize("fanouts, expected", [
    ({"cites": [5], "writes": [5]},
     "fanouts gives no list for the relations paper__rev_writes__author, author__affiliated_with__institution, "
     "institution__rev_affiliated_with__author; name every relation (0 for one that draws nothing)"),
    ({"cites": [5], "writes": [5], "rev_writes": [5], "affiliated_with": [5], "rev_affiliated_with": [5],
      "reviews": [5]},
     "unknown relation reviews; the graph's relations are paper__cites__paper, author__writes__paper, "
     "paper__rev_writes__author, author__affiliated_with__institution, institution__rev_affiliated_with__author"),
    ({"cites": [5, 5], "writes": [5], "rev_writes": [5, 5], "affiliated_with": [5], "rev_affiliated_with": [5]},
     "the lists of fanouts give different numbers of hops (1, 2); give every relation one fanout per hop"),
    ({"cites": [5], "paper__cites__paper": [5]},
     "fanouts names the relation paper__cites__paper twice; give each relation one list"),
    ({"cites": [5, -2]},
     "fanout -2 is invalid; every entry of fanouts of paper__cites__paper must be an integer in [0, 2^31 - 1] "
     "or -1 (all neighbours)"),
    ({7: [5]}, "unknown relation 7; the graph's relations are paper__cites__paper"),
])
def test_the_fanout_table_refuses_a_bad_list_per_relation_in_one_sentence(fanouts, expected):
    sentence = _message(lambda: fanout_table(fanouts, _typed_schema()))
    assert sentence.startswith(expected) and "\n" not in sentence


def test_the_fanout_table_checks_the_number_of_layers_once():
    schema = _typed_schema()
    expected = "--fanouts gives 2 hops but 3 layers are sampled; pass one fanout per layer"
    assert _message(lambda: fanout_table([5, 5], schema, layers=3, what="--fanouts")) == expected
    per_relation = dict.fromkeys(["cites", "writes", "rev_writes", "affiliated_with", "rev_affiliated_with"], [5, 5])
    assert _message(lambda: fanout_table(per_relation, schema, layers=3, what="--fanouts")) == expected
    assert "relations are unknown; pass its schema" in _message(lambda: fanout_table({"cites": [5]}))


def test_the_fanout_table_takes_a_table_given_whole_and_gives_a_copy_of_it():
    schema = _typed_schema()
    given = np.array([[15, 5, 0, -1, 1], [10, 0, 3, -1, 2]], dtype=np.int32)
    table = fanout_table(given, schema)
    assert table.dtype == np.int64 and table.tolist() == given.tolist() and not np.shares_memory(table, given)
    assert fanout_table(given.tolist(), schema).tolist() == given.tolist()  # a list of rows
    assert fanout_table(tuple(map(tuple, given)), schema).tolist() == given.tolist()  # Workload.fanouts' form
    # Without a schema at hand, the relations' count makes it typed (a workload read back from JSON).
    assert fanout_table(given, num_relations=5).tolist() == given.tolist()
    assert fanout_table([[3], [2]]).tolist() == [[3], [2]]  # homogeneous: [L, 1]
    assert fanout_table(np.array([[3], [2]]), GraphSchema.homogeneous(5)).tolist() == [[3], [2]]


@pytest.mark.parametrize("fanouts, schema, expected", [
    ([[2, 2]], "typed", "fanouts of a typed graph must be an int64 [L, R] table, one row per hop and one column per "
                        "relation (R = 5), got shape [1, 2]; give one fanout per relation and hop"),
    ([[2, 2, 2, 2, 2], [1]], "typed", "fanouts of a typed graph must be an int64 [L, R] table, one row per hop and "
                                      "one column per relation (R = 5), got rows of different lengths;"),
    (np.array(5), None, "fanouts of a typed graph must be an int64 [L, R] table, one row per hop and one column per "
                        "relation (R = 1), got shape []"),
    (np.zeros((0, 5), dtype=np.int64), "typed", "fanouts of a typed graph must be an int64 [L, R] table, one row per "
                                                "hop and one column per relation (R = 5), got shape [0, 5];"),
    ([[2, 2, 2.5, 2, 2]], "typed", "fanouts must hold integers, got dtype float64; pass whole numbers of neighbours"),
    ([[2, 2, -2, 2, 2]], "typed", "fanout -2 is invalid; every entry of fanouts must be an integer in [0, 2^31 - 1] "
                                  "or -1 (all neighbours)"),
    # A homogeneous graph's one column keeps the rule of one list: 0 (a hop that draws nothing) is refused.
    ([[5], [0]], None, "fanout 0 is invalid; every entry of fanouts must be an integer in [1, 2^31 - 1] or -1"),
    ([[5], [0]], "homogeneous", "fanout 0 is invalid; every entry of fanouts must be an integer in [1, 2^31 - 1]"),
])
def test_the_fanout_table_refuses_a_bad_table_in_one_sentence(fanouts, schema, expected):
    schema = {"typed": _typed_schema(), "homogeneous": GraphSchema.homogeneous(5), None: None}[schema]
    sentence = _message(lambda: fanout_table(fanouts, schema))
    assert sentence.startswith(expected) and "\n" not in sentence


def test_a_table_given_whole_obeys_the_kinds_and_the_layers_rules():
    schema = _typed_schema()
    assert _message(lambda: fanout_table(np.full((2, 5), 4), schema, LADIES)) == (
        "the ladies sampler draws homogeneous graphs only; use --sampler nodewise or bulk")
    assert _message(lambda: fanout_table([[64], [-1]], kind=LADIES)) == _message(
        lambda: check_fanouts([64, -1], LADIES))
    expected = "--fanouts gives 2 hops but 3 layers are sampled; pass one fanout per layer"
    assert _message(lambda: fanout_table(np.full((2, 5), 4), schema, layers=3, what="--fanouts")) == expected
    assert _message(lambda: fanout_table([[4], [4]], layers=3, what="--fanouts")) == expected


def test_a_workload_and_the_vip_analysis_read_fanouts_through_the_one_rule():
    # Workload and inclusion_probabilities call fanout_table: every form it reads gives the same
    # workload and the same arrays, and its sentences are theirs.
    from test_sampler import typed_graph

    schema, rowptr, col, edge_rel = typed_graph()
    lists = {str(r): ((0, 3) if r.name == "writes" else (2, 1)) for r in schema.relations}
    table = fanout_table(lists, schema)
    assert Workload(table, 4, schema=schema) == Workload(lists, 4, schema=schema)
    assert Workload(table.tolist(), 4, schema=schema) == Workload(lists, 4, schema=schema)
    assert Workload(np.array([[5], [3]]), 4) == Workload((5, 3), 4)
    assert _message(lambda: Workload([[5, 5]], 4, schema=schema)) == _message(lambda: fanout_table([[5, 5]], schema))
    assert _message(lambda: Workload([[64], [0]], 4, sampler="ladies")) == _message(
        lambda: check_fanouts([64, 0], LADIES))
    seeds = [np.array([0, 1])]
    want = inclusion_probabilities(rowptr, col, seeds, table, 1, edge_rel=edge_rel, schema=schema)
    for form in (lists, table.tolist()):
        got = inclusion_probabilities(rowptr, col, seeds, form, 1, edge_rel=edge_rel, schema=schema)
        np.testing.assert_array_equal(got, want)
    every = inclusion_probabilities(rowptr, col, seeds, [2, 1], 1, edge_rel=edge_rel, schema=schema)
    np.testing.assert_array_equal(every, inclusion_probabilities(rowptr, col, seeds, np.tile([[2], [1]], (1, 5)), 1,
                                                                 edge_rel=edge_rel, schema=schema))
    homogeneous = inclusion_probabilities(rowptr, col, seeds, [3, 2], 1)
    np.testing.assert_array_equal(inclusion_probabilities(rowptr, col, seeds, [[3], [2]], 1), homogeneous)
    assert _message(lambda: inclusion_probabilities(rowptr, col, seeds, [[3], [0]], 1)) == _message(
        lambda: fanout_table([[3], [0]]))


def test_the_command_line_fanouts_of_a_typed_graph_give_what_the_fanout_table_takes():
    schema = _typed_schema()
    assert parse_typed_fanouts("15,10,5") == (15, 10, 5)
    text = "cites=15,10; writes = 5,0;rev_writes=0,3;author__affiliated_with__institution=-1,-1;rev_affiliated_with=1,2"
    parsed = parse_typed_fanouts(text)
    assert parsed == {"cites": (15, 10), "writes": (5, 0), "rev_writes": (0, 3),
                      "author__affiliated_with__institution": (-1, -1), "rev_affiliated_with": (1, 2)}
    assert fanout_table(parsed, schema).tolist() == [[15, 5, 0, -1, 1], [10, 0, 3, -1, 2]]
    assert "fanouts gives no list for the relation institution__rev_affiliated_with__author;" in _message(
        lambda: fanout_table(parse_typed_fanouts(text.rsplit(";", 1)[0]), schema))


@pytest.mark.parametrize("text, expected", [
    ("cites=15,10;writes", "--fanouts must give each relation's list as REL=15,10,5 separated by ';'"),
    ("=15,10", "--fanouts must give each relation's list as REL=15,10,5 separated by ';'"),
    ("cites=5;cites=4", "--fanouts names the relation cites twice; give each relation one list"),
    ("cites=5,x", "--fanouts of cites must be comma-separated integers like 15,10,5, got '5,x'"),
    ("cites=5,,4", "--fanouts of cites has an empty item"),
    ("15,1.5", "--fanouts must be comma-separated integers like 15,10,5"),
])
def test_bad_command_line_fanouts_of_a_typed_graph_are_refused_in_one_sentence(text, expected):
    assert _message(lambda: parse_typed_fanouts(text)).startswith(expected)


def test_sampling_on_the_gpu_needs_a_kind_that_draws_there_and_a_run_on_the_gpu(tiny_partitions, capsys):
    """The sampling-device rule, one sentence wherever it applies: the config, the command line
    (before any rank starts) and a loader."""
    from salientpp.sampling import check_sampling_device

    assert check_sampling_device("cpu", NODEWISE, "cpu") == torch.device("cpu")
    assert check_sampling_device("cpu", BULK, "cuda:1") == torch.device("cpu")
    assert check_sampling_device("cuda", BULK, "cuda:1") == torch.device("cuda", 1)
    assert [k.value for k in (NODEWISE, BULK, LADIES) if k.gpu] == ["bulk", "ladies"]
    cpu_only = _message(lambda: check_sampling_device("cuda", NODEWISE, "cuda"))
    assert cpu_only == ("--sampling-device cuda applies only with --sampler bulk or ladies; drop it, or use --sampler "
                        "bulk or ladies")
    no_gpu = _message(lambda: check_sampling_device("cuda", BULK, "cpu"))
    assert no_gpu == ("--sampling-device cuda applies only with --device cuda (the batches are drawn on the training "
                      "GPU); drop it, or use --device cuda")
    assert "must be one of cpu, cuda, got 'tpu'" in _message(lambda: check_sampling_device("tpu", BULK, "cuda"))
    part_dir = str(tiny_partitions[0] / "p1")
    assert _message(lambda: TrainConfig(part_dir, sampler="bulk", sampling_device="cuda").validate()) == no_gpu
    # On the command line a node-wise run is told the same: the config's rule is the loader's (kind.gpu).
    assert main(["train", part_dir, "--sampling-device", "cuda", "--device", "cuda", "--epochs", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(cpu_only) and "Traceback" not in err

    from salientpp import DistGraph, DistNeighborLoader
    from salientpp.distributed import init_distributed

    graph = DistGraph(part_dir, init_distributed("cpu"))
    assert _message(lambda: DistNeighborLoader(graph, "train", (4, 4), 32, sampler="bulk",
                                               sampling_device="cuda")) == no_gpu
    drawn_here = DistNeighborLoader(graph, "train", (4, 4), 32, sampler="bulk", sampling_device="cpu")
    assert drawn_here._loader.sampler.device == torch.device("cpu")
