"""Explicit cache plans: `salientpp train --plan DIR` takes any plan `salientpp analyze` wrote (byte
budgets with a CPU tier included, any --out) and uses its tiers and GPU share as they are; bad
plans are refused before any rank starts; without --plan the trainer builds the plan with
analyze's own function at analyze's default location, says so, and never swallows a failed save."""
from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from salientpp.cache.plan import read_plan_info
from salientpp.cli import main as cli_main
from salientpp.distributed import CommStats, init_distributed, launch, shutdown_distributed
from salientpp.loader.dist_loader import DistNeighborLoader
from salientpp.errors import InputError
from salientpp.io import file_checksum
from salientpp.partition import load_partitioned
from salientpp.resources import estimate_train
from salientpp.train import TrainConfig
from salientpp.train import setup as run_setup
from trainers import rank_trainer
from conftest import fail_probe_in, one_sentence

WORKLOAD = ["--fanouts", "5,5", "--batch-size", "16"]
SMALL = [*WORKLOAD, "--hidden", "16", "--layers", "2", "--eval-fanouts", "5,5"]
UNEVALUATED = SMALL[:SMALL.index("--eval-fanouts")]  # for runs with --eval-every 0
ROW_BYTES = 32 * 4  # the tiny preset: 32 float32 features
GPU_ROWS, CPU_ROWS, DEVICE_FRACTION = 20, 200, 0.3


@pytest.fixture(scope="module")
def p2(tiny_partitions) -> str:
    return str(tiny_partitions[0] / "p2")


@pytest.fixture(scope="module")
def byte_plan(p2, tmp_path_factory) -> Path:
    """A byte-budget plan with a small GPU tier and a larger CPU tier, written with --out to a
    path that no naming rule could guess, with a GPU fraction other than the default."""
    out = tmp_path_factory.mktemp("plans") / "somewhere" / "my-plan"
    out.parent.mkdir()
    assert cli_main(["analyze", p2, *WORKLOAD, "--device-cache-bytes", str(GPU_ROWS * ROW_BYTES),
                     "--host-cache-bytes", str(CPU_ROWS * ROW_BYTES), "--device-fraction", str(DEVICE_FRACTION),
                     "--out", str(out)]) == 0
    info = read_plan_info(out)
    assert info.num_device == (GPU_ROWS, GPU_ROWS) and info.num_host == (CPU_ROWS, CPU_ROWS)  # a non-empty CPU tier
    return out






def _copy_without_plans(p2: str, where: Path) -> Path:
    shutil.copytree(p2, where, ignore=shutil.ignore_patterns("cache"))
    return where


# -- training with a plan analyze wrote ---------------------------------------------------------------


def test_a_byte_budget_plan_trains_from_its_own_path_and_its_cpu_tier_is_hit(p2, byte_plan, tmp_path, capfd):
    metrics = tmp_path / "m.jsonl"
    assert cli_main(["train", p2, "--plan", str(byte_plan), *UNEVALUATED, "--epochs", "2", "--eval-every", "0",
                     "--json", str(metrics), "--quiet"]) == 0
    assert f"cache plan: using {byte_plan}" in capfd.readouterr().out
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [line["epoch"] for line in lines] == [0, 1]
    for line in lines:
        assert line["comm"]["host_hits"] > 0 and line["comm"]["device_hits"] > 0
    # Rank 0's tiers are the plan's, not recomputed from --device-fraction's default.
    info = read_plan_info(byte_plan)
    assert lines[0]["cache"] == {"policy": "vip", "plan": str(byte_plan), "source": f"using {byte_plan}",
                                 "cached_rows": GPU_ROWS + CPU_ROWS, "device_cached_rows": GPU_ROWS,
                                 "device_local_rows": info.num_device_owned[0]}
    assert info.num_device_owned[0] == int(DEVICE_FRACTION * load_partitioned(p2).book.part_size(0))


