"""``salientpp train PART_DIR``: distributed training with the tiered feature cache."""
from __future__ import annotations

import argparse
import os
import sys

from ..cache import parse_fanouts
from ..dist import WorkerError
from ..dist.health import StageError
from ..models import MODELS
from ..resources import parse_memory_limit
from ..train import TrainConfig, TrainResult, train


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "train", help="train a GNN on a partitioned dataset, one rank per partition",
        description="Train SAGE, GAT or GIN with DDP on a partitioned dataset: one rank per partition, remote "
                    "feature rows from a VIP cache or fetched with all-to-all, batches pipelined. Alone it "
                    "starts one local rank per partition; under torchrun it joins torchrun's job.")
    p.add_argument("part_dir", metavar="PART_DIR", help="a partitioned directory (salientpp partition)")
    p.add_argument("--epochs", type=int, default=10, help="total epochs (default 10)")
    p.add_argument("--model", choices=MODELS, default="sage", help="model (default sage)")
    p.add_argument("--hidden", type=int, default=256, help="hidden width (default 256)")
    p.add_argument("--layers", type=int, default=3, help="number of layers (default 3)")
    p.add_argument("--fanouts", default="15,10,5", help="neighbours per hop, seeds first (default 15,10,5)")
    p.add_argument("--batch-size", type=int, default=1024, help="seeds per batch per rank (default 1024)")
    p.add_argument("--lr", type=float, default=0.003, help="Adam learning rate (default 0.003)")
    p.add_argument("--dropout", type=float, default=0.5, help="dropout between layers (default 0.5)")
    p.add_argument("--cache", default="vip", help="cache policy (vip, degree, halo, ...) or none (default vip)")
    p.add_argument("--replication", type=float, default=0.1,
                   help="alpha: each rank caches floor(alpha*N/K) remote rows (default 0.1)")
    p.add_argument("--gpu-fraction", type=float, default=0.15,
                   help="fraction of the owned rows kept on the device, by VIP order (default 0.15)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="training device (default cpu)")
    p.add_argument("--nprocs", type=int, default=None, help="local ranks to start (default: one per partition)")
    depth = p.add_mutually_exclusive_group()
    depth.add_argument("--pipeline-depth", type=int, default=4, help="batches in flight (default 4)")
    depth.add_argument("--no-pipeline", action="store_true", help="run the stages of each batch one after another")
    p.add_argument("--inference", choices=("sampled", "layerwise"), default="sampled",
                   help="validation/test inference: sampled minibatches, or exact layer-wise over all neighbours "
                        "(default sampled)")
    p.add_argument("--eval-fanouts", default=None, help="fanouts of sampled inference (default 20 per layer)")
    p.add_argument("--eval-every", type=int, default=1, help="evaluate every N epochs and after the last (0: never; default 1)")
    p.add_argument("--checkpoint-dir", default=None, help="write last.pt and best.pt here")
    p.add_argument("--checkpoint-every", default="1epoch", metavar="N[steps|epochs]",
                   help="checkpoint after every N steps (and at each epoch's end) or every N epochs (default 1epoch)")
    p.add_argument("--resume", action="store_true", help="continue from last.pt in --checkpoint-dir")
    p.add_argument("--max-restarts", type=int, default=0,
                   help="when a rank fails, restart all ranks from the last checkpoint up to N times, like "
                        "torchrun --max-restarts (default 0)")
    p.add_argument("--json", dest="json_path", default=None, metavar="FILE", help="append one JSON line per epoch")
    p.add_argument("--seed", type=int, default=0, help="seed of the model, dropout and loaders (default 0)")
    p.add_argument("--threads", type=int, default=1, help="sampler threads per rank (default 1)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before a stuck collective fails (300)")
    p.add_argument("--memory-limit", default=None, metavar="SIZE",
                   help="refuse to start when this machine's ranks are estimated to need more, e.g. 16GiB "
                        "(default: the available memory)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or per-epoch lines")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig(
        part_dir=args.part_dir, epochs=args.epochs, model=args.model, hidden=args.hidden, layers=args.layers,
        fanouts=parse_fanouts(args.fanouts), batch_size=args.batch_size, lr=args.lr, dropout=args.dropout,
        cache=args.cache, replication=args.replication, gpu_fraction=args.gpu_fraction, device=args.device,
        nprocs=args.nprocs, pipeline_depth=1 if args.no_pipeline else args.pipeline_depth, inference=args.inference,
        eval_fanouts=parse_fanouts(args.eval_fanouts) if args.eval_fanouts else None, eval_every=args.eval_every,
        checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every, resume=args.resume,
        max_restarts=args.max_restarts, json_path=args.json_path, seed=args.seed,
        num_threads=args.threads, timeout_s=args.timeout, memory_limit=parse_memory_limit(args.memory_limit),
        progress=not args.quiet)


def run(args: argparse.Namespace) -> int:
    try:
        result = train(config_from_args(args))
    except WorkerError as exc:
        print(f"salientpp train: error: {exc}", file=sys.stderr)
        for rank, message in exc.others:
            print(f"  then rank {rank} failed: {message}", file=sys.stderr)
        if exc.details:
            print(exc.details, file=sys.stderr)
        return 1
    except StageError as exc:  # this process is one rank of a torchrun job
        print(f"salientpp train: error: {exc}", file=sys.stderr)
        return 1
    if int(os.environ.get("RANK", 0)) != 0:  # one summary per job under torchrun
        return 0
    if result.resumed_from is not None or result.restarts:
        epoch, step = result.resumed_from or (0, 0)
        print(f"resumed from epoch {epoch}, step {step} after {result.restarts} restart(s)")
    print(summary(result))
    return 0


def summary(result: TrainResult) -> str:
    """The closing line of a run: epochs, and the accuracies where the run evaluated."""
    line = f"trained {result.epochs_done} epoch{'' if result.epochs_done == 1 else 's'}"
    if result.best_epoch < 0:
        return line + " (no validation accuracy: evaluation was off or there are no validation nodes)"
    return (f"{line}: best valid {result.best_valid:.4f} (epoch {result.best_epoch}), "
            f"test at best valid {result.test_at_best:.4f}, final test {result.final_test:.4f}")
