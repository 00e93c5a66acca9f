"""``salientpp selfcheck``: what one command can prove about the device path on this machine.

On ``--device cuda`` it is the proof of the GPU path; on ``--device cpu`` the same checks run on
the CPU path (the tests run them that way). Each check is a :class:`Check` row of the table:

1. the extension: loaded, built with or without CUDA kernels, and the GPUs torch sees;
2. the row gather: the kernel against torch indexing on random row origins (empty parts, two
   tiers, pinned host tables on CUDA), with and without output positions; the model step's
   kernels (CSR aggregation with its root term, forward and backward, and the fused ReLU +
   dropout) in float32 and bfloat16: on CUDA against the CPU kernels (forward and dropout equal
   bit for bit, the aggregation's gradient within float rounding), on the CPU against torch's
   ``index_add_``;
3. per preset (``tiny``, ``small``), a 1-rank training on the device:
   * every assembled batch equals ``x[n_id]`` of the unpartitioned dataset;
   * the training's test accuracy against the same training on the CPU, within noise;
   * on CUDA, the host waits per step in the training epoch (``torch.cuda.set_sync_debug_mode``);
4. the bulk samplers on the device (:class:`~salientpp.sampling.BulkSampler`, node-wise and
   LADIES): every edge is a graph edge, node-wise destinations draw ``min(f, d)`` distinct
   neighbours, and the mean nodes per hop equal the CPU's within Monte-Carlo error (node-wise:
   the C++ sampler's; LADIES: the CPU bulk sampler's, which the tests check against its definition);
5. 2 local ranks on the device over the tiny preset in 2 parts, with a VIP cache in both tiers
   and a pipeline: every assembled batch equals ``x[n_id]`` (on one GPU the ranks share it and
   exchange over gloo);
6. ``bench train`` on the small preset in 1 part on the device: the epoch against PyG's
   NeighborLoader on the same device where PyG can sample, and the pipelined epoch over its
   slowest stage (left out with ``--no-bench``).

A check that raises is one failed row (traceback on stderr), and the checks after it still run.
"""
from __future__ import annotations

import argparse
import itertools
import math
import tempfile
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from ._ext import extension
from .errors import InputError, check_int

PRESETS = ("tiny", "small")
# Test accuracies of two trainings that differ only in their random numbers (another device's
# dropout masks) differ by about sqrt(2 p (1 - p) / n) from the test set alone; training adds its
# own spread, measured at up to 0.01 between seeds on these presets. The bound allows 4 sigma of
# the former plus that.
SEED_SPREAD = 0.01


@dataclass(frozen=True)
class Check:
    """One row of the table: ``ok`` is ``None`` for a line that informs rather than checks."""

    name: str
    ok: bool | None
    detail: str

    @property
    def status(self) -> str:
        return {True: "pass", False: "FAIL", None: "info"}[self.ok]


def environment(device: str) -> list[Check]:
    """The extension and the GPUs; raises :class:`InputError` when ``device`` cannot be used."""
    ext = extension()
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    names = ", ".join(torch.cuda.get_device_name(i) for i in range(count)) or "none"
    rows = [Check("extension", True, f"loaded; CUDA kernels {'built' if ext.with_cuda else 'not built'}"),
            Check("GPUs", None, f"{count} ({names})")]
    if device == "cuda":
        if count == 0:
            raise InputError("--device cuda was asked for but torch sees no CUDA GPU; run the self-check on a "
                             "GPU machine, or with --device cpu")
        if not ext.with_cuda:
            raise InputError("the salientpp extension was built without its CUDA kernels (torch had no CUDA when "
                             "it was built); rebuild it on this machine with `pip install --no-build-isolation -e .`")
        if count == 1:
            rows.append(Check("multi-rank on 1 GPU", None, "NCCL cannot put two ranks on one GPU, so local ranks "
                                                           "beyond the GPU count exchange rows over gloo"))
    return rows


