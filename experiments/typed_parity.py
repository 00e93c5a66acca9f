"""R-SAGE against PyG's ``to_hetero(SAGE)`` on real and synthetic typed graphs (issue #64, item 5).

The models (``--models``) train in salientpp's trainer on the same batches (one rank, the same
fanouts, batch size, hidden width, epochs, optimiser and seeds), so that only the model differs:

* ``rsage``: the built-in R-SAGE as ``train`` builds it by default;
* ``rsage-relation``: with a root weight and bias per relation (``--typed-root relation``);
* ``rsage-raw``: its first layer over the input rows as they come (``--typed-input raw``);
* ``rsage-unit-rows``: the default R-SAGE whose learned rows act as ``nn.Embedding``'s N(0, 1)
  rows would, not the trainer's N(0, 1/D) (:func:`unit_rows_rsage`; measured here only);
* ``pyg``: PyG's ``to_hetero`` of a homogeneous two-layer ``SAGEConv((-1, -1), hidden)`` model
  with a linear head (``aggr="sum"``), a user's model called with the batch's ``x_dict`` and
  ``edge_index_dict``: the structure of ``rsage`` with both options (one function, other weights).

A type without features gets learned rows from the trainer's embedding (``--embedding-dim``) in
every model. The score is the test metric at the best validation epoch, over ``--seeds``.

Graphs (``--graphs``, comma-separated):

* ``acm``, ``dblp``: HeCo's ACM and DBLP (Wang et al., KDD 2021; github.com/liun-online/HeCo,
  ``data/acm``, ``data/dblp``) with its split of 20 labelled nodes per class (``train_20``,
  ``val_20``, ``test_20``): ACM's papers (features; the target), authors (features) and subjects
  (no features); DBLP's authors (features; the target), papers and terms (features) and
  conferences (no features). ``--heco DIR`` is the directory holding ``acm/`` and ``dblp/``.
* ``cora-words``: Cora's papers (the target, with their bag-of-words features) and one node per
  vocabulary word (no features), with ``cites`` and paper ``has`` word relations.
* ``igbh``: the synthetic IGBH-shaped preset (``--igbh-spec``): papers (the target), authors,
  institutes and fields of study, every type with features (``author_features=0`` in the spec
  takes the authors' away).

``--embedding-dim`` applies to a graph with a type without features (a built-in typed model
refuses learned rows beside features).

    PYTHONPATH=. python experiments/typed_parity.py --heco /tmp/heco --out /tmp/parity \\
        --models rsage,rsage-relation,rsage-raw,rsage-unit-rows,pyg \\
        --json experiments/results/typed-parity/parity.json
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

from salientpp.data import from_pyg
from salientpp.data.format import save_dataset
from salientpp.errors import InputError
from salientpp.models.gnn import build_model
from salientpp.partition import load_partitioned
from salientpp.partition.partitioner import partition_dataset
from salientpp.train import TrainConfig, train
from salientpp.train.setup import model_input_of

# Where the PyG model's factory finds the graph it is built for (the factory gets widths only).
PART_ENV = "TYPED_PARITY_PART"
EMBEDDING_ENV = "TYPED_PARITY_EMBEDDING_DIM"
DROPOUT_ENV = "TYPED_PARITY_DROPOUT"


def _sparse_rows(path: Path) -> np.ndarray:
    """A HeCo feature file (a scipy sparse matrix, or a dense array under an ``.npz`` name) as float32 rows."""
    import scipy.sparse as sp

    try:
        return np.asarray(sp.load_npz(path).todense(), dtype=np.float32)
    except (TypeError, ValueError):
        return np.asarray(np.load(path), dtype=np.float32)


def _edges(path: Path) -> torch.Tensor:
    return torch.from_numpy(np.loadtxt(path, dtype=np.int64).T.copy())


def heco_graph(name: str, root: Path):
    """HeCo's ``name`` (``acm`` or ``dblp``) as a ``HeteroData`` and its target type, with the
    20-per-class split."""
    from torch_geometric.data import HeteroData

    d = root / name
    h = HeteroData()
    if name == "acm":
        target = "paper"
        h["paper"].x = torch.from_numpy(_sparse_rows(d / "p_feat.npz"))
        h["author"].x = torch.from_numpy(_sparse_rows(d / "a_feat.npz"))
        pa, ps = _edges(d / "pa.txt"), _edges(d / "ps.txt")
        h["subject"].num_nodes = int(ps[1].max()) + 1
        h["paper", "written_by", "author"].edge_index = pa
        h["paper", "about", "subject"].edge_index = ps
    elif name == "dblp":
        target = "author"
        h["author"].x = torch.from_numpy(_sparse_rows(d / "a_feat.npz"))
        h["paper"].x = torch.from_numpy(_sparse_rows(d / "p_feat.npz"))
        h["term"].x = torch.from_numpy(_sparse_rows(d / "t_feat.npz"))
        pa, pc, pt = _edges(d / "pa.txt"), _edges(d / "pc.txt"), _edges(d / "pt.txt")
        h["conference"].num_nodes = int(pc[1].max()) + 1
        h["paper", "written_by", "author"].edge_index = pa
        h["paper", "at", "conference"].edge_index = pc
        h["paper", "has", "term"].edge_index = pt
    else:
        raise InputError(f"unknown HeCo graph {name!r}; use acm or dblp")
    h[target].y = torch.from_numpy(np.load(d / "labels.npy").astype(np.int64))
    splits = {split: torch.from_numpy(np.load(d / f"{split}_20.npy")) for split in ("train", "val", "test")}
    return h, target, splits


def cora_words_graph(path: Path):
    """Cora's papers and its vocabulary's words (no features) as a ``HeteroData``, with Cora's split."""
    from torch_geometric.data import HeteroData

    raw = np.load(path)
    x = raw["x"].astype(np.float32)
    h = HeteroData()
    h["paper"].x = torch.from_numpy(x)
    h["paper"].y = torch.from_numpy(raw["y"].astype(np.int64))
    h["word"].num_nodes = x.shape[1]
    h["paper", "cites", "paper"].edge_index = torch.from_numpy(raw["edge_index"].astype(np.int64))
    paper, word = np.nonzero(x)
    h["paper", "has", "word"].edge_index = torch.from_numpy(np.stack([paper, word]).astype(np.int64))
    splits = {split: torch.from_numpy(raw[f"{split}_idx"].astype(np.int64)) for split in ("train", "val", "test")}
    return h, "paper", splits


