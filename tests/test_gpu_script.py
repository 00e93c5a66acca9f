"""The GPU session's prepared script (experiments/gpu/run.sh), rehearsed on the CPU with the tiny
preset so that it cannot rot between the sessions that have a GPU: every step runs and succeeds,
and the benchmarks' JSON holds their rows. (The build step, which CI's own install covers, and
the CUDA kernel tests, which the suite runs anyway, are skipped here; so is the PyG build, which
takes 25 minutes on 2 cores, and the selfcheck step, whose command, read from the script,
tests/test_selfcheck.py runs in its own process with every row checked.)"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "experiments" / "gpu" / "run.sh"


def _rehearse(out: Path, **settings: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OUT": str(out), "DEVICE": "cpu", "PRESET": "tiny",
           "EPOCHS": "2", "BUILD": "0", "KERNEL_TESTS": "0", "WORK": str(out.parent / "work"),
           "SOURCES": str(out.parent / "no-sources"), **settings}
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600)
    with tarfile.open(out / "results.tgz") as packed:  # every step's files, in one
        packed.extractall(out / "results", filter="data")
    return done


# Every step the rehearsal runs, in the script's order, in two halves that pytest-xdist can run side
# by side (each generates its own data); selfcheck is left to tests/test_selfcheck.py.
TRAIN_STEPS = ("env", "data", "train", "train-fetch-thread", "train-gpu-sampling", "train-host-rows")
OTHER_STEPS = ("data", "step", "profile", "sampler", "step-4096")
NOT_REHEARSED = {"build", "pyg", "kernels", "selfcheck"}


def test_the_rehearsal_covers_every_step_of_the_script():
    named = [line.split()[1] for line in SCRIPT.read_text().splitlines() if line.startswith("step ")]
    assert set(named) - NOT_REHEARSED == set(TRAIN_STEPS) | set(OTHER_STEPS)


def _rehearse_steps(out: Path, names: tuple[str, ...]) -> Path:
    """Run ``names``, check that each succeeded and that results.tgz holds steps.log; the results folder."""
    done = _rehearse(out, STEPS=" ".join(names))
    steps = (out / "steps.log").read_text().splitlines()
    assert done.returncode == 0, steps
    assert sorted(p.name for p in out.iterdir()) == ["results", "results.tgz", "steps.log"]
    assert (out / "results" / "steps.log").read_text().splitlines() == steps
    assert [line.split()[:2] for line in steps] == [[name, "ok"] for name in names], steps
    return out / "results"


def test_the_gpu_scripts_training_steps_run_on_the_cpu_and_write_their_results(tmp_path):
    results = _rehearse_steps(tmp_path / "out", TRAIN_STEPS)
    assert "device cpu" in (results / "env.log").read_text()
    # PyG's rows are there where its NeighborLoader can sample (pyg-lib or torch_sparse installed).
    from salientpp.bench.pyg_baseline import unavailable_reason

    rows = json.loads((results / "bench-train.json").read_text())["rows"]
    ours = [row for row in rows if not row["cache"].startswith("PyG NeighborLoader")]
    assert ours and all(row["cache"] == "none" for row in ours)  # 1 part: nothing to cache
    assert all(row["epoch_s"] > 0 for row in rows) and (len(ours) < len(rows)) == (unavailable_reason() is None)
    for name in ("fetch-thread", "gpu-sampling", "host-rows"):  # the variants: no baselines
        variant = json.loads((results / f"bench-train-{name}.json").read_text())["rows"]
        assert variant and all(row["cache"] == "none" and row["epoch_s"] > 0 for row in variant)
    # The data is kept in WORK: a second call on the same machine skips generating it, and STEPS
    # runs only the steps it names.
    again = _rehearse(tmp_path / "again", STEPS="data")
    assert again.returncode == 0 and [line.split()[0] for line in (tmp_path / "again" / "steps.log").open()] == ["data"]
    assert "exists: kept" in (tmp_path / "again" / "results" / "data.log").read_text()
    # Steps that would start past the deadline (less than 10 s before it) are skipped, and fail the script.
    late = _rehearse(tmp_path / "late", DEADLINE="5")
    steps = dict(line.split(maxsplit=1) for line in (tmp_path / "late" / "steps.log").read_text().splitlines())
    assert late.returncode == 1 and steps and all(status.startswith("SKIPPED") for status in steps.values())
    assert not (tmp_path / "late" / "results" / "step-4096.log").exists()


def test_the_gpu_scripts_other_steps_run_on_the_cpu_and_write_their_results(tmp_path):
    results = _rehearse_steps(tmp_path / "out", OTHER_STEPS)
    with gzip.open(results / "trace.json.gz") as trace:
        assert json.load(trace)["traceEvents"]  # a Chrome trace with events
    assert "Self CPU" in (results / "profile.txt").read_text()
    from salientpp.bench.pyg_baseline import unavailable_reason

    for name in ("bench-step.json", "bench-step-4096.json"):
        steps = json.loads((results / name).read_text())["rows"]
        assert {row["device"] for row in steps} == {"cpu"} and all(row["seconds"] > 0 for row in steps)
    sampler = json.loads((results / "bench-sampler.json").read_text())
    assert {(row["impl"], row["bulk_size"]) for row in sampler["rows"]} == {
        ("salientpp", None), ("bulk", 1), ("bulk", 4), ("bulk", 16), *[("pyg", None)] * (unavailable_reason() is None)}


def test_a_failed_step_is_logged_and_the_later_steps_still_run(tmp_path):
    # (Without the env step, 8 s of importing torch and PyG: the test above has it succeed.)
    done = _rehearse(tmp_path / "out", PRESET="no-such-preset", STEPS="data train")
    steps = dict(line.split(maxsplit=1) for line in (tmp_path / "out" / "steps.log").read_text().splitlines())
    assert done.returncode == 1 and sorted(steps) == ["data", "train"]
    assert steps["data"].startswith("FAILED (exit 2)")
    assert steps["train"].startswith("FAILED")  # it still ran: no partitions to train on, said in train.log
    assert "error" in (tmp_path / "out" / "results" / "data.log").read_text()