def random_sources(gen: torch.Generator, device: torch.device, num_rows: int, width: int,
                   sizes: list[tuple[int, int, int]], dtype: torch.dtype = torch.float32) -> list:
    """Row-gather sources taking ``n`` rows each of tables ``[r0 + r1, width]`` (``r1 > 0``: a
    second tier, pinned on CUDA), at disjoint random positions of a ``[num_rows, width]`` output;
    ``sizes`` holds ``(n, r0, r1)`` per source. Tables and indices other than a second tier live
    on ``device``; values are integers in [-1000, 1000) cast to ``dtype``."""
    from .distributed.device import RowSource

    positions = torch.randperm(num_rows, generator=gen)
    sources, at = [], 0
    for n, r0, r1 in sizes:
        low = torch.randint(-1000, 1000, (r0, width), generator=gen).to(dtype).to(device)
        high = torch.randint(-1000, 1000, (r1, width), generator=gen).to(dtype) if r1 else None
        if high is not None and device.type == "cuda":
            high = high.pin_memory()
        idx = torch.randint(0, r0 + r1, (n,), generator=gen) if r0 + r1 else torch.empty(0, dtype=torch.int64)
        sources.append(RowSource(low, idx.to(device), positions[at:at + n].to(device), high))
        at += n
    return sources


