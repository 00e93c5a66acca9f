"""The files of salientpp that one batch of the default run passes through are those that
docs/architecture.md lists under "One batch": the test reads the list from the page, so the page
is the one place to update when the path changes."""
from __future__ import annotations

import re
import shutil
import sys
import threading
from pathlib import Path

import salientpp
from salientpp.distributed import init_distributed, launch
from salientpp.train import TrainConfig

from trainers import rank_trainer

ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
BATCH_SECTION = "## One batch"
PACKAGE = Path(salientpp.__file__).parent  # the files are named relative to its parent, salientpp/...
STEADY_FROM = 2  # the intervals before (start-up, the first batch, the first model step) are warm-up
BATCH_SIZE = 16  # the default's 1024 would give tiny one step per epoch; a steady step needs a few


def documented_batch_files() -> set[str]:
    """The files in the first column of the table under "## One batch" of docs/architecture.md."""
    text = ARCHITECTURE.read_text()
    assert f"\n{BATCH_SECTION}\n" in text, f"docs/architecture.md has no section {BATCH_SECTION!r}"
    section = text.split(f"\n{BATCH_SECTION}\n", 1)[1].split("\n## ", 1)[0]
    files = re.findall(r"^\|\s*\d+\s*\|\s*`(salientpp/[\w/]+\.py)`", section, re.MULTILINE)
    assert len(files) == len(set(files)), f"a file is listed twice: {files}"
    return set(files)


def _files_of_each_step(part_dir: str) -> list[set[str]]:
    """In a rank: one epoch of the default built-in trainer (but for the batch size), profiled on
    every thread it starts (the sampler's and the fetch thread's run Python too). Element ``i``
    is the set of salientpp files whose Python code ran from the model step of batch ``i - 1``
    to that of batch ``i`` (element 0: from the epoch's start to the first model step; the last:
    from the last model step to the epoch's end), as ``salientpp/...py`` paths."""
    steps: list[set[str]] = [set()]
    prefix, start = str(PACKAGE) + "/", len(str(PACKAGE.parent)) + 1

    def record(frame, event, arg):
        path = frame.f_code.co_filename
        if path.startswith(prefix):
            steps[-1].add(path[start:])

    threading.setprofile(record)  # from here: every thread the rank starts, the loader's included
    try:
        ctx = init_distributed("cpu", timeout_s=120)
        trainer = rank_trainer(TrainConfig(part_dir, batch_size=BATCH_SIZE, progress=False), ctx)
        forward = trainer.forward

        def step_then_forward(batch):  # each model step starts the next interval
            steps.append(set())
            return forward(batch)

        trainer.forward = step_then_forward
        sys.setprofile(record)
        try:
            trainer.train_epoch(0)
        finally:
            sys.setprofile(None)
    finally:
        threading.setprofile(None)
    trainer.finish()
    salientpp.shutdown_distributed(ctx)
    return steps


def test_one_steady_batch_of_the_default_run_passes_through_the_files_the_architecture_page_lists(
        tiny_partitions, tmp_path):
    part_dir = tmp_path / "p2"  # the default run writes its cache plan into the partitioned directory
    shutil.copytree(tiny_partitions[0] / "p2", part_dir)
    documented = documented_batch_files()
    for rank, steps in enumerate(launch(_files_of_each_step, (str(part_dir),), nprocs=2)):
        steady = steps[STEADY_FROM:-1]
        assert len(steady) >= 2, f"rank {rank} ran {len(steps) - 1} steps, too few to reach a steady one"
        every_batch = set.intersection(*steady)  # files some batch skips are not the batch's path
        assert every_batch == documented, (
            f"rank {rank}: one batch runs {sorted(every_batch)}; update the table under {BATCH_SECTION!r} in "
            f"docs/architecture.md: add {sorted(every_batch - documented)}, remove {sorted(documented - every_batch)}")
