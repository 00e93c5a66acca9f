"""The CPU model step's kernels: CSR aggregation and the fused counter-based dropout, against torch."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GINConv, SAGEConv

from conftest import relations_into, typed_sample

from salientpp._ext import extension
from salientpp.models.gnn import SeedForward
from salientpp.models.gnn import MFGModel, MeanGCNConv, build_model
from salientpp.models.typed import TypedInput, TypedMFGModel, type_ranks
from salientpp.models.ops import aggregate, aggregate_reference, aggregate_with_root, dropout
from salientpp.sampling import MFG
from salientpp.train.config import cpu_has_bf16


def random_csr(num_dst: int, num_src: int, max_degree: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A CSR over ``num_dst`` destinations with 0..max_degree random sources each (some empty)."""
    g = torch.Generator().manual_seed(seed)
    degree = torch.randint(0, max_degree + 1, (num_dst,), generator=g)
    rowptr = torch.cat([torch.zeros(1, dtype=torch.int64), degree.cumsum(0)])
    col = torch.randint(0, num_src, (int(rowptr[-1]),), generator=g)
    return rowptr, col


@pytest.fixture
def threads():
    """Restores torch's intra-op thread count after a test that changes it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("mean", [True, False])
@pytest.mark.parametrize("num_dst,num_src,max_degree", [(0, 5, 3), (7, 1, 4), (300, 500, 12), (50, 50, 0)])
def test_aggregate_equals_index_add_and_its_gradient_passes_gradcheck(mean, num_dst, num_src, max_degree):
    rowptr, col = random_csr(num_dst, num_src, max_degree, seed=num_dst)
    x = torch.randn(num_src, 9, dtype=torch.float64, requires_grad=True)
    out = aggregate(x, rowptr, col, mean)
    assert out.shape == (num_dst, 9)
    torch.testing.assert_close(out, aggregate_reference(x, rowptr, col, mean), rtol=1e-12, atol=1e-12)
    if num_dst and col.numel():
        assert torch.autograd.gradcheck(lambda t: aggregate(t, rowptr, col, mean), (x,), fast_mode=True)
    grad = torch.randn(num_dst, 9, dtype=torch.float64)
    (ours,) = torch.autograd.grad(aggregate(x, rowptr, col, mean), x, grad)
    (theirs,) = torch.autograd.grad(aggregate_reference(x, rowptr, col, mean), x, grad)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mean", [True, False])
@pytest.mark.parametrize("used", ["both", "aggregation", "root"])
def test_aggregate_with_root_has_the_gradient_of_aggregate_and_slice(mean, used):
    rowptr, col = random_csr(40, 90, 6, seed=5)
    x = torch.randn(90, 7, dtype=torch.float64, requires_grad=True)
    weights = {"both": (1.0, 1.0), "aggregation": (1.0, 0.0), "root": (0.0, 1.0)}[used]

    def loss(total, root):  # a part left out of the loss gets no gradient at all
        parts = [w * t.square().sum() for w, t in zip(weights, (total, root)) if w]
        return sum(parts)

    total, root = aggregate_with_root(x, rowptr, col, mean)
    torch.testing.assert_close(total, aggregate_reference(x, rowptr, col, mean), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(root, x[:40], rtol=0, atol=0)
    (ours,) = torch.autograd.grad(loss(total, root), x)
    (theirs,) = torch.autograd.grad(loss(aggregate_reference(x, rowptr, col, mean), x[:40]), x)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(lambda t: aggregate_with_root(t, rowptr, col, mean), (x,))


def test_aggregate_with_root_returns_a_view_when_no_gradient_is_needed():
    rowptr, col = random_csr(10, 30, 4, seed=2)
    x = torch.randn(30, 3)
    total, root = aggregate_with_root(x, rowptr, col)
    assert root.data_ptr() == x.data_ptr() and root.shape == (10, 3)
    torch.testing.assert_close(total, aggregate_reference(x, rowptr, col, True))


def test_aggregate_in_16_bit_types_sums_in_float32():
    rowptr, col = random_csr(200, 300, 30, seed=1)
    x = torch.randn(300, 16)
    exact = aggregate_reference(x.double(), rowptr, col, True)
    for dtype in (torch.bfloat16, torch.float16):
        out = aggregate(x.to(dtype), rowptr, col, True)
        assert out.dtype == dtype
        # Inputs rounded to the type (relative 2^-8 / 2^-11), sums in float32, one final rounding.
        eps = 2.0 ** (-8 if dtype == torch.bfloat16 else -11)
        torch.testing.assert_close(out.double(), exact, rtol=2 * eps, atol=2 * eps * x.abs().max().item())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mean", [True, False])
def test_16_bit_features_aggregate_into_float32_exactly_as_their_float32_copy_would(dtype, mean):
    """Read in place, 16-bit rows give the float32 path's sums bit for bit (each value converts
    exactly and is added in the same order), and the root rows are their float32 values."""
    rowptr, col = random_csr(60, 150, 9, seed=4)
    x = torch.randn(150, 11).to(dtype)
    total, root = aggregate_with_root(x, rowptr, col, mean, dtype=torch.float32)
    want_total, want_root = aggregate_with_root(x.float(), rowptr, col, mean)
    assert total.dtype == root.dtype == torch.float32
    assert torch.equal(total, want_total) and torch.equal(root, want_root)
    assert torch.equal(aggregate(x, rowptr, col, mean, dtype=torch.float32), want_total)


def test_aggregate_converts_a_16_bit_input_that_needs_a_gradient_and_passes_the_gradient_back():
    rowptr, col = random_csr(20, 50, 5, seed=6)
    x = torch.randn(50, 4).half().requires_grad_()
    out = aggregate(x, rowptr, col, True, dtype=torch.float32)
    assert out.dtype == torch.float32
    (grad,) = torch.autograd.grad(out.sum(), x)
    (want,) = torch.autograd.grad(aggregate_reference(x.float(), rowptr, col, True).sum(), x)
    assert grad.dtype == torch.float16 and torch.equal(grad, want)


def test_aggregate_results_do_not_depend_on_the_thread_count(threads):
    rowptr, col = random_csr(2000, 3000, 20, seed=2)
    x = torch.randn(3000, 64, requires_grad=True)
    grad = torch.randn(2000, 64)
    runs = []
    for n in (1, 2, 3):
        torch.set_num_threads(n)
        out = aggregate(x, rowptr, col, True)
        (g,) = torch.autograd.grad(out, x, grad)
        runs.append((out, g))
    for out, g in runs[1:]:
        assert torch.equal(out, runs[0][0]) and torch.equal(g, runs[0][1])


def test_aggregate_rejects_a_malformed_csr():
    x = torch.randn(4, 2)
    with pytest.raises(RuntimeError, match="col must lie in"):
        aggregate(x, torch.tensor([0, 2]), torch.tensor([0, 4]))
    with pytest.raises(RuntimeError, match="non-decreasing"):
        aggregate(x, torch.tensor([0, 2, 1, 2]), torch.tensor([0, 1]))


def test_the_dropout_keep_rate_is_binomial_and_halves_of_one_hash_are_independent():
    """Over n = 2^20 elements, the number kept is Binomial(n, 1 - p): within 5 standard
    deviations (a false alarm once in ~3.5 million runs). Elements 2j and 2j + 1 take the two
    halves of one 64-bit hash: their 2x2 contingency table passes a chi-square independence test
    at the 1e-4 level (1 degree of freedom: statistic < 15.1)."""
    n = 1 << 20
    for p in (0.1, 0.5, 0.9):
        keep = extension().dropout_mask([n], p, 12345)
        kept = int(keep.sum())
        sd = math.sqrt(n * p * (1 - p))
        assert abs(kept - n * (1 - p)) < 5 * sd, (p, kept)
        pairs = keep.view(-1, 2).long()
        table = torch.zeros(2, 2)
        table.index_put_((pairs[:, 0], pairs[:, 1]), torch.ones(pairs.shape[0]), accumulate=True)
        expected = table.sum(1, keepdim=True) * table.sum(0, keepdim=True) / table.sum()
        chi2 = float(((table - expected) ** 2 / expected).sum())
        assert chi2 < 15.1, (p, chi2)


def test_dropout_masks_of_two_seeds_agree_as_independent_draws_would():
    n = 1 << 18
    a, b = extension().dropout_mask([n], 0.5, 1), extension().dropout_mask([n], 0.5, 2)
    agree = int((a == b).sum())
    assert abs(agree - n / 2) < 5 * math.sqrt(n / 4)  # P(agree) = p^2 + (1-p)^2 = 1/2


@pytest.mark.parametrize("relu", [True, False])
def test_fused_dropout_forward_and_backward_follow_the_mask(relu):
    x = torch.randn(333, 77, dtype=torch.float64, requires_grad=True)
    p, seed = 0.3, 987654321
    mask = extension().dropout_mask(list(x.shape), p, seed).double()
    base = torch.relu(x) if relu else x
    out = extension().dropout_forward(x.detach(), p, seed, relu)
    torch.testing.assert_close(out, base.detach() * mask / (1 - p), rtol=0, atol=1e-15)
    grad = torch.randn_like(x)
    ours = extension().dropout_backward(grad, out, p, seed, relu)
    (theirs,) = torch.autograd.grad(base * mask / (1 - p), x, grad)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-15)


def test_dropout_follows_torch_manual_seed_and_differs_between_calls(threads):
    x = torch.randn(500, 40)
    torch.manual_seed(5)
    first, second = dropout(x, 0.5), dropout(x, 0.5)
    torch.manual_seed(5)
    torch.set_num_threads(1)
    again = dropout(x, 0.5)
    assert torch.equal(first, again) and not torch.equal(first, second)
    assert torch.equal(dropout(x, 0.5, training=False, relu=True), torch.relu(x))
    assert torch.equal(dropout(x, 0.0, relu=False), x)


def test_dropout_gradient_reaches_the_input_through_the_autograd_function():
    x = torch.randn(64, 32, requires_grad=True)
    torch.manual_seed(0)
    out = dropout(x, 0.25, relu=True)
    out.sum().backward()
    # d out / d x = 1 / (1 - p) exactly where the output is positive, else 0.
    assert torch.equal(x.grad, (out > 0).float() / 0.75)


def _block(num_dst: int, num_src: int, seed: int) -> MFG:
    rowptr, col = random_csr(num_dst, num_src, 6, seed)
    dst = torch.repeat_interleave(torch.arange(num_dst), rowptr[1:] - rowptr[:-1])
    return MFG(num_src, num_dst, torch.stack([col, dst]), rowptr)


@pytest.mark.parametrize("model", ["sage", "gin", "gcn"])
def test_the_csr_layers_compute_what_the_pyg_convolutions_compute(model):
    """Without dropout (eval mode) the built-in model through the CSR kernel and through PyG's
    own convolution give the same outputs and the same parameter gradients."""
    torch.manual_seed(0)
    net = MFGModel(model, 12, 16, 5, 2, dropout=0.5).double().eval()
    assert isinstance(net.convs[0], {"sage": SAGEConv, "gin": GINConv, "gcn": MeanGCNConv}[model])
    blocks = [_block(40, 90, 1), _block(10, 40, 2)]
    x = torch.randn(90, 12, dtype=torch.float64)

    def run(use_csr: bool):
        net.zero_grad()
        h = x
        for i, b in enumerate(blocks):
            block = b if use_csr else type("PyGBlock", (), {"num_dst": b.num_dst, "edge_index": b.edge_index})()
            h = net.layer(i, h, block)
        h.square().sum().backward()
        return h.detach(), [p.grad.clone() for p in net.parameters()]

    (out_csr, grads_csr), (out_pyg, grads_pyg) = run(True), run(False)
    torch.testing.assert_close(out_csr, out_pyg, rtol=1e-10, atol=1e-10)
    for a, b in zip(grads_csr, grads_pyg):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.skipif(not cpu_has_bf16(), reason="this CPU has no bfloat16 instructions")
def test_the_model_under_bfloat16_autocast_stays_close_to_float32():
    torch.manual_seed(0)
    net = MFGModel("sage", 12, 32, 5, 2).eval()
    blocks = [_block(200, 500, 3), _block(50, 200, 4)]
    x = torch.randn(500, 12)
    exact = net(x, blocks)
    with torch.autocast("cpu", torch.bfloat16):
        low = net(x, blocks)
    assert low.dtype == torch.bfloat16
    # Every product and sum is rounded to 8 significant bits: relative error of a few 2^-8.
    assert float((low.float() - exact).norm() / exact.norm()) < 0.03


@pytest.mark.parametrize("model", ["sage", "gin", "gcn", "gat"])
def test_the_models_read_float16_features_as_they_would_read_their_float32_values(model):
    """A float16 ``x`` gives the outputs and parameter gradients of ``x.float()``, bit for bit:
    the CSR layers read the 16-bit rows in place, GAT converts them first."""
    torch.manual_seed(0)
    net = MFGModel(model, 12, 16, 5, 2).eval()
    blocks = [_block(40, 90, 1), _block(10, 40, 2)]
    x = torch.randn(90, 12).half()

    def run(features):
        net.zero_grad()
        out = net(features, blocks)
        out.square().sum().backward()
        return out.detach(), [p.grad.clone() for p in net.parameters()]

    (out16, grads16), (out32, grads32) = run(x), run(x.float())
    assert out16.dtype == torch.float32 and torch.equal(out16, out32)
    for a, b in zip(grads16, grads32):
        assert torch.equal(a, b)


def test_the_built_in_models_get_features_as_stored_and_a_users_model_gets_float32():
    batch = SimpleNamespace(x=torch.randn(6, 3).half(), n_id=torch.arange(6))
    builtin = SeedForward.of(MFGModel("sage", 3, 4, 2, 1))
    assert builtin.inputs(batch) is batch.x  # no float32 copy: the first layer converts as it reads

    class UserModel(torch.nn.Module):
        def forward(self, x, edge_index):
            return x

    rows = SeedForward.of(UserModel()).inputs(batch)
    assert rows.dtype == torch.float32 and torch.equal(rows, batch.x.float())


# ---- the typed models (R-SAGE, R-GCN, R-GAT) against PyG's heterogeneous models -----------------

HIDDEN, HEADS = 8, 4  # the built-in R-GAT has 4 heads, as MLPerf configures it


def _typed_model(name: str, sample) -> TypedMFGModel:
    torch.manual_seed(1)
    typed = TypedInput(sample.schema, {"paper": 5, "author": 6}, embedding_dim=3)
    return build_model(name, 5, HIDDEN, 3, 2, dropout=0.5, inputs=typed).double().eval()


def _x_dict(sample) -> dict[str, torch.Tensor]:
    """The sample's rows of each type: its features, and 3-wide rows of the fields (which have
    none), as an embedding gives them."""
    fields = int((sample.node_type == sample.schema.type_index("field")).sum())
    return {**sample.x_dict, "field": torch.randn(fields, 3, generator=torch.Generator().manual_seed(2))}


def _inputs(model: TypedMFGModel, sample) -> list[torch.Tensor]:
    """The model's projected input rows of each type (the embedding rows of the fields)."""
    return model.inputs(_x_dict(sample), sample.node_type.bincount().tolist())


