"""Typed link prediction on MovieLens 100k: salientpp's R-SAGE on 2 ranks against a full-batch
PyG ``to_hetero(SAGE)`` reference and item popularity, on the same split (issue #64's bar
``typed-surface``).

    python experiments/movielens_link.py --data /tmp/ml100k [--seeds 3] [--settings base,...] [--reference-movie-rows]

The data: GroupLens's MovieLens 100k as ``ratings.csv`` (userId,itemId,rating: 100,000 ratings
of 1,682 movies by 943 users) and ``items.csv`` (itemId,title,thumbnail,genre: one genre per
movie), the copy in github.com/sahilpocker/Data-for-Vizuara, ``movielens100k/``.

The graph: 943 featureless users (``num_nodes``); 1,682 movies with 20 features, the one-hot of
the movie's genre (19 genres) and its release year parsed from the title, standardised (the
median year where the title has none); one ``("user", "rates", "movie")`` edge per rating, every
rating as in PyG's MovieLens link example (``--min-rating 4`` keeps the liked ones), and PyG's
``ToUndirected`` reverse ``("movie", "rev_rates", "user")``.
``from_pyg(h, target_edge=("user", "rates", "movie"), link_split=(0.8, 0.1, 0.1), seed=seed)``
holds out ratings and their reverses, a new split per seed. Every model is scored as in
``typed_link_reference.py``: each validation or test rating against 100 movies drawn uniformly
among those its user has not rated in any split (as ``salientpp train`` evaluates), ROC-AUC over
all scores, the test ROC-AUC at the best validation epoch.

* salientpp: the dataset partitioned in 2 and trained with ``--task link --model rsage`` and the
  options of a ``--settings`` entry (:data:`SETTINGS`: ``base`` is typed_link_reference.py's
  dot-decoder run, ``tuned`` the best with the movies' features, ``learned`` the best of the
  settings docs/link-prediction.md lists for seed 0: a learned row per user and per movie,
  ``--no-features``; :func:`command` gives the ``salientpp train`` line each one is).
* the reference and popularity: :func:`typed_link_reference.reference` (a user embedding of 32,
  a movie ``Linear(F, 32)``, two ``to_hetero`` ``SAGEConv(-1, 64)`` layers, dot decoder, full
  batch, Adam lr 0.01), with ``--reference-steps`` steps, evaluated every 10. With
  ``--reference-movie-rows`` its movies' input is ``[x || I]`` (:func:`with_movie_rows`): the
  ``Linear`` of a one-hot row is a learned row per movie beside the features, as ``learned`` has.

It prints one JSON line per seed and setting and the means, and writes them with ``--out``.
"""
from __future__ import annotations

import argparse
import csv
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from typed_link_reference import RATES, reference  # noqa: E402

from salientpp.data import from_pyg  # noqa: E402
from salientpp.options import declared  # noqa: E402
from salientpp.partition import partition_dataset  # noqa: E402
from salientpp.train import TrainConfig, train  # noqa: E402

COMMON = dict(task="link", model="rsage", layers=2, fanouts=(10, 10), eval_fanouts=(10, 10), batch_size=512,
              progress=False)
SETTINGS: dict[str, dict] = {
    # name: TrainConfig options beyond COMMON
    "base": dict(embedding_dim=32, hidden=64, lr=0.01, epochs=10, decoder="dot"),
    "tuned": dict(embedding_dim=32, hidden=64, lr=0.01, epochs=20, decoder="mlp", dropout=0.0,
                  negative_sampling="per-source"),
    "learned": dict(embedding_dim=64, features=False, hidden=64, lr=0.01, epochs=30, decoder="mlp", dropout=0.0,
                    negative_sampling="per-source", num_negatives=20, eval_fanouts=(-1, -1)),
}
FLAGS = {option.name: option for option in declared(TrainConfig)}


