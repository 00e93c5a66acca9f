"""Memory estimates and ``--memory-limit``: refusals before any output, the available-memory
probe, and estimates checked against the measured peak RSS of real runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import salientpp
from salientpp import host
from salientpp._ext import extension
from salientpp.cache import Budget, Workload
from salientpp.cli import main
from salientpp.data.format import save_dataset
from salientpp.data.synthetic import synthetic_dataset
from salientpp.errors import InputError
from salientpp.partition import load_partitioned
from salientpp.partition.partitioner import partition_dataset
from salientpp.host import available_memory
from salientpp.resources import (KEPT_FREED_FRACTION, MemoryEstimate, batch_size_estimate, check_memory,
                                 estimate_analyze, estimate_partition, estimate_train)

REPO = Path(salientpp.__file__).resolve().parents[1]
ANALYZE = ["--fanouts", "10,5", "--batch-size", "16", "--replication", "0.1"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return save_dataset(synthetic_dataset("tiny"), tmp_path_factory.mktemp("tiny") / "dataset")


@pytest.fixture
def tiny_parts(tmp_path) -> Path:
    """A fresh 2-part partitioning of ``tiny`` (fresh: the tests check that nothing is added to it)."""
    part_dir = tmp_path / "p2"
    partition_dataset(synthetic_dataset("tiny"), part_dir, 2)
    return part_dir


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def one_error_line(capsys, command: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"salientpp {command}: error: "), err
    return err


# ---- refusals --------------------------------------------------------------------------------------

def test_partition_over_the_memory_limit_exits_2_and_writes_nothing(tmp_path, tiny_dir, capsys):
    before = listing(tmp_path)
    assert main(["partition", str(tiny_dir), str(tmp_path / "out"), "--parts", "2", "--memory-limit", "1MiB"]) == 2
    err = one_error_line(capsys, "partition")
    assert "needs about" in err and "--memory-limit allows only 1 MiB" in err and "raise --memory-limit" in err
    assert listing(tmp_path) == before  # neither OUT_DIR nor its temporary sibling


def test_analyze_over_the_memory_limit_exits_2_and_writes_nothing(tiny_parts, tmp_path, capsys):
    before = listing(tmp_path)
    assert main(["analyze", str(tiny_parts), *ANALYZE, "--memory-limit", "1MiB"]) == 2  # default: PART_DIR/cache/NAME
    err = one_error_line(capsys, "analyze")
    assert "the vip analysis of 2 partitions" in err and "--memory-limit allows only 1 MiB" in err
    assert main(["analyze", str(tiny_parts), *ANALYZE, "--memory-limit", "1MiB", "--out", str(tmp_path / "plan")]) == 2
    one_error_line(capsys, "analyze")
    assert listing(tmp_path) == before  # no PART_DIR/cache, no --out directory


@pytest.mark.parametrize("limit, shown", [("1", "1 byte"), ("1000", "1,000 bytes"), ("1536", "1.5 KiB")])
def test_a_tiny_memory_limit_is_shown_as_given_not_as_0_mib(tmp_path, tiny_dir, capsys, limit, shown):
    assert main(["partition", str(tiny_dir), str(tmp_path / "out"), "--parts", "2", "--memory-limit", limit]) == 2
    assert f"--memory-limit allows only {shown};" in one_error_line(capsys, "partition")


def test_a_size_that_is_not_zero_never_reads_as_zero():
    sizes = [0, 1, 2, 1023, 1024, 1536, 2**20 - 1, 2**20, 2**30 - 1, 2**30, 2**40, 3 * 2**50]
    assert [host.format_bytes(size) for size in sizes] == [
        "0 bytes", "1 byte", "2 bytes", "1,023 bytes", "1.0 KiB", "1.5 KiB", "1024.0 KiB", "1 MiB", "1024 MiB",
        "1.0 GiB", "1.0 TiB", "3,072.0 TiB"]


def test_a_run_within_the_limit_prints_its_estimate(tiny_parts, tmp_path, capsys):
    assert main(["analyze", str(tiny_parts), *ANALYZE, "--memory-limit", "64GiB", "--out", str(tmp_path / "plan")]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("the vip analysis of 2 partitions of 2,000 nodes needs about ") and "of memory (" in line


@pytest.mark.parametrize("command", ["partition", "analyze"])
@pytest.mark.parametrize("value, words", [("lots", "is not a size"), ("0", "must be a positive size"),
                                          ("-2GiB", "is not a size")])
def test_a_bad_memory_limit_is_one_sentence_and_exit_2(tmp_path, tiny_dir, tiny_parts, capsys, command, value, words):
    args = ([str(tiny_dir), str(tmp_path / "out"), "--parts", "2"] if command == "partition"
            else [str(tiny_parts), *ANALYZE])
    before = listing(tmp_path)
    assert main([command, *args, f"--memory-limit={value}"]) == 2
    err = one_error_line(capsys, command)
    assert "--memory-limit" in err and words in err
    assert listing(tmp_path) == before


def test_partition_refuses_without_a_limit_when_too_little_memory_is_available(tmp_path, tiny_dir, monkeypatch,
                                                                               capsys):
    monkeypatch.setattr(host, "available_memory", lambda: 100 * 2**20)
    # A larger --memory-limit cannot raise the budget above what is available.
    for extra in ([], ["--memory-limit", "1TiB"]):
        assert main(["partition", str(tiny_dir), str(tmp_path / "out"), "--parts", "2", *extra]) == 2
        err = one_error_line(capsys, "partition")
        assert "but only 100 MiB is available (MemAvailable and the cgroup limit)" in err
        assert "use --method multilevel" in err and "raise --memory-limit" not in err
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("key, value, expected", [
    ("num_edges", "many", "gives num_edges as 'many', not a non-negative integer below 2^63"),
    ("num_nodes", 10**25, f"gives num_nodes as {10**25}, not a positive integer below 2^63"),
    ("num_features", 2**63, f"gives num_features as {2**63}, not a positive integer below 2^63"),
])
def test_partition_refuses_a_meta_json_without_valid_counts(tmp_path, tiny_dir, capsys, key, value, expected):
    import shutil
    dataset = tmp_path / "dataset"
    shutil.copytree(tiny_dir, dataset)
    meta = json.loads((dataset / "meta.json").read_text())
    meta[key] = value
    (dataset / "meta.json").write_text(json.dumps(meta))
    assert main(["partition", str(dataset), str(tmp_path / "out"), "--parts", "2"]) == 2
    assert expected in one_error_line(capsys, "partition")
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "out").exists()


def test_check_memory_compares_the_total_with_the_budget(monkeypatch):
    monkeypatch.setattr(host, "available_memory", lambda: 10 * 2**30)
    estimate = MemoryEstimate("the job", {"a": 3 * 2**30, "b": 2**30})
    assert estimate.total == 4 * 2**30
    assert estimate.describe() == "about 4.0 GiB (a 3.0 GiB, b 1.0 GiB)"
    assert check_memory(estimate, None) == ("the job needs about 4.0 GiB (a 3.0 GiB, b 1.0 GiB) of memory "
                                            "(available 10.0 GiB)")
    assert check_memory(estimate, 4 * 2**30).endswith("(limit 4.0 GiB)")  # exactly the limit fits
    with pytest.raises(InputError, match=r"the job needs about 4.0 GiB of memory but --memory-limit allows only"):
        check_memory(estimate, 4 * 2**30 - 1)


# ---- what may be allocated ------------------------------------------------------------------------

def _meminfo_kb(key: str) -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


@pytest.mark.skipif(not Path("/proc/meminfo").is_file(), reason="needs Linux's /proc/meminfo")
def test_available_memory_is_positive_and_at_most_the_machines_memory():
    assert 0 < available_memory() <= _meminfo_kb("MemTotal") * 1024


def _fake_system(tmp_path: Path, monkeypatch, cgroup_lines: str, files: dict[str, str]) -> None:
    """Point the probe at a fake /proc/meminfo (4 GiB available), /proc/self/cgroup and cgroup tree."""
    (tmp_path / "meminfo").write_text("MemTotal:  8388608 kB\nMemAvailable:  4194304 kB\n")
    (tmp_path / "cgroup").write_text(cgroup_lines)
    for name, text in files.items():
        (tmp_path / "fs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / name).write_text(text)
    monkeypatch.setattr(host, "MEMINFO", tmp_path / "meminfo")
    monkeypatch.setattr(host, "PROC_CGROUP", tmp_path / "cgroup")
    monkeypatch.setattr(host, "CGROUP_ROOT", tmp_path / "fs")


@pytest.mark.parametrize("cgroup_lines, files, expected_mib", [
    # cgroup v2, 1 GiB limit, 512 MiB used of which 128 MiB inactive file cache -> 640 MiB left
    ("0::/job\n", {"job/memory.max": "1073741824\n", "job/memory.current": "536870912\n",
                   "job/memory.stat": "anon 1\ninactive_file 134217728\n"}, 640),
    ("0::/\n", {"memory.max": "max\n", "memory.current": "536870912\n"}, 4096),  # no limit: MemAvailable
    # cgroup v1, 2 GiB limit, 1.5 GiB used -> 512 MiB left
    ("4:memory:/docker/abc\n0::/\n", {"memory/docker/abc/memory.limit_in_bytes": "2147483648\n",
                                      "memory/docker/abc/memory.usage_in_bytes": "1610612736\n"}, 512),
    ("4:memory:/x\n", {"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 4096),  # v1 "unlimited"
    ("", {}, 4096),  # no cgroup information
    # a limit far above MemAvailable does not raise it
    ("0::/\n", {"memory.max": str(64 * 2**30), "memory.current": "0"}, 4096),
])
def test_available_memory_is_the_smaller_of_memavailable_and_the_cgroup_headroom(
        tmp_path, monkeypatch, cgroup_lines, files, expected_mib):
    _fake_system(tmp_path, monkeypatch, cgroup_lines, files)
    assert available_memory() == expected_mib * 2**20


# ---- estimates against measured peaks ------------------------------------------------------------

# Runs `salientpp ARGS` in a fresh interpreter and prints the VmHWM (peak RSS) before the command
# (after the imports) and at its end. The child reports its own VmHWM because getrusage(RUSAGE_CHILDREN).ru_maxrss
# of a child started from this (large) pytest process is at least this process's RSS: Linux
# carries the old address space's high-water mark across exec.
PEAK_CHILD = """
import sys
import numpy as np
from salientpp.cache.vip import inclusion_probabilities
from salientpp.cli import build_parser, main