def prepare(graph: str, args, out: Path) -> Path:
    """The one-part partitioning of ``graph`` under ``out`` (made once)."""
    part = out / graph / "p1"
    if part.exists():
        return part
    if graph == "igbh":
        from salientpp.data.synthetic import synthetic_dataset

        dataset = synthetic_dataset(args.igbh_spec)
    else:
        h, target, splits = (cora_words_graph(Path(args.cora)) if graph == "cora-words"
                             else heco_graph(graph, Path(args.heco)))
        dataset = from_pyg(h, target=target, train=splits["train"], valid=splits["val"], test=splits["test"],
                           source=f"typed_parity:{graph}")
    (out / graph).mkdir(parents=True, exist_ok=True)
    save_dataset(dataset, out / graph / "data")
    partition_dataset(dataset, part, 1)
    return part


def to_hetero_sage(in_dim: int, hidden: int, out_dim: int, num_layers: int) -> nn.Module:
    """PyG's ``to_hetero`` of SAGE for the graph at ``$TYPED_PARITY_PART`` (``aggr="sum"``): its
    lazy weights are made by one forward over one row of every type, so the trainer's optimiser
    sees them."""
    from torch_geometric.nn import SAGEConv, to_hetero

    data = load_partitioned(os.environ[PART_ENV], verify=False, check=False)
    schema = data.schema
    embedding_dim = int(os.environ.get(EMBEDDING_ENV, "0"))

    class SAGE(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList(SAGEConv((-1, -1), hidden) for _ in range(num_layers))
            self.head = nn.Linear(hidden, out_dim)
            self.dropout = nn.Dropout(float(os.environ.get(DROPOUT_ENV, "0.5")))

        def forward(self, x, edge_index):
            for i, conv in enumerate(self.convs):
                x = conv(x, edge_index)
                if i < len(self.convs) - 1:
                    x = self.dropout(torch.nn.functional.leaky_relu(x))
            return self.head(x)

    metadata = (list(schema.node_types), [r.key for r in schema.relations])
    model = to_hetero(SAGE(), metadata, aggr="sum")
    widths = [data.feature_width(t) or embedding_dim for t in range(schema.num_types)]
    x_dict = {name: torch.zeros(1, w) for name, w in zip(schema.node_types, widths)}
    edges = {r.key: torch.zeros((2, 0), dtype=torch.int64) for r in schema.relations}
    with torch.no_grad():
        model(x_dict, edges)
    target = schema.target

    class Target(nn.Module):  # the target type's rows: the trainer takes its seeds' first rows
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x_dict, edge_index_dict):
            return self.model(x_dict, edge_index_dict)[target]

    return Target()


def unit_rows_rsage(in_dim: int, hidden: int, out_dim: int, num_layers: int) -> nn.Module:
    """The built-in R-SAGE (the same weights as ``rsage`` of the same seed) for the graph at
    ``$TYPED_PARITY_PART``, whose featureless types' learned rows act as ``nn.Embedding``'s N(0, 1)
    rows would: the trainer's N(0, 1/D) rows times sqrt(D), learned at the embedding's rate over
    sqrt(D) (:func:`run` sets it), so that Adam, blind to the gradient's scale, moves the rows the
    model reads by the embedding's rate, as it moves an N(0, 1) table's."""
    data = load_partitioned(os.environ[PART_ENV], verify=False, check=False)
    typed = model_input_of(data, int(os.environ[EMBEDDING_ENV]), True)
    scale = math.sqrt(typed.embedding_dim)
    model = build_model("rsage", in_dim, hidden, out_dim, num_layers, float(os.environ[DROPOUT_ENV]), inputs=typed)

    class UnitRows(nn.Module):
        salientpp_input = model.salientpp_input

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x_dict, mfgs, node_type, n_id):
            x_dict = {t: x * scale if t in typed.featureless else x for t, x in x_dict.items()}
            return self.model(x_dict, mfgs, node_type, n_id)

    return UnitRows()


