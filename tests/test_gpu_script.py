"""The GPU session's prepared script (experiments/gpu/run.sh), rehearsed on the CPU with the tiny
preset so that it cannot rot between the sessions that have a GPU: every step runs and succeeds,
and the benchmark's JSON holds its rows. (The build step, which CI's own install covers, and the
CUDA kernel tests, which the suite runs anyway, are skipped here.)"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "experiments" / "gpu" / "run.sh"


def _rehearse(out: Path, **settings: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OUT": str(out), "DEVICE": "cpu", "PRESET": "tiny", "PARTS": "2",
           "EPOCHS": "2", "BUILD": "0", "KERNEL_TESTS": "0", **settings}
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600)


def test_the_gpu_script_runs_every_step_on_the_cpu_and_writes_its_results(tmp_path):
    done = _rehearse(tmp_path / "out")
    steps = (tmp_path / "out" / "steps.log").read_text().splitlines()
    assert done.returncode == 0, steps
    assert [line.split()[:2] for line in steps] == [["env", "ok"], ["data", "ok"], ["step", "ok"],
                                                    ["selfcheck", "ok"], ["train", "ok"], ["profile", "ok"]], steps
    with gzip.open(tmp_path / "out" / "trace.json.gz") as trace:
        assert json.load(trace)["traceEvents"]  # a Chrome trace with events
    assert "Self CPU" in (tmp_path / "out" / "profile.txt").read_text()
    assert "device cpu" in (tmp_path / "out" / "env.log").read_text()
    rows = json.loads((tmp_path / "out" / "bench-train.json").read_text())
    assert {row["cache"] for row in rows} == {"none", "vip"} and all(row["epoch_s"] > 0 for row in rows)
    steps = json.loads((tmp_path / "out" / "bench-step.json").read_text())
    assert {row["device"] for row in steps} == {"cpu"} and all(row["seconds"] > 0 for row in steps)


def test_a_failed_step_is_logged_and_the_later_steps_still_run(tmp_path):
    done = _rehearse(tmp_path / "out", PRESET="no-such-preset")
    steps = dict(line.split(maxsplit=1) for line in (tmp_path / "out" / "steps.log").read_text().splitlines())
    assert done.returncode == 1
    assert steps["data"].startswith("FAILED (exit 2)") and steps["selfcheck"].startswith("ok")
    assert steps["train"].startswith("FAILED")  # no partitions to train on, and said so in train.log
    assert "error" in (tmp_path / "out" / "data.log").read_text()