def _check_features(part_dir: str, plan: str) -> dict:
    """On one rank: every batch's assembled features, training and evaluation, against x[n_id]."""
    ctx = init_distributed("cpu", timeout_s=60)
    config = TrainConfig(part_dir, epochs=1, hidden=8, layers=2, fanouts=(5, 5), batch_size=16, plan=plan,
                         pipeline_depth=2, eval_fanouts=(5, 5), eval_batch_size=64, progress=False).validate()
    trainer = rank_trainer(config, ctx)
    data = trainer.graph.data
    x = np.concatenate([np.asarray(data.part(k).x) for k in range(data.num_parts)])  # global id order
    store, info = trainer.loader.store, read_plan_info(plan)
    tiers = (store.num_device_owned, store.cache_device[0].shape[0], store.cache_host[0].shape[0])
    ok, batches, stats = True, 0, CommStats()
    evaluation = DistNeighborLoader(trainer.graph, trainer.evaluator.seeds, config.eval_fanouts,
                                    config.eval_batch_size, plan=plan, pipeline_depth=2)
    for loader in (trainer.loader, evaluation):
        for batch in loader:
            ok &= torch.equal(batch.x, torch.from_numpy(x[batch.n_id.numpy()]))
            batches += batch.batch_size > 0
        stats.add(loader.stats)
    shutdown_distributed(ctx)
    expected = (info.num_device_owned[ctx.rank], info.num_device[ctx.rank], info.num_host[ctx.rank])
    return {"ok": ok, "batches": batches, "tiers": tiers, "expected": expected, **stats.as_dict()}


def test_features_assembled_through_a_byte_budget_plan_equal_x_n_id(p2, byte_plan):
    for rank in launch(_check_features, (p2, str(byte_plan)), nprocs=2):
        assert rank["ok"] and rank["batches"] > 0
        assert rank["tiers"] == rank["expected"]
        assert rank["host_hits"] > 0 and rank["device_hits"] > 0 and rank["received"] > 0


# -- refused before any rank starts ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def foreign_plan(tiny_partitions, tmp_path_factory) -> Path:
    """A plan of another partitioning of the same graph (one part)."""
    out = tmp_path_factory.mktemp("foreign") / "plan"
    assert cli_main(["analyze", str(tiny_partitions[0] / "p1"), *WORKLOAD, "--replication", "0",
                     "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("case, expected", [
    ("foreign", "was built for another partitioning than"),
    ("fanouts", "was built for fanouts 5,5 but training uses 4,4; build a fitting plan with `salientpp analyze"),
    ("batch", "was built for batch size 16 but training uses 32"),
    ("partitioned dir", "not a 'salientpp-cache-plan' one"),
    ("missing", "is not a directory; pass a salientpp-cache-plan directory"),
    ("--policy", "--policy cannot be combined with --plan"),
    ("--replication and --device-fraction", "--replication and --device-fraction cannot be combined with --plan"),
])
def test_an_unusable_plan_is_one_sentence_before_any_rank_starts(p2, byte_plan, foreign_plan, tmp_path, capsys,
                                                                  no_ranks, case, expected):
    plan, extra = str(byte_plan), []
    if case == "foreign":
        plan = str(foreign_plan)
    elif case == "fanouts":
        extra = ["--fanouts", "4,4"]
    elif case == "batch":
        extra = ["--batch-size", "32"]
    elif case == "partitioned dir":
        plan = p2
    elif case == "missing":
        plan = str(tmp_path / "nowhere")
    elif case == "--policy":
        extra = ["--policy", "vip"]  # even the default: the plan decides
    else:
        extra = ["--replication", "0.2", "--device-fraction", "0.5"]
    assert cli_main(["train", p2, *SMALL, "--plan", plan, *extra]) == 2
    assert expected in one_sentence(capsys)


def test_the_python_api_refuses_cache_options_beside_a_plan(p2, byte_plan):
    with pytest.raises(InputError, match="--device-fraction cannot be combined with --plan"):
        TrainConfig(p2, fanouts=(5, 5), layers=2, batch_size=16, plan=str(byte_plan), device_fraction=0.5).validate()


# -- without --plan: analyze's plan at analyze's default location ----------------------------------------


