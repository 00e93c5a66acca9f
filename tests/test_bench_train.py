"""``salientpp bench train``: the runs it times (pipelined only where the budget pipelines), the
baselines it is asked for, and what it keeps when a baseline's ranks fail."""
from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from salientpp.bench import train as bench_train
from salientpp.cli import main as cli
from salientpp import host
from salientpp.distributed.group import WorkerError
from salientpp.partition import load_partitioned
from conftest import one_sentence

TINY = ["--fanouts", "5,5", "--batch-size", "64", "--epochs", "1", "--replication", "", "--hidden", "8"]


def _bench_with_baseline(monkeypatch, baseline, part_dir: Path, out: Path, *options: str) -> None:
    """``bench train PART_DIR`` on TINY with ``options``, PyG's baseline replaced by ``baseline``
    (``BaselineConfig -> history``), its rows written to ``out``."""
    monkeypatch.setattr(bench_train, "unavailable_reason", lambda: None)
    monkeypatch.setattr(bench_train, "run_baseline", baseline)
    assert cli(["bench", "train", str(part_dir), *TINY, *options, "--json", str(out)]) == 0


def test_a_baseline_killed_for_memory_is_reported_and_the_measured_rows_are_kept(tmp_path, monkeypatch, capsys):
    assert cli(["prepare", "synthetic:tiny,num_nodes=600", str(tmp_path / "ds")]) == 0
    assert cli(["partition", str(tmp_path / "ds"), str(tmp_path / "p1"), "--parts", "1"]) == 0
    calls = []

    def killed(config):
        calls.append(config.model)
        raise WorkerError(2, "the process was killed by SIGKILL")

    out = tmp_path / "rows.json"
    _bench_with_baseline(monkeypatch, killed, tmp_path / "p1", out, "--pipeline-depth", "4", "--fetch-thread", "on")
    printed = capsys.readouterr().out
    assert len(calls) == 2  # both baselines were tried
    assert printed.count("failed: rank 2 failed: the process was killed by SIGKILL") == 2
    written = json.loads(out.read_text())
    assert written["kind"] == bench_train.KIND
    rows = written["rows"]
    assert [(r["cache"], r["depth"], r["fetch_thread"]) for r in rows] == [("none", 1, False), ("none", 4, True)]
    assert all(r["epoch_s"] > 0 and r["rank_cpu_s"] > 0 for r in rows)
    # the consumer waits for a fetch thread, which only the pipelined run has
    assert rows[0]["wait_s"] == 0 and rows[1]["wait_s"] > 0
    assert "| none | 0 | fp32 | depth 4, fetch thread |" in printed
    assert "pipeline depth 4 (as given), fetch stages on a thread of their own" in printed
    # the fetch stages' CPU seconds are part of their wall time (one thread runs them)
    assert all(0 < r["fetch_cpu_s"] <= r["fetch_s"] + 1e-3 for r in rows)
    # The pipelined run's slowest stage counts its sampling timed alone at its parallelism; the
    # run without pipeline counts its own.
    off, piped = rows
    assert off["sampling_alone_s"] == off["sample_s"] and piped["sampling_alone_s"] > 0
    stages = [off["fetch_s"], off["compute_s"]]
    assert off["vs_slowest_stage"] == pytest.approx(off["epoch_s"] / max(off["sample_s"], *stages))
    assert piped["vs_slowest_stage"] == pytest.approx(piped["epoch_s"] / max(piped["sampling_alone_s"], *stages))
    assert "sampling alone with the pipeline's 1 sampler thread and read-ahead 4:" in printed


