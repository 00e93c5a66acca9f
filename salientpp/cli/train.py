"""``salientpp train PART_DIR``: distributed training with the tiered feature cache."""
from __future__ import annotations

import argparse
import os
import sys

from ..distributed.group import is_first_rank
from ..distributed.health import StageError
from ..train import TrainResult, train
from ..train.checkpoint import describe_position
from ..train.config import add_options, config_from_args
from ..train.state import VALID_METRIC
from . import error_line


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "train", help="train a GNN on a partitioned dataset, one rank per partition",
        description="Train SAGE, GAT, GIN or GCN with DDP on a partitioned dataset: one rank per partition, remote "
                    "feature rows from a VIP cache or fetched with all-to-all, batches pipelined. Alone it "
                    "starts one local rank per partition; under torchrun it joins torchrun's job.")
    add_options(p)  # one option per TrainConfig field, from its schema
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        result = train(config_from_args(args))
    except StageError as exc:  # this process is one rank of a torchrun job
        print(error_line("salientpp train", str(exc)), file=sys.stderr)
        # Leave at once: a peer is gone, so threads of the process group and the loader may still
        # be blocked on it, and the interpreter's teardown can abort on them ("terminate called
        # without an active exception", exit -6, seen in CI) instead of exiting 1.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    if not is_first_rank():  # one summary per job under torchrun
        return 0
    if result.resumed_from is not None:
        print(f"resumed from the checkpoint at {describe_position(*result.resumed_from)}")
    if result.restarts:
        print(f"restarted {result.restarts} time{'' if result.restarts == 1 else 's'} after a rank failed")
    print(summary(result))
    return 0


def summary(result: TrainResult) -> str:
    """The closing line of a run: epochs, and the metrics where the run evaluated."""
    line = f"trained {result.epochs_done} epoch{'' if result.epochs_done == 1 else 's'}"
    if result.best_epoch < 0:
        evaluated = any(VALID_METRIC in h for h in result.history)
        why = (f"it was not a number in any epoch (e.g. {result.metric} of a split with one class)" if evaluated
               else "no epoch evaluated a validation split (--eval-every 0, or the split is empty)")
        return f"{line} (no best validation {result.metric or 'metric'}: {why})"
    return (f"{line}: best valid {result.metric} {result.best_valid:.4f} (epoch {result.best_epoch}), "
            f"test at best valid {result.test_at_best:.4f}, final test {result.final_test:.4f}")
