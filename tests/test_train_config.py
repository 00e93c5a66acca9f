"""TrainConfig is the schema of `salientpp train`: the command line, the options every rank must
agree on, those a plan decides and those a checkpoint must match all come from its fields;
validate() only checks, resolved() fills in the defaults once."""
from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from salientpp.cli import build_parser
from salientpp.cli import main as cli_main
from salientpp.errors import InputError
from salientpp.train import TrainConfig
from salientpp.train.config import (DEFAULT_EVAL_FANOUT, DEFAULT_FANOUTS, add_options, agreed_options,
                                    checkpoint_options, config_from_args, flag_of, option_of)
from conftest import one_sentence


def _train_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices["train"]


def test_every_option_of_train_is_a_config_field_and_every_field_an_option():
    dests = {a.dest for a in _train_parser()._actions if a.dest != "help"}
    assert dests == {f.name for f in dataclasses.fields(TrainConfig)}


def test_an_argument_that_maps_to_no_field_is_an_error_at_start_up():
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    add_options(parser)
    parser.add_argument("--colour")
    with pytest.raises(ValueError, match="map to no TrainConfig field: colour"):
        config_from_args(parser.parse_args(["PART", "--colour", "red"]))


def test_options_given_on_the_command_line_become_fields_and_the_others_keep_their_defaults():
    config = config_from_args(_train_parser().parse_args(
        ["P", "--fanouts", "4,3", "--bulk-size", "2", "--no-pipeline", "--quiet", "--memory-limit", "1GiB"]))
    assert (config.part_dir, config.fanouts, config.minibatches_per_bulk) == ("P", (4, 3), 2)
    assert (config.pipeline_depth, config.progress, config.memory_limit) == (1, False, 2**30)
    assert config.epochs == TrainConfig.__dataclass_fields__["epochs"].default and config.policy is None


def test_the_options_ranks_agree_on_come_from_the_schema(tiny_partitions):
    agreed = agreed_options(TrainConfig(str(tiny_partitions[0] / "p2")).resolved())
    # The two that the hand-kept list missed, and the resolved defaults every rank must share.
    assert {"sampler", "minibatches_per_bulk", "fanouts", "eval_fanouts", "eval_batch_size"} <= set(agreed)
    assert agreed["eval_fanouts"] == [DEFAULT_EVAL_FANOUT] * 3 and agreed["fanouts"] == list(DEFAULT_FANOUTS)
    # Paths and this machine's threads may differ between machines.
    assert not {"part_dir", "plan", "json_path", "sampler_threads", "torch_threads", "nprocs"} & set(agreed)
    # Whether checkpoints are written (and resumed) decides collectives: agreed on, the path itself not.
    assert (agreed["checkpoint_dir"], agreed["resume"]) == (False, False)
    saving = TrainConfig(str(tiny_partitions[0] / "p2"), checkpoint_dir=str(tiny_partitions[0] / "ckpt-agreed")).resolved()
    assert agreed_options(saving)["checkpoint_dir"] is True
    assert {"model", "hidden", "layers", "fanouts", "batch_size", "seed"} <= set(checkpoint_options(TrainConfig("P")))


def test_validate_only_checks_and_resolved_fills_the_defaults_in(tiny_partitions):
    part_dir = str(tiny_partitions[0] / "p2")
    config = TrainConfig(part_dir, layers=2, fanouts=(5, 5), batch_size=32)
    assert config.validate() is config and (config.eval_fanouts, config.eval_batch_size, config.policy) == (None,) * 3
    resolved = config.resolved()
    assert (resolved.eval_fanouts, resolved.eval_batch_size) == ((DEFAULT_EVAL_FANOUT,) * 2, 32)
    assert (resolved.policy, resolved.replication, resolved.device_fraction) == ("vip", 0.1, 0.15)
    assert resolved.resolved() == resolved  # resolving twice changes nothing
    full = TrainConfig(part_dir, mode="full-graph", layers=2).resolved()
    assert (full.fanouts, full.eval_fanouts, full.inference, full.policy) == (None, None, "layerwise", None)
    assert full.resolved() == full  # what does not apply to the run stays unset, so it resolves again
    with pytest.raises(InputError, match="--fanouts 15,10,5 applies only with --mode minibatch"):
        TrainConfig(part_dir, mode="full-graph", layers=3, fanouts=DEFAULT_FANOUTS).validate()


@pytest.mark.parametrize("option, value", [("policy", "vip"), ("replication", 0.1), ("device_fraction", 0.15)])
def test_an_option_a_plan_decides_is_refused_with_a_plan_even_at_its_default_value(tiny_partitions, tmp_path, capsys,
                                                                                    option, value):
    part_dir = str(tiny_partitions[0] / "p2")
    flag = flag_of(TrainConfig.__dataclass_fields__[option])
    assert option_of(TrainConfig.__dataclass_fields__[option]).plan_decides
    with pytest.raises(InputError, match=f"{flag} cannot be combined with --plan"):
        TrainConfig(part_dir, plan=str(tmp_path), **{option: value}).validate()
    assert cli_main(["train", part_dir, "--plan", str(tmp_path), flag, str(value)]) == 2
    assert f"{flag} cannot be combined with --plan" in one_sentence(capsys)


def test_a_renamed_flag_still_works_for_one_release_and_says_its_new_name(tiny_partitions, tmp_path, capsys):
    """Every old flag of RENAMED_FLAGS is only ever an alias of its new one, and using it prints
    one note per old flag (the command still succeeds)."""
    from salientpp.cli import parsers
    from salientpp.parsing import RENAMED_FLAGS

    aliased = set()
    for p in parsers(build_parser()):
        actions = {flag: a for a in p._actions for flag in a.option_strings}
        for old, new in RENAMED_FLAGS.items():
            if old in actions:  # the same option as the new name, never a second one
                assert actions[old] is actions.get(new), (old, p.prog)
                aliased.add(old)
    assert aliased == set(RENAMED_FLAGS)  # each old flag is still accepted somewhere
    config = config_from_args(_train_parser().parse_args(["P", "--cache", "none", "--threads", "3"]))
    assert (config.policy, config.sampler_threads) == ("none", 3)
    p2 = str(tiny_partitions[0] / "p2")
    assert cli_main(["analyze", p2, "--fanouts", "5,5", "--batch-size", "16", "--replication", "0.1",
                     "--gpu-fraction", "0.5", "--threads", "1", "--out", str(tmp_path / "plan")]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert notes == ["note: --gpu-fraction is now --device-fraction; the old name is accepted until the next release",
                     "note: --threads is now --sampler-threads; the old name is accepted until the next release"]
    assert json.loads((tmp_path / "plan" / "meta.json").read_text())["device_fraction"] == 0.5


@pytest.mark.parametrize("model", ["rsage", "rgcn", "rgat"])
def test_a_typed_model_runs_layerwise_inference_but_not_full_graph_training(tiny_partitions, model):
    part_dir = str(tiny_partitions[0] / "p2")
    TrainConfig(part_dir, model=model, inference="layerwise").validate()
    TrainConfig(part_dir, model=model, inference="layerwise", embedding_dim=8, features=False).validate()
    with pytest.raises(InputError, match=f"--mode full-graph is not implemented for the typed model {model}"):
        TrainConfig(part_dir, model=model, mode="full-graph", layers=2).validate()
