"""R-SAGE's structural choices (``TypedStructure``: root weights per type or per relation, the
first layer over projected or raw input rows): what PyG's ``to_hetero(SAGE)`` computes, layer-wise
equal to the sampled forward, refused where they do not apply, and kept by a checkpoint."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import typed_sample

from salientpp.data.synthetic import synthetic_dataset
from salientpp.errors import InputError
from salientpp.models.gnn import build_model
from salientpp.models.typed import (INPUTS, ROOTS, TYPED_MODELS, TypedInput, TypedMFGModel, TypedStructure, seed_rows,
                                    typed_blocks)
from salientpp.partition.partitioner import partition_dataset
from salientpp.train import TrainConfig

HIDDEN = 8
STRUCTURES = [TypedStructure(root, input) for root, input in itertools.product(ROOTS, INPUTS)]
WIDTHS = {"paper": 5, "author": 6}  # typed_sample's features; its fields get 3-wide learned rows


def _model(sample, structure: TypedStructure, name: str = "rsage") -> TypedMFGModel:
    torch.manual_seed(1)
    typed = TypedInput(sample.schema, WIDTHS, embedding_dim=3)
    return build_model(name, 5, HIDDEN, 3, 2, dropout=0.5, inputs=typed, structure=structure).double().eval()


def _x_dict(sample) -> dict[str, torch.Tensor]:
    fields = int((sample.node_type == sample.schema.type_index("field")).sum())
    return {**{t: x.double() for t, x in sample.x_dict.items()},
            "field": torch.randn(fields, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)}


def test_rsage_per_relation_over_raw_inputs_computes_what_pyg_to_hetero_of_sage_computes():
    from torch_geometric.nn import SAGEConv, to_hetero

    sample = typed_sample(seed=3)
    schema = sample.schema
    ours = _model(sample, TypedStructure("relation", "raw"))

    class Sage(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList(SAGEConv((-1, -1), HIDDEN) for _ in range(2))

        def forward(self, x, edge_index):
            for i, conv in enumerate(self.convs):
                x = conv(x, edge_index)
                x = F.leaky_relu(x) if i == 0 else x
            return x

    pyg = to_hetero(Sage(), (list(schema.node_types), [r.key for r in schema.relations]), aggr="sum")
    data = _subgraph(sample, _x_dict(sample))
    with torch.no_grad():
        pyg({t: x.float() for t, x in data.x_dict.items()}, data.edge_index_dict)  # its lazy weights' widths
        pyg.double()
        for layer, conv in zip(pyg.convs, ours.convs):
            for r, relation in enumerate(schema.relations):  # one weight of theirs for one of ours
                theirs = layer[str(relation)]
                conv.rel[r].weight.copy_(theirs.lin_l.weight)
                conv.root[r].weight.copy_(theirs.lin_r.weight)
                conv.root[r].bias.copy_(theirs.lin_l.bias)
        expected = ours.head(pyg(data.x_dict, data.edge_index_dict)["paper"][:sample.num_seeds])
    out = ours(_x_dict(sample), sample.mfgs, sample.node_type, sample.n_id)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in pyg.parameters()) + 3 * (HIDDEN + 1)
    torch.testing.assert_close(out.detach(), expected, rtol=1e-10, atol=1e-10)


def _subgraph(sample, x_dict):
    """The sampled subgraph as a HeteroData: the rows ``x_dict`` of each type's batch nodes, and
    every kept edge between batch nodes, in the types' local rows."""
    from torch_geometric.data import HeteroData

    data, local = HeteroData(), {}
    for t, name in enumerate(sample.schema.node_types):
        local.update({v: i for i, v in enumerate(sample.n_id[sample.node_type == t].tolist())})
        data[name].x = x_dict[name]
    for r, relation in enumerate(sample.schema.relations):
        pairs = [(local[u], local[v]) for u, v in sample.edges[r].T.tolist() if u in local and v in local]
        data[relation.key].edge_index = torch.tensor(pairs, dtype=torch.int64).view(-1, 2).T
    return data


@pytest.mark.parametrize("structure", STRUCTURES, ids=lambda s: f"{s.root}-{s.input}")
def test_the_layer_wise_path_of_every_structure_equals_its_sampled_forward(structure):
    sample = typed_sample(seed=6)
    model = _model(sample, structure)
    x_dict = _x_dict(sample)
    with torch.no_grad():
        want = model(x_dict, sample.mfgs, sample.node_type, sample.n_id)
        _, blocks = typed_blocks(sample.mfgs, sample.node_type, model.schema)
        h = model.layer_inputs([x_dict[t] for t in model.schema.node_types])
        for i, block in enumerate(blocks):
            (h,) = model.whole_graph_layer(i, h, [block])
        got = seed_rows(h, sample.node_type[:sample.num_seeds], blocks[-1].num_dst)
    assert want.abs().max() > 1e-3
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_the_structures_differ_in_their_parameters_as_their_choices_say():
    sample = typed_sample(seed=3)
    schema = sample.schema
    sizes = {s: sum(p.numel() for p in _model(sample, s).parameters()) for s in STRUCTURES}
    default = TypedStructure()
    # per relation: a root of each relation instead of one per type, in both layers
    assert (sizes[TypedStructure("relation")] - sizes[default]
            == 2 * (schema.num_relations - schema.num_types) * (HIDDEN * HIDDEN + HIDDEN))
    # raw: no projection, and the first layer's weights read the input widths instead of the hidden
    widths = [{**WIDTHS, "field": 3}[t] for t in schema.node_types]
    projection = sum(w * HIDDEN + HIDDEN for w in widths)
    first_layer = sum((widths[s] - HIDDEN) * HIDDEN for s, _ in schema.relation_ends)
    first_layer += sum((w - HIDDEN) * HIDDEN for w in widths)
    assert sizes[TypedStructure(input="raw")] - sizes[default] == first_layer - projection