def test_only_the_baselines_asked_for_run_and_the_pipelined_runs_are_left_out_when_the_pipeline_is_off(
        tiny_partitions, tmp_path, monkeypatch, capsys):
    root, _ = tiny_partitions
    models = []
    monkeypatch.setattr(bench_train, "unavailable_reason", lambda: None)
    monkeypatch.setattr(bench_train, "run_baseline",
                        lambda config: models.append(config.model) or [{"epoch_s": 1.0, "stage_s": {}, "steps": 1}])
    monkeypatch.setattr(host, "usable_cores", lambda: (1, "affinity mask"))  # 2 ranks on 1 core
    out = tmp_path / "rows.json"
    assert cli(["bench", "train", str(root / "p2"), *TINY, "--baselines", "pyg", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert models == ["pyg"]
    assert "pipeline off: the torch threads take every core" in printed
    rows = json.loads(out.read_text())["rows"]
    assert [(r["cache"], r["depth"]) for r in rows][:1] == [("none", 1)] and len(rows) == 2


def test_each_pyg_worker_count_is_a_baseline_row_and_the_fastest_is_pyg_s_figure(tiny_partitions, tmp_path,
                                                                                    monkeypatch, capsys):
    """PyG's num_workers tuned side by side: one row per count, each run with that count, and the
    ratio line divides PyG's fastest epoch by ours."""
    root, _ = tiny_partitions
    seen = []

    def baseline(config):
        seen.append(config.workers)
        return [{"epoch_s": {0: 3.0, 2: 2.0, 4: 2.5}[config.workers], "stage_s": {}, "steps": 1}]

    out = tmp_path / "rows.json"
    _bench_with_baseline(monkeypatch, baseline, root / "p1", out, "--baselines", "pyg", "--pyg-workers", "0,2,4")
    printed = capsys.readouterr().out
    assert seen == [0, 2, 4]
    rows = json.loads(out.read_text())["rows"]
    assert [r["pyg_workers"] for r in rows if r["alpha"] is None] == [0, 2, 4]
    ours = min(r["epoch_s"] for r in rows if r["cache"] == "none")
    assert (f"epoch against PyG's NeighborLoader + PyG's SAGE: {ours:.3f} s against 2.000 s (its fastest, 2 workers): "
            f"{2.0 / ours:.2f}x") in printed


@pytest.mark.parametrize("option", [["--baselines", "dgl"], ["--baselines", ""], ["--precisions", "fp16"],
                                    ["--precisions", ""], ["--pipeline-depth", "0"], ["--pyg-workers", "4,-1"],
                                    ["--pyg-workers", ""]])
def test_bench_train_refuses_a_bad_option_in_one_sentence(tiny_partitions, capsys, option):
    root, _ = tiny_partitions
    assert cli(["bench", "train", str(root / "p1"), *TINY, *option]) == 2
    assert option[0] in one_sentence(capsys)


def test_outside_load_and_freed_memory_runs_alternate_and_only_the_loaded_runs_have_busy_processes(
        tiny_partitions, tmp_path, monkeypatch, capsys):
    root, _ = tiny_partitions
    busy, calls = [], []

    @contextmanager
    def counted_busy_processes(count):
        busy.append(count)
        try:
            yield
        finally:
            busy.pop()

    def timed_run(args, precision, cache, alpha, depth, reuse_freed_memory=True):
        calls.append((depth, reuse_freed_memory, sum(busy)))
        epoch = 1.0 + sum(busy) + (0.0 if reuse_freed_memory else 0.5)
        return {"cache": cache, "alpha": alpha, "depth": depth, "precision": precision, "epoch_s": epoch,
                "sample_s": 0.1, "fetch_s": 0.1, "fetch_cpu_s": 0.05, "compute_s": 0.5, "compute_cpu_s": 0.5, "rank_cpu_s": 1.8,
                "rows_per_epoch": 0.0}

    monkeypatch.setattr(bench_train, "busy_processes", counted_busy_processes)
    monkeypatch.setattr(bench_train, "_run", timed_run)
    out = tmp_path / "rows.json"
    assert cli(["bench", "train", str(root / "p1"), *TINY, "--no-baseline", "--pipeline-depth", "3",
                "--outside-load", "2", "--compare-freed-memory", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    # the plain runs (off, depth 3); idle and loaded at depth 3, alternating; kept and returned, pipeline off
    assert calls == [(1, True, 0), (3, True, 0)] + [(3, True, 0), (3, True, 2)] * 2 + [(1, True, 0), (1, False, 0)] * 2
    rows = json.loads(out.read_text())["rows"]
    assert [r.get("outside_load") for r in rows] == [None, None, 0, 2, 0, 2, None, None, None, None]
    assert [r.get("reuse_freed_memory") for r in rows[6:]] == [True, False, True, False]
    assert ("median epoch 1.000 s idle and 3.000 s under 2 busy processes: 3.00x; rank 0 used 1.800 CPU s per "
            "epoch idle (1.80 cores) and 1.800 under load (0.60 cores)") in printed
    assert "median epoch 1.000 s kept for reuse and 1.500 s returned to the system: 1.50x" in printed


def _spinners(children: Path) -> set[str]:
    """The pids in ``children`` (a /proc children list) whose command line is the busy loop."""
    found = set()
    for pid in children.read_text().split():
        try:
            if b"while True" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(pid)
        except OSError:  # exited meanwhile
            pass
    return found


def test_busy_processes_are_running_inside_the_block_and_gone_after_it():
    children = Path(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/children")
    if not children.exists():
        pytest.skip("this kernel does not list a thread's children in /proc")
    before = _spinners(children)
    with bench_train.busy_processes(2):
        deadline = time.monotonic() + 30  # a child's command line is the parent's until it has exec'd
        while len(spinning := _spinners(children) - before) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(spinning) == 2
    assert not any(Path(f"/proc/{pid}").exists() for pid in spinning)


def test_the_gpu_fraction_reaches_the_timed_runs_configuration(tmp_path):
    import argparse

    parser = argparse.ArgumentParser()
    bench_train.add_arguments(parser)
    given = bench_train._config(parser.parse_args([str(tmp_path), "--device-fraction", "1"]), "fp32")
    default = bench_train._config(parser.parse_args([str(tmp_path)]), "fp32")
    assert given.device_fraction == 1.0 and default.device_fraction is None  # None: train's default


def test_a_typed_graph_fetches_exactly_the_simulators_rows_and_its_baseline_gets_the_fanout_table(
        tmp_path, monkeypatch, capsys):
    """On a typed graph bench train times R-SAGE with per-relation fanouts; the rows every run
    fetches (all types together) are those the simulator predicts, cached or not. The baseline
    trains PyG's R-SAGE with the same fanout table; the one with salientpp's model is skipped."""
    assert cli(["prepare", "synthetic:igbh,num_nodes=1000", str(tmp_path / "ds")]) == 0
    assert cli(["partition", str(tmp_path / "ds"), str(tmp_path / "p2"), "--parts", "2"]) == 0
    configs = []
    monkeypatch.setattr(bench_train, "unavailable_reason", lambda: None)  # as if PyG could sample
    monkeypatch.setattr(bench_train, "run_baseline",
                        lambda config: configs.append(config) or [{"epoch_s": 1.0, "stage_s": {}, "steps": 1}])
    out = tmp_path / "rows.json"
    fanouts = "cites=4,3;written_by=3,3;rev_written_by=3,3;affiliated_to=2,0;rev_affiliated_to=2,0;topic=2,2;rev_topic=2,2"
    assert cli(["bench", "train", str(tmp_path / "p2"), "--fanouts", fanouts, "--batch-size", "32", "--epochs", "2",
                "--replication", "0.1", "--hidden", "8", "--pipeline-depth", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "rsage, fanouts cites=4,3" in printed
    assert "baseline with salientpp's model skipped: it runs on homogeneous graphs only" in printed
    assert [(c.model, c.typed_model) for c in configs] == [("pyg", "rsage")]
    schema = load_partitioned(tmp_path / "p2", verify=False).schema
    given = {name: [int(f) for f in lists.split(",")] for name, lists in (item.split("=") for item in fanouts.split(";"))}
    assert configs[0].fanouts == tuple(zip(*(given[r.name] for r in schema.relations)))
    rows = json.loads(out.read_text())["rows"]
    assert [(r["cache"], r["depth"]) for r in rows[:4]] == [("none", 1), ("none", 2), ("vip", 1), ("vip", 2)]
    assert rows[4]["cache"].endswith("+ DDP, PyG's to_hetero(SAGE), full replication")
    assert all(r["rows_per_epoch"] == r["predicted_rows"] > 0 for r in rows[:4])
    assert rows[2]["rows_per_epoch"] < rows[0]["rows_per_epoch"] and rows[1]["sampling_alone_s"] > 0


def test_a_typed_graph_has_no_baseline_for_rgcn(tmp_path, monkeypatch, capsys):
    assert cli(["prepare", "synthetic:igbh,num_nodes=600", str(tmp_path / "ds")]) == 0
    assert cli(["partition", str(tmp_path / "ds"), str(tmp_path / "p1"), "--parts", "1"]) == 0
    monkeypatch.setattr(bench_train, "unavailable_reason", lambda: None)
    monkeypatch.setattr(bench_train, "run_baseline", lambda config: pytest.fail("a baseline ran for rgcn"))
    assert cli(["bench", "train", str(tmp_path / "p1"), *TINY, "--model", "rgcn", "--baselines", "pyg"]) == 0
    assert "baseline skipped: PyG's model is built for --model rsage or rgat on a typed graph, not rgcn" in \
        capsys.readouterr().out

@pytest.mark.parametrize("sampler", ["nodewise", "bulk"])
def test_a_typed_graph_with_a_featureless_type_is_timed_with_train_s_embedding(typed_partitions, tmp_path,
                                                                                monkeypatch, capsys, sampler):
    """``--embedding-dim`` (train's option) gives the authors, who have no features, learned rows:
    our runs fetch them from the partitioned embedding beside the features the simulator predicts
    (for either node-wise sampler: the bulk one draws the typed graph as the simulator's does),
    and PyG's baseline gets the same width (an nn.Embedding of its own)."""
    root, _ = typed_partitions
    configs = []
    monkeypatch.setattr(bench_train, "unavailable_reason", lambda: None)
    monkeypatch.setattr(bench_train, "run_baseline",
                        lambda config: configs.append(config) or [{"epoch_s": 1.0, "stage_s": {}, "steps": 1}])
    out = tmp_path / "rows.json"
    argv = ["bench", "train", str(root / "p2"), "--fanouts", "3,2", "--batch-size", "4", "--epochs", "2",
            "--replication", "0.2", "--hidden", "8", "--baselines", "pyg", "--sampler", sampler, "--json", str(out)]
    assert cli(argv) == 2  # without it, the authors have no input rows
    assert "the node type author has no features; give it a learnable embedding with --embedding-dim" in \
        one_sentence(capsys)
    assert cli([*argv, "--embedding-dim", "4"]) == 0
    assert [(c.typed_model, c.embedding_dim, c.features) for c in configs] == [("rsage", 4, True)]
    rows = json.loads(out.read_text())["rows"]
    ours, baseline = rows[:-1], rows[-1]
    assert [r["cache"] for r in ours] == ["none", "vip"] and baseline["cache"].endswith("to_hetero(SAGE), full replication")
    assert all(r["rows_per_epoch"] == r["predicted_rows"] > 0 and r["embedding_rows_per_epoch"] > 0 for r in ours)
    assert all(r["epoch_s"] > 0 and r["num_parts"] == 2 for r in rows)
    assert set(ours[0]) == set(ours[1]) and set(baseline) <= set(ours[0]) | {"pyg_workers"}


def test_pyg_s_typed_model_reads_a_featureless_types_rows_from_its_embedding_by_node_id(typed_partitions):
    import torch

    from salientpp.bench.pyg_baseline import PyGHeteroModel, pyg_graph
    from salientpp.train.setup import model_input_of

    root, _ = typed_partitions
    data = load_partitioned(root / "p2")
    graph = pyg_graph(data)
    model = PyGHeteroModel("rsage", graph, 8, data.num_classes, 1, "paper", inputs=model_input_of(data, 4, True))
    assert list(model.embedding) == ["author"] and model.embedding["author"].weight.shape == (20, 4)
    # a one-layer batch: every paper, the authors 3, 0, 7, 12 (local rows 0..3) and the papers they wrote
    authors = torch.tensor([3, 0, 7, 12])
    writes = graph[("author", "writes", "paper")].edge_index
    kept = writes[:, torch.isin(writes[0], authors)]
    local = torch.full((20,), -1, dtype=torch.int64)
    local[authors] = torch.arange(4)
    cites = ("paper", "cites", "paper")
    batch_edges = {cites: graph[cites].edge_index, ("author", "writes", "paper"): torch.stack([local[kept[0]], kept[1]])}
    out = model({"paper": graph["paper"].x}, batch_edges, n_id_dict={"author": authors})
    assert out.shape == (graph["paper"].num_nodes, data.num_classes)
    out.sum().backward()
    touched = model.embedding["author"].weight.grad.abs().sum(1) > 0
    assert kept.shape[1] and set(torch.nonzero(touched).flatten().tolist()) == set(kept[0].tolist())


@pytest.mark.skipif(bench_train.unavailable_reason() is not None, reason=str(bench_train.unavailable_reason()))
def test_pyg_s_typed_baseline_trains_a_featureless_type_on_its_embedding(typed_partitions):
    from salientpp.bench.pyg_baseline import BaselineConfig, run_baseline

    root, _ = typed_partitions
    relations = load_partitioned(root / "p2", verify=False).schema.num_relations
    history = run_baseline(BaselineConfig(str(root / "p2"), 2, ((3,) * relations, (2,) * relations), 4, 8,
                                          embedding_dim=4))
    assert len(history) == 2 and all(h["epoch_s"] > 0 and h["stage_s"]["train"] > 0 for h in history)


def test_a_homogeneous_graph_given_an_embedding_skips_pyg_s_baselines_which_read_features_only(
        tiny_partitions, monkeypatch, capsys):
    root, _ = tiny_partitions
    monkeypatch.setattr(bench_train, "unavailable_reason", lambda: None)
    monkeypatch.setattr(bench_train, "run_baseline", lambda config: pytest.fail("a baseline ran"))
    assert cli(["bench", "train", str(root / "p1"), *TINY, "--embedding-dim", "4"]) == 0
    assert "baseline skipped: PyG's homogeneous baselines read features only" in capsys.readouterr().out