def _subgraph(sample, h: list[torch.Tensor]):
    """The sampled subgraph as a HeteroData built from the graph itself: the rows ``h[t]`` of each
    type's batch nodes, and every kept edge between batch nodes, in the types' local rows."""
    from torch_geometric.data import HeteroData

    data = HeteroData()
    local = {}
    for t, name in enumerate(sample.schema.node_types):
        ids = sample.n_id[sample.node_type == t].tolist()
        local.update({v: i for i, v in enumerate(ids)})
        data[name].x = h[t]
    for r, relation in enumerate(sample.schema.relations):
        pairs = [(local[u], local[v]) for u, v in sample.edges[r].T.tolist() if u in local and v in local]
        data[relation.key].edge_index = torch.tensor(pairs, dtype=torch.int64).view(-1, 2).T
    return data


def _run_hetero(convs, data) -> torch.Tensor:
    """PyG's layers (each maps x_dict, edge_index_dict to x_dict) with MLPerf's LeakyReLU between them."""
    x_dict = data.x_dict
    for i, conv in enumerate(convs):
        x_dict = conv(x_dict, data.edge_index_dict)
        if i < len(convs) - 1:
            x_dict = {t: F.leaky_relu(x) for t, x in x_dict.items()}
    return x_dict["paper"]


