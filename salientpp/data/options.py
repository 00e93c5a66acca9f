"""The options of ``salientpp prepare`` that some sources use (:class:`ImportOptions`), and the
check of their counts made before any input is read (:func:`check_counts`)."""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from ..errors import InputError


def _option(default, flag: str, *schemes: str):
    """A field of :class:`ImportOptions` given by ``flag`` that only the sources of ``schemes`` read."""
    return field(default=default, metadata={"flag": flag, "schemes": schemes})


@dataclass
class ImportOptions:
    """Options of ``salientpp prepare`` that some sources use.

    Attributes:
        root: directory that holds OGB datasets (``ogb:`` only).
        features, labels, train_idx, valid_idx, test_idx: ``.npy`` files (``edgelist:`` only);
            labels are class ids ``[N]`` or multi-label targets ``[N, T]`` (see :func:`~salientpp.data.convert.as_labels`).
        num_nodes: number of nodes when the edge list does not mention the last ones.
        feature_dtype: "float32" or "float16"; features are converted to it (a ``synthetic:`` graph's are
            generated as it: :func:`~salientpp.data.synthetic.parse_spec` applies it to the spec).
        keep_self_loops: keep (v, v) edges instead of dropping them.
        seed: seeds the random split, features and labels an edge list lacks.
        num_features: width of the random features an edge list lacks.
        num_classes: the number of classes, recorded as meta.json's ``num_classes``: of the random
            labels an edge list lacks (default :data:`~salientpp.data.edgelist.RANDOM_CLASSES`), or the bound that the class
            ids a source gives must lie below (default: their largest id + 1); for ``igbh:`` it also picks
            the label file (19 or 2983 classes).
        all_types: ``ogb-lsc:mag240m`` with authors and institutions too (a typed graph).
    """

    root: str | None = _option(None, "--root", "ogb", "ogb-lsc")
    features: str | None = _option(None, "--features", "edgelist")
    labels: str | None = _option(None, "--labels", "edgelist")
    train_idx: str | None = _option(None, "--train-idx", "edgelist")
    valid_idx: str | None = _option(None, "--valid-idx", "edgelist")
    test_idx: str | None = _option(None, "--test-idx", "edgelist")
    num_nodes: int | None = _option(None, "--num-nodes", "edgelist")
    feature_dtype: str = "float32"
    keep_self_loops: bool = _option(False, "--self-loops", "npz", "edgelist", "ogb", "ogb-lsc", "igbh")
    seed: int = 0
    num_features: int = _option(128, "--num-features", "edgelist")
    num_classes: int | None = None
    all_types: bool = _option(False, "--all-types", "ogb-lsc")

    def check_applies_to(self, scheme: str) -> None:
        """Raise :class:`InputError` for an option given (not at its default) that ``scheme``'s
        sources do not read (each field's ``schemes``; a field without them applies to every source)."""
        for f in fields(self):
            schemes = f.metadata.get("schemes")
            if schemes is not None and scheme not in schemes and getattr(self, f.name) != f.default:
                raise InputError(f"{f.metadata['flag']} applies only to {' and '.join(s + ':' for s in schemes)} "
                                 f"sources, not to {scheme}:; drop it")


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
