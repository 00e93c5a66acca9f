"""The ``igbh:PATH`` source: IGBH (the Illinois Graph Benchmark's heterogeneous graph, MLPerf
Training's R-GAT dataset) in the on-disk layout its download scripts write, one ``.npy`` per node
type and relation under ``PATH/processed`` (``PATH`` is a size's directory, e.g. ``igbh/small``)::

    paper/node_feat.npy            float32 [n_paper, 1024]
    paper/node_label_19.npy        [n_labelled] class ids (float32 or integers) of the first papers
    paper/node_label_2K.npy        the same with 2,983 classes (--num-classes 2983)
    author/node_feat.npy, institute/node_feat.npy, fos/node_feat.npy  [n_t, 1024]
    journal/node_feat.npy, conference/node_feat.npy                   large and full only
    paper__cites__paper/edge_index.npy, paper__written_by__author/edge_index.npy,
    author__affiliated_to__institute/edge_index.npy, paper__topic__fos/edge_index.npy,
    paper__published__journal/edge_index.npy, paper__venue__conference/edge_index.npy
                                   int [E, 2]: a source id and a destination id per row

The node counts are the features' rows. The large and full sizes ship their float32 features and
labels as raw arrays without a ``.npy`` header: those are mapped with IGB's own assumption (1,024
features per row, one float32 label per paper). The split is IGB's: of the labelled papers (the
first ``n_labelled``), the first 60% train, the next 20% validation, the rest test.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import InputError
from ..io import check_input_file
from .convert import typed_dataset
from .format import Dataset
from .options import ImportOptions

# The node types (the target first), the relations, and the types and relations of the venues,
# which only the large and full sizes have.
TYPES = ("paper", "author", "institute", "fos")
RELATIONS = (("paper", "cites", "paper"), ("paper", "written_by", "author"), ("author", "affiliated_to", "institute"),
             ("paper", "topic", "fos"))
VENUE_TYPES = ("journal", "conference")
VENUE_RELATIONS = (("paper", "published", "journal"), ("paper", "venue", "conference"))
# The label file of each class count (--num-classes), and the width of a headerless features file.
LABEL_FILES = {19: "node_label_19.npy", 2983: "node_label_2K.npy"}
RAW_FEATURES = 1024
# IGB's split of the labelled papers: the first 60% train, the next 20% validation, the rest test.
TRAIN_FRACTION, VALID_FRACTION = 0.6, 0.2


def _from_igbh(path: Path, options: ImportOptions) -> Dataset:
    """IGBH from the layout of the module docstring: a typed dataset whose target is ``paper``;
    every type has features. ``options.num_classes`` picks the labels (19, the default, or 2983)."""
    classes = options.num_classes or 19
    if classes not in LABEL_FILES:
        raise InputError(f"igbh: has labels of 19 or 2983 classes, not {classes}; pass --num-classes 19 or 2983")
    processed = path / "processed"
    fix = ("download an IGBH size with IGB's download script (github.com/IllinoisGraphBenchmark/IGB-Datasets) and "
           "pass its directory, the one that holds processed/")
    venues = (processed / VENUE_TYPES[0]).exists() or (processed / VENUE_TYPES[1]).exists()
    types = TYPES + (VENUE_TYPES if venues else ())
    relations = RELATIONS + (VENUE_RELATIONS if venues else ())
    features = {t: _read(processed / t / "node_feat.npy", fix, width=RAW_FEATURES) for t in types}
    labels = _read(processed / "paper" / LABEL_FILES[classes], fix, width=None)
    edges = {}
    for relation in relations:
        edge_index = _read(processed / "__".join(relation) / "edge_index.npy", fix, width=None)
        if edge_index.ndim != 2 or edge_index.shape[1] != 2:
            raise InputError(f"{processed / '__'.join(relation) / 'edge_index.npy'} must hold one edge per row, shape "
                             f"[E, 2], got {list(edge_index.shape)}; {fix}")
        edges[relation] = edge_index.T
    for t, f in features.items():
        if f.ndim != 2:
            raise InputError(f"{processed / t / 'node_feat.npy'} must hold one feature row per node, shape [n, F], "
                             f"got {list(f.shape)}; {fix}")
    num_nodes = {t: int(f.shape[0]) for t, f in features.items()}
    papers = num_nodes["paper"]
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1 or labels.shape[0] > papers:
        raise InputError(f"{processed / 'paper' / LABEL_FILES[classes]} must hold one label for each of the first "
                         f"papers (at most {papers}), got shape {list(labels.shape)}; {fix}")
    labelled = int(labels.shape[0])
    y = np.full(papers, np.nan, dtype=np.float32)  # exact for class ids below 2^24; as_labels makes NaN -1
    y[:labelled] = labels
    n_train, n_valid = int(labelled * TRAIN_FRACTION), int(labelled * VALID_FRACTION)
    ids = np.arange(labelled, dtype=np.int64)
    splits = (ids[:n_train], ids[n_train:n_train + n_valid], ids[n_train + n_valid:])
    x = features.pop("paper")
    return typed_dataset(num_nodes, edges, "paper", x, y, splits, features, options.keep_self_loops, f"igbh:{path}")


def _read(path: Path, fix: str, width: int | None) -> np.ndarray:
    """The array of the ``.npy`` file ``path``, memory-mapped; a file without a ``.npy`` header (IGB's
    large and full sizes) is mapped as raw float32 rows of ``width`` values when ``width`` is given,
    else as a 1-D float32 array. :class:`InputError` ending in ``fix`` when it is absent or unreadable."""
    check_input_file(path, "the IGBH file", fix)
    try:
        with open(path, "rb") as f:
            npy = f.read(6) == b"\x93NUMPY"
        if npy:
            return np.load(path, mmap_mode="r", allow_pickle=False)
        size = path.stat().st_size
        row = 4 * (width or 1)
        if size % row:
            raise ValueError(f"{size} bytes, not a whole number of {row}-byte rows")
        return np.memmap(path, dtype=np.float32, mode="r", shape=(size // row, width) if width else (size // row,))
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"the IGBH file {path} is not a readable array ({exc}); {fix}") from None