def _sum_into(schema, t: int, tensors: list[torch.Tensor]) -> torch.Tensor:
    """The sum of the per-relation ``tensors`` over the relations into node type ``t``."""
    return sum(tensors[r] for r in relations_into(schema, t))


def test_rsage_computes_what_pyg_to_hetero_of_a_sage_model_computes():
    from torch_geometric.nn import SAGEConv, to_hetero

    sample = typed_sample(seed=3)
    ours = _typed_model("rsage", sample)
    schema = sample.schema

    class Sage(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList(SAGEConv(HIDDEN, HIDDEN) for _ in range(2))

        def forward(self, x, edge_index):
            for i, conv in enumerate(self.convs):
                x = conv(x, edge_index)
                x = F.leaky_relu(x) if i == 0 else x
            return x

    pyg = to_hetero(Sage(), (list(schema.node_types), [r.key for r in schema.relations]), aggr="sum").double()
    with torch.no_grad():
        for layer, conv in zip(pyg.convs, ours.convs):
            per_relation = [layer[str(r)] for r in schema.relations]
            for r, theirs in enumerate(per_relation):
                conv.rel[r].weight.copy_(theirs.lin_l.weight)
            for t in range(schema.num_types):  # the roots of the relations into a type act as one
                conv.root[t].weight.copy_(_sum_into(schema, t, [c.lin_r.weight for c in per_relation]))
                conv.root[t].bias.copy_(_sum_into(schema, t, [c.lin_l.bias for c in per_relation]))
    out = ours(_x_dict(sample), sample.mfgs, sample.node_type, sample.n_id)
    with torch.no_grad():
        data = _subgraph(sample, _inputs(ours, sample))
        expected = ours.head(pyg(data.x_dict, data.edge_index_dict)["paper"][:sample.num_seeds])
    assert out.shape == (sample.num_seeds, 3)
    torch.testing.assert_close(out.detach(), expected, rtol=1e-10, atol=1e-10)



def test_rgat_computes_what_pyg_heteroconv_of_gat_convolutions_computes():
    """MLPerf's R-GAT layer: HeteroConv (sum) of GATConv(hidden, hidden / heads, heads,
    add_self_loops=False) per relation."""
    from torch_geometric.nn import GATConv, HeteroConv

    sample = typed_sample(seed=4)
    ours = _typed_model("rgat", sample)
    schema = sample.schema
    torch.manual_seed(2)
    pyg = [HeteroConv({r.key: GATConv(HIDDEN, HIDDEN // HEADS, heads=HEADS, add_self_loops=False)
                       for r in schema.relations}, aggr="sum").double() for _ in range(2)]
    with torch.no_grad():
        for layer, conv in zip(pyg, ours.convs):
            per_relation = [layer.convs[r.key] for r in schema.relations]
            for r, theirs in enumerate(per_relation):
                theirs.bias.normal_()  # PyG starts them at zero: make them count
                conv.lin[r].weight.copy_(theirs.lin.weight)
                conv.att_src[r].copy_(theirs.att_src[0])
                conv.att_dst[r].copy_(theirs.att_dst[0])
            for t in range(schema.num_types):
                conv.bias[t].copy_(_sum_into(schema, t, [c.bias for c in per_relation]))
    out = ours(_x_dict(sample), sample.mfgs, sample.node_type, sample.n_id)
    with torch.no_grad():
        data = _subgraph(sample, _inputs(ours, sample))
        expected = ours.head(_run_hetero(pyg, data)[:sample.num_seeds])
    torch.testing.assert_close(out.detach(), expected, rtol=1e-10, atol=1e-10)


def test_rgcn_computes_what_pyg_rgcnconv_computes():
    """R-GCN: per relation the mean of the sources times W_r, plus one root weight and bias:
    PyG's RGCNConv(aggr="mean") without bases, run on the homogenised subgraph."""
    from torch_geometric.nn import RGCNConv

    sample = typed_sample(seed=5)
    ours = _typed_model("rgcn", sample)
    schema = sample.schema
    torch.manual_seed(2)
    pyg = [RGCNConv(HIDDEN, HIDDEN, schema.num_relations, aggr="mean").double() for _ in range(2)]
    with torch.no_grad():
        for theirs, conv in zip(pyg, ours.convs):
            theirs.bias.normal_()
            for r in range(schema.num_relations):
                conv.rel[r].weight.copy_(theirs.weight[r].T)
            conv.root[0].weight.copy_(theirs.root.T)
            conv.root[0].bias.copy_(theirs.bias)
    out = ours(_x_dict(sample), sample.mfgs, sample.node_type, sample.n_id)
    with torch.no_grad():
        h = _inputs(ours, sample)
        # the homogenised subgraph: rows in n_id order, every kept edge between batch nodes
        x = torch.empty(sample.n_id.shape[0], HIDDEN, dtype=torch.float64)
        for t in range(schema.num_types):
            x[sample.node_type == t] = h[t]
        position = {v: i for i, v in enumerate(sample.n_id.tolist())}
        pairs = [(position[u], position[v], r) for r in range(schema.num_relations)
                 for u, v in sample.edges[r].T.tolist() if u in position and v in position]
        edges = torch.tensor(pairs, dtype=torch.int64).T
        for i, conv in enumerate(pyg):
            x = conv(x, edges[:2], edges[2])
            x = F.leaky_relu(x) if i == 0 else x
        expected = ours.head(x[:sample.num_seeds])
    torch.testing.assert_close(out.detach(), expected, rtol=1e-10, atol=1e-10)


# ---- the CUDA twins (csrc/model_kernels.cu): equal to the CPU kernels ----------------------------

cuda_kernels = pytest.mark.skipif(not (torch.cuda.is_available() and extension().with_cuda),
                                  reason="needs a GPU and the extension built with CUDA")


@cuda_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mean", [True, False])
def test_the_cuda_aggregation_and_its_gradient_equal_the_cpu_kernels(dtype, mean):
    rowptr, col = random_csr(700, 900, 15, seed=3)
    x = torch.randn(900, 70, dtype=dtype, requires_grad=True)
    grad_out = torch.randn(700, 70, dtype=dtype)
    x_gpu = x.detach().cuda().requires_grad_()
    out, root = aggregate_with_root(x, rowptr, col, mean)
    out_gpu, root_gpu = aggregate_with_root(x_gpu, rowptr.cuda(), col.cuda(), mean)
    # The sums run in float in edge order on both devices: the same bits.
    assert torch.equal(out_gpu.cpu(), out) and torch.equal(root_gpu.cpu(), root)
    (out * grad_out).sum().backward()
    (out_gpu * grad_out.cuda()).sum().backward()
    # The gradient's atomic adds on the GPU sum in another order: float32 rounding apart (then
    # rounded to the 16-bit type once).
    tolerance = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}[dtype]
    torch.testing.assert_close(x_gpu.grad.cpu().float(), x.grad.float(), rtol=tolerance, atol=tolerance)


@cuda_kernels
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_features_aggregate_into_float32_on_cuda_as_on_the_cpu(dtype):
    rowptr, col = random_csr(300, 400, 9, seed=5)
    x = torch.randn(400, 33).to(dtype)
    out = aggregate(x, rowptr, col, True, torch.float32)
    out_gpu = aggregate(x.cuda(), rowptr.cuda(), col.cuda(), True, torch.float32)
    assert out_gpu.dtype == torch.float32 and torch.equal(out_gpu.cpu(), out)


@cuda_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("relu", [True, False])
def test_the_cuda_dropout_draws_the_cpu_mask_bit_for_bit(dtype, relu):
    x = torch.randn(1001, 37, dtype=dtype, requires_grad=True)  # an odd count: the last pair is half
    x_gpu = x.detach().cuda().requires_grad_()
    torch.manual_seed(11)
    out = dropout(x, 0.3, relu=relu)
    torch.manual_seed(11)  # the same seed drawn for the call
    out_gpu = dropout(x_gpu, 0.3, relu=relu)
    assert torch.equal(out_gpu.cpu(), out)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    out_gpu.backward(grad_out.cuda())
    assert torch.equal(x_gpu.grad.cpu(), x.grad)


def test_type_ranks_give_each_node_its_row_among_its_types_nodes_in_n_id_order():
    node_type = torch.tensor([2, 0, 2, 1, 0, 2, 2])
    rank, counts = type_ranks(node_type, 4)
    assert rank.tolist() == [0, 0, 1, 0, 1, 2, 3] and counts.tolist() == [2, 1, 4, 0]
    assert rank.dtype == counts.dtype == torch.int64
    rank, counts = type_ranks(torch.zeros(1, dtype=torch.int64).expand(3), 1)  # one type: the positions
    assert rank.tolist() == [0, 1, 2] and counts.tolist() == [3]
