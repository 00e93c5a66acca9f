"""``salientpp prepare SOURCE OUT_DIR``: import a graph into the dataset format."""
from __future__ import annotations

import argparse
import time

from ..data.format import MULTICLASS, Dataset, save_dataset, with_link_split
from ..data.importers import ImportOptions, load_source
from ..data.options import Source
from ..data.links import link_relation, parse_link_split
from ..data.synthetic import fits_in_memory, parse_spec, write_synthetic
from ..errors import InputError, counted, shown
from ..io import check_output_dir, check_output_location, mark_complete
from ..options import add_arguments, check_applies, declared, values_from


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prepare", help="import a graph (synthetic, npz, edge list, OGB) into a dataset directory",
        description="Import a graph into salientpp's dataset format (CSR + features + labels + split, .npy).")
    p.add_argument("source", help="synthetic:PRESET[,key=value...] | npz:PATH | edgelist:PATH | ogb:NAME | "
                                  "ogb-lsc:mag240m | igbh:PATH")
    p.add_argument("out_dir", help="dataset directory to create (must not exist)")
    add_arguments(p, declared(ImportOptions))
    p.add_argument("--link-split", metavar="TRAIN,VALID,TEST",
                   help="hold out edges for link prediction: fractions of the edges of --link-relation (summing to "
                        "at most 1); validation and test edges are removed from the graph with their reverses (see "
                        "docs/link-prediction.md)")
    p.add_argument("--link-relation", metavar="SRC__NAME__DST",
                   help="with --link-split: the relation whose edges to hold out (e.g. user__rates__movie, or its "
                        "name alone when unique); required on a typed graph, the only relation by default")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_output_location(args.out_dir, "the output directory")
    check_output_dir(args.out_dir)  # before a long import, not after it
    fractions = None if args.link_split is None else parse_link_split(args.link_split)
    if args.link_relation is not None and fractions is None:
        raise InputError("--link-relation names the relation of --link-split, which is not given; add --link-split "
                         "0.85,0.05,0.10 or drop --link-relation")
    options = ImportOptions(**values_from(args, declared(ImportOptions)))
    start = time.perf_counter()
    scheme, _, spec = args.source.partition(":")
    if scheme == "synthetic" and fractions is None and not fits_in_memory(parse_spec(spec, options)):
        check_applies(options, declared(ImportOptions), Source(scheme, in_memory=False))  # load_source's, in memory
        dataset = write_synthetic(spec, args.out_dir, options=options)
        mark_complete(args, args.out_dir)
        print("generated out of core: the graph would not fit in the available memory")
        _summary(args.out_dir, dataset, start)
        return 0
    dataset = load_source(args.source, options)
    if fractions is not None:
        relation = link_relation(dataset.schema, args.link_relation, args.source)
        if dataset.has_link_split:
            raise InputError(f"{args.source} already holds held-out edges (train_edges, valid_edges, test_edges); "
                             "drop --link-split to use them, or drop them from the archive")
        dataset = with_link_split(dataset, relation, fractions, options.seed)
    save_dataset(dataset, args.out_dir)
    mark_complete(args, args.out_dir)
    _summary(args.out_dir, dataset, start)
    if dataset.has_link_split:
        print(f"held-out edges of {dataset.link_split.relation} train/valid/test: {dataset.link_split.counts()} "
              "(valid and test are not in the graph, nor are their reverses)")
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