def check_gather(device: torch.device, plans: int = 200) -> Check:
    """The row gather on ``device`` against torch indexing on random plans: an owned source with
    two tiers and three more, some empty, then serving peers (one two-tier source without positions)."""
    from .distributed.device import gather_rows, gather_rows_reference

    gen = torch.Generator().manual_seed(0)
    cases = []
    for i in range(plans):
        width = (3, 16, 100, 128)[i % 4]  # odd row sizes take the narrow copy path on CUDA
        num_rows = int(torch.randint(0, 200, (1,), generator=gen))
        counts = (torch.randint(0, 3, (4,), generator=gen) * (num_rows // 8)).tolist()
        sizes = [(n, int(torch.randint(1, 50, (1,), generator=gen)), int(torch.randint(0, 2, (1,), generator=gen)) * 20)
                 for n in counts]
        cases.append((num_rows, width, random_sources(gen, device, num_rows, width, sizes)))
    serve = random_sources(gen, device, 64, 8, [(64, 30, 20)])[0]
    cases.append((64, 8, [replace(serve, pos=None)]))
    failed = 0
    for num_rows, width, sources in cases:
        ours = gather_rows(torch.zeros(num_rows, width, device=device), sources)
        expected = gather_rows_reference(torch.zeros(num_rows, width, device=device), sources)
        failed += not torch.equal(ours.cpu(), expected.cpu())
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return Check("row gather vs torch indexing", failed == 0, f"{plans + 1 - failed} of {plans + 1} random plans equal")


def check_model_kernels(device: torch.device) -> Check:
    """The model step's kernels on ``device`` on random CSRs, mean and sum, float32 and bfloat16:
    on CUDA against the CPU kernels (what ``tests/test_model_ops.py`` asserts where a GPU is, for
    a GPU machine without pytest); on the CPU the aggregation against torch's ``index_add_``."""
    from .models.ops import aggregate_reference, aggregate_with_root, dropout, runs_kernels

    twins = device.type == "cuda" and runs_kernels(device)  # else torch's operations run there
    gen = torch.Generator().manual_seed(0)
    cases = failed = 0
    for dtype, mean, (num_dst, num_src, max_degree) in itertools.product(
            (torch.float32, torch.bfloat16), (True, False), ((700, 900, 15), (1, 5, 0), (3000, 20000, 40))):
        degree = torch.randint(0, max_degree + 1, (num_dst,), generator=gen)
        rowptr = torch.cat([torch.zeros(1, dtype=torch.int64), degree.cumsum(0)])
        col = torch.randint(0, num_src, (int(rowptr[-1]),), generator=gen)
        x = torch.randn(num_src, 70, generator=gen).to(dtype).requires_grad_()
        grad_out = torch.randn(num_dst, 70, generator=gen).to(dtype)
        ours = x.detach().to(device).requires_grad_()
        out, root = aggregate_with_root(ours, rowptr.to(device), col.to(device), mean)
        (out * grad_out.to(device)).sum().backward()
        torch.manual_seed(cases)
        dropped = dropout(ours.detach(), 0.3, relu=True).cpu()
        if twins:  # the same bits as the CPU kernels, the same dropout mask
            expected, expected_root = aggregate_with_root(x, rowptr, col, mean)
            torch.manual_seed(cases)
            same = (torch.equal(out.cpu(), expected) and torch.equal(root.cpu(), expected_root)
                    and torch.equal(dropped, dropout(x.detach(), 0.3, relu=True)))
        else:  # torch's index_add_ in float32; the dropout scales what it keeps by 1 / (1 - p)
            expected = aggregate_reference(x.float(), rowptr, col, mean).to(dtype)
            kept = dropped != 0
            same = (torch.allclose(out.cpu().float(), expected.float(), rtol=1e-2, atol=1e-2)
                    and torch.allclose(dropped[kept].float(), (x.detach().float().relu() / 0.7)[kept], rtol=1e-2))
        (expected * grad_out).sum().backward()
        tolerance = 1e-5 if dtype == torch.float32 else 1e-2  # atomic adds sum in another order
        same = same and torch.allclose(ours.grad.cpu().float(), x.grad.float(), rtol=tolerance, atol=tolerance)
        cases += 1
        failed += not same
    against = "CUDA kernels vs the CPU kernels" if twins else f"{device.type} kernels vs torch's index_add_"
    return Check("model-step kernels", failed == 0, f"{against}: {cases - failed} of {cases} cases equal "
                 "(aggregation with its root term and gradient, ReLU + dropout; float32 and bfloat16)")


def _hop_sizes(batches) -> np.ndarray:
    """float64 ``[batches, L + 1]``: nodes after hop 0 (the seeds), 1, ..., L of each batch."""
    return np.array([[b.batch_size] + [m.num_src for m in reversed(b.mfgs)] for b in batches], dtype=np.float64)


def _edges_valid(batches, rowptr: np.ndarray, col: np.ndarray, fanout_check: list[int] | None) -> bool:
    """Every MFG edge ``n_id[src] -> n_id[dst]`` is a graph edge; with ``fanout_check``, each
    destination of hop h has ``min(f_h, d)`` distinct sources."""
    n = rowptr.shape[0] - 1
    keys = np.repeat(np.arange(n), np.diff(rowptr)) * n + col
    for batch in batches:
        n_id = batch.n_id.cpu().numpy()
        for h, mfg in enumerate(reversed(batch.mfgs)):
            src, dst = mfg.edge_index.cpu().numpy()
            key = n_id[dst] * n + n_id[src]
            pos = np.searchsorted(keys, key).clip(max=keys.shape[0] - 1)
            if not np.all(keys[pos] == key):
                return False
            if fanout_check is not None:
                degree = np.diff(rowptr)[n_id[:mfg.num_dst]]
                if not np.array_equal(np.bincount(dst, minlength=mfg.num_dst), np.minimum(fanout_check[h], degree)):
                    return False
                if np.unique(dst * n + n_id[src]).shape[0] != src.shape[0]:
                    return False
    return True


def check_bulk(device: torch.device, batches: int = 400) -> list[Check]:
    """Bulk node-wise and LADIES on ``device`` against the CPU (see the module docstring)."""
    from .data.synthetic import synthetic_dataset
    from .sampling import BULK, LADIES, NODEWISE, make_sampler

    ds = synthetic_dataset("tiny,num_nodes=3000,avg_degree=16,seed=1")
    rowptr, col = np.asarray(ds.rowptr), np.asarray(ds.col)
    rng = np.random.default_rng(0)
    seed_lists = [torch.from_numpy(rng.choice(ds.num_nodes, 16, replace=False)) for _ in range(batches)]
    rows = []
    # Each bulk kind on the device, against the CPU sampler of its distribution: the C++ one for
    # node-wise, the bulk one for LADIES.
    for name, kind, reference_kind, fanouts in (("nodewise", BULK, NODEWISE, [10, 5]),
                                                ("ladies", LADIES, LADIES, [64, 64])):
        on_device = make_sampler(rowptr, col, fanouts, kind, device=device)
        drawn = [b for start in range(0, batches, 50)
                 for b in on_device.sample_bulk(seed_lists[start:start + 50], seed=1, first_index=start)]
        cpu = make_sampler(rowptr, col, fanouts, reference_kind)
        reference = [cpu.sample(s, seed=2, batch_index=i) for i, s in enumerate(seed_lists)]
        ours, theirs = _hop_sizes(drawn), _hop_sizes(reference)
        # Two independent samples of `batches` batches each: the difference of the means has
        # standard error sqrt(var_a / n + var_b / n); 4 of them bound a correct sampler's difference.
        se = np.sqrt((ours.var(axis=0) + theirs.var(axis=0)) / batches)
        close = bool(np.all(np.abs(ours.mean(axis=0) - theirs.mean(axis=0)) <= 4 * se + 1e-9))
        valid = _edges_valid(drawn, rowptr, col, None if kind.layer_sizes else fanouts)
        weights = all(m.edge_weight is not None and bool((m.edge_weight > 0).all()) for b in drawn for m in b.mfgs
                      ) if kind.weighted else True
        detail = (f"nodes per hop {np.round(ours.mean(axis=0), 1).tolist()} vs cpu "
                  f"{np.round(theirs.mean(axis=0), 1).tolist()}; edges {'valid' if valid else 'INVALID'}")
        rows.append(Check(f"bulk {name} sampler on {device.type}", close and valid and weights, detail))
    return rows


def _prepare(preset: str, work: Path, parts: int = 1) -> tuple[Path, object]:
    from .data.synthetic import synthetic_dataset
    from .partition.partitioner import partition_dataset

    dataset = synthetic_dataset(preset)
    part_dir = work / f"{preset}-{parts}"
    # A random partition: the checks need no good cut, and no pymetis (GPU machines are often offline).
    partition_dataset(dataset, part_dir, parts, method="random")
    return part_dir, dataset


def _config(part_dir: Path, device: str, epochs: int):
    from .train import TrainConfig

    return TrainConfig(str(part_dir), epochs=epochs, hidden=128, layers=2, fanouts=(10, 5), batch_size=256,
                       policy="none", device=device, seed=0, progress=False)


def _equal_batches(trainer, dataset) -> tuple[int, int]:
    """(batches whose assembled ``x`` equals ``dataset.x[n_id]``, batches) in one pass of the
    trainer's loader; ``n_id`` is in the partitioned numbering, mapped back through ``orig_id``."""
    x = torch.as_tensor(np.asarray(dataset.x))[torch.as_tensor(np.asarray(trainer.graph.data.orig_id))]
    equal = batches = 0
    for batch in trainer.loader:
        equal += torch.equal(batch.x.cpu(), x[batch.n_id.cpu()])
        batches += 1
    return equal, batches


def _features_and_syncs(config, dataset) -> tuple[Check, Check | None]:
    """Every training batch's features against the dataset, then one epoch with CUDA's sync
    debug mode counting the host's waits."""
    from .distributed import init_distributed, shutdown_distributed
    from .train import trainer_for

    ctx = init_distributed(config.device)
    try:
        trainer = trainer_for(config, ctx)
        equal, batches = _equal_batches(trainer, dataset)
        features = Check("assembled x equals x[n_id]", equal == batches > 0, f"{equal} of {batches} batches")
        syncs = None
        if ctx.device.type == "cuda":
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                try:
                    trainer.train_epoch(1)
                finally:
                    torch.cuda.set_sync_debug_mode("default")
            waits = [w for w in caught if "synchroniz" in str(w.message)]
            syncs = Check("host waits for the GPU in a training epoch", None,
                          f"{len(waits)} in {len(trainer.loader)} steps"
                          + (f" (first: {waits[0].filename}:{waits[0].lineno})" if waits else ""))
        return features, syncs
    finally:
        shutdown_distributed(ctx)


def check_preset(preset: str, device: str, work: Path, epochs: int) -> list[Check]:
    """Features, accuracy against the CPU, and (CUDA) host waits of a 1-rank training of ``preset``."""
    from .train import train

    part_dir, dataset = _prepare(preset, work)
    features, syncs = _features_and_syncs(_config(part_dir, device, epochs), dataset)
    rows = [Check(f"{preset}: {features.name}", features.ok, features.detail)]
    if syncs is not None:
        rows.append(Check(f"{preset}: {syncs.name}", syncs.ok, syncs.detail))
    acc = train(_config(part_dir, device, epochs)).test_at_best
    n = int(np.asarray(dataset.test_idx).shape[0])
    if device == "cpu":
        rows.append(Check(f"{preset}: test accuracy", None, f"{acc:.3f} on {n:,} test nodes (the CPU is the "
                                                            "reference of --device cuda)"))
        return rows
    ref = train(_config(part_dir, "cpu", epochs)).test_at_best
    p = min(max((acc + ref) / 2, 1 / n), 1 - 1 / n)
    bound = 4 * math.sqrt(2 * p * (1 - p) / n) + SEED_SPREAD
    rows.append(Check(f"{preset}: test accuracy, {device} vs cpu", abs(acc - ref) <= bound,
                      f"{acc:.3f} vs {ref:.3f} (|diff| {abs(acc - ref):.3f}, bound {bound:.3f}, {n:,} test nodes)"))
    return rows


def _rank_features(part_dir: str, preset: str, device: str) -> tuple[int, int, dict[str, float]]:
    """One rank of :func:`check_ranks`: its equal and total batches, and its exchange counters."""
    from .data.synthetic import synthetic_dataset
    from .distributed import init_distributed, shutdown_distributed
    from .train import TrainConfig, trainer_for

    ctx = init_distributed(device)
    try:
        config = TrainConfig(part_dir, epochs=1, hidden=16, layers=2, fanouts=(10, 5), batch_size=64, policy="vip",
                             replication=0.5, device_fraction=0.3, pipeline_depth=3, device=device, seed=0,
                             sampler="bulk", sampling_device=device, progress=False)
        trainer = trainer_for(config, ctx)
        equal, batches = _equal_batches(trainer, synthetic_dataset(preset))
        return equal, batches, trainer.loader.stats.as_dict()
    finally:
        shutdown_distributed(ctx)


def check_ranks(device: str, work: Path, preset: str = "tiny", ranks: int = 2) -> Check:
    """``ranks`` local ranks on ``device`` over ``preset`` in as many parts, with a VIP cache in
    both tiers (half the remote rows, 30% of them on the device), pipeline depth 3 and the batches
    drawn on ``device`` by the bulk sampler (``--sampling-device``): every assembled batch equals
    ``x[n_id]``, and rows came through both the exchange and the device tier."""
    from .distributed import launch

    part_dir, _ = _prepare(preset, work, ranks)
    results = launch(_rank_features, (str(part_dir), preset, device), nprocs=ranks, timeout_s=600)
    equal = sum(r[0] for r in results)
    batches = sum(r[1] for r in results)
    received = sum(r[2]["received"] for r in results)
    hits = sum(r[2]["device_hits"] for r in results)
    return Check(f"{preset}, {ranks} ranks, cache in both tiers, drawn on the {device}: assembled x equals x[n_id]",
                 equal == batches > 0 and received > 0 and hits > 0,
                 f"{equal} of {batches} batches; {received:,.0f} rows received, {hits:,.0f} from the device tier")


def check_bench(device: str, work: Path, epochs: int, preset: str = "small") -> list[Check]:
    """``bench train`` of ``preset`` in 1 part on ``device``: our epoch against PyG's on the same
    device where PyG can sample here, and the pipelined epoch over its slowest stage where the
    bench times a pipeline (it does not on a CPU whose torch threads take every core)."""
    import json

    from .bench.train import BASELINE_MODELS, add_arguments, main as bench_main
    from .bench.pyg_baseline import PYG, unavailable_reason

    part_dir = work / f"{preset}-1"
    if not part_dir.exists():  # check_preset has partitioned it when the presets include it
        part_dir, _ = _prepare(preset, work)
    out = work / "bench.json"
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    bench_main(parser.parse_args([str(part_dir), "--epochs", str(epochs), "--device", device, "--json", str(out)]))
    rows = json.loads(out.read_text())["rows"]
    ours = min(r["epoch_s"] for r in rows if r["cache"] == "none")
    pyg = [r["epoch_s"] for r in rows if BASELINE_MODELS[PYG] in r["cache"]]
    name = f"bench train {preset}-1"
    checks = [Check(f"{name}: epoch vs PyG", None,
                    f"{ours:.3f} s vs {pyg[0]:.3f} s: {pyg[0] / ours:.2f}x faster (goal on a GPU: 4x)" if pyg else
                    f"salientpp {ours:.3f} s/epoch; no PyG baseline: {unavailable_reason() or 'its run failed (above)'}")]
    checks += [Check(f"{name}: pipelined / slowest stage", None,
                     f"{r['vs_slowest_stage']:.2f} at depth {r['depth']} (goal on a GPU: 1.15)")
               for r in rows if r["cache"] == "none" and r["depth"] > 1]
    return checks


def run(device: str, presets: list[str], epochs: int, bench: bool) -> list[Check]:
    """Every check, in order, printing each row as it completes."""
    for preset in presets:
        if preset not in PRESETS:
            raise InputError(f"unknown preset {preset!r} for the self-check; choose from {', '.join(PRESETS)}")
    check_int(epochs, "--epochs")
    rows = environment(device)
    print(f"salientpp selfcheck --device {device}\n\n| check | result | detail |\n|---|---|---|", flush=True)
    for row in rows:
        _print(row)
    with tempfile.TemporaryDirectory(prefix="salientpp-selfcheck-") as tmp:
        work = Path(tmp)
        steps = [("row gather", lambda: [check_gather(torch.device(device))]),
                 ("model-step kernels", lambda: [check_model_kernels(torch.device(device))]),
                 ("bulk samplers", lambda: check_bulk(torch.device(device)))]
        steps += [(f"{p}: training", lambda p=p: check_preset(p, device, work, epochs)) for p in presets]
        steps.append(("ranks", lambda: [check_ranks(device, work)]))
        if bench:
            steps.append(("bench train", lambda: check_bench(device, work, 3)))
        for name, step in steps:
            for row in _rows_of(name, step):
                _print(row)
                rows.append(row)
    return rows


def _rows_of(name: str, step: Callable[[], list[Check]]) -> list[Check]:
    """The rows of the step ``name``; a step that raises is one failed row with the error's first
    line (its traceback on stderr), so that the checks after it still run."""
    try:
        return step()
    except InputError:
        raise
    except Exception as exc:  # a self-check reports a broken step and goes on
        traceback.print_exc()
        lines = str(exc).strip().splitlines()
        return [Check(name, False, f"raised {type(exc).__name__}: {lines[0] if lines else ''}")]


def _print(row: Check) -> None:
    print(f"| {row.name} | {row.status} | {row.detail} |", flush=True)
