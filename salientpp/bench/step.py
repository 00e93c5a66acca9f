"""The model step on CPU: aggregation, dropout and whole training steps, ours against the alternatives.

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
  and ours under ``torch.autocast`` bfloat16 where the CPU has bfloat16 instructions;
* on a dataset with float16 features, our training step with the batch's features converted to
  float32 first against the first layer reading them as stored.

Times are CPU seconds of the process (all threads), which unlike wall time do not grow when other
jobs share the cores; the ratio column divides the first row of each group by the row. Like a
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
from ..distributed.host_memory import keep_freed_memory
from ..errors import check_int
from ..io import check_output_dir, strict_json, write_text_atomic
from ..models.gnn import MFGModel
from ..models.ops import aggregate, dropout
from .pyg_baseline import PyGReferenceModel
from ..sampling import NeighborSampler
from ..sampling import MFG
from ..timing import median_seconds


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", metavar="DATASET", help="a prepared dataset directory (salientpp prepare)")
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batches", type=int, default=4, help="sampled batches per repeat (default 4)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats; medians are reported (default 5)")
    p.add_argument("--torch-threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--no-reuse-freed-memory", dest="reuse_freed_memory", action="store_false",
                   help="keep glibc's default for freed host memory instead of keeping it for reuse, as training ranks do")
    p.add_argument("--json", dest="json_path", default=None, help="write the rows as JSON here (must not exist)")


def _aggregators() -> dict[str, Callable[[torch.Tensor, MFG], torch.Tensor]]:
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
        "salientpp CSR kernel": lambda x, m: aggregate(x, m.rowptr, m.edge_index[0], mean=True),
    }


def _layer_inputs(batches, dims: list[int], generator: torch.Generator) -> list[list[torch.Tensor]]:
    """Per batch, a random input per layer (``[num_src, d_i]``), needing a gradient from layer 1 on."""
    return [[torch.randn(m.num_src, dims[i], generator=generator).requires_grad_(i > 0)
             for i, m in enumerate(b.mfgs)] for b in batches]


def main(args: argparse.Namespace) -> int:
    fanouts = parse_fanouts(args.fanouts)
    for name, value in (("--batch-size", args.batch_size), ("--hidden", args.hidden), ("--batches", args.batches),
                        ("--repeats", args.repeats), ("--torch-threads", args.torch_threads)):
        check_int(value, name)
    if args.json_path:
        check_output_dir(args.json_path, "output file")
    data = load_dataset(args.dataset)
    reused = args.reuse_freed_memory and keep_freed_memory()
    torch.set_num_threads(args.torch_threads)
    generator = torch.Generator().manual_seed(0)
    train_ids = torch.from_numpy(np.array(data.train_idx, dtype=np.int64))
    sampler = NeighborSampler(np.asarray(data.rowptr), np.asarray(data.col), list(fanouts))
    batches = [sampler.sample(train_ids[torch.randperm(train_ids.shape[0], generator=generator)[:args.batch_size]],
                              seed=0, batch_index=i) for i in range(args.batches)]
    x_all = torch.from_numpy(np.asarray(data.x, dtype=np.float32))
    num_classes = data.num_outputs
    dims = [x_all.shape[1]] + [args.hidden] * (len(fanouts) - 1)
    rows: list[dict] = []

    inputs = _layer_inputs(batches, dims, generator)

    def run_aggregation(fn) -> None:
        for b, xs in zip(batches, inputs):
            for m, x in zip(b.mfgs, xs):
                out = fn(x, m)
                if x.requires_grad:
                    out.sum().backward()
                    x.grad = None

    for name, fn in _aggregators().items():
        rows.append({"group": "aggregation (mean, forward + backward)", "impl": name,
                     "cpu_s": median_seconds(lambda: run_aggregation(fn), args.repeats, time.process_time)})

    hidden = [[torch.randn(m.num_dst, args.hidden, generator=generator, requires_grad=True) for m in b.mfgs[:-1]]
              for b in batches]

    def run_dropout(fn) -> None:
        for hs in hidden:
            for h in hs:
                fn(h).sum().backward()
                h.grad = None

    for name, fn in (("torch relu + dropout", lambda h: F.dropout(torch.relu(h), 0.5, True)),
                     ("salientpp fused relu + dropout", lambda h: dropout(h, 0.5, True, relu=True))):
        rows.append({"group": "ReLU + dropout (p = 0.5, forward + backward)", "impl": name,
                     "cpu_s": median_seconds(lambda: run_dropout(fn), args.repeats, time.process_time)})

    features = [x_all[b.n_id] for b in batches]
    labels = [torch.randint(num_classes, (b.batch_size,), generator=generator) for b in batches]

    def step_seconds(cls, bf16: bool, inputs: list[torch.Tensor], convert: Callable = lambda x: x) -> float:
        torch.manual_seed(0)
        model = cls("sage", dims[0], args.hidden, num_classes, len(fanouts), 0.5)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.003)

        def run_steps() -> None:
            for b, x, y in zip(batches, inputs, labels):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    out = model(convert(x), b.mfgs)
                loss = F.cross_entropy(out.float(), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

        return median_seconds(run_steps, args.repeats, time.process_time)

    steps = [("PyG convolutions + torch dropout", PyGReferenceModel, False), ("salientpp float32", MFGModel, False)]
    if torch.cpu._is_avx512_bf16_supported():
        steps.append(("salientpp bfloat16 autocast", MFGModel, True))
    for name, cls, bf16 in steps:
        rows.append({"group": "training step (SAGE, forward + backward + Adam)", "impl": name,
                     "cpu_s": step_seconds(cls, bf16, features)})
    if data.x.dtype != np.float32:
        stored = [torch.from_numpy(np.asarray(data.x)[b.n_id.numpy()]) for b in batches]
        group = f"training step with {data.x.dtype} features (salientpp SAGE)"
        rows.append({"group": group, "impl": "x converted to float32 first",
                     "cpu_s": step_seconds(MFGModel, False, stored, lambda x: x.float())})
        rows.append({"group": group, "impl": f"{data.x.dtype} x read by the first layer",
                     "cpu_s": step_seconds(MFGModel, False, stored)})

    nodes = statistics.mean(int(b.n_id.shape[0]) for b in batches)
    print(f"{args.dataset}: {args.batches} batches of {args.batch_size} seeds (mean {nodes:,.0f} nodes), fanouts "
          f"{args.fanouts}, hidden {args.hidden}, {args.torch_threads} torch thread(s), freed host memory "
          f"{'kept for reuse' if reused else 'returned (glibc default)'}; CPU ms per batch, medians of {args.repeats}")
    print("| what | implementation | CPU ms per batch | speed-up |")
    print("|---|---|---:|---:|")
    first: dict[str, float] = {}
    for r in rows:
        r["cpu_ms_per_batch"] = 1e3 * r["cpu_s"] / args.batches
        base = first.setdefault(r["group"], r["cpu_s"])
        r["speedup"] = base / max(r["cpu_s"], 1e-12)
        print(f"| {r['group']} | {r['impl']} | {r['cpu_ms_per_batch']:.1f} | {r['speedup']:.2f}x |")
    if args.json_path:
        write_text_atomic(args.json_path, strict_json(rows, indent=2) + "\n")
    return 0
