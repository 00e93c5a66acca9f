"""Layer-wise inference of the built-in typed models (R-SAGE, R-GCN, R-GAT) equals their outputs
on sampled batches of every neighbour (fanout -1 at every layer), on one rank and on two, with
every type's features or with a featureless type's learned embedding rows."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from salientpp.data.synthetic import synthetic_dataset
from salientpp.distributed import CommStats, init_distributed, launch, shutdown_distributed
from salientpp.errors import InputError
from salientpp.loader.dist_loader import DistNeighborLoader
from salientpp.models.gnn import SeedForward
from salientpp.models.typed import TYPED_MODELS
from salientpp.partition import load_partitioned
from salientpp.partition.partitioner import partition_dataset
from salientpp.train import TrainConfig
from salientpp.train.layerwise import LayerwiseInference
from trainers import rank_trainer

SMALL = dict(hidden=16, layers=2, fanouts=(4, 4), batch_size=32, eval_batch_size=61, policy="none", progress=False)
TOLERANCE = 1e-4  # float32 sums over the same neighbours in another order


# The same graph with every type's features, and with authors' rows learned (an 8-wide embedding).
FEATURED, FEATURELESS = "igbh,num_nodes=300,max_degree=100", "igbh,num_nodes=300,max_degree=100,author_features=0"
INPUT_OPTIONS = {FEATURED: {}, FEATURELESS: dict(embedding_dim=8)}


@pytest.fixture(scope="module", params=[FEATURED, FEATURELESS], ids=["features", "learned-authors"])
def igbh_parts(tmp_path_factory, request):
    """A small IGBH-shaped graph (papers, authors, institutes, fields; the authors with features or
    without) partitioned into 1 and 2 parts: ``root / "p1"``, ``root / "p2"``."""
    root = tmp_path_factory.mktemp("typed-layerwise")
    for k in (1, 2):
        partition_dataset(synthetic_dataset(request.param), root / f"p{k}", k)
    return Parts(root, request.param)


@dataclass(frozen=True)
class Parts:
    """A graph's partitionings under ``root`` and its synthetic spec (:data:`FEATURED`, :data:`FEATURELESS`)."""

    root: Path
    spec: str

    def config(self, part: str, **options) -> TrainConfig:
        """The run's options on partitioning ``part``: :data:`SMALL` and the graph's input options."""
        return TrainConfig(str(self.root / part), **SMALL, **INPUT_OPTIONS[self.spec], **options)


