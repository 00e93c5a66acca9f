"""The options of ``salientpp prepare`` that some sources use (:class:`ImportOptions`, declared
with :mod:`salientpp.options`' schema), and the check of their counts made before any input is
read (:func:`check_counts`)."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..options import Needs, option
from ..parsing import parse_seed


@dataclass(frozen=True)
class Source:
    """What ``prepare`` imports, as far as its options' :class:`~salientpp.options.Needs` ask:
    the source's scheme (``"edgelist"``) and whether the graph is read into memory (a synthetic
    graph too large for it is generated out of core)."""

    scheme: str
    in_memory: bool = True


def _scheme(*schemes: str) -> Needs:
    """The sources of ``schemes`` (``"ogb"``, ``"ogb-lsc"``): an option only their importers read."""
    return Needs(f"{' or '.join(s + ':' for s in schemes)} sources",
                 lambda source: source.scheme in schemes)


IN_MEMORY = Needs("a graph read into memory (one generated out of core takes its number of classes from its spec)",
                  lambda source: source.in_memory,
                  instead="write num_classes=C into the spec (synthetic:PRESET,num_classes=C)")


@dataclass
class ImportOptions:
    """Options of ``salientpp prepare`` that some sources use; each field's
    :class:`~salientpp.options.Option` holds its flag, its help and the sources it applies to
    (``prepare`` refuses it elsewhere: :func:`~salientpp.options.check_applies` with a :class:`Source`).

    Attributes:
        root: directory that holds OGB datasets (``ogb:`` and ``ogb-lsc:`` only).
        features, labels, train_idx, valid_idx, test_idx: ``.npy`` files (``edgelist:`` only);
            labels are class ids ``[N]`` or multi-label targets ``[N, T]`` (see :func:`~salientpp.data.convert.as_labels`).
        num_nodes: number of nodes when the edge list does not mention the last ones.
        feature_dtype: "float32" or "float16"; features are converted to it (a ``synthetic:`` graph's are
            generated as it: :func:`~salientpp.data.synthetic.parse_spec` applies it to the spec).
        keep_self_loops: keep (v, v) edges instead of dropping them.
        seed: seeds the random split, features and labels an edge list lacks, and ``--link-split``.
        num_features: width of the random features an edge list lacks.
        num_classes: the number of classes, recorded as meta.json's ``num_classes``: of the random
            labels an edge list lacks (default :data:`~salientpp.data.edgelist.RANDOM_CLASSES`), or the bound that the class
            ids a source gives must lie below (default: their largest id + 1); for ``igbh:`` it also picks
            the label file (19 or 2983 classes).
        all_types: ``ogb-lsc:mag240m`` with authors and institutions too (a typed graph).
    """

    root: str | None = option(None, "ogb: directory that holds the OGB dataset folder", needs=_scheme("ogb", "ogb-lsc"))
    features: str | None = option(None, "edgelist: features .npy [N, F] (default: random normal)",
                                  needs=_scheme("edgelist"))
    labels: str | None = option(None, "edgelist: labels .npy: int class ids [N] (-1 = unlabelled) or multi-label "
                                "targets [N, T], float (0/1, NaN = unknown) or bool (default: random classes)",
                                needs=_scheme("edgelist"))
    train_idx: str | None = option(None, "edgelist: training ids .npy", needs=_scheme("edgelist"))
    valid_idx: str | None = option(None, "edgelist: validation ids .npy", needs=_scheme("edgelist"))
    test_idx: str | None = option(None, "edgelist: test ids .npy (default without split files: random 8/2/90)",
                                  needs=_scheme("edgelist"))
    num_nodes: int | None = option(None, "edgelist: number of nodes (default: rows of --features, else labels, else "
                                   "largest id + 1; sparse ids are compacted when no .npy file is given)", type=int,
                                   needs=_scheme("edgelist"))
    feature_dtype: str = option("float32", "the features' number format", choices=("float32", "float16"))
    keep_self_loops: bool = option(False, "keep (v, v) edges (dropped by default)", flag="--self-loops",
                                   needs=_scheme("npz", "edgelist", "ogb", "ogb-lsc", "igbh"))
    seed: int = option(0, "seed of anything generated for an edge list, and of --link-split", type=parse_seed)
    num_features: int = option(128, "edgelist: width of random features (>= 1)", type=int, needs=_scheme("edgelist"))
    num_classes: int | None = option(None, "number of classes (>= 1), recorded in meta.json: of the random labels of "
                                     "an edge list without --labels (default 2); class ids that the source gives "
                                     "must lie below it (default: largest id + 1); igbh: 19 (default) or 2983 picks "
                                     "the label file", type=int, needs=IN_MEMORY)
    all_types: bool = option(False, "ogb-lsc:mag240m: import authors and institutions too, a typed graph (only "
                             "papers have features)", needs=_scheme("ogb-lsc"))


def check_counts(options: ImportOptions) -> None:
    """Raise :class:`InputError` unless ``num_nodes`` (when given), ``num_features`` and
    ``num_classes`` are positive: checked before any input is read."""
    for flag, value in (("--num-nodes", options.num_nodes), ("--num-features", options.num_features),
                        ("--num-classes", options.num_classes)):
        if value is None or value >= 1:
            continue
        if flag == "--num-features":
            raise InputError(f"--num-features must be at least 1, got {value}: at least one feature column is needed "
                             "in a dataset; to train on a learned embedding alone, pass --num-features 1 and train "
                             "with --embedding-dim D --no-features")
        raise InputError(f"{flag} must be a positive count, got {value}; pass {flag} 1 or more")