def peak():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

# What the "Python + torch" item covers: every subcommand's imports and numba's LLVM and threads.
build_parser()
inclusion_probabilities(np.array([0, 1, 2]), np.array([1, 0]), [np.array([0])], [1], 1)
base = peak()
code = main(sys.argv[1:])
print(base, peak(), code)
"""


def measured_peak(*args: str) -> tuple[int, int]:
    """``(RSS after the imports, peak RSS)`` in bytes of ``salientpp ARGS`` in a fresh process."""
    if not Path("/proc/self/status").is_file():
        pytest.skip("needs Linux's /proc/self/status")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", PEAK_CHILD, *args], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    base, peak, code = (int(word) for word in done.stdout.split()[-3:])
    assert code == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return base, peak


def assert_conservative(estimate: MemoryEstimate, base: int, peak: int) -> None:
    """The estimate covers the peak, and its graph-dependent part covers what the work added to
    the imports; it stays below 3x the peak. (Measured ratios are 1.1-1.7: the estimate sums
    phases that do not coexist and bounds sampled batches from above; 3x leaves room for other
    library versions without letting an estimate grow absurd.)"""
    assert estimate.total >= peak, (estimate.describe(), peak)
    assert estimate.total - estimate.items["Python + torch"] >= peak - base, (estimate.describe(), base, peak)
    assert estimate.total <= 3 * peak, (estimate.describe(), peak)


@pytest.fixture(scope="module")
def small_partitioned(tmp_path_factory) -> tuple[Path, Path, int, int]:
    """The ``small`` preset (100,000 nodes, 2M edges, 100 features) partitioned with METIS into
    2 parts in a fresh process: ``(dataset dir, partitioned dir, base RSS, peak RSS)``."""
    root = tmp_path_factory.mktemp("small")
    dataset = save_dataset(synthetic_dataset("small"), root / "dataset")
    base, peak = measured_peak("partition", str(dataset), str(root / "p2"), "--parts", "2")
    return dataset, root / "p2", base, peak


def test_partition_estimate_covers_the_measured_peak(small_partitioned):
    dataset, _, base, peak = small_partitioned
    meta = json.loads((dataset / "meta.json").read_text())
    assert_conservative(estimate_partition(meta, 2, "metis"), base, peak)


def test_analyze_estimate_covers_the_measured_peak(small_partitioned, tmp_path):
    _, part_dir, _, _ = small_partitioned
    base, peak = measured_peak("analyze", str(part_dir), "--fanouts", "15,10,5", "--batch-size", "1024",
                               "--replication", "0.1", "--out", str(tmp_path / "plan"))
    meta = json.loads((part_dir / "meta.json").read_text())
    estimate = estimate_analyze(meta, (Workload((15, 10, 5), 1024),), Budget(replication=0.1), "vip")
    assert_conservative(estimate, base, peak)


def test_train_estimate_covers_the_measured_peak_of_one_rank(tmp_path):
    # 30,000 nodes, 600k edges, 100 features: one rank trains 3 batches of up to ~30k nodes.
    part_dir = tmp_path / "p1"
    partition_dataset(synthetic_dataset("small,num_nodes=30000"), part_dir, 1)
    base, peak = measured_peak("train", str(part_dir), "--epochs", "1", "--eval-every", "0", "--quiet",
                               "--fanouts", "15,10,5", "--batch-size", "1024", "--hidden", "256", "--layers", "3",
                               "--pipeline-depth", "4")
    estimate = estimate_train(load_partitioned(part_dir), fanouts=(15, 10, 5), batch_size=1024, hidden=256, layers=3,
                              replication=0.1, pipeline_depth=4, policy="vip", local_ranks=1)
    assert "cache rows" not in estimate.items  # one partition has nothing remote to cache
    assert_conservative(estimate, base, peak)


@pytest.mark.parametrize("spec, fanouts, batch_size", [("tiny", (15, 10, 5), 64), ("tiny", (5, -1), 16),
                                                     ("small,num_nodes=30000", (15, 10, 5), 1024),
                                                     ("small,num_nodes=30000", (20, 20, 20), 256)])
def test_sampled_batches_are_no_larger_than_the_batch_size_estimate(spec, fanouts, batch_size):
    import numpy as np
    import torch

    from salientpp.sampling import NeighborSampler

    data = synthetic_dataset(spec)
    estimate = batch_size_estimate(data.num_nodes, data.num_edges, fanouts, batch_size)
    sampler = NeighborSampler(data.rowptr, data.col, fanouts=list(fanouts))
    rng = np.random.default_rng(0)
    for index in range(3):
        seeds = torch.from_numpy(rng.choice(data.num_nodes, batch_size, replace=False))
        batch = sampler.sample(seeds, batch_index=index)
        assert batch.n_id.shape[0] <= estimate.nodes[-1]
        hops = list(reversed(batch.mfgs))  # mfgs[0] is the input layer, fed by the last hop
        assert all(hop.edge_index.shape[1] <= edges for hop, edges in zip(hops, estimate.edges))
        assert all(hop.num_dst <= nodes for hop, nodes in zip(hops, estimate.nodes))


# ---- how the estimates move ----------------------------------------------------------------------

PRODUCTS = {"num_nodes": 2_400_000, "num_edges": 119_800_160, "num_features": 100, "feature_dtype": "float32",
            "num_parts": 8}


def test_partition_estimate_of_products_is_above_its_measured_peak_and_names_metis():
    # `partition products products-8` peaked at 12.15 GiB with METIS and 1.03 GiB with multilevel
    # (`bench partition`, docs/partitioning.md); products-4 with METIS at 13.8 GiB, before the layout streamed.
    estimate = estimate_partition(PRODUCTS, 4, "metis")
    assert 14_419_968 * 1024 <= estimate.total <= 1.5 * 14_419_968 * 1024
    assert max(estimate.items, key=estimate.items.get) == "METIS work space"
    assert estimate_partition(PRODUCTS, 4, "random").total < estimate.total / 3  # no METIS
    multilevel = estimate_partition(PRODUCTS, 8, "multilevel")
    assert 1.03 * 2**30 <= multilevel.total <= estimate.total / 4


def test_the_multilevel_estimate_holds_one_weight_per_balance_constraint_of_a_typed_graph():
    from salientpp.data.schema import GraphSchema
    n = PRODUCTS["num_nodes"]
    schema = GraphSchema.with_reverses(["paper", "author", "institute", "field"], [n // 2, n // 4, n // 8, n // 8],
                                       [("author", "writes", "paper"), ("author", "in", "institute"),
                                        ("paper", "about", "field")], "paper")
    typed = {**PRODUCTS, **schema.to_meta()}
    homogeneous = estimate_partition(PRODUCTS, 8, "multilevel")
    # three more constraints (author, institute and field nodes), one int64 weight per vertex each
    assert estimate_partition(typed, 8, "multilevel").total == homogeneous.total + 3 * 8 * n
    assert estimate_partition(typed, 8, "metis").total == estimate_partition(PRODUCTS, 8, "metis").total


def test_estimates_grow_with_what_drives_them(tiny_parts):
    workloads = (Workload((15, 10, 5), 1024),)
    analyses = [estimate_analyze({**PRODUCTS, "num_parts": k}, workloads, Budget(replication=0.1), "vip").total
                for k in (2, 4, 8)]
    assert analyses == sorted(analyses) and analyses[0] < analyses[-1]
    both = workloads + (Workload((20, 20, 20), 1024, splits=("valid",)),)
    assert estimate_analyze(PRODUCTS, both, Budget(replication=0.1), "vip").total > analyses[-1]
    assert (estimate_analyze(PRODUCTS, workloads, Budget(replication=0.1), "oracle").items["sampled batches"] > 0)

    data = load_partitioned(tiny_parts)
    common = dict(fanouts=(15, 10, 5), batch_size=1024, hidden=256, layers=3, pipeline_depth=4)
    train = {(r, alpha, cache): estimate_train(data, replication=alpha, policy=cache, local_ranks=r, **common).total
             for r in (1, 2) for alpha in (0.1, 1.0) for cache in ("vip", "none")}
    assert train[(2, 0.1, "vip")] > train[(1, 0.1, "vip")]
    assert train[(2, 1.0, "vip")] > train[(2, 0.1, "vip")] > train[(2, 0.1, "none")]
    gat = estimate_train(data, replication=0.1, policy="vip", local_ranks=2, model="gat", **common).total
    evaluated = estimate_train(data, replication=0.1, policy="vip", local_ranks=2, eval_fanouts=(20, 20, 20), **common)
    assert gat > train[(2, 0.1, "vip")] and evaluated.total >= train[(2, 0.1, "vip")]
    # A rank that keeps freed host memory holds a fraction of each step's allocations beyond them.
    kept = estimate_train(data, replication=0.1, policy="vip", local_ranks=2, **common).items
    returned = estimate_train(data, replication=0.1, policy="vip", local_ranks=2, reuse_freed_memory=False,
                              **common).items
    step = kept["per-rank batch buffers"] + kept["activations"]
    assert kept["freed blocks kept for reuse"] == int(KEPT_FREED_FRACTION * step) > 0
    assert "freed blocks kept for reuse" not in returned and sum(returned.values()) < sum(kept.values())


def test_a_typed_graphs_owned_rows_have_each_types_width_and_only_featureless_types_are_embedded(tmp_path):
    # author has no features (an embedding with --embedding-dim), paper 5 and inst 2 float32 ones:
    # counting every node at the target's width and embedding every node overcounts.
    from cache_support import make_typed_partitioned

    data = make_typed_partitioned(tmp_path / "parts")
    types = data.schema.node_types
    counts = np.diff(data.book.blocks).reshape(data.num_parts, len(types))  # [K, T] owned nodes
    rows = np.array([4 * data.feature_width(t) for t in range(len(types))])
    assert rows[types.index("author")] == 0 and rows[types.index("inst")] < rows[types.index("paper")]
    common = dict(fanouts=(2,), batch_size=4, hidden=8, layers=1, pipeline_depth=1, policy="none")
    both = estimate_train(data, local_ranks=2, embedding_dim=6, **common).items
    assert both["owned feature rows"] == int(counts.sum(0) @ (2 * rows + 16))
    assert both["embedding table and optimizer state"] == int(counts[:, types.index("author")].sum()) * (3 * 4 * 6 + 16)
    one = estimate_train(data, local_ranks=1, **common).items
    assert one["owned feature rows"] == int((counts @ (2 * rows + 16)).max())
    assert "embedding table and optimizer state" not in one


def test_sampler_id_maps_are_counted_per_workspace_and_by_the_map_the_graph_gets(tiny_parts):
    data = load_partitioned(tiny_parts)
    common = dict(fanouts=(15, 10, 5), batch_size=1024, hidden=256, layers=3, pipeline_depth=4, policy="none",
                  local_ranks=2)
    one = estimate_train(data, sampler_threads=1, **common).items["sampler id maps"]
    three = estimate_train(data, sampler_threads=3, eval_fanouts=(20, 20, 20), **common).items["sampler id maps"]
    # a direct table of 8 bytes per vertex for each sampling thread and the training thread, per rank
    assert one == 2 * (1 + 1) * 8 * data.num_nodes
    assert three == 2 * 2 * (3 + 1) * 8 * data.num_nodes  # the evaluation loader has its own sampler
    limit = extension().dense_id_map_max_nodes
    workloads = (Workload((15, 10, 5), 1024),)
    maps = {n: estimate_analyze({**PRODUCTS, "num_nodes": n}, workloads, Budget(replication=0.1), "oracle",
                                threads=2).items["sampler id maps"] for n in (limit, limit + 1)}
    assert maps[limit] == 3 * 8 * limit
    assert 0 < maps[limit + 1] < maps[limit]  # past the limit a hash map, sized by the batch and not by N


def test_batches_sampled_ahead_of_the_pipeline_for_idle_sampler_threads_are_counted(tiny_parts):
    data = load_partitioned(tiny_parts)
    common = dict(fanouts=(15, 10, 5), batch_size=1024, hidden=256, layers=3, policy="none", local_ranks=2)
    within = estimate_train(data, pipeline_depth=4, sampler_threads=4, **common).items
    beyond = estimate_train(data, pipeline_depth=4, sampler_threads=12, **common).items
    serial = estimate_train(data, pipeline_depth=1, sampler_threads=12, **common).items
    assert "sampled batches ahead" not in within and "sampled batches ahead" not in serial
    # 8 more sampled graphs per rank than the depth, each less than a batch with its feature rows
    assert 0 < beyond["sampled batches ahead"] < 2 * 8 * beyond["per-rank batch buffers"] / (2 * 5)
    assert beyond["sampled batches ahead"] % (2 * 8) == 0


def test_train_estimate_refuses_impossible_options(tiny_parts):
    data = load_partitioned(tiny_parts)
    common = dict(fanouts=(15, 10, 5), batch_size=1024, hidden=256, layers=3, pipeline_depth=4, policy="vip")
    with pytest.raises(InputError, match="3 local ranks cannot train 2 partitions"):
        estimate_train(data, replication=0.1, local_ranks=3, **common)
    with pytest.raises(InputError, match="outside"):
        estimate_train(data, replication=float("nan"), local_ranks=2, **common)
    with pytest.raises(InputError, match="one fanout per layer"):
        estimate_train(data, replication=0.1, local_ranks=2, **{**common, "layers": 2})


def test_train_over_the_memory_limit_exits_2_before_any_rank_starts(tiny_parts, tmp_path, capsys):
    before = listing(tmp_path)
    assert main(["train", str(tiny_parts), "--memory-limit", "1MiB", "--checkpoint-dir", str(tmp_path / "ckpt"),
                 "--layers", "2", "--fanouts", "5,5", "--quiet"]) == 2
    err = one_error_line(capsys, "train")
    assert "training 2 of 2 partitions" in err and "--memory-limit allows only 1 MiB" in err
    assert listing(tmp_path) == before  # no checkpoint directory, no cache plan