def _outputs(parts: Parts, part: str, models: tuple[str, ...], layerwise: bool) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One rank: for each model, ``(original ids [n], outputs [n, C])`` of the rank's target nodes of
    partitioning ``part``, by layer-wise inference or by sampled batches of every neighbour (the
    input rows of both: the features and the trainer's embedding, untrained)."""
    ctx = init_distributed("cpu", timeout_s=60)
    try:
        results = {}
        for model in models:
            trainer = rank_trainer(parts.config(part, model=model), ctx)
            graph = trainer.graph
            owned = np.arange(graph.num_owned, dtype=np.int64)
            if layerwise:
                stats = CommStats()
                out, ids = trainer.evaluator.layerwise_logits(owned, stats), owned + graph.seed_start
                if ctx.distributed:
                    assert stats.received > 0  # halo rows crossed ranks
            else:
                trainer.model.eval()
                forward = SeedForward.of(trainer.model, trainer.embedding, typed=True)
                loader = DistNeighborLoader(graph, owned + graph.seed_start, [-1] * SMALL["layers"], 64, shuffle=False)
                with torch.no_grad():
                    batches = [(forward(batch), batch.n_id[:batch.batch_size]) for batch in loader]
                out, ids = torch.cat([o for o, _ in batches]), torch.cat([i for _, i in batches]).numpy()
            results[model] = (graph.original_ids(ids), out.numpy())
        return results
    finally:
        shutdown_distributed(ctx)


def _by_original_id(ids: np.ndarray, rows: np.ndarray) -> dict[int, np.ndarray]:
    return dict(zip(ids.tolist(), rows))


@pytest.fixture(scope="module")
def sampled_all(igbh_parts):
    """Every typed model's sampled-all outputs on one rank, by original id."""
    return {model: _by_original_id(*result)
            for model, result in _outputs(igbh_parts, "p1", TYPED_MODELS, layerwise=False).items()}


def _assert_equal(got: tuple[np.ndarray, np.ndarray], want: dict[int, np.ndarray]) -> None:
    ids, rows = got
    assert sorted(ids.tolist()) == sorted(want)  # every target node, once
    expected = np.stack([want[i] for i in ids.tolist()])
    assert np.abs(rows).max() > 1e-3  # outputs that could differ
    assert np.abs(rows - expected).max() <= TOLERANCE


@pytest.mark.parametrize("model", TYPED_MODELS)
def test_one_rank_layerwise_equals_the_sampled_batches_of_every_neighbour(igbh_parts, sampled_all, model):
    got = _outputs(igbh_parts, "p1", (model,), layerwise=True)[model]
    _assert_equal(got, sampled_all[model])


def test_two_ranks_layerwise_equals_one_rank_sampled_batches_of_every_neighbour(igbh_parts, sampled_all):
    # the weights depend only on the seed and the schema's widths, the embedding's rows on the seed and
    # the original ids: the same model on either partitioning
    results = launch(_outputs, (igbh_parts, "p2", TYPED_MODELS, True), nprocs=2)
    for model in TYPED_MODELS:
        ids = np.concatenate([r[model][0] for r in results])
        rows = np.concatenate([r[model][1] for r in results])
        assert all(r[model][0].shape[0] > 0 for r in results)  # both ranks own target nodes
        _assert_equal((ids, rows), sampled_all[model])


def test_layerwise_evaluation_of_a_typed_model_validates_and_scores(igbh_parts):
    config = igbh_parts.config("p1", model="rgcn", inference="layerwise", epochs=1, lr=0.01)
    trainer = rank_trainer(config, init_distributed("cpu"))
    metrics = trainer.evaluate(0)
    assert 0.0 <= metrics["valid_metric"] <= 1.0 and 0.0 <= metrics["test_metric"] <= 1.0


def test_layerwise_inference_refuses_a_type_without_features_or_learned_rows(tmp_path):
    partition_dataset(synthetic_dataset(FEATURELESS), tmp_path / "p1", 1)
    with pytest.raises(InputError, match="the node type author has neither; give it a learned embedding"):
        LayerwiseInference(init_distributed("cpu"), load_partitioned(tmp_path / "p1"), 64)


def test_predict_of_a_typed_model_is_layerwise_and_scores_as_the_evaluation(igbh_parts, tmp_path, monkeypatch):
    from salientpp.train import predict as predict_module, train

    ckpt = tmp_path / "ckpt"
    result = train(igbh_parts.config("p1", model="rsage", inference="layerwise", epochs=1, lr=0.01,
                                     checkpoint_dir=str(ckpt)))

    def no_sampling(*args, **kwargs):
        raise AssertionError("predict sampled batches instead of running layer by layer")
    monkeypatch.setattr(predict_module, "DistNeighborLoader", no_sampling)
    predict_module.predict(str(igbh_parts.root / "p1"), ckpt, tmp_path / "pred")
    predicted = np.load(tmp_path / "pred" / "predicted.npy")
    dataset = synthetic_dataset(igbh_parts.spec)
    start, _ = dataset.schema.target_range
    test = np.asarray(dataset.test_idx) - start
    assert predicted.shape == (dataset.y.shape[0],)
    accuracy = float((predicted[test] == np.asarray(dataset.y)[test]).mean())
    assert accuracy == pytest.approx(result.final_test, abs=1e-12)
