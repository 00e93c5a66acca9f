"""``salientpp prepare SOURCE OUT_DIR``: import a graph into the dataset format."""
from __future__ import annotations

import argparse
import time
from dataclasses import replace

from ..data.format import MULTICLASS, Dataset, save_dataset
from ..data.importers import ImportOptions, load_source
from ..data.links import parse_link_split, split_edges
from ..data.synthetic import fits_in_memory, parse_spec, write_synthetic
from ..errors import InputError, counted, shown
from ..io import check_output_dir, check_output_location, mark_complete
from ..parsing import parse_seed


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prepare", help="import a graph (synthetic, npz, edge list, OGB) into a dataset directory",
        description="Import a graph into salientpp's dataset format (CSR + features + labels + split, .npy).")
    p.add_argument("source", help="synthetic:PRESET[,key=value...] | npz:PATH | edgelist:PATH | ogb:NAME | "
                                  "ogb-lsc:mag240m | igbh:PATH")
    p.add_argument("out_dir", help="dataset directory to create (must not exist)")
    p.add_argument("--root", help="ogb: directory that holds the OGB dataset folder")
    p.add_argument("--features", help="edgelist: features .npy [N, F] (default: random normal)")
    p.add_argument("--labels", help="edgelist: labels .npy: int class ids [N] (-1 = unlabelled) or multi-label "
                                    "targets [N, T], float (0/1, NaN = unknown) or bool (default: random classes)")
    p.add_argument("--train-idx", help="edgelist: training ids .npy")
    p.add_argument("--valid-idx", help="edgelist: validation ids .npy")
    p.add_argument("--test-idx", help="edgelist: test ids .npy (default without split files: random 8/2/90)")
    p.add_argument("--num-nodes", type=int,
                   help="edgelist: number of nodes (default: rows of --features, else labels, else largest id + 1; "
                        "sparse ids are compacted when no .npy file is given)")
    p.add_argument("--num-features", type=int, default=128, help="edgelist: width of random features (>= 1)")
    p.add_argument("--num-classes", type=int,
                   help="number of classes (>= 1), recorded in meta.json: of the random labels of an edge list "
                        "without --labels (default 2); class ids that the source gives must lie below it "
                        "(default: largest id + 1); igbh: 19 (default) or 2983 picks the label file")
    p.add_argument("--all-types", action="store_true",
                   help="ogb-lsc:mag240m: import authors and institutions too, a typed graph (only papers have "
                        "features)")
    p.add_argument("--feature-dtype", choices=("float32", "float16"), default="float32")
    p.add_argument("--self-loops", action="store_true", help="keep (v, v) edges (dropped by default)")
    p.add_argument("--seed", type=parse_seed, default=0,
                   help="seed of anything generated for an edge list, and of --link-split")
    p.add_argument("--link-split", metavar="TRAIN,VALID,TEST",
                   help="hold out edges for link prediction (homogeneous graphs only): fractions of the undirected "
                        "edges (summing to at most 1); validation and test edges are removed from the graph (see "
                        "docs/data.md)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_output_location(args.out_dir, "the output directory")
    check_output_dir(args.out_dir)  # before a long import, not after it
    fractions = None if args.link_split is None else parse_link_split(args.link_split)
    options = ImportOptions(root=args.root, features=args.features, labels=args.labels, train_idx=args.train_idx,
                            valid_idx=args.valid_idx, test_idx=args.test_idx, num_nodes=args.num_nodes,
                            feature_dtype=args.feature_dtype, keep_self_loops=args.self_loops, seed=args.seed,
                            num_features=args.num_features, num_classes=args.num_classes,
                            all_types=args.all_types)
    start = time.perf_counter()
    scheme, _, spec = args.source.partition(":")
    options.check_applies_to(scheme)
    if scheme == "synthetic" and fractions is None and not fits_in_memory(parse_spec(spec, options)):
        if args.num_classes is not None:
            raise InputError(f"{args.source} is generated out of core, which takes the number of classes from the "
                             "spec only; write num_classes=C into it (synthetic:PRESET,num_classes=C)")
        dataset = write_synthetic(spec, args.out_dir, options=options)
        mark_complete(args, args.out_dir)
        print("generated out of core: the graph would not fit in the available memory")
        _summary(args.out_dir, dataset, start)
        return 0
    dataset = load_source(args.source, options)
    if fractions is not None:
        dataset.schema.require_homogeneous("--link-split", args.source, "drop --link-split (link prediction stays "
                                           "homogeneous)")
        if dataset.has_link_split:
            raise InputError(f"{args.source} already holds held-out edges (train_edges, valid_edges, test_edges); "
                             "drop --link-split to use them, or drop them from the archive")
        rowptr, col, split = split_edges(dataset.rowptr, dataset.col, fractions, args.seed)
        dataset = replace(dataset, rowptr=rowptr, col=col, link_split=split)
    save_dataset(dataset, args.out_dir)
    mark_complete(args, args.out_dir)
    _summary(args.out_dir, dataset, start)
    if dataset.has_link_split:
        print(f"held-out edges train/valid/test: {dataset.link_split.counts()} (valid and test are not in the graph)")
    if dataset.input_id is not None:
        print(f"the edge list's ids (up to {int(dataset.input_id[-1]):,}) were sparse, so they were compacted to "
              f"0..{dataset.num_nodes - 1:,} ({counted(dataset.num_nodes, 'distinct id', spec=',')}); input_id.npy "
              "holds the original id of each node")
    return 0


def _summary(out_dir: str, dataset: Dataset, start: float) -> None:
    schema = dataset.schema
    types = (f" of {counted(schema.num_types, 'type')} and {counted(schema.num_relations, 'relation')} (features, "
             f"labels and splits of the {shown(schema.target)} nodes)" if dataset.is_typed else "")
    print(f"wrote {out_dir}: {counted(dataset.num_nodes, 'node', spec=',')}, "
          f"{counted(dataset.num_edges, 'directed edge', spec=',')}{types}, "
          f"{counted(dataset.num_features, f'{dataset.x.dtype} feature')}, {_labels(dataset)}, "
          f"train/valid/test {len(dataset.train_idx):,}/{len(dataset.valid_idx):,}/{len(dataset.test_idx):,} "
          f"({time.perf_counter() - start:.1f} s)")


def _labels(dataset: Dataset) -> str:
    """``"7 classes"`` or ``"112 binary targets (multi-label, float32)"`` for the summary line."""
    if dataset.label_kind == MULTICLASS:
        return counted(dataset.num_classes, "class", "classes")
    return f"{counted(dataset.num_tasks, 'binary target')} (multi-label, {dataset.y.dtype})"
