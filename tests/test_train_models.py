"""The built-in trainer with a user's model factory, multi-label labels (ROC-AUC), and
`salientpp predict`, whose outputs equal the layer-wise evaluation of the same checkpoint."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from salientpp.cli import main as cli_main
from salientpp.data.format import load_dataset, save_dataset
from salientpp.data.synthetic import synthetic_dataset
from salientpp.errors import InputError
from salientpp.models import ModelInput
from salientpp.models.gnn import ExpectedOutputs, SeedForward, build_model, model_input
from salientpp.models.typed import TypedInput, TypedMFGModel
from salientpp.partition.partitioner import partition_dataset
from salientpp.sampling import MFG
from salientpp.sampling.convert import one_type
from salientpp.train import TrainConfig, train

from conftest import typed_sample

SMALL = dict(hidden=32, layers=2, fanouts=(5, 5), batch_size=64, lr=0.01, eval_fanouts=(10, 10), progress=False)

USER_MODULE = '''
import torch
from torch_geometric.nn import GraphConv

class TwoHop(torch.nn.Module):
    def __init__(self, in_dim, hidden, out_dim):
        super().__init__()
        self.conv1 = GraphConv(in_dim, hidden, aggr="mean")
        self.conv2 = GraphConv(hidden, out_dim, aggr="mean")

    def forward(self, x, edge_index):
        return self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)

def make(in_dim, hidden, out_dim, num_layers):
    return TwoHop(in_dim, hidden, out_dim)

not_a_function = 3


class Raises(torch.nn.Linear):
    def forward(self, x, edge_index):
        raise RuntimeError("boom in forward")


class Tuple(torch.nn.Linear):
    def forward(self, x, edge_index):
        return super().forward(x), 1


class NoParameters(torch.nn.Module):
    def forward(self, x, edge_index):
        return x


def raising(in_dim, hidden, out_dim, num_layers):
    return Raises(in_dim, out_dim)


def factory_raises(in_dim, hidden, out_dim, num_layers):
    raise ValueError("factory boom")


def one_argument(in_dim):
    return Raises(in_dim, 2)


def returns_tuple(in_dim, hidden, out_dim, num_layers):
    return Tuple(in_dim, out_dim)


def no_parameters(in_dim, hidden, out_dim, num_layers):
    return NoParameters()


def exits(in_dim, hidden, out_dim, num_layers):
    import sys
    sys.exit(3)


def exits_cleanly(in_dim, hidden, out_dim, num_layers):
    import sys
    sys.exit(0)
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_gnn.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # for the spawned ranks
    return "my_gnn"


def test_a_user_model_factory_with_a_pyg_forward_trains_on_two_ranks(tiny_partitions, user_module, tmp_path):
    result = train(TrainConfig(str(tiny_partitions[0] / "p2"), model=f"{user_module}:make", epochs=4,
                               json_path=str(tmp_path / "m.jsonl"), **SMALL))
    assert result.metric == "accuracy" and result.best_valid > 0.4  # 8 classes: chance is about 0.2
    lines = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert lines[-1]["train_loss"] < lines[0]["train_loss"]


@pytest.mark.parametrize("spec, expected", [
    ("my_gnn:missing", "has no function 'missing'"),
    ("my_gnn:not_a_function", "has no function 'not_a_function'"),
    ("no_such_module_xyz:make", "cannot import 'no_such_module_xyz'"),
    ("transformer", "unknown model 'transformer'"),
    (".my_gnn:make", "names a relative module; give its full name"),
    ("broken_syntax:make", r"the module 'broken_syntax' of --model broken_syntax:make is not valid Python "
                           r"\(.* at .*broken_syntax.py, line 2\)"),
    ("raises_at_import:make", "importing 'raises_at_import' for --model raises_at_import:make raised "
                              "RuntimeError: no GPU here; fix the module"),
    ("exits_at_import:make", "importing 'exits_at_import' .* raised SystemExit: 4"),
])
def test_a_bad_model_spec_is_one_sentence_before_any_rank_starts(tiny_partitions, user_module, tmp_path, spec,
                                                                 expected):
    (tmp_path / "broken_syntax.py").write_text("import torch\ndef make(:\n")
    (tmp_path / "raises_at_import.py").write_text("raise RuntimeError('no GPU here')\n")
    (tmp_path / "exits_at_import.py").write_text("import sys\nsys.exit(4)\n")
    with pytest.raises(InputError, match=expected):
        TrainConfig(str(tiny_partitions[0] / "p2"), model=spec, **SMALL).validate()


@pytest.mark.parametrize("factory, stage, cause", [
    ("raising", "the forward/backward", "RuntimeError: boom in forward"),
    ("factory_raises", "the start-up", "ValueError: factory boom"),
    ("one_argument", "the start-up", "TypeError: one_argument() takes 1 positional argument but 4 were given"),
    ("returns_tuple", "the forward/backward", "AttributeError: 'tuple' object has no attribute"),
    ("no_parameters", "the start-up", "ValueError: optimizer got an empty parameter list"),
    ("exits", "the start-up", "SystemExit: 3"),
    # A launched function's sys.exit(0) ends its rank cleanly, but the built-in trainer owes a
    # result: a model that exits, even with 0, stopped the run.
    ("exits_cleanly", "the start-up", "SystemExit: 0"),
])
def test_a_user_model_that_fails_alone_is_one_line_as_on_two_ranks(tiny_partitions, user_module, capsys, factory,
                                                                    stage, cause):
    # One partition: the rank is this process, and fails as a launched rank does (exit 1, one line).
    assert cli_main(["train", str(tiny_partitions[0] / "p1"), "--model", f"{user_module}:{factory}", "--epochs", "1",
                     "--hidden", "8", "--layers", "2", "--fanouts", "5,5", "--batch-size", "64", "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("salientpp train: error: rank 0 failed: StageError: rank 0 "
                                                         f"stopped in {stage}"), err
    assert cause in err, err


def test_layerwise_inference_is_refused_for_a_user_model(tiny_partitions, user_module):
    with pytest.raises(InputError, match="layer-wise inference runs the built-in models"):
        TrainConfig(str(tiny_partitions[0] / "p2"), model=f"{user_module}:make", inference="layerwise",
                    **{**SMALL, "eval_fanouts": None}).validate()


def test_multi_label_targets_train_with_bce_and_report_roc_auc(tmp_path, tiny_partitions):
    dataset = synthetic_dataset("tiny,num_tasks=5,unknown_fraction=0.1")
    partition_dataset(dataset, tmp_path / "p2", 2)
    result = train(TrainConfig(str(tmp_path / "p2"), epochs=6, **SMALL))
    assert result.metric == "roc-auc"
    assert result.best_valid > 0.7 and result.final_test > 0.7  # chance: 0.5
    with pytest.raises(InputError, match="the metric roc-auc needs binary or multi-label targets"):
        train(TrainConfig(str(tiny_partitions[0] / "p2"), metric="roc-auc", epochs=1, **SMALL))


def test_predict_writes_every_node_in_original_ids_and_equals_the_layerwise_evaluation(tmp_path, capsys):
    dataset = synthetic_dataset("tiny")
    save_dataset(dataset, tmp_path / "data")
    partition_dataset(dataset, tmp_path / "p2", 2)
    ckpt = tmp_path / "ckpt"
    result = train(TrainConfig(str(tmp_path / "p2"), epochs=2, inference="layerwise", checkpoint_dir=str(ckpt),
                               **{**SMALL, "eval_fanouts": None}))
    assert cli_main(["predict", str(tmp_path / "p2"), "--checkpoint", str(ckpt), "--out", str(tmp_path / "pred")]) == 0
    outputs = np.load(tmp_path / "pred" / "outputs.npy")
    predicted = np.load(tmp_path / "pred" / "predicted.npy")
    data = load_dataset(tmp_path / "data")
    assert outputs.shape == (data.num_nodes, data.num_classes) and np.array_equal(predicted, outputs.argmax(1))
    test = np.asarray(data.test_idx)
    accuracy = float((predicted[test] == np.asarray(data.y)[test]).mean())
    assert accuracy == pytest.approx(result.final_test, abs=1e-12)
    # An existing output is refused, as every output is.
    assert cli_main(["predict", str(tmp_path / "p2"), "--checkpoint", str(ckpt), "--out", str(tmp_path / "pred")]) == 2
    assert "already exists" in capsys.readouterr().err


# ---- how the trainer calls a model ----------------------------------------------------------------

class _Recorder(torch.nn.Module):
    """Records how it was called; returns one row per batch node."""

    def forward(self, x, graph, **keywords):
        self.called = (graph, keywords)
        return x


class _Hops(_Recorder):
    salientpp_input = ModelInput.EDGE_INDEX_HOPS


class _Blocks(_Recorder):
    salientpp_input = "mfgs"  # the value works as well as the enum member


class _NamedMfgs(torch.nn.Module):
    """Its parameter is named mfgs but it declares nothing: it gets edge_index (names are not read)."""

    def forward(self, x, mfgs):
        self.called = mfgs
        return x


def _batch():
    return SimpleNamespace(x=torch.ones(4, 2), edge_index="edge_index", mfgs="mfgs", batch_size=2,
                           num_sampled_nodes=[2, 2], num_sampled_edges=[3], n_id=torch.arange(4))


@pytest.mark.parametrize("model, graph, keywords", [
    (_Recorder(), "edge_index", {}),
    (_Hops(), "edge_index", {"num_sampled_nodes": [2, 2], "num_sampled_edges": [3]}),
    (_Blocks(), "mfgs", {}),
])
def test_a_model_is_called_as_it_declares_and_the_pyg_way_by_default(model, graph, keywords):
    out = SeedForward.of(model)(_batch())
    assert model.called == (graph, keywords)
    assert out.shape[0] == (4 if graph == "mfgs" else 2)  # edge_index models return every node: the seeds are kept


def test_a_models_parameter_names_do_not_choose_its_input():
    model = _NamedMfgs()
    SeedForward.of(model)(_batch())
    assert model.called == "edge_index"


def test_a_bad_declaration_or_forward_is_one_sentence():
    class Declared(_Recorder):
        salientpp_input = "blocks"

    class OneArgument(torch.nn.Module):
        def forward(self, x):
            return x

    with pytest.raises(InputError, match=r"Declared.salientpp_input is 'blocks'; declare one of 'edge_index'"):
        model_input(Declared())
    with pytest.raises(InputError, match=r"OneArgument.forward cannot be called as forward\(x, edge_index\)"):
        model_input(OneArgument())
    with pytest.raises(InputError, match=r"cannot be called as forward\(x, edge_index, num_sampled_nodes=\.\.\."):
        model_input(type("NoKeywords", (_NamedMfgs,), {"salientpp_input": ModelInput.EDGE_INDEX_HOPS})())


# ---- typed graphs: the built-in typed models and PyG's heterogeneous conventions --------------------

def _typed_batch_namespace(sample):
    """What SeedForward reads of a typed batch."""
    return SimpleNamespace(x_dict=sample.x_dict, mfgs=sample.mfgs, node_type=sample.node_type, n_id=sample.n_id,
                           batch_size=sample.num_seeds, target_type=sample.schema.target, schema=sample.schema,
                           edge_index_dict="edge_index_dict", num_sampled_nodes_dict="nodes",
                           num_sampled_edges_dict="edges")


class _HeteroRecorder(torch.nn.Module):
    """PyG's hetero way (declares nothing): returns a dict of every type's rows."""

    def forward(self, x_dict, edge_index_dict, **keywords):
        self.called = (edge_index_dict, keywords, {t: x.dtype for t, x in x_dict.items()})
        return {t: x[:, :2] for t, x in x_dict.items()}


class _HeteroHops(_HeteroRecorder):
    salientpp_input = ModelInput.EDGE_INDEX_DICT_HOPS


@pytest.mark.parametrize("model, keywords", [
    (_HeteroRecorder(), {}),
    (_HeteroHops(), {"num_sampled_nodes_dict": "nodes", "num_sampled_edges_dict": "edges"}),
])
def test_a_hetero_model_on_a_typed_graph_is_called_with_x_dict_and_edge_index_dict_and_gives_the_targets_seeds(
        model, keywords):
    sample = typed_sample()
    sample.x_dict = {t: x.half() for t, x in sample.x_dict.items()}
    out = SeedForward.of(model, typed=True)(_typed_batch_namespace(sample))
    assert model.called == ("edge_index_dict", keywords, {"paper": torch.float32, "author": torch.float32})
    assert torch.equal(out, sample.x_dict["paper"][:sample.num_seeds, :2].float())  # the target's first rows


@pytest.mark.parametrize("name", ["rsage", "rgcn", "rgat"])
def test_a_built_in_typed_model_takes_x_dict_mfgs_node_type_and_n_id_and_returns_the_seeds(name):
    sample = typed_sample()
    typed = TypedInput(sample.schema, {"paper": 5, "author": 6}, embedding_dim=3)
    model = build_model(name, 5, 16, 7, 2, inputs=typed)
    assert model_input(model, typed=True) is ModelInput.TYPED_MFGS and isinstance(model, TypedMFGModel)
    forward = SeedForward.of(model, typed=True, expected=ExpectedOutputs(7, "a score per class of 7", name))
    fields = int((sample.node_type == sample.schema.type_index("field")).sum())
    sample.x_dict["field"] = torch.randn(fields, 3, requires_grad=True)  # the rows an embedding gives
    batch = _typed_batch_namespace(sample)
    assert forward.inputs(batch) is sample.x_dict  # as stored: the projections convert them
    out = forward(batch)
    out.sum().backward()
    assert out.shape == (sample.num_seeds, 7)
    embedding = sample.x_dict["field"]
    assert embedding.grad is not None and embedding.grad.abs().sum() > 0  # the fields' rows are learned


def test_a_built_in_typed_model_refuses_an_x_dict_without_the_rows_of_a_featureless_type():
    sample = typed_sample()
    model = build_model("rsage", 5, 16, 7, 2, inputs=TypedInput(sample.schema, {"paper": 5, "author": 6}, 3))
    with pytest.raises(InputError, match="x_dict has no rows of the node type field, .*embedding rows"):
        model(sample.x_dict, sample.mfgs, sample.node_type, sample.n_id)


def test_a_built_in_typed_model_on_a_homogeneous_batch_equals_its_typed_computation_on_one_type():
    """A homogeneous graph is a typed one with one type and one relation: node_type and edge_type
    as constant views of zeros (a homogeneous batch's) give what all-zero tensors give."""
    from test_model_ops import _block

    torch.manual_seed(0)
    model = build_model("rgat", 6, 8, 3, 2).eval()
    blocks = [_block(40, 90, 1), _block(10, 40, 2)]
    assert all(b.edge_type.stride() == (0,) for b in blocks)  # an MFG made without edge types: relation 0
    x, n_id = {"node": torch.randn(90, 6)}, torch.arange(90)
    typed_blocks = [MFG(b.num_src, b.num_dst, b.edge_index, b.rowptr, edge_type=torch.zeros_like(b.edge_index[0]))
                    for b in blocks]
    torch.testing.assert_close(model(x, blocks, one_type(90), n_id),
                               model(x, typed_blocks, torch.zeros(90, dtype=torch.int64), n_id))


def test_rsage_trains_on_a_homogeneous_graph_through_the_built_in_trainer(tiny_partitions):
    result = train(TrainConfig(str(tiny_partitions[0] / "p1"), model="rsage", epochs=4, **SMALL))
    assert result.best_valid > 0.45  # 8 classes: chance is about 0.2, the most common class 0.375


@pytest.mark.parametrize("call, expected", [
    (lambda s: model_input(_Hops(), typed=True),
     r"the model _Hops takes 'edge_index\+hops' input, which a typed graph does not have .*; declare "
     r"salientpp_input = 'x_dict\+edge_index_dict'"),
    (lambda s: model_input(_Blocks(), typed=True), r"the model _Blocks takes 'mfgs' input, which a typed graph"),
    (lambda s: build_model("sage", 5, 8, 3, 2, inputs=TypedInput(s.schema, {"paper": 5, "author": 6}, 3)),
     r"the built-in sage model reads one node type; on a typed graph use --model rsage or rgcn or rgat"),
    (lambda s: build_model("rsage", 5, 8, 3, 2, inputs=TypedInput(s.schema, {"paper": 5, "author": 6})),
     r"the node type field has no features; give it a learnable embedding with --embedding-dim"),
    (lambda s: build_model("rgat", 5, 6, 3, 2, inputs=TypedInput(s.schema, {"paper": 5, "author": 6}, 3)),
     r"R-GAT needs a hidden size divisible by its 4 heads, got 6"),
    (lambda s: SeedForward.of(build_model("rsage", 5, 8, 3, 2), embedding=SimpleNamespace(types=None)),
     r"takes its input per node type \('x_dict\+mfgs'\), which a learnable embedding of every node beside the "
     r"features does not give"),
    (lambda s: model_input(type("OneArgument", (torch.nn.Module,), {"forward": lambda self, x_dict: x_dict})(),
                           typed=True),
     r"OneArgument.forward cannot be called as forward\(x_dict, edge_index_dict\)"),
])
def test_a_model_that_does_not_fit_a_typed_graph_is_refused_in_one_sentence(call, expected):
    with pytest.raises(InputError, match=expected):
        call(typed_sample())


@pytest.mark.parametrize("change, expected", [
    (lambda s: s.x_dict.pop("author"), r"x_dict has no rows of the node type author, which the model reads"),
    (lambda s: s.x_dict.update(author=s.x_dict["author"][:3]),
     r"x_dict holds 3 rows of the node type author but the batch has \d+ nodes of it; pass one row per node"),
    (lambda s: setattr(s, "node_type", None), r"a batch of a graph with 3 node types needs node_type"),
])
def test_a_typed_batch_the_built_in_model_cannot_read_is_refused_in_one_sentence(change, expected):
    sample = typed_sample()
    model = build_model("rsage", 5, 8, 3, 2, inputs=TypedInput(sample.schema, {"paper": 5, "author": 6}, 3))
    change(sample)
    with pytest.raises(InputError, match=expected):
        model(sample.x_dict, sample.mfgs, sample.node_type, sample.n_id)


def test_the_default_model_is_sage_on_one_node_type_and_rsage_on_several():
    from salientpp.data.schema import GraphSchema
    from salientpp.models.gnn import check_model
    from salientpp.train.setup import default_model

    from conftest import typed_dataset

    typed = typed_dataset()[0].schema
    assert default_model(GraphSchema.homogeneous(10)) == "sage"
    assert default_model(typed) == "rsage"
    check_model(default_model(typed), typed=True)  # a typed graph's default reads every node type
