"""Typed link prediction on a synthetic user–item rating graph: salientpp's R-SAGE on 2 ranks
against a full-batch PyG ``to_hetero(SAGE)`` reference and item popularity, on the same split.

    python experiments/typed_link_reference.py [--seeds 3] [--epochs 10]

The graph: 600 featureless users (``num_nodes``), 400 movies with 16 features (8 noisy copies
of a latent factor, 8 of noise), 25 ratings per user drawn with probability proportional to a
power-law popularity times ``exp(0.7 <z_user, z_movie>)``, and PyG's ``ToUndirected`` reverse.
``from_pyg(h, target_edge=("user", "rates", "movie"), link_split=(0.85, 0.05, 0.10))`` holds
out ratings and their reverses. Every model is scored the same way: each validation or test
rating against 100 movies drawn uniformly for its user among those it has not rated in any split,
ROC-AUC over all scores, the test ROC-AUC at the best validation epoch.

* salientpp: ``--task link --model rsage --embedding-dim 32 --hidden 64 --layers 2 --fanouts
  10,10 --batch-size 512 --lr 0.01``, dot and MLP decoders, 2 partitions.
* the reference: a user ``nn.Embedding(32)``, a movie ``Linear(16, 32)``, ``to_hetero`` of two
  ``SAGEConv(-1, 64)`` (``aggr="sum"``) over the training ratings, dot decoder, full batch, one
  random (user, movie) negative per training rating per step, 60 steps of Adam (lr 0.01).
* popularity: a movie's training ratings.

It prints one JSON line per seed and the means.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import numpy as np
import torch

from salientpp.data import from_pyg
from salientpp.partition import partition_dataset
from salientpp.sampling.link import KnownPairs
from salientpp.train import TrainConfig, train

RATES = ("user", "rates", "movie")


def rating_graph(seed: int, users: int = 600, movies: int = 400, per_user: int = 25):
    """The ``HeteroData`` of the module docstring."""
    from torch_geometric.data import HeteroData

    g = np.random.default_rng(seed)
    zu, zm = g.standard_normal((users, 8)), g.standard_normal((movies, 8))
    popularity = 1.0 / np.arange(1, movies + 1) ** 0.8
    x = np.concatenate([zm + 0.5 * g.standard_normal((movies, 8)), g.standard_normal((movies, 8))], 1)
    src, dst = [], []
    for u in range(users):
        w = popularity * np.exp(0.7 * zm @ zu[u])
        src += [u] * per_user
        dst += g.choice(movies, per_user, replace=False, p=w / w.sum()).tolist()
    h = HeteroData()
    h["user"].num_nodes = users
    h["movie"].x = torch.from_numpy(x.astype(np.float32))
    h[RATES].edge_index = torch.tensor([src, dst])
    h["movie", "rev_rates", "user"].edge_index = torch.tensor([dst, src])
    return h


def _auc(positive: np.ndarray, negative: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(np.r_[np.ones(len(positive)), np.zeros(len(negative))], np.r_[positive, negative]))


def _ranked(score, edges: torch.Tensor, movies: int, known: KnownPairs, negatives: int = 100) -> float:
    """ROC-AUC of ``score(users, movies)`` over ``edges`` and ``negatives`` random movies per edge,
    none of them a rating in ``known`` (drawn again, as salientpp's evaluation does)."""
    generator = torch.Generator().manual_seed(7)
    users = edges[0].repeat_interleave(negatives)
    drawn = torch.randint(0, movies, (users.shape[0],), generator=generator)
    known.redraw(users, drawn, lambda count: torch.randint(0, movies, (count,), generator=generator))
    return _auc(score(edges[0], edges[1]), score(users, drawn))


def reference(h, dataset, seed: int, steps: int = 60, eval_every: int = 1) -> tuple[float, float]:
    """``(test ROC-AUC at the best validation step, popularity's test ROC-AUC)``; the model is
    evaluated every ``eval_every`` steps and after the last."""
    from torch_geometric.data import HeteroData
    from torch_geometric.nn import SAGEConv, to_hetero

    torch.manual_seed(seed)
    users, movies = h["user"].num_nodes, h["movie"].x.shape[0]
    first = {t: dataset.schema.range_of(t)[0] for t in ("user", "movie")}
    train_, valid, test = (torch.from_numpy(np.stack([e[0] - first["user"], e[1] - first["movie"]]))
                           for e in (dataset.link_split.train, dataset.link_split.valid, dataset.link_split.test))
    known = KnownPairs.of(torch.cat([train_, valid, test], dim=1), movies)

    class Sage(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = SAGEConv((-1, -1), 64), SAGEConv((-1, -1), 64)

        def forward(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    data = HeteroData()
    data["user"].num_nodes, data["movie"].x = users, h["movie"].x
    data[RATES].edge_index, data["movie", "rev_rates", "user"].edge_index = train_, train_.flip(0)
    encoder = to_hetero(Sage(), data.metadata(), aggr="sum")
    embedding, project = torch.nn.Embedding(users, 32), torch.nn.Linear(data["movie"].x.shape[1], 32)

    def embed():
        return encoder({"user": embedding.weight, "movie": project(data["movie"].x)}, data.edge_index_dict)

    with torch.no_grad():
        embed()  # the lazy SAGEConv weights
    parameters = [*encoder.parameters(), *embedding.parameters(), *project.parameters()]
    optimizer = torch.optim.Adam(parameters, lr=0.01)
    generator = torch.Generator().manual_seed(seed)
    best = (-1.0, 0.0)
    for step in range(1, steps + 1):
        optimizer.zero_grad()
        z = embed()
        u = torch.randint(0, users, (train_.shape[1],), generator=generator)
        m = torch.randint(0, movies, (train_.shape[1],), generator=generator)
        scores = torch.cat([(z["user"][train_[0]] * z["movie"][train_[1]]).sum(-1), (z["user"][u] * z["movie"][m]).sum(-1)])
        labels = torch.cat([torch.ones(train_.shape[1]), torch.zeros(train_.shape[1])])
        torch.nn.functional.binary_cross_entropy_with_logits(scores, labels).backward()
        optimizer.step()
        if step % eval_every and step < steps:
            continue
        with torch.no_grad():
            z = embed()
            score = lambda a, b: (z["user"][a] * z["movie"][b]).sum(-1).numpy()  # noqa: E731
            measured = (_ranked(score, valid, movies, known), _ranked(score, test, movies, known))
        best = max(best, measured)
    degree = np.bincount(train_[1].numpy(), minlength=movies).astype(np.float64)
    popular = _ranked(lambda a, b: degree[b.numpy()], test, movies, known)
    return best[1], popular


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    results = []
    for seed in range(args.seeds):
        h = rating_graph(seed)
        dataset = from_pyg(h, target_edge=RATES, link_split=(0.85, 0.05, 0.10), seed=seed)
        ref, popular = reference(h, dataset, seed)
        row = {"seed": seed, "reference": ref, "popularity": popular}
        with tempfile.TemporaryDirectory() as tmp:
            partition_dataset(dataset, Path(tmp) / "p2", 2)
            for decoder in ("dot", "mlp"):
                row[f"salientpp_{decoder}"] = train(TrainConfig(
                    str(Path(tmp) / "p2"), task="link", model="rsage", embedding_dim=32, hidden=64, layers=2,
                    fanouts=(10, 10), batch_size=512, lr=0.01, epochs=args.epochs, eval_fanouts=(10, 10),
                    decoder=decoder, seed=seed, progress=False)).test_at_best
        print(json.dumps(row), flush=True)
        results.append(row)
    print("means:", {key: round(statistics.mean(r[key] for r in results), 4) for key in results[0] if key != "seed"})


if __name__ == "__main__":
    main()