# Each model of --models: its --model and the options it adds to the run's (see the module docstring).
UNIT_ROWS = "rsage-unit-rows"
MODELS = {"rsage": {"model": "rsage"},
          "rsage-relation": {"model": "rsage", "typed_root": "relation"},
          "rsage-raw": {"model": "rsage", "typed_input": "raw"},
          UNIT_ROWS: {"model": "experiments.typed_parity:unit_rows_rsage"},
          "pyg": {"model": "experiments.typed_parity:to_hetero_sage"}}


def run(part: Path, model: str, seed: int, args) -> dict:
    data = load_partitioned(part, verify=False, check=False)
    featureless = any(not data.feature_width(t) for t in range(data.schema.num_types))
    embedding_dim = args.embedding_dim if featureless else 0
    os.environ[PART_ENV], os.environ[EMBEDDING_ENV] = str(part), str(embedding_dim)
    os.environ[DROPOUT_ENV] = str(args.dropout)
    fanouts = tuple(args.fanouts)
    if model not in MODELS:
        raise InputError(f"unknown model {model!r}; choose from {', '.join(MODELS)}")
    options = dict(MODELS[model])
    if model == UNIT_ROWS:
        if not embedding_dim:
            raise InputError(f"{UNIT_ROWS} changes the learned rows of the types without features, and every type "
                             f"of {part} has features; drop it from --models for this graph")
        options["embedding_lr"] = TrainConfig.embedding_lr / math.sqrt(embedding_dim)
    result = train(TrainConfig(str(part), hidden=args.hidden, layers=len(fanouts), fanouts=fanouts,
                               eval_fanouts=fanouts, batch_size=args.batch_size, epochs=args.epochs, lr=args.lr,
                               dropout=args.dropout, seed=seed, metric=args.metric, embedding_dim=embedding_dim,
                               progress=False, **options))
    return {"seed": seed, "test": result.test_at_best, "valid": result.best_valid, "best_epoch": result.best_epoch}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--heco", default="/tmp/heco", help="directory holding HeCo's acm/ and dblp/")
    p.add_argument("--cora", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets" / "cora.npz"))
    p.add_argument("--igbh-spec", default="igbh,num_nodes=6000,train_fraction=0.5,valid_fraction=0.1,test_fraction=0.4")
    p.add_argument("--graphs", default="acm,dblp,cora-words,igbh")
    p.add_argument("--models", default="rsage,pyg", help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--fanouts", default="10,10")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--embedding-dim", type=int, default=64)
    p.add_argument("--metric", default="accuracy")
    p.add_argument("--json")
    args = p.parse_args(argv)
    args.fanouts = [int(f) for f in args.fanouts.split(",")]
    out = Path(args.out)
    rows = []
    try:
        for graph in args.graphs.split(","):
            part = prepare(graph, args, out)
            for model in args.models.split(","):
                runs = []
                for seed in args.seeds.split(","):
                    runs.append(run(part, model, int(seed), args))
                    print(f"{graph} {model} seed {seed}: {runs[-1]['test']:.4f}", flush=True)
                tests = [r["test"] for r in runs]
                rows.append({"graph": graph, "model": model, "mean": statistics.mean(tests),
                             "std": statistics.stdev(tests) if len(tests) > 1 else 0.0, "runs": runs})
                print(f"{graph} {model}: {rows[-1]['mean']:.4f} ± {rows[-1]['std']:.4f}", flush=True)
                _write(args, rows)  # each model's as it ends: a stopped run keeps what it measured
    except InputError as exc:
        print(f"typed_parity: {exc}", file=sys.stderr)
        return 2
    print(f"\nfanouts {args.fanouts}, hidden {args.hidden}, batch {args.batch_size}, {args.epochs} epochs, "
          f"lr {args.lr}, dropout {args.dropout}, embedding {args.embedding_dim}, metric {args.metric}")
    print(f"| graph | model | test {args.metric} at best valid (mean ± std) |")
    print("|---|---|---:|")
    for row in rows:
        print(f"| {row['graph']} | {row['model']} | {row['mean']:.4f} ± {row['std']:.4f} |")
    return 0


def _write(args, rows: list[dict]) -> None:
    """The rows so far, with the run's options, to ``--json`` (if given)."""
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"options": {k: v for k, v in vars(args).items() if k != "json"},
                                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
