"""The thread budget of a rank: usable cores (affinity mask, cgroup CPU quota), their split among
local ranks and within a rank, the overrides, the start-up line, and its use by launch and train."""
from __future__ import annotations

import os
import re
from dataclasses import replace

import pytest
import torch

from salientpp.cli import main as cli_main
from salientpp import DistGraph, DistNeighborLoader
from salientpp.distributed import init_distributed, launch
from salientpp import host
from salientpp.host import ThreadBudget
from salientpp.errors import InputError
from salientpp.host import local_world_size, sampler_read_ahead, usable_cores
from salientpp.train import MinibatchTrainer, RankSetup, TrainConfig, resolve_run
from conftest import one_sentence

SMALL = ["--hidden", "16", "--layers", "2", "--fanouts", "5,5", "--batch-size", "16", "--eval-fanouts", "5,5"]
UNEVALUATED = SMALL[:SMALL.index("--eval-fanouts")]  # for runs with --eval-every 0


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A fake machine: ``machine(cores, cgroup_lines, {path under /sys/fs/cgroup: text})`` sets
    the affinity mask to ``cores`` cores and writes /proc/self/cgroup and the cgroup files."""
    proc, root = tmp_path / "proc-self-cgroup", tmp_path / "sys-fs-cgroup"
    monkeypatch.setattr(host, "PROC_CGROUP", proc)
    monkeypatch.setattr(host, "CGROUP_ROOT", root)
    root.mkdir()

    def make(cores: int, cgroup: str | None = None, files: dict[str, str] | None = None) -> None:
        monkeypatch.setattr(host.os, "sched_getaffinity", lambda pid: set(range(cores)))
        if cgroup is not None:
            proc.write_text(cgroup)
        for name, text in (files or {}).items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)

    return make


# ---- usable cores ---------------------------------------------------------------------------------

def test_a_v2_quota_of_one_and_a_half_cores_on_four_allowed_cores_gives_two(machine):
    machine(4, "0::/job.slice/run\n", {"job.slice/run/cpu.max": "150000 100000\n"})
    assert usable_cores() == (2, "cgroup CPU quota")


def test_a_v2_cpu_max_without_a_quota_leaves_the_affinity_mask(machine):
    machine(4, "0::/job.slice/run\n", {"job.slice/run/cpu.max": "max 100000\n"})
    assert usable_cores() == (4, "affinity mask")


@pytest.mark.parametrize("quota, cores", [("50000 100000", 1), ("100000 100000", 1), ("250000 100000", 3),
                                          ("1 100000", 1)])
def test_a_v2_quota_is_rounded_up_to_whole_cores_and_at_least_one(machine, quota, cores):
    machine(8, "0::/\n", {"cpu.max": quota})
    assert usable_cores() == (cores, "cgroup CPU quota")


def test_a_quota_above_the_affinity_mask_leaves_the_mask(machine):
    machine(2, "0::/\n", {"cpu.max": "800000 100000"})
    assert usable_cores() == (2, "affinity mask")


def test_a_quota_on_a_parent_cgroup_limits_its_children(machine):
    machine(8, "0::/outer/inner\n", {"outer/cpu.max": "200000 100000", "outer/inner/cpu.max": "max 100000"})
    assert usable_cores() == (2, "cgroup CPU quota")


def test_a_cgroup_directory_outside_this_namespace_falls_back_to_the_root(machine):
    # Inside a container /proc/self/cgroup can name a path of the host; the root is the container's.
    machine(8, "0::/system.slice/docker-1.scope\n", {"cpu.max": "300000 100000"})
    assert usable_cores() == (3, "cgroup CPU quota")


@pytest.mark.parametrize("mount", ["cpu,cpuacct", "cpu"])
def test_a_v1_cfs_quota_limits_the_cores(machine, mount):
    machine(16, "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n",
            {f"{mount}/docker/abc/cpu.cfs_quota_us": "300000\n", f"{mount}/docker/abc/cpu.cfs_period_us": "100000\n"})
    assert usable_cores() == (3, "cgroup CPU quota")


def test_a_v1_quota_of_minus_one_is_no_limit(machine):
    machine(4, "4:cpu,cpuacct:/\n", {"cpu,cpuacct/cpu.cfs_quota_us": "-1", "cpu,cpuacct/cpu.cfs_period_us": "100000"})
    assert usable_cores() == (4, "affinity mask")


@pytest.mark.parametrize("cgroup, files", [
    (None, {}),                                                     # no /proc/self/cgroup
    ("0::/job\n", {}),                                              # no cpu.max anywhere
    ("4:cpu:/job\n", {"cpu/job/cpu.cfs_quota_us": "200000"}),       # a v1 quota without its period
    ("0::/job\n", {"job/cpu.max": "lots 100000"}),                  # not a quota
    ("0::/job\n", {"job/cpu.max": "200000 0"}),                     # a zero period
    ("1:cpuset:/job\n", {"cpuset/job/cpu.cfs_quota_us": "100000"}),  # another controller's hierarchy
], ids=["no-proc-file", "no-cpu-max", "v1-no-period", "junk", "zero-period", "other-controller"])
def test_missing_or_unreadable_cgroup_files_leave_the_affinity_mask(machine, cgroup, files):
    machine(6, cgroup, files)
    assert usable_cores() == (6, "affinity mask")


def test_the_memory_check_still_reads_its_cgroup_through_the_shared_parser(tmp_path, monkeypatch):
    monkeypatch.setattr(host, "PROC_CGROUP", tmp_path / "cgroup")
    monkeypatch.setattr(host, "CGROUP_ROOT", tmp_path / "fs")
    (tmp_path / "cgroup").write_text("4:memory:/job\n0::/job\n")
    for name, text in {"fs/job/memory.max": "1000", "fs/memory/job/memory.limit_in_bytes": "2000"}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert host._cgroup_dirs() == [
        (tmp_path / "fs/memory/job", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
        (tmp_path / "fs/job", "memory.max", "memory.current", "inactive_file")]


# ---- the budget -------------------------------------------------------------------------------------

@pytest.fixture
def cores(monkeypatch):
    """``cores(n)``: make :func:`usable_cores` report ``n`` cores of the affinity mask."""
    def make(n: int) -> None:
        monkeypatch.setattr(host, "usable_cores", lambda: (n, "affinity mask"))
    return make


@pytest.mark.parametrize("usable, ranks, torch_threads, sampler_threads", [
    (2, 2, 1, 1), (2, 1, 2, 1), (3, 4, 1, 1), (16, 2, 8, 1), (32, 2, 16, 2), (64, 1, 64, 8), (17, 2, 8, 1),
    (96, 3, 32, 4)])
def test_the_cores_are_split_among_local_ranks_then_between_torch_and_samplers(cores, usable, ranks, torch_threads,
                                                                               sampler_threads):
    cores(usable)
    budget = ThreadBudget.for_rank(ranks)
    assert (budget.cores, budget.local_ranks, budget.torch_threads, budget.sampler_threads) == (
        usable, ranks, torch_threads, sampler_threads)
    assert budget.source == "affinity mask" and budget.low_priority_sampler


def test_overrides_are_used_as_they_are_even_beyond_the_cores(cores):
    cores(4)
    budget = ThreadBudget.for_rank(2, torch_threads=5, sampler_threads=3)
    assert (budget.torch_threads, budget.sampler_threads) == (5, 3)
    assert ThreadBudget.for_rank(2, torch_threads=7).sampler_threads == 1  # the other keeps its default
    assert ThreadBudget.for_rank(2, sampler_threads=6).torch_threads == 2


@pytest.mark.parametrize("torch_threads, sampler_threads, low", [
    (None, None, True),   # the defaults share the cores: samplers yield to torch
    (2, None, True),      # one override: the rule holds even with cores to spare
    (None, 1, True),
    (3, 2, True),         # both given, 5 > 4 cores per rank
    (2, 2, False),        # both given and they fit: each thread has a core
    (3, 1, False),
])
def test_samplers_run_at_low_priority_unless_both_overrides_fit_in_the_ranks_cores(cores, torch_threads,
                                                                                    sampler_threads, low):
    cores(8)
    assert ThreadBudget.for_rank(2, torch_threads, sampler_threads).low_priority_sampler is low


@pytest.mark.parametrize("args", [dict(local_ranks=0), dict(local_ranks=1, torch_threads=0),
                                  dict(local_ranks=1, sampler_threads=-2), dict(local_ranks=1, torch_threads=True),
                                  dict(local_ranks=1, sampler_threads=1.5)])
def test_a_thread_count_that_is_not_a_positive_integer_is_refused(cores, args):
    cores(4)
    with pytest.raises(InputError, match="must be a positive integer"):
        ThreadBudget.for_rank(**args)


@pytest.mark.parametrize("usable, ranks, torch_threads, sampler_threads", [
    (16, 1, 4, 12), (16, 2, 2, 6), (16, 4, 1, 3), (2, 1, 1, 1), (1, 1, 1, 1), (3, 1, 1, 2)])
def test_on_a_gpu_most_cores_sample_and_a_quarter_run_torch(cores, usable, ranks, torch_threads, sampler_threads):
    cores(usable)
    budget = ThreadBudget.for_rank(ranks, device="cuda")
    assert (budget.torch_threads, budget.sampler_threads) == (torch_threads, sampler_threads)
    cpu = ThreadBudget.for_rank(ranks)
    assert cpu.torch_threads == budget.cores_per_rank and cpu.sampler_threads == max(1, budget.cores_per_rank // 8)
    given = ThreadBudget.for_rank(ranks, 5, 7, device="cuda")  # --torch-threads and --sampler-threads win
    assert (given.torch_threads, given.sampler_threads) == (5, 7)


def test_pyg_samples_in_as_many_workers_as_our_sampler_has_threads_on_a_gpu_and_inline_on_the_cpu(cores):
    from salientpp.bench.pyg_baseline import sampling_workers

    cores(16)
    assert sampling_workers(ThreadBudget.for_rank(1, device="cuda")) == 12
    assert sampling_workers(ThreadBudget.for_rank(2, sampler_threads=3, device="cuda")) == 3
    assert sampling_workers(ThreadBudget.for_rank(1)) == 0


@pytest.mark.parametrize("depth, threads, read_ahead", [(1, 1, 1), (1, 12, 1), (4, 1, 4), (4, 12, 12), (8, 3, 8)])
def test_a_pipeline_samples_at_least_one_batch_ahead_per_sampler_thread(depth, threads, read_ahead):
    assert sampler_read_ahead(depth, threads) == read_ahead


def test_describe_names_the_cores_their_source_and_the_threads(cores):
    cores(2)
    assert ThreadBudget.for_rank(2).describe() == (
        "threads: 2 cores (affinity mask) for 2 local ranks: 1 torch intra-op thread and 1 low-priority sampler "
        "thread per rank; pipeline off: the torch threads take every core (--pipeline-depth sets it)")
    assert ThreadBudget.for_rank(2, device="cuda").describe().endswith(
        "per rank; pipeline depth 4, fetch stages on a thread of their own")
    assert ThreadBudget.for_rank(2, device="cuda").describe(fetch_thread=False).endswith("per rank; pipeline depth 4")
    line = ThreadBudget(6, 1, 4, 2, "cgroup CPU quota", torch_threads_given=True, sampler_threads_given=True).describe()
    assert line == ("threads: 6 cores (cgroup CPU quota) for 1 local rank: 4 torch intra-op threads (set by "
                    "--torch-threads) and 2 normal-priority sampler threads (set by --sampler-threads) per rank; "
                    "pipeline depth 4")
    assert ThreadBudget.for_rank(4).describe(pipeline_depth=3).endswith("; pipeline depth 3 (as given)")
    line = ThreadBudget.for_rank(1, sampler_threads=3).describe()
    assert "2 torch intra-op threads and 3 low-priority sampler threads (set by --sampler-threads)" in line
    # A run that samples nothing (full-graph training) is not told of sampler threads.
    assert ThreadBudget.for_rank(2).describe(samples=False) == (
        "threads: 2 cores (affinity mask) for 2 local ranks: 1 torch intra-op thread per rank")


@pytest.mark.parametrize("usable, ranks, torch_threads, device, depth", [
    (2, 1, None, "cpu", 1), (2, 2, None, "cpu", 1), (2, 4, None, "cpu", 1), (16, 4, None, "cpu", 1),
    (2, 1, 1, "cpu", 4), (16, 4, 3, "cpu", 4), (16, 4, 4, "cpu", 1), (2, 4, 1, "cpu", 1),
    (2, 2, None, "cuda", 4), (16, 1, None, torch.device("cuda", 0), 4)])
def test_the_pipeline_is_on_by_default_on_a_gpu_or_when_the_torch_threads_leave_cores_free(
        cores, usable, ranks, torch_threads, device, depth):
    cores(usable)
    budget = ThreadBudget.for_rank(ranks, torch_threads, device=device)
    assert budget.gpu is (torch.device(device).type == "cuda")
    assert budget.gpu or budget.spare_cores is (depth == 4)
    assert budget.pipeline_depth() == depth
    assert budget.pipeline_depth(3) == 3  # --pipeline-depth is used as it is


@pytest.mark.parametrize("device, depth, given, threaded", [
    ("cuda", 4, None, True), ("cuda", 1, None, False), ("cpu", 4, None, False), ("cpu", 1, None, False),
    ("cpu", 2, True, True), ("cuda", 4, False, False)])
def test_the_fetch_thread_is_on_by_default_on_a_gpu_with_a_pipeline(cores, device, depth, given, threaded):
    cores(16)
    assert ThreadBudget.for_rank(1, device=device).fetch_thread(depth, given) is threaded


def test_a_fetch_thread_without_a_pipeline_is_refused_before_any_rank_starts(parts, capsys):
    code = cli_main(["train", str(parts / "p1"), *SMALL, "--no-pipeline", "--fetch-thread", "on", "--epochs", "1"])
    assert code == 2
    message = one_sentence(capsys)
    assert "--pipeline-depth 2 or more" in message, message


def test_apply_sets_torch_threads_and_tolerates_interop_threads_already_fixed(monkeypatch):
    before = torch.get_num_threads()
    calls = []

    def interop(n):
        calls.append(n)
        raise RuntimeError("Error: cannot set number of interop threads after parallel work has started")

    monkeypatch.setattr(torch, "set_num_interop_threads", interop)
    try:
        ThreadBudget(8, 1, 3, 1, "affinity mask").apply()
        assert torch.get_num_threads() == 3 and calls == [1]
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("value, ranks", [(None, 1), ("3", 3), ("0", 1), ("two", 1)])
def test_local_world_size_comes_from_the_environment(monkeypatch, value, ranks):
    if value is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", value)
    assert local_world_size() == ranks


# ---- launch, the trainer and `salientpp train` ------------------------------------------------------

def _rank_threads() -> tuple[int, int, str]:
    return torch.get_num_threads(), torch.get_num_interop_threads(), os.environ["LOCAL_WORLD_SIZE"]


def test_launched_ranks_start_with_the_default_budget_of_their_local_world():
    per_rank = max(1, usable_cores()[0] // 2)
    assert launch(_rank_threads, nprocs=2) == [(per_rank, 1, "2")] * 2


@pytest.fixture(scope="module")
def parts(tiny_partitions):
    return tiny_partitions[0]


def test_the_trainers_loaders_run_the_budgets_sampler_threads_at_its_priority(parts):
    config = TrainConfig(str(parts / "p1"), hidden=16, layers=2, fanouts=(4, 4), batch_size=32, policy="none",
                         progress=False)
    run = resolve_run(config, 1)
    budget = ThreadBudget(8, 1, 5, 3, "affinity mask")
    trainer = MinibatchTrainer(RankSetup.open(replace(run, threads=budget), init_distributed("cpu", threads=budget)))
    assert trainer.threads is budget
    assert (trainer.loader._loader.workers.sampler_threads, trainer.loader._loader.workers.low_priority) == (3, True)
    fitting = ThreadBudget(8, 1, 5, 3, "affinity mask", torch_threads_given=True, sampler_threads_given=True)
    trainer = MinibatchTrainer(RankSetup.open(replace(run, threads=fitting), init_distributed("cpu", threads=fitting)))
    assert (trainer.loader._loader.workers.sampler_threads, trainer.loader._loader.workers.low_priority) == (3, False)


@pytest.mark.parametrize("given, usable, depth", [(None, 8, 4), (None, 4, 1), (3, 4, 3)])
def test_the_runs_pipeline_depth_is_the_budgets_unless_given_and_the_sampler_reads_as_far_ahead(
        parts, cores, given, usable, depth):
    cores(usable)
    config = TrainConfig(str(parts / "p1"), hidden=16, layers=2, fanouts=(4, 4), batch_size=32, policy="none",
                         pipeline_depth=given, torch_threads=1, progress=False)
    run = resolve_run(config, 4)  # 4 local ranks of 1 torch thread: spare cores on 8, none on 4
    assert run.config.pipeline_depth == depth
    trainer = MinibatchTrainer(RankSetup.open(run, init_distributed("cpu")))
    assert trainer.loader.pipeline_depth == depth
    assert trainer.loader.read_ahead == trainer.loader._loader.workers.read_ahead == depth


def test_a_loaders_default_pipeline_depth_follows_the_machines_budget(parts, cores, monkeypatch):
    graph = DistGraph(str(parts / "p1"), init_distributed("cpu"))
    cores(2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert DistNeighborLoader(graph, "train", (4, 4), 32).pipeline_depth == 1  # on the CPU
    cores(8)
    assert DistNeighborLoader(graph, "train", (4, 4), 32).pipeline_depth == 1  # 4 torch threads per rank
    assert DistNeighborLoader(graph, "train", (4, 4), 32, pipeline_depth=2).pipeline_depth == 2
    # With a pipeline, every sampler thread has a batch to sample; without, one batch at a time.
    assert DistNeighborLoader(graph, "train", (4, 4), 32, pipeline_depth=2, sampler_threads=5).read_ahead == 5
    assert DistNeighborLoader(graph, "train", (4, 4), 32, pipeline_depth=1, sampler_threads=5).read_ahead == 1
    loader = DistNeighborLoader(graph, "train", (4, 4), 32, pipeline_depth=3, sampler_threads=5, read_ahead=2)
    assert loader.read_ahead == loader._loader.workers.read_ahead == 2


@pytest.mark.parametrize("name, value", [("sampler_threads", 0), ("torch_threads", 0), ("torch_threads", -1),
                                         ("sampler_threads", True)])
def test_the_config_refuses_thread_counts_that_are_not_positive(parts, name, value):
    with pytest.raises(InputError, match="must be a positive integer"):
        TrainConfig(str(parts / "p2"), **{name: value}).validate()


@pytest.mark.parametrize("value", ["off", "on", 1, 0])
def test_a_fetch_thread_that_is_not_a_bool_is_refused_by_the_loader_the_budget_and_the_config(parts, value):
    # "off" is truthy: taken as it is, it turned the thread on
    expected = f"fetch_thread must be True, False or None (the default), got {value!r}"
    graph = DistGraph(str(parts / "p1"), init_distributed("cpu"))
    with pytest.raises(InputError, match=re.escape(expected)):
        DistNeighborLoader(graph, "train", (4, 4), 32, pipeline_depth=2, fetch_thread=value)
    with pytest.raises(InputError, match=re.escape(expected)):
        ThreadBudget(8, 1, 5, 3, "affinity mask").fetch_thread(2, value)
    with pytest.raises(InputError, match=re.escape(expected)):
        TrainConfig(str(parts / "p2"), fetch_thread=value).validate()


def test_the_config_leaves_unset_thread_counts_to_the_budget(parts):
    config = TrainConfig(str(parts / "p2")).resolved()
    assert (config.sampler_threads, config.torch_threads) == (None, None)


@pytest.mark.parametrize("option", ["--sampler-threads", "--torch-threads"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_train_refuses_a_thread_count_below_one_before_any_rank_starts(parts, capsys, no_ranks, option, value):
    assert cli_main(["train", str(parts / "p2"), *SMALL, option, value]) == 2
    err = one_sentence(capsys)
    assert option in err and "must be a positive integer" in err and value in err


def test_a_two_rank_run_prints_the_budget_once_with_this_machines_numbers(parts, tmp_path, capfd):
    usable, source = usable_cores()
    per_rank = max(1, usable // 2)
    samplers = max(1, per_rank // 8)
    assert cli_main(["train", str(parts / "p2"), *UNEVALUATED, "--epochs", "1", "--eval-every", "0", "--policy", "none"]) == 0
    out = capfd.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("threads: ")]
    assert lines == [f"threads: {usable} core{'s' * (usable != 1)} ({source}) for 2 local ranks: "
                     f"{per_rank} torch intra-op thread{'s' * (per_rank != 1)} and "
                     f"{samplers} low-priority sampler thread{'s' * (samplers != 1)} per rank; "
                     + "pipeline off: the torch threads take every core (--pipeline-depth sets it)"], out


def _omp_wait_policy() -> tuple[str | None, str | None]:
    """The rank's OMP_WAIT_POLICY, and the one OpenMP read when torch was loaded: in the
    environment block its process image started with (a fork keeps the fork server's)."""
    start = dict(item.split("=", 1) for item in open("/proc/self/environ").read().split("\0") if "=" in item)
    return os.environ.get("OMP_WAIT_POLICY"), start.get("OMP_WAIT_POLICY")


def test_launched_ranks_wait_passively_unless_the_user_chose_a_policy(monkeypatch):
    """Ranks start with OMP_WAIT_POLICY=PASSIVE (spinning OpenMP threads slow a shared machine
    down), as OpenMP read it when torch was loaded in the process they were forked from; a policy
    the user set is kept (the fork server is started again for it), and the launcher's own
    environment is left as it was."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert launch(_omp_wait_policy, (), 2) == [("PASSIVE", "PASSIVE")] * 2
    assert "OMP_WAIT_POLICY" not in os.environ
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert launch(_omp_wait_policy, (), 1) == [("ACTIVE", "ACTIVE")]


def test_the_python_api_takes_the_command_lines_defaults(parts):
    """One source of defaults: a loader a user builds without options runs what `salientpp train`
    would run on the same rank (the budget's sampler threads and priority, the device share of
    owned rows), and init_distributed waits as long as --timeout does."""
    import inspect

    from salientpp.train.config import TrainConfig as Config

    budget = ThreadBudget(8, 1, 5, 3, "affinity mask")
    ctx = init_distributed("cpu", threads=budget)
    graph = DistGraph(str(parts / "p1"), ctx)
    loader = DistNeighborLoader(graph, "train", (4, 4), 32)
    resolved = Config(str(parts / "p1"), policy="none").resolved()
    assert (loader._loader.workers.sampler_threads, loader._loader.workers.low_priority) == (budget.sampler_threads, True)
    assert loader.pipeline_depth == budget.pipeline_depth()
    assert loader.store.num_device_owned == int(resolved.device_fraction * graph.num_owned) > 0
    assert inspect.signature(init_distributed).parameters["timeout_s"].default == resolved.timeout_s == ctx.timeout_s
