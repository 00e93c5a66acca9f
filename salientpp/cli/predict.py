"""``salientpp predict PART_DIR --checkpoint CKPT --out DIR``: every node's model outputs."""
from __future__ import annotations

import argparse
import inspect

from ..io import mark_complete
from ..train.predict import predict


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "predict", help="write every node's outputs of a trained model (original node ids)",
        description="Load a checkpoint of `salientpp train` and write every node's outputs (logits) and predictions "
                    "as .npy in the original node ids: layer-wise full-neighbour inference for the built-in models, "
                    "minibatches over every neighbour for a user's model. One rank per partition.")
    p.add_argument("part_dir", metavar="PART_DIR", help="the partitioned directory the model was trained on")
    p.add_argument("--checkpoint", required=True, metavar="CKPT",
                   help="a --checkpoint-dir of salientpp train (its last.pt) or a last.pt/best.pt file")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory to create (must not exist)")
    default = inspect.signature(predict).parameters["batch_size"].default
    p.add_argument("--batch-size", type=int, default=default,
                   help=f"destinations (or seeds) per chunk (default {default})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = predict(args.part_dir, args.checkpoint, args.out, args.batch_size)
    mark_complete(args, out)
    print(f"wrote {out}: outputs.npy and predicted.npy in the original node ids")
    return 0
