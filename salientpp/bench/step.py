"""The model step on the CPU or a GPU: aggregation, dropout and whole training steps, ours against
the alternatives.

On sampled batches of DATASET (seeds drawn from its training split) it times, side by side in
one run, medians over ``--repeats`` of the total over ``--batches`` batches:

* aggregation (mean over each MFG, forward and, where the layer's input needs a gradient, backward):
  PyG's scatter over a gathered ``[E, F]`` message tensor (what ``SAGEConv`` runs), PyG's
  sorted-index ``segment`` over the same gathered tensor, ``torch.sparse`` CSR matmul, and the
  extension's CSR kernel (:func:`salientpp.models.ops.aggregate`);
* ReLU + dropout of every hidden layer, forward and backward: torch's against the fused
  counter-based one (:func:`salientpp.models.ops.dropout`);
* a whole training step (forward, cross-entropy, backward, Adam) of the 3-layer SAGE: PyG's
  convolutions with torch's dropout (the model before this step was rewritten), ours in float32,
  and ours under ``torch.autocast`` bfloat16 on a GPU or where the CPU has bfloat16 instructions;
* on a dataset with float16 features, our training step with the batch's features converted to
  float32 first against the first layer reading them as stored.

On the CPU, times are CPU seconds of the process (all threads), which unlike wall time do not
grow when other jobs share the cores; with ``--device cuda`` the batches, inputs and models live
on the GPU, the CUDA twins of the kernels run where the extension has them (else the row says
which fallback ran), and times are wall seconds between two ``torch.cuda.synchronize``. The ratio
column divides the first row of each group by the row. Like a
training rank, the process keeps freed host memory for reuse
(:func:`~salientpp.distributed.host_memory.keep_freed_memory`), so a step's new tensors are not
faulted in page by page; ``--no-reuse-freed-memory`` keeps glibc's default instead.
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from ..sampling import parse_fanouts
from ..data.format import load_dataset
from ..distributed.group import resolve_device
from ..distributed.host_memory import keep_freed_memory
from ..errors import check_int
from ..io import check_output_dir
from .results import write_outputs
from ..models.gnn import MFGModel
from ..models.ops import aggregate, dropout, runs_kernels
from .pyg_baseline import PyGReferenceModel
from ..sampling import NeighborSampler
from ..sampling import MFG
from ..timing import median_seconds

# The kind its --json file declares (salientpp.bench.results) and its line in `salientpp bench --help`.
KIND = "salientpp-bench-step"
SUMMARY = "the model step (CPU or --device cuda): aggregation kernels, fused dropout, whole training steps vs PyG's"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", metavar="DATASET", help="a prepared dataset directory (salientpp prepare)")
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batches", type=int, default=4, help="sampled batches per repeat (default 4)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats; medians are reported (default 5)")
    p.add_argument("--torch-threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the batches, models and kernels run (default cpu)")
    p.add_argument("--no-reuse-freed-memory", dest="reuse_freed_memory", action="store_false",
                   help="keep glibc's default for freed host memory instead of keeping it for reuse, as training ranks do")
    p.add_argument("--json", dest="json_path", default=None, help="write the rows as JSON here (must not exist)")


def _synchronized_clock() -> float:
    """Wall seconds once the GPU has finished what was queued: what a step costs on it."""
    torch.cuda.synchronize()
    return time.perf_counter()


def _aggregators(device: torch.device) -> dict[str, Callable[[torch.Tensor, MFG], torch.Tensor]]:
    from torch_geometric.utils import scatter, segment

    def destinations(m: MFG) -> torch.Tensor:
        return m.edge_index[1]

    def sparse_csr(x: torch.Tensor, m: MFG) -> torch.Tensor:
        degree = (m.rowptr[1:] - m.rowptr[:-1]).clamp(min=1).to(x.dtype)
        values = torch.repeat_interleave(1 / degree, m.rowptr[1:] - m.rowptr[:-1])
        with warnings.catch_warnings():  # torch calls its sparse CSR support beta
            warnings.simplefilter("ignore", UserWarning)
            a = torch.sparse_csr_tensor(m.rowptr, m.edge_index[0].contiguous(), values, (m.num_dst, x.shape[0]))
        return a @ x

    return {
        "PyG scatter (SAGEConv)": lambda x, m: scatter(x[m.edge_index[0]], destinations(m), 0, m.num_dst, "mean"),
        "PyG segment (sorted index)": lambda x, m: segment(x[m.edge_index[0]], m.rowptr, "mean"),
        "torch.sparse CSR matmul": sparse_csr,
        _ours("salientpp CSR kernel", device): lambda x, m: aggregate(x, m.rowptr, m.edge_index[0], mean=True),
    }


def _ours(name: str, device: torch.device) -> str:
    """A row of our kernels, named after what runs: torch's fallback where the extension has no
    kernels for ``device`` (a build without CUDA)."""
    return name if runs_kernels(device) else f"{name} (torch fallback: the extension has no {device.type} kernels)"


def _layer_inputs(batches, dims: list[int], generator: torch.Generator,
                  device: torch.device) -> list[list[torch.Tensor]]:
    """Per batch, a random input per layer (``[num_src, d_i]`` on ``device``), needing a gradient
    from layer 1 on."""
    return [[torch.randn(m.num_src, dims[i], generator=generator).to(device).requires_grad_(i > 0)
             for i, m in enumerate(b.mfgs)] for b in batches]


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "the CPU"


def main(args: argparse.Namespace) -> int:
    fanouts = parse_fanouts(args.fanouts)
    for name, value in (("--batch-size", args.batch_size), ("--hidden", args.hidden), ("--batches", args.batches),
                        ("--repeats", args.repeats), ("--torch-threads", args.torch_threads)):
        check_int(value, name)
    if args.json_path is not None:
        check_output_dir(args.json_path, "output file")
    device = resolve_device(args.device, 0)  # refuses cuda where torch sees no GPU
    cuda = device.type == "cuda"
    clock, clock_name = (_synchronized_clock, "GPU wall") if cuda else (time.process_time, "CPU")
    data = load_dataset(args.dataset)
    data.schema.require_homogeneous("bench step", args.dataset)
    reused = args.reuse_freed_memory and keep_freed_memory()
    torch.set_num_threads(args.torch_threads)
    generator = torch.Generator().manual_seed(0)
    train_ids = torch.from_numpy(np.array(data.train_idx, dtype=np.int64))
    sampler = NeighborSampler(np.asarray(data.rowptr), np.asarray(data.col), list(fanouts))
    sampled = [sampler.sample(train_ids[torch.randperm(train_ids.shape[0], generator=generator)[:args.batch_size]],
                              seed=0, batch_index=i) for i in range(args.batches)]
    batches = [b.to(device) for b in sampled]
    x_all = torch.from_numpy(np.asarray(data.x, dtype=np.float32))
    num_classes = data.num_outputs
    dims = [x_all.shape[1]] + [args.hidden] * (len(fanouts) - 1)
    rows: list[dict] = []

    inputs = _layer_inputs(batches, dims, generator, device)

    def run_aggregation(fn) -> None:
        for b, xs in zip(batches, inputs):
            for m, x in zip(b.mfgs, xs):
                out = fn(x, m)
                if x.requires_grad:
                    out.sum().backward()
                    x.grad = None

    for name, fn in _aggregators(device).items():
        rows.append({"group": "aggregation (mean, forward + backward)", "impl": name,
                     "seconds": median_seconds(lambda: run_aggregation(fn), args.repeats, clock)})

    hidden = [[torch.randn(m.num_dst, args.hidden, generator=generator).to(device).requires_grad_()
               for m in b.mfgs[:-1]] for b in batches]

    def run_dropout(fn) -> None:
        for hs in hidden:
            for h in hs:
                fn(h).sum().backward()
                h.grad = None

    for name, fn in (("torch relu + dropout", lambda h: F.dropout(torch.relu(h), 0.5, True)),
                     (_ours("salientpp fused relu + dropout", device), lambda h: dropout(h, 0.5, True, relu=True))):
        rows.append({"group": "ReLU + dropout (p = 0.5, forward + backward)", "impl": name,
                     "seconds": median_seconds(lambda: run_dropout(fn), args.repeats, clock)})

    features = [x_all[b.n_id].to(device) for b in sampled]
    labels = [torch.randint(num_classes, (b.batch_size,), generator=generator).to(device) for b in batches]

    def step_seconds(cls, bf16: bool, inputs: list[torch.Tensor], convert: Callable = lambda x: x) -> float:
        torch.manual_seed(0)
        model = cls("sage", dims[0], args.hidden, num_classes, len(fanouts), 0.5).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.003)

        def run_steps() -> None:
            for b, x, y in zip(batches, inputs, labels):
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                    out = model(convert(x), b.mfgs)
                loss = F.cross_entropy(out.float(), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

        return median_seconds(run_steps, args.repeats, clock)

    steps = [("PyG convolutions + torch dropout", PyGReferenceModel, False),
             (_ours("salientpp float32", device), MFGModel, False)]
    if cuda or torch.cpu._is_avx512_bf16_supported():
        steps.append(("salientpp bfloat16 autocast", MFGModel, True))
    for name, cls, bf16 in steps:
        rows.append({"group": "training step (SAGE, forward + backward + Adam)", "impl": name,
                     "seconds": step_seconds(cls, bf16, features)})
    if data.x.dtype != np.float32:
        stored = [torch.from_numpy(np.asarray(data.x)[b.n_id.numpy()]).to(device) for b in sampled]
        group = f"training step with {data.x.dtype} features (salientpp SAGE)"
        rows.append({"group": group, "impl": "x converted to float32 first",
                     "seconds": step_seconds(MFGModel, False, stored, lambda x: x.float())})
        rows.append({"group": group, "impl": f"{data.x.dtype} x read by the first layer",
                     "seconds": step_seconds(MFGModel, False, stored)})

    nodes = statistics.mean(int(b.n_id.shape[0]) for b in batches)
    print(f"{args.dataset}: {args.batches} batches of {args.batch_size} seeds (mean {nodes:,.0f} nodes), fanouts "
          f"{args.fanouts}, hidden {args.hidden}, on {_device_name(device)}, {args.torch_threads} torch thread(s), "
          f"freed host memory {'kept for reuse' if reused else 'returned (glibc default)'}; {clock_name} ms per "
          f"batch, medians of {args.repeats}")
    print(f"| what | implementation | {clock_name} ms per batch | speed-up |")
    print("|---|---|---:|---:|")
    first: dict[str, float] = {}
    for r in rows:
        r.update(device=args.device, clock=clock_name, ms_per_batch=1e3 * r["seconds"] / args.batches)
        base = first.setdefault(r["group"], r["seconds"])
        r["speedup"] = base / max(r["seconds"], 1e-12)
        print(f"| {r['group']} | {r['impl']} | {r['ms_per_batch']:.1f} | {r['speedup']:.2f}x |")
    write_outputs(args, KIND, rows, args.json_path)
    return 0
