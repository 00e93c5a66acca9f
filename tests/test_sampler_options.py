"""Bad sampler options (``--sampler``, ``--bulk-size``, LADIES layer sizes) on ``train``, ``simulate``
and ``analyze``: one sentence, exit code 2, before any data is read or rank started."""
from __future__ import annotations

import numpy as np
import pytest

from salientpp.cli import main
from salientpp.data.schema import GraphSchema
from salientpp.errors import InputError
from salientpp.sampling import BulkSampler, NeighborLoader, NeighborSampler, make_sampler
from salientpp.train import TrainConfig, resolve_run
from conftest import exit_code


def _refused(capsys, argv: list[str], expected: str) -> None:
    code = exit_code(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert expected in err and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith(f"salientpp {argv[0]}: error: "), err


@pytest.mark.parametrize("command", ["train", "simulate", "analyze"])
def test_an_unknown_sampler_name_is_refused(tiny_partitions, capsys, command):
    part_dir = str(tiny_partitions[0] / "p2")
    extra = {"train": [], "simulate": ["--fanouts", "5", "--batch-size", "32"],
             "analyze": ["--fanouts", "5", "--batch-size", "32", "--replication", "0.1"]}[command]
    _refused(capsys, [command, part_dir, "--sampler", "layerwise", *extra], "invalid choice: 'layerwise'")


@pytest.mark.parametrize("command", ["simulate", "analyze"])
def test_ladies_layer_sizes_below_one_are_refused_by_the_cache_commands(tiny_partitions, capsys, command):
    part_dir = str(tiny_partitions[0] / "p2")
    extra = ["--replication", "0.1"] if command == "analyze" else []
    _refused(capsys, [command, part_dir, "--sampler", "ladies", "--fanouts", "64,-1", "--batch-size", "32", *extra],
             "LADIES samples a number of nodes per layer")


@pytest.mark.parametrize("argv, expected", [
    (["--sampler", "ladies", "--fanouts=-1,64", "--layers", "2"], "LADIES samples a number of nodes per layer"),
    (["--sampler", "bulk", "--bulk-size", "0"], "--bulk-size must be a positive integer"),
    (["--sampler", "ladies", "--fanouts", "64,64", "--layers", "2", "--model", "gat"], "use --model sage"),
])
def test_train_refuses_bad_sampler_options_before_starting_ranks(tiny_partitions, capsys, argv, expected):
    _refused(capsys, ["train", str(tiny_partitions[0] / "p2"), *argv], expected)


def test_a_node_wise_plan_is_refused_for_ladies_training(tiny_partitions, tmp_path, capsys):
    part_dir = str(tiny_partitions[0] / "p2")
    plan = tmp_path / "plan"
    assert main(["analyze", part_dir, "--fanouts", "5,5", "--batch-size", "32", "--replication", "0.1",
                 "--out", str(plan)]) == 0
    capsys.readouterr()
    with pytest.raises(InputError, match="built for the nodewise sampler but training uses ladies"):
        resolve_run(TrainConfig(part_dir, layers=2, fanouts=(5, 5), batch_size=32, sampler="ladies", plan=str(plan)))
    # Bulk node-wise draws the same distribution: the node-wise plan serves it.
    run = resolve_run(TrainConfig(part_dir, layers=2, fanouts=(5, 5), batch_size=32, sampler="bulk", plan=str(plan)))
    assert run.cache.plan.path == plan


@pytest.mark.parametrize("kwargs, expected", [
    (dict(minibatches_per_bulk=0), r"minibatches_per_bulk \(--bulk-size\) must be a positive integer"),
    (dict(method="fastgcn"), "unknown bulk sampling method"),
    (dict(method="ladies", replace=True), "drop --replace"),
])
def test_the_bulk_sampler_refuses_bad_arguments_in_one_sentence(kwargs, expected):
    rowptr, col = np.array([0, 1, 2]), np.array([1, 0])
    with pytest.raises(InputError, match=expected):
        BulkSampler(rowptr, col, [2], **kwargs)


def test_make_sampler_names_the_choices_for_an_unknown_sampler():
    with pytest.raises(InputError, match="choose one of nodewise, bulk, ladies"):
        make_sampler(np.array([0, 1, 2]), np.array([1, 0]), [2], "neighbour")
    with pytest.raises(InputError, match="NeighborSampler or a BulkSampler"):
        NeighborLoader(object(), [0], 1)


# ---- a typed graph's arrays ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("changes, expected", [
    (dict(edge_rel=None), "a typed graph needs the relation of each CSR entry; pass edge_rel=dataset.edge_rel"),
    (dict(schema=None), "edge_rel needs the graph's schema to name its relations; pass schema=dataset.schema"),
    (dict(edge_rel="short"), "edge_rel must have one entry per entry of col"),
    (dict(edge_rel="int64"), "edge_rel must be a 1-D int8 array, got torch.int64"),
    (dict(schema="small"), "the schema counts 6 nodes but the CSR has 530; pass the schema of this graph"),
])
def test_a_typed_sampler_refuses_mismatched_graph_arrays_in_one_sentence(changes, expected):
    from test_sampler import TYPED_RELATIONS, typed_graph

    schema, rowptr, col, edge_rel = typed_graph()
    given = {"short": edge_rel[:-1], "int64": edge_rel.astype(np.int64),
             "small": GraphSchema.with_reverses(("paper", "author", "institution"), (3, 2, 1), TYPED_RELATIONS,
                                                "paper")}
    args = dict(edge_rel=edge_rel, schema=schema) | {k: given.get(v, v) for k, v in changes.items()}
    with pytest.raises(InputError) as info:
        NeighborSampler(rowptr, col, [3, 2], **args)
    assert str(info.value).startswith(expected) and "\n" not in str(info.value), str(info.value)


@pytest.mark.parametrize("corruption, expected", [
    ("out of range", r"edge_rel holds a relation outside \[0, 5\) in the row of node \d+; the typed CSR is corrupt"),
    ("ungrouped", r"edge_rel is not grouped by relation in the row of node \d+; the typed CSR is corrupt"),
    ("descending", r"edge_rel is not grouped by relation in the row of node \d+; the typed CSR is corrupt"),
])
def test_a_corrupt_edge_rel_is_reported_when_sampling_meets_it(corruption, expected):
    from test_sampler import typed_graph

    schema, rowptr, col, edge_rel = typed_graph()
    edge_rel = edge_rel.copy()
    v = int(np.flatnonzero(np.diff(rowptr) >= 3)[0])
    if corruption == "out of range":
        edge_rel[rowptr[v + 1] - 1] = 9
    else:  # relations 0, 1, 0, 0, ... (the ends agree, an entry inside does not) or 1, 0, 0, ...
        edge_rel[rowptr[v]:rowptr[v + 1]] = 0
        edge_rel[rowptr[v] + (1 if corruption == "ungrouped" else 0)] = 1
    sampler = NeighborSampler(rowptr, col, [-1], edge_rel=edge_rel, schema=schema)
    expected = expected.replace(r"\d+", str(v))
    with pytest.raises(InputError, match=expected):
        sampler.sample([v])
    # The same through a loader's C++ threads.
    with pytest.raises(InputError, match=expected):
        list(NeighborLoader(sampler, [v], 1))
