"""One mechanism decides whether an option applies, in every command (salientpp.options): each
command's conditional options are refused by the one helper in the one sentence shape, the rules
that depend on a sampler kind are the kind's fields, and the old mechanisms are gone."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from conftest import exit_code, one_sentence
from salientpp.options import Needs, not_applicable
from salientpp.sampling import BULK, LADIES, NODEWISE, SAMPLERS, check_sampler, check_sampling_device
from salientpp.train import TrainConfig
from salientpp.train.config import BULK_ONLY, GPU_SAMPLER_ONLY

ROOT = Path(__file__).resolve().parents[1]
# "X applies only with Y; drop it, or Z": what not_applicable writes, and nothing else does.
SHAPE = re.compile(r"(?P<given>--[a-z-]+( \S+)?) applies only with (?P<what>.+); drop it, or (?P<instead>.+)")
WORKLOAD = ["--fanouts", "5", "--batch-size", "64"]


@pytest.mark.parametrize("argv, given, what", [
    (["train", "{P}", "--dependencies", "cache"], "--dependencies cache", "--mode full-graph"),
    (["analyze", "{P}", *WORKLOAD, "--replication", "0.1", "--num-negatives", "3", "--out", "{T}/plan"],
     "--num-negatives 3", "--task link"),
    (["simulate", "{P}", *WORKLOAD, "--eval-weight", "0.5"], "--eval-weight 0.5", "--eval-fanouts"),
    (["prepare", "synthetic:tiny", "{T}/out", "--all-types"], "--all-types", "ogb-lsc: sources"),
    (["bench", "vip", "{P}", "--negative-sampling", "per-source"], "--negative-sampling per-source", "--task link"),
    (["bench", "train", "{P}", "--sampling-device", "cuda"], "--sampling-device cuda", "--sampler bulk or ladies"),
    (["bench", "sampler", "{T}/absent", "--ladies-fanouts", "64,64"], "--ladies-fanouts 64,64",
     "--samplers naming ladies"),
], ids=["train", "analyze", "simulate", "prepare", "bench-vip", "bench-train", "bench-sampler"])
def test_every_command_refuses_a_conditional_option_in_the_one_sentence(tiny_partitions, tmp_path, capsys, no_ranks,
                                                                        argv, given, what):
    part = tiny_partitions[0] / "p2"
    assert exit_code([arg.format(P=part, T=tmp_path) for arg in argv]) == 2
    message = one_sentence(capsys)
    match = SHAPE.search(message)
    assert match and (match["given"], match["what"]) == (given, what), message
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_the_helper_offers_the_option_it_needs_unless_told_another_fix():
    needs = Needs("--task link", lambda options: False)
    assert str(not_applicable("--num-negatives 3", needs)) == ("--num-negatives 3 applies only with --task link; drop "
                                                                "it, or use --task link")
    other = Needs("a graph read into memory", lambda source: False, instead="write it into the spec")
    assert str(not_applicable("--num-classes 3", other)).endswith("; drop it, or write it into the spec")


def test_the_old_mechanisms_are_gone():
    found = subprocess.run(["grep", "-rlE", r"_only_with|check_applies_to|applies only to runs", "salientpp"],
                           cwd=ROOT, capture_output=True, text=True).stdout
    assert found == ""
    # the one sentence is written in one place
    writers = subprocess.run(["grep", "-rl", "applies only with {", "salientpp"], cwd=ROOT, capture_output=True,
                             text=True).stdout.split()
    assert writers == ["salientpp/options.py"]


@pytest.mark.parametrize("name", SAMPLERS)
def test_what_depends_on_the_sampler_kind_is_the_kinds_fields_in_the_config_and_the_loader(tiny_partitions, name):
    """``--sampling-device cuda``: the config and the loader apply the one rule, ``kind.gpu``."""
    kind = check_sampler(name)
    config = TrainConfig(str(tiny_partitions[0] / "p1"), sampler=name, sampling_device="cuda", device="cuda")
    assert GPU_SAMPLER_ONLY.holds(config) is kind.gpu and BULK_ONLY.holds(config) is kind.draws_in_bulk
    if kind.gpu:
        assert check_sampling_device("cuda", kind, "cuda") is not None
    else:
        with pytest.raises(Exception) as from_loader:
            check_sampling_device("cuda", kind, "cuda")
        with pytest.raises(Exception) as from_config:
            config.validate()
        assert str(from_loader.value) == str(from_config.value)
    assert GPU_SAMPLER_ONLY.what == "--sampler " + " or ".join(n for n in SAMPLERS if check_sampler(n).gpu)


def test_a_kind_named_in_the_needs_is_every_kind_with_the_field():
    gpu = [k for k in (NODEWISE, BULK, LADIES) if k.gpu]
    assert all(f"{k.value}" in GPU_SAMPLER_ONLY.what for k in gpu)
    assert NODEWISE.value not in GPU_SAMPLER_ONLY.what.split()


def test_prepare_checks_its_options_once_and_refuses_num_classes_out_of_core(tmp_path, monkeypatch, capsys):
    from salientpp.cli import prepare
    from salientpp.data import importers

    calls = []

    def counted(module):
        original = module.check_applies
        monkeypatch.setattr(module, "check_applies", lambda *a, **k: calls.append(module.__name__) or original(*a, **k))

    counted(prepare), counted(importers)
    assert exit_code(["prepare", "synthetic:tiny", str(tmp_path / "in-memory")]) == 0
    assert len(calls) == 1
    calls.clear()
    monkeypatch.setattr(prepare, "fits_in_memory", lambda spec: False)
    assert exit_code(["prepare", "synthetic:tiny", str(tmp_path / "out-of-core"), "--num-classes", "3"]) == 2
    message = one_sentence(capsys)
    assert len(calls) == 1 and SHAPE.search(message)
    assert "--num-classes 3 applies only with a graph read into memory" in message and "num_classes=C" in message
    assert not (tmp_path / "out-of-core").exists()
