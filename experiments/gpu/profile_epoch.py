"""STEPS training steps in the middle of an epoch of a 1-part partitioned directory under
``torch.profiler``, after one epoch of warm-up: where the time of a rank goes, and which stages
overlap (the pipeline's threads and, on a GPU, its streams).

    python3 experiments/gpu/profile_epoch.py PART_DIR DEVICE OUT_DIR STEPS

Writes ``OUT_DIR/trace.json.gz`` (a Chrome trace: chrome://tracing or Perfetto) and
``OUT_DIR/profile.txt`` (the 40 operations with the most time, on the device for ``cuda``, else
on the CPU). Part of the GPU session's script (``run.sh``, step ``profile``).
"""
from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

from torch.profiler import ProfilerActivity, profile, schedule

from salientpp.distributed import init_distributed, shutdown_distributed
from salientpp.train import TrainConfig, trainer_for


def main(part_dir: str, device: str, out_dir: str, steps: str) -> None:
    out = Path(out_dir)
    ctx = init_distributed(device)
    try:
        trainer = trainer_for(TrainConfig(part_dir, epochs=2, eval_every=0, device=device, progress=False), ctx)
        trainer.train_epoch(0)  # warm-up: the allocator, the kernels' first launches
        active = min(int(steps), len(trainer.loader))
        # Skip the epoch's first steps (the pipeline filling up) where the epoch has room for them.
        wait = min(10, len(trainer.loader) - active)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with profile(activities=activities, schedule=schedule(wait=wait, warmup=0, active=active)) as prof:
            forward = trainer.forward

            def stepping(batch):  # the profiler's step boundary: each training step's start
                prof.step()
                return forward(batch)

            trainer.forward = stepping
            trainer.train_epoch(1)
    finally:
        shutdown_distributed(ctx)
    trace = out / "trace.json"
    prof.export_chrome_trace(str(trace))
    with open(trace, "rb") as src, gzip.open(out / "trace.json.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    trace.unlink()
    key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    (out / "profile.txt").write_text(prof.key_averages().table(sort_by=key, row_limit=40) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
