"""``salientpp train PART_DIR``: distributed training with the tiered feature cache."""
from __future__ import annotations

import argparse
import os
import sys

from ..embedding.optim import SPARSE_OPTIMIZERS
from ..sampling import SAMPLERS
from ..cache import parse_fanouts
from ..distributed import WorkerError
from ..distributed.health import StageError
from ..distributed.threads import CORES_PER_SAMPLER
from ..sampling.link import NegativeSampling
from ..train.link import DECODERS, LINK_METRICS, TASKS
from ..train.tasks import METRICS
from ..resources import parse_memory_limit
from ..train import TrainConfig, TrainResult, train
from ..fullgraph import Dependencies
from ..train.config import MODES, PLAN_DECIDES, PRECISIONS, plan_conflict


def _default(name: str) -> str:
    """The default of ``TrainConfig.name`` as the help shows it (the dataclass is its one source)."""
    value = TrainConfig.__dataclass_fields__[name].default
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def register(subparsers: argparse._SubParsersAction) -> None:
    # Options left out stay out of the namespace, so TrainConfig's own defaults apply and --plan
    # can tell the cache options that were given from those that were not.
    p = subparsers.add_parser(
        "train", help="train a GNN on a partitioned dataset, one rank per partition",
        argument_default=argparse.SUPPRESS,
        description="Train SAGE, GAT, GIN or GCN with DDP on a partitioned dataset: one rank per partition, remote "
                    "feature rows from a VIP cache or fetched with all-to-all, batches pipelined. Alone it "
                    "starts one local rank per partition; under torchrun it joins torchrun's job.")
    p.add_argument("part_dir", metavar="PART_DIR", help="a partitioned directory (salientpp partition)")
    p.add_argument("--epochs", type=int, help=f"total epochs (default {_default('epochs')})")
    p.add_argument("--mode", choices=MODES,
                   help="sampled minibatches, or one exact step per epoch over the whole graph (no sampling, "
                        f"batches, cache or pipeline; layer-wise evaluation; default {_default('mode')})")
    p.add_argument("--dependencies", choices=[d.value for d in Dependencies],
                   help="--mode full-graph: recompute remote vertices' hidden rows (cache), exchange them every "
                        "layer (communicate), or choose per vertex or level by a cost model calibrated on this "
                        "machine, timing the plans it predicts close to the fastest once at start-up "
                        f"(default {_default('dependencies')})")
    p.add_argument("--model", metavar="sage|gat|gin|gcn|PKG.MODULE:FUNCTION",
                   help=f"a built-in model or a factory FUNCTION(in_dim, hidden, out_dim, num_layers) -> "
                        f"torch.nn.Module (default {_default('model')})")
    p.add_argument("--metric", choices=tuple(dict.fromkeys(METRICS + LINK_METRICS)),
                   help="validation/test metric (default: accuracy for class labels, roc-auc for multi-label and "
                        "for --task link)")
    p.add_argument("--task", choices=TASKS,
                   help=f"node classification, or link prediction over the held-out edges of `salientpp prepare "
                        f"--link-split` (default {_default('task')})")
    p.add_argument("--num-negatives", type=int,
                   help=f"--task link: negatives per training edge (default {_default('num_negatives')})")
    p.add_argument("--negative-sampling", choices=[m.value for m in NegativeSampling],
                   help="--task link: uniform random node pairs, or random destinations of each edge's source "
                        f"(default {_default('negative_sampling')})")
    p.add_argument("--decoder", choices=DECODERS,
                   help=f"--task link: how a node pair is scored from its embeddings (default {_default('decoder')})")
    p.add_argument("--eval-negatives", type=int,
                   help="--task link: negatives of its source each held-out edge is ranked against (MRR, hits@K; "
                        f"default {_default('eval_negatives')})")
    p.add_argument("--hidden", type=int, help=f"hidden width (default {_default('hidden')})")
    p.add_argument("--layers", type=int, help=f"number of layers (default {_default('layers')})")
    p.add_argument("--fanouts", help=f"neighbours per hop, seeds first (default {_default('fanouts')})")
    p.add_argument("--batch-size", type=int, help=f"seeds per batch per rank (default {_default('batch_size')})")
    p.add_argument("--sampler", choices=SAMPLERS,
                   help=f"training sampler (default {_default('sampler')}); bulk: the same draws, many batches at "
                        "once; ladies: layer-wise importance sampling, --fanouts are nodes per layer (SAGE)")
    p.add_argument("--bulk-size", dest="minibatches_per_bulk", type=int, metavar="K",
                   help=f"minibatches the bulk and ladies samplers draw at once (default "
                        f"{_default('minibatches_per_bulk')})")
    p.add_argument("--lr", type=float, help=f"Adam learning rate (default {_default('lr')})")
    p.add_argument("--weight-decay", type=float,
                   help=f"Adam's L2 penalty of the model's parameters (default {_default('weight_decay')})")
    p.add_argument("--dropout", type=float, help=f"dropout between layers (default {_default('dropout')})")
    p.add_argument("--embedding-dim", type=int, metavar="D",
                   help="learn a D-wide node embedding, partitioned like the features and updated by a sparse "
                        "optimiser, and feed the model [x || emb] (default 0: none)")
    p.add_argument("--no-features", dest="features", action="store_false",
                   help="feed the model the learned embedding alone (needs --embedding-dim); no features are fetched")
    p.add_argument("--embedding-optimizer", choices=SPARSE_OPTIMIZERS,
                   help=f"the embedding's sparse optimiser (default {_default('embedding_optimizer')})")
    p.add_argument("--embedding-lr", type=float,
                   help=f"the embedding's learning rate (default {_default('embedding_lr')})")
    p.add_argument("--plan", metavar="DIR",
                   help="a cache plan directory written by `salientpp analyze` (a replication factor or byte "
                        "budgets, any --name or --out): its GPU and CPU tiers and its owned rows on the device are "
                        "used as they are, so --cache, --replication and --gpu-fraction cannot be given with it")
    p.add_argument("--cache", help="without --plan: the cache policy (vip, degree, halo, ...) or none; the plan "
                                   "`salientpp analyze` writes for it is used from PART_DIR/cache, or built there "
                                   f"(default {_default('cache')})")
    p.add_argument("--replication", type=float,
                   help=f"without --plan: alpha, each rank caches floor(alpha*N/K) remote rows "
                        f"(default {_default('replication')})")
    p.add_argument("--gpu-fraction", type=float,
                   help=f"without --plan: fraction of the owned rows kept on the device, by VIP order "
                        f"(default {_default('gpu_fraction')})")
    p.add_argument("--device", choices=("cpu", "cuda"), help=f"training device (default {_default('device')})")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="number format of the training step: bf16 runs the forward under torch.autocast with "
                        f"bfloat16 (CPUs with AVX512-BF16 or AMX, or GPUs; default {_default('precision')})")
    p.add_argument("--nprocs", type=int, help="local ranks to start (default: one per partition)")
    depth = p.add_mutually_exclusive_group()
    depth.add_argument("--pipeline-depth", type=int, help=f"batches in flight (default {_default('pipeline_depth')})")
    depth.add_argument("--no-pipeline", action="store_true", help="run the stages of each batch one after another")
    p.add_argument("--inference", choices=("sampled", "layerwise"),
                   help="validation/test inference: sampled minibatches, or exact layer-wise over all neighbours "
                        f"(default {_default('inference')})")
    p.add_argument("--eval-fanouts", help="fanouts of sampled inference (default 20 per layer)")
    p.add_argument("--eval-every", type=int,
                   help=f"evaluate every N epochs and after the last (0: never; default {_default('eval_every')})")
    p.add_argument("--checkpoint-dir", help="write last.pt and best.pt here")
    p.add_argument("--checkpoint-every", metavar="N[steps|epochs]",
                   help="checkpoint after every N steps (and at each epoch's end) or every N epochs "
                        f"(default {_default('checkpoint_every')})")
    p.add_argument("--resume", action="store_true", help="continue from last.pt in --checkpoint-dir")
    p.add_argument("--max-restarts", type=int,
                   help="when a rank fails, restart all ranks from the last checkpoint up to N times, like "
                        f"torchrun --max-restarts (default {_default('max_restarts')})")
    p.add_argument("--json", dest="json_path", metavar="FILE", help="append one JSON line per epoch")
    p.add_argument("--seed", type=int, help=f"seed of the model, dropout and loaders (default {_default('seed')})")
    p.add_argument("--threads", dest="num_threads", type=int, metavar="T",
                   help=f"C++ sampler threads per rank (default: from the thread budget, a rank's cores / "
                        f"{CORES_PER_SAMPLER}, at least 1); they run at low priority unless --threads and "
                        "--torch-threads together fit in a rank's cores")
    p.add_argument("--torch-threads", type=int, metavar="T",
                   help="torch intra-op threads per rank (default: from the thread budget, a rank's cores = the "
                        "cores of this machine / local ranks)")
    p.add_argument("--timeout", dest="timeout_s", type=float, metavar="S",
                   help=f"seconds before a stuck collective fails (default {_default('timeout_s')})")
    p.add_argument("--no-reuse-freed-memory", dest="reuse_freed_memory", action="store_false",
                   help="let each rank's host allocator return freed blocks to the system, as glibc does by default, "
                        "instead of keeping them for the next step: less resident memory between steps, but each "
                        "step faults its large tensors in again (measured up to 1.7x slower epochs on the CPU)")
    p.add_argument("--memory-limit", metavar="SIZE",
                   help="refuse to start when this machine's ranks are estimated to need more, e.g. 16GiB "
                        "(default: the available memory)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or per-epoch lines")
    p.set_defaults(func=run)


# How an option given on the command line becomes a TrainConfig field (the rest are taken as they are).
_CONVERT = {"fanouts": parse_fanouts, "eval_fanouts": parse_fanouts, "memory_limit": parse_memory_limit}


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig of the options given; those left out keep TrainConfig's defaults."""
    given = vars(args)
    if "plan" in given:
        decided = [f"--{name.replace('_', '-')}" for name in PLAN_DECIDES if name in given]
        if decided:
            raise plan_conflict(given["plan"], decided)
    fields = TrainConfig.__dataclass_fields__
    options = {name: _CONVERT.get(name, lambda v: v)(value) for name, value in given.items() if name in fields}
    if given.get("no_pipeline"):
        options["pipeline_depth"] = 1
    if given.get("quiet"):
        options["progress"] = False
    return TrainConfig(**options)


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
        # Leave at once: a peer is gone, so threads of the process group and the loader may still
        # be blocked on it, and the interpreter's teardown can abort on them ("terminate called
        # without an active exception", exit -6, seen in CI) instead of exiting 1.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
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
    return (f"{line}: best valid {result.metric} {result.best_valid:.4f} (epoch {result.best_epoch}), "
            f"test at best valid {result.test_at_best:.4f}, final test {result.final_test:.4f}")