def movielens(data: Path, min_rating: int = 1):
    """The ``HeteroData`` of the module docstring: ``user`` (``num_nodes`` 943), ``movie``
    (``x`` float32 ``[1682, 20]``), ``RATES`` and its reverse (int64 ``[2, E]``, 0-based ids)."""
    from torch_geometric.data import HeteroData

    with open(data / "items.csv", newline="") as f:
        items = sorted(csv.DictReader(f), key=lambda row: int(row["itemId"]))
    assert [int(row["itemId"]) for row in items] == list(range(1, len(items) + 1)), "items.csv ids are not 1..N"
    genres = sorted({row["genre"] for row in items})
    x = np.zeros((len(items), len(genres) + 1), np.float32)
    x[np.arange(len(items)), [genres.index(row["genre"]) for row in items]] = 1.0
    years = np.array([float(t[-5:-1]) if t.rstrip()[-6:-5] == "(" and t[-5:-1].isdigit() else np.nan
                      for t in (row["title"].rstrip() for row in items)])
    years[np.isnan(years)] = np.nanmedian(years)
    x[:, -1] = (years - years.mean()) / years.std()
    ratings = np.loadtxt(data / "ratings.csv", delimiter=",", skiprows=1, dtype=np.int64)
    ratings = ratings[ratings[:, 2] >= min_rating]
    edges = torch.from_numpy(np.stack([ratings[:, 0] - 1, ratings[:, 1] - 1]))
    h = HeteroData()
    h["user"].num_nodes = int(ratings[:, 0].max())
    h["movie"].x = torch.from_numpy(x)
    h[RATES].edge_index = edges
    h["movie", "rev_rates", "user"].edge_index = edges.flip(0)
    return h


def with_movie_rows(h):
    """A copy of :func:`movielens`'s ``h`` whose movies' ``x`` is ``[x || I]`` (float32
    ``[1682, 20 + 1682]``): a linear layer over it adds a learned row per movie to the features'."""
    h = h.clone()
    x = h["movie"].x
    h["movie"].x = torch.cat([x, torch.eye(x.shape[0], dtype=x.dtype)], 1)
    return h


def command(options: dict, seed: int) -> str:
    """The ``salientpp train`` command line that ``train(TrainConfig(P, **options, seed=seed))`` is."""
    flags = [FLAGS[key].given(value) for key, value in options.items() if key != "progress"]
    return " ".join(["salientpp train P", *flags, f"--seed {seed}"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("/tmp/ml100k"))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--settings", default="learned", help=f"comma-separated names of {sorted(SETTINGS)}")
    parser.add_argument("--min-rating", type=int, default=1)
    parser.add_argument("--reference-steps", type=int, default=200)
    parser.add_argument("--no-reference", action="store_true", help="skip the reference and popularity")
    parser.add_argument("--reference-movie-rows", action="store_true",
                        help="give the reference a learned row per movie beside the features (with_movie_rows)")
    parser.add_argument("--out", type=Path, help="write the rows and means as JSON here")
    args = parser.parse_args()
    names = args.settings.split(",")
    h = movielens(args.data, args.min_rating)
    results = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        dataset = from_pyg(h, target_edge=RATES, link_split=(0.8, 0.1, 0.1), seed=seed)
        row: dict = {"seed": seed}
        if not args.no_reference:
            start = time.perf_counter()
            row["reference"], row["popularity"] = reference(with_movie_rows(h) if args.reference_movie_rows else h,
                                                            dataset, seed, steps=args.reference_steps, eval_every=10)
            row["reference_s"] = round(time.perf_counter() - start, 1)
        with tempfile.TemporaryDirectory() as tmp:
            partition_dataset(dataset, Path(tmp) / "p2", 2)
            for name in names:
                options = {**COMMON, **SETTINGS[name]}
                start = time.perf_counter()
                result = train(TrainConfig(str(Path(tmp) / "p2"), **options, seed=seed))
                row[name] = result.test_at_best
                row[f"{name}_epoch"], row[f"{name}_valid"] = result.best_epoch, result.best_valid
                row[f"{name}_tests"] = [round(e["test_metric"], 4) for e in result.history if "test_metric" in e]
                row[f"{name}_s"] = round(time.perf_counter() - start, 1)
        print(json.dumps(row), flush=True)
        results.append(row)
    means = {key: round(statistics.mean(r[key] for r in results), 4) for key in results[0]
             if key != "seed" and not key.endswith("_tests")}
    print("means:", means)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d", time.gmtime()), "machine": "the shared 2-core CPU VM",
            "host": platform.node(), "data": str(args.data), "min_rating": args.min_rating,
            "split": [0.8, 0.1, 0.1], "reference_steps": args.reference_steps,
            "reference_movie_rows": args.reference_movie_rows,
            "commands": {name: command({**COMMON, **SETTINGS[name]}, args.first_seed) for name in names},
            "rows": results, "means": means}, indent=1) + "\n")


if __name__ == "__main__":
    main()