@pytest.mark.parametrize("model", [m for m in TYPED_MODELS if m not in TypedStructure.MODELS] + ["sage"])
def test_a_structure_is_refused_by_a_model_it_does_not_apply_to(model):
    sample = typed_sample(seed=3)
    with pytest.raises(InputError, match="apply to the built-in rsage model only"):
        build_model(model, 5, HIDDEN, 3, 2, inputs=TypedInput(sample.schema, WIDTHS, 3),
                    structure=TypedStructure("relation"))


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """A small IGBH-shaped graph (every type with features, of two widths) in two parts, and a
    homogeneous one in one."""
    root = tmp_path_factory.mktemp("typed-structure")
    partition_dataset(synthetic_dataset("igbh,num_nodes=300,max_degree=100"), root / "typed", 2)
    partition_dataset(synthetic_dataset("tiny,num_nodes=200"), root / "homogeneous", 1)
    return root


@pytest.mark.parametrize("model, flag", [("sage", "typed_root"), ("rgcn", "typed_input"), (None, "typed_root")])
def test_the_options_are_refused_in_one_sentence_where_they_do_not_apply(parts, model, flag):
    from salientpp.train.setup import resolve_run

    value = {"typed_root": "relation", "typed_input": "raw"}[flag]
    config = TrainConfig(str(parts / "homogeneous"), model=model, **{flag: value})
    with pytest.raises(InputError, match=rf"^--{flag.replace('_', '-')} {value} applies only with --model rsage; "):
        resolve_run(config)


def test_a_checkpoint_keeps_the_structure_and_layer_wise_predict_on_two_ranks_rebuilds_it(parts, tmp_path):
    """predict runs a built-in model layer by layer: the raw input's first layer reads each type's
    rows at their own widths, the halo's from the other rank."""
    from salientpp.train import train
    from salientpp.train.predict import predict

    ckpt = tmp_path / "ckpt"
    part = str(parts / "typed")
    result = train(TrainConfig(part, model="rsage", typed_root="relation", typed_input="raw", hidden=16, layers=2,
                               fanouts=(4, 4), eval_fanouts=(-1, -1), batch_size=32, epochs=1, lr=0.01,
                               policy="none", progress=False, checkpoint_dir=str(ckpt)))
    predict(part, ckpt, tmp_path / "pred")
    predicted = np.load(tmp_path / "pred" / "predicted.npy")
    dataset = synthetic_dataset("igbh,num_nodes=300,max_degree=100")
    test = np.asarray(dataset.test_idx) - dataset.schema.target_range[0]
    accuracy = float((predicted[test] == np.asarray(dataset.y)[test]).mean())
    assert accuracy == pytest.approx(result.final_test, abs=1e-12)


def test_a_checkpoint_written_before_the_options_existed_resumes_with_the_structure_it_was_built_with(parts,
                                                                                                      tmp_path):
    from salientpp.cache.plan import partition_identity
    from salientpp.partition import load_partitioned
    from salientpp.train import train
    from salientpp.train.setup import check_resume

    ckpt = tmp_path / "ckpt"
    options = dict(model="rsage", hidden=8, layers=2, fanouts=(3, 3), batch_size=64, lr=0.01, policy="none",
                   progress=False, checkpoint_dir=str(ckpt), eval_every=0)
    train(TrainConfig(str(parts / "typed"), epochs=1, **options))
    state = torch.load(ckpt / "last.pt", weights_only=True)
    for key in ("typed_root", "typed_input"):  # as a checkpoint of the version before them
        del state["options"][key]
    torch.save(state, ckpt / "last.pt")
    data = load_partitioned(parts / "typed")
    partition_id = partition_identity(data.meta)
    check_resume(TrainConfig(str(parts / "typed"), epochs=2, resume=True, **options), partition_id, data.schema)
    with pytest.raises(InputError, match="was trained with typed_input=None, not 'raw'"):
        check_resume(TrainConfig(str(parts / "typed"), epochs=2, resume=True, typed_input="raw", **options),
                     partition_id, data.schema)
