"""Bad sampler options (``--sampler``, ``--bulk-size``, LADIES layer sizes) on ``train``, ``simulate``
and ``analyze``: one sentence, exit code 2, before any data is read or rank started."""
from __future__ import annotations

import pytest

from salientpp.cli import main
from salientpp.errors import InputError
from salientpp.sampling import BulkSampler, NeighborLoader, make_sampler
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
    import numpy as np

    rowptr, col = np.array([0, 1, 2]), np.array([1, 0])
    with pytest.raises(InputError, match=expected):
        BulkSampler(rowptr, col, [2], **kwargs)


def test_make_sampler_names_the_choices_for_an_unknown_sampler():
    import numpy as np

    with pytest.raises(InputError, match="choose one of nodewise, bulk, ladies"):
        make_sampler(np.array([0, 1, 2]), np.array([1, 0]), [2], "neighbour")
    with pytest.raises(InputError, match="NeighborSampler or a BulkSampler"):
        NeighborLoader(object(), [0], 1)
