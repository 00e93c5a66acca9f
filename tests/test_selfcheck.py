"""``salientpp selfcheck``: the device path's one-command proof, run here on the CPU path."""
from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import pytest
import torch

from salientpp import selfcheck
from salientpp.cli import main as cli_main
from salientpp.distributed import device as gather
from conftest import one_sentence

GPU_SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "gpu" / "run.sh"


def gpu_script_selfcheck(device: str) -> list[str]:
    """The ``salientpp`` arguments of the GPU script's selfcheck step with ``DEVICE=device``: the
    script's CPU rehearsal (tests/test_gpu_script.py) leaves that step to this module, which runs
    it in this process."""
    line = next(line for line in GPU_SCRIPT.read_text().splitlines() if line.startswith("step selfcheck "))
    words = shlex.split(line.replace('"$DEVICE"', device))
    assert words[3] == "salientpp" and "$" not in line.replace('"$DEVICE"', ""), line
    return words[4:]


def test_the_gpu_scripts_selfcheck_passes_its_kernel_and_training_checks_on_the_cpu_and_prints_a_table(capsys):
    assert cli_main(gpu_script_selfcheck("cpu")) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in out.splitlines()
            if line.startswith("| ") and not line.startswith("| check")}
    assert rows["row gather vs torch indexing"] == "pass" and rows["model-step kernels"] == "pass"
    assert rows["tiny: assembled x equals x[n_id]"] == "pass"
    assert rows["tiny: test accuracy"] == "info" and rows["extension"] == "pass"
    assert rows["bulk nodewise sampler on cpu"] == "pass" and rows["bulk ladies sampler on cpu"] == "pass"
    assert rows["tiny, 2 ranks, cache in both tiers, drawn on the cpu: assembled x equals x[n_id]"] == "pass"


def test_a_check_that_raises_is_one_failed_row_and_the_checks_after_it_still_run(monkeypatch, capsys):
    def broken(device, plans=200):
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore lines")

    monkeypatch.setattr(selfcheck, "check_gather", broken)
    # The checks after it that the test above runs for real are stubs here, but for the training.
    monkeypatch.setattr(selfcheck, "check_bulk", lambda device: [selfcheck.Check("bulk", True, "stub")])
    monkeypatch.setattr(selfcheck, "check_ranks", lambda device, work: selfcheck.Check("ranks", True, "stub"))
    assert cli_main(["selfcheck", "--device", "cpu", "--presets", "tiny", "--epochs", "1", "--no-bench"]) == 1
    captured = capsys.readouterr()
    rows = {line.split("|")[1].strip(): line.split("|")[2:4] for line in captured.out.splitlines()
            if line.startswith("| ") and not line.startswith("| check")}
    assert rows["row gather"][0].strip() == "FAIL"
    assert rows["row gather"][1].strip() == "raised RuntimeError: CUDA error: an illegal memory access was encountered"
    assert rows["tiny: assembled x equals x[n_id]"][0].strip() == "pass"
    assert "Traceback" in captured.err and "FAILED: row gather" in captured.out


def test_the_bench_check_reads_our_epoch_the_pyg_ratio_and_the_pipelined_ratio_from_the_bench(monkeypatch, tmp_path):
    from salientpp.bench import train as bench_train
    from salientpp.bench.results import write_results

    pyg = "PyG NeighborLoader (pyg-lib) + DDP, PyG's SAGE, full replication"
    written = [{"cache": "none", "depth": 1, "epoch_s": 0.2, "vs_slowest_stage": 2.0},
               {"cache": "none", "depth": 4, "epoch_s": 0.1, "vs_slowest_stage": 1.13},
               {"cache": pyg, "depth": 1, "epoch_s": 0.5}]
    seen = []

    def fake_bench(args):
        seen.append(args)
        write_results(args.json_path, bench_train.KIND, written)  # as bench train writes it
        return 0

    monkeypatch.setattr(bench_train, "main", fake_bench)
    ratio, pipelined = selfcheck.check_bench("cpu", tmp_path, 3, preset="tiny")
    assert seen[0].part_dir == str(tmp_path / "tiny-1") and seen[0].epochs == 3
    assert ratio.detail.startswith("0.100 s vs 0.500 s: 5.00x faster")
    assert pipelined.detail.startswith("1.13 at depth 4")


def test_a_bulk_sampler_that_draws_too_many_neighbours_fails_the_bulk_check(monkeypatch):
    from salientpp.sampling import bulk

    real = bulk.BulkSampler._nodewise

    def greedy(self, frontier, fanouts, generators):  # every neighbour of every relation, ignoring the fanouts
        return real(self, frontier, np.full_like(fanouts, -1), generators)

    monkeypatch.setattr(bulk.BulkSampler, "_nodewise", greedy)
    nodewise, _ = selfcheck.check_bulk(torch.device("cpu"), batches=100)
    assert nodewise.ok is False


def test_a_wrong_kernel_result_fails_the_gather_check(monkeypatch):
    real = gather.gather_rows_reference
    monkeypatch.setattr(gather, "gather_rows_reference", lambda out, sources: real(out, sources).add_(1))
    check = selfcheck.check_gather(torch.device("cpu"), plans=20)
    equal = int(check.detail.split()[0])
    assert check.ok is False and equal < 21 // 2  # only plans that write no row (and the serve check) stay equal


def test_a_wrong_aggregation_or_dropout_fails_the_model_kernel_check(monkeypatch):
    from salientpp.models import ops

    real = ops.aggregate_with_root
    monkeypatch.setattr(ops, "aggregate_with_root", lambda x, *args: tuple(t * 1.05 for t in real(x, *args)))
    check = selfcheck.check_model_kernels(torch.device("cpu"))
    # Only the 4 cases whose destinations have no edges (all zeros, scaled or not) stay equal.
    assert check.ok is False and check.detail.split(": ")[1].startswith("4 of 12")
    monkeypatch.setattr(ops, "aggregate_with_root", real)
    real_dropout = ops.dropout
    monkeypatch.setattr(ops, "dropout", lambda x, p, relu=False: real_dropout(x, p, relu=False))  # no ReLU
    assert selfcheck.check_model_kernels(torch.device("cpu")).ok is False


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_selfcheck_on_cuda_without_a_gpu_is_one_sentence_and_exit_2(capsys):
    assert cli_main(["selfcheck", "--device", "cuda", "--no-bench"]) == 2
    assert "sees no CUDA GPU" in one_sentence(capsys)


@pytest.mark.parametrize("argv,message", [
    (["--presets", "huge"], "unknown preset 'huge'"),
    (["--epochs", "0"], "--epochs must be a positive integer"),
])
def test_selfcheck_refuses_bad_options_before_any_work(capsys, argv, message):
    assert cli_main(["selfcheck", "--device", "cpu", "--no-bench", *argv]) == 2
    assert message in one_sentence(capsys)


def test_the_selfcheck_partitions_without_pymetis_so_offline_gpu_machines_need_not_carry_it(monkeypatch, tmp_path):
    import sys

    from salientpp.partition import load_partitioned

    monkeypatch.setitem(sys.modules, "pymetis", None)  # any import of it fails
    part_dir, dataset = selfcheck._prepare("tiny", tmp_path, 2)
    assert load_partitioned(part_dir).num_parts == 2 and dataset.num_nodes > 0