def test_without_a_plan_the_trainer_builds_analyzes_plan_says_where_and_then_uses_it(p2, tmp_path, capfd):
    part_dir = _copy_without_plans(p2, tmp_path / "p2")
    train = ["train", str(part_dir), *UNEVALUATED, "--epochs", "1", "--eval-every", "0", "--quiet"]
    path = part_dir / "cache" / "vip-f5-5-b16-r0.1"
    assert cli_main(train) == 0
    assert f"cache plan: built {path}" in capfd.readouterr().out
    assert cli_main(train) == 0
    assert f"cache plan: using {path}" in capfd.readouterr().out
    # It is exactly the plan `salientpp analyze` writes with the same options.
    assert cli_main(["analyze", str(part_dir), *WORKLOAD, "--replication", "0.1", "--out", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a" / "meta.json").read_text() == (path / "meta.json").read_text()


def test_an_existing_default_plan_of_other_options_is_refused_before_any_rank_starts(p2, tmp_path, capsys, no_ranks):
    """A plan of other options has another default name (-df0.5), so only one written under the
    run's own name (--name) can stand in its way: it is refused, never used as if it fitted."""
    part_dir = _copy_without_plans(p2, tmp_path / "p2")
    assert cli_main(["analyze", str(part_dir), *WORKLOAD, "--replication", "0.1", "--device-fraction", "0.5",
                     "--name", "vip-f5-5-b16-r0.1"]) == 0
    assert (part_dir / "cache" / "vip-f5-5-b16-r0.1").is_dir()
    capsys.readouterr()
    assert cli_main(["train", str(part_dir), *UNEVALUATED, "--eval-every", "0"]) == 2
    err = one_sentence(capsys)
    assert "was built with device fraction 0.5 but this run asks for 0.15" in err and "--plan" in err




@pytest.mark.parametrize("corrupt, expected", [
    ("offsets", "the partitioned directory {d} is corrupt: offsets.npy gives partition 0"),
    ("orig_id", "orig_id.npy in {d} repeats ids, so it is not a permutation"),
])
def test_a_corrupt_partition_book_or_renumbering_is_blamed_on_the_partition_not_its_plan(p2, tmp_path, capsys,
                                                                                         no_ranks, corrupt, expected):
    """The plan at the default location records the partition's checksums; a hand edit that also
    updated them makes the plan look foreign, but the partitioned directory is what is wrong."""
    part_dir = _copy_without_plans(p2, tmp_path / "p2")
    assert cli_main(["analyze", str(part_dir), *WORKLOAD, "--replication", "0.1"]) == 0
    array = np.load(part_dir / f"{corrupt}.npy")
    array[1] = array[1] + 1 if corrupt == "offsets" else array[0]
    np.save(part_dir / f"{corrupt}.npy", array)
    meta = json.loads((part_dir / "meta.json").read_text())
    meta["files"][corrupt]["checksum"] = file_checksum(part_dir / f"{corrupt}.npy")
    (part_dir / "meta.json").write_text(json.dumps(meta))
    capsys.readouterr()
    assert cli_main(["train", str(part_dir), *UNEVALUATED, "--eval-every", "0"]) == 2
    err = one_sentence(capsys)
    assert expected.format(d=part_dir) in err and "re-partition the dataset" in err and "analyze" not in err


def test_a_read_only_partitioned_dir_without_a_plan_is_refused_before_any_rank_starts(p2, tmp_path, capsys,
                                                                                      monkeypatch, no_ranks):
    part_dir = _copy_without_plans(p2, tmp_path / "p2")
    fail_probe_in(monkeypatch, part_dir, errno.EROFS)
    assert cli_main(["train", str(part_dir), *SMALL]) == 2
    err = one_sentence(capsys)
    assert f"no cache plan at {part_dir / 'cache' / 'vip-f5-5-b16-r0.1-eval-valid.test-f5-5-b16'}" in err
    assert "the file system is read-only" in err and "--out DIR` and train with --plan DIR" in err
    assert not (part_dir / "cache").exists()


def test_a_failed_save_of_the_plan_is_never_swallowed(p2, tmp_path, monkeypatch):
    part_dir = _copy_without_plans(p2, tmp_path / "p2")
    config = TrainConfig(str(part_dir), hidden=16, layers=2, fanouts=(5, 5), batch_size=16, progress=False)
    choice = run_setup.resolve_run(config).cache

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr("salientpp.cache.plan.write_meta", disk_full)
    with pytest.raises(InputError, match=r"cannot write .*vip-f5-5-b16-r0\.1-eval-valid\.test-f20-20-b16: no space left "
                                         "on device"):
        run_setup.open_cache(choice, load_partitioned(part_dir), 0, 0, 1)
    assert not list((part_dir / "cache").iterdir())  # no plan, no temporary


def test_the_memory_estimate_counts_the_rows_an_existing_plan_caches(p2, byte_plan):
    data = load_partitioned(p2)
    common = dict(fanouts=(5, 5), batch_size=16, hidden=16, layers=2, pipeline_depth=4, policy="vip", local_ranks=2)
    with_plan = estimate_train(data, cached_rows=read_plan_info(byte_plan).max_cached_rows, **common)
    assert with_plan.items["cache rows"] == 2 * 3 * (GPU_ROWS + CPU_ROWS) * ROW_BYTES
    assert "cache plan analysis (rank 0)" not in with_plan.items  # the plan exists: nothing to analyze


@pytest.fixture(scope="module")
def tiny_link_p2(tmp_path_factory) -> str:
    """The tiny preset with held-out edges, in 2 partitions (for link plans)."""
    from salientpp.data import load_dataset
    from salientpp.partition import partition_dataset

    root = tmp_path_factory.mktemp("tiny-link-plans")
    assert cli_main(["prepare", "synthetic:tiny", str(root / "ds"), "--link-split", "0.8,0.1,0.1"]) == 0
    partition_dataset(load_dataset(root / "ds"), root / "p2", 2)
    return str(root / "p2")


@pytest.mark.parametrize("options", [
    dict(sampler="ladies", fanouts=(64, 64)),
    dict(task="link", num_negatives=3, negative_sampling="per-source"),
    dict(seed=3, policy="random", replication=0.2, device_fraction=0.5),
    dict(policy="oracle", sampler="bulk"),
    dict(eval_every=3, eval_fanouts=(4, 4), eval_batch_size=50),
    dict(eval_every=0),
], ids=["ladies", "link", "seed-random", "oracle-bulk", "evaluated-every-third-epoch", "unevaluated"])
def test_the_suggested_analyze_command_writes_a_plan_that_train_then_takes(p2, tiny_link_p2, options, tmp_path,
                                                                          capsys):
    """The plan request is derived once from the config: the analyze command suggested for it
    writes a plan that analyze accepts, whose default name is the run's own, and that the same
    run then takes with --plan and without it (at the default location)."""
    import shlex

    from salientpp.cache.options import analyze_command

    part = _copy_without_plans(tiny_link_p2 if options.get("task") == "link" else p2, tmp_path / "p")
    config = TrainConfig(str(part), hidden=16, layers=2, batch_size=16, fanouts=options.pop("fanouts", (5, 5)),
                         **options)
    request = run_setup.plan_request(config.resolved())
    command = analyze_command(str(part), request, out=str(tmp_path / "plan"))
    words = shlex.split(command)
    assert words[:2] == ["salientpp", "analyze"]
    assert cli_main(words[1:]) == 0, capsys.readouterr().err
    # Given as --plan, the plan serves the run: checked once before the ranks, and by nothing after.
    planned = run_setup.resolve_run(TrainConfig(str(part), hidden=16, layers=2, batch_size=16,
                                                **{**options, "plan": str(tmp_path / "plan"), "policy": None,
                                                   "replication": None, "device_fraction": None},
                                                fanouts=config.fanouts))
    assert planned.cache.plan is not None and planned.cache.plan.info.meta.options == request.options
    # Without --plan the run finds it at the default location, under the name analyze gives it.
    assert cli_main([*words[1:-2], "--memory-limit", "20GiB"]) == 0
    chosen = run_setup.resolve_run(config).cache
    assert chosen.path == request.default_dir(str(part)) and chosen.plan is not None and not chosen.to_build


def test_plans_built_with_another_seed_or_oracle_epochs_never_share_a_default_name(p2):
    from salientpp.cache.plan import default_plan_name

    names = set()
    for seed, epochs in ((0, 10), (1, 10), (0, 3)):
        config = TrainConfig(p2, policy="oracle", seed=seed, fanouts=(5, 5), layers=2, batch_size=16).resolved()
        request = run_setup.plan_request(config)
        request = type(request)(request.workloads, type(request.options)(**{**request.options.__dict__,
                                                                           "epochs": epochs}))
        names.add(default_plan_name(request))
    assert len(names) == 3, names


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_analyze_and_train_name_one_plan_for_one_request_on_the_device_it_is_for(p2, device):
    """The device share's default is the device's (default_device_fraction) in both commands, so
    `analyze --device D` writes the plan that `train --device D` looks for, on a GPU too."""
    import argparse

    from salientpp.cache.options import graph_schema, plan_request_from
    from salientpp.cache.plan import default_device_fraction
    from salientpp.cli import analyze

    parser = argparse.ArgumentParser()
    analyze.register(parser.add_subparsers())
    args = parser.parse_args(["analyze", p2, *WORKLOAD, "--replication", "0.1", "--device", device])
    analyzed = plan_request_from(args, graph_schema(p2))
    trained = run_setup.plan_request(TrainConfig(p2, fanouts=(5, 5), layers=2, batch_size=16, replication=0.1,
                                                 device=device, eval_every=0).resolved(), graph_schema(p2))
    assert analyzed.default_dir(p2) == trained.default_dir(p2)
    assert analyzed.options == trained.options and trained.options.device_fraction == default_device_fraction(device)


# -- the default plan serves the run's evaluation ----------------------------------------------------


def _request(part: str, schema=None, **options):
    config = TrainConfig(part, **{"hidden": 16, "layers": 2, "batch_size": 16, "fanouts": (5, 5), **options}).resolved()
    return run_setup.plan_request(config, schema)


def test_the_default_plan_serves_the_sampled_evaluation_by_its_passes_per_epoch_and_says_so(p2):
    from salientpp.cache.plan import default_plan_name

    evaluated = _request(p2, eval_fanouts=(4, 4), eval_batch_size=50, eval_every=4)
    training, evaluation = evaluated.workloads
    assert evaluation.splits == ("valid", "test") and evaluation.weight == 1 / 4
    assert (evaluation.fanouts, evaluation.batch_size) == (((4,), (4,)), 50)
    assert _request(p2, eval_fanouts=(4, 4), eval_batch_size=50, eval_every=2).workloads[1].weight == 1 / 2
    # --plan-workload train, no evaluation, or one that reads no cached rows: the training-only plan.
    alone = [_request(p2, eval_fanouts=(4, 4), plan_workload="train"), _request(p2, eval_every=0),
             _request(p2, inference="layerwise")]
    assert all(request.workloads == (training,) for request in alone)
    names = {default_plan_name(request) for request in alone}
    assert len(names) == 1 and default_plan_name(evaluated) not in names


def test_a_typed_graphs_default_plan_serves_its_evaluation_over_its_relations(typed_partitions):
    from salientpp.cache.options import graph_schema

    part = str(typed_partitions[0] / "p2")
    schema = graph_schema(part)
    training, evaluation = _request(part, schema, batch_size=4, eval_fanouts=(2, 2)).workloads
    assert evaluation.relations == training.relations == tuple(str(r) for r in schema.relations)
    assert evaluation.fanout_table.shape == (2, len(schema.relations)) and (evaluation.fanout_table == 2).all()


def test_a_default_plan_of_other_evaluation_under_the_runs_name_is_refused(p2, tmp_path, capsys, no_ranks):
    """A training-only plan written under an evaluated run's name is never taken as if it served
    that run's evaluation."""
    part_dir = _copy_without_plans(p2, tmp_path / "p2")
    name = run_setup.plan_request(TrainConfig(str(part_dir), hidden=16, layers=2, batch_size=16, fanouts=(5, 5),
                                              eval_fanouts=(5, 5)).resolved()).default_dir(part_dir).name
    assert cli_main(["analyze", str(part_dir), *WORKLOAD, "--replication", "0.1", "--name", name]) == 0
    capsys.readouterr()
    assert cli_main(["train", str(part_dir), *SMALL]) == 2
    err = one_sentence(capsys)
    assert "was built for training only but this run asks for a plan of training and evaluation" in err
    assert f"--plan {part_dir / 'cache' / name}" in err


def test_the_evaluation_aware_plan_fetches_far_fewer_rows_per_epoch_where_evaluation_dominates(p2):
    """On the tiny graph (valid + test are 11.5x its training nodes) with evaluation every epoch,
    the rows a partition fetches per epoch of training and evaluation, counted over the batches
    the loaders draw, fall by far more than the margin under the default plan."""
    from salientpp import streams
    from salientpp.cache.plan import build_plans, cacheable_remote, node_row_bytes

    data = load_partitioned(p2)
    assert data.split_size("valid") + data.split_size("test") >= 10 * data.split_size("train")
    options = dict(layers=1, fanouts=(5,), eval_fanouts=(5,), eval_batch_size=256, replication=0.2)
    evaluated = _request(p2, **options)
    alone = _request(p2, plan_workload="train", **options)
    served = evaluated.context(data)  # what the run fetches: training and evaluation, one epoch each
    node_bytes = node_row_bytes(data)

    def rows(request) -> float:
        fetched = 0.0
        for plan in build_plans(request.context(data), "vip", request.options.budget):
            uncached = np.zeros(data.num_nodes, dtype=bool)
            uncached[cacheable_remote(served, plan.part, node_bytes)] = True
            uncached[plan.device_ids] = uncached[plan.host_ids] = False
            fetched += served.access_counts(plan.part, 2, streams.RUN_STREAM)[uncached].sum() / 2
        return fetched

    assert rows(evaluated) < 0.7 * rows(alone)
