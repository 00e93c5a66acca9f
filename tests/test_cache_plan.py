"""Cache plans: budgets filled exactly, tiers and slot maps, local order, disk round trip,
compatibility checks, custom policies, and one-sentence errors from `salientpp analyze`."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from cache_support import make_partitioned
from salientpp.cache import (Budget, PlanOptions, PlanRequest, PolicyContext, Workload, build_plans, check_plan,
                             load_plan, load_plans, policy_scores, register_policy, save_plans)
from salientpp.cache.plan import predicted_rows, read_plan_info
from salientpp.cache.workload import EdgeSeeds
from salientpp.cli import main
from salientpp.data.schema import GraphSchema
from salientpp.errors import InputError
from salientpp.parsing import parse_bytes

FANOUTS = (10, 5)


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    return make_partitioned(tmp_path_factory.mktemp("plan") / "parts", parts=4)


@pytest.fixture
def ctx(parts):
    return PolicyContext(parts, (Workload(FANOUTS, 16),))


def _row_bytes(parts):
    return parts.num_features * parts.feature_dtype.itemsize


@pytest.mark.parametrize("policy", ["vip", "degree", "num-paths"])
@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5, 3.0])
def test_replication_caches_the_top_remote_rows(parts, ctx, policy, alpha):
    plans = build_plans(ctx, policy, Budget(replication=alpha))
    for plan in plans:
        k = plan.part
        owned = parts.book.owned(k)
        remote = np.setdiff1d(np.arange(parts.num_nodes), owned)
        # alpha = K-1 is full replication: every remote row, even where a partition is smaller than N/K
        expected = remote.size if alpha == 3.0 else min(math.floor(alpha * parts.num_nodes / 4 + 1e-9), remote.size)
        assert plan.device_ids.size == expected
        assert plan.host_ids.size == 0
        assert np.unique(plan.device_ids).size == plan.device_ids.size
        assert not np.isin(plan.device_ids, owned).any()
        scores = policy_scores(ctx, policy, k)
        assert np.all(np.diff(scores[plan.device_ids]) <= 0)  # best first
        uncached = np.setdiff1d(remote, plan.device_ids)
        if plan.device_ids.size and uncached.size:
            assert scores[plan.device_ids].min() >= scores[uncached].max()


def test_byte_budgets_are_filled_exactly_gpu_tier_first(parts, ctx):
    row = _row_bytes(parts)
    budget = Budget(device_bytes=10 * row + row // 2, host_bytes=20 * row + 3)
    for plan in build_plans(ctx, "vip", budget):
        assert plan.device_ids.size == 10 and plan.host_ids.size == 20
        assert plan.device_ids.size * row <= budget.device_bytes < (plan.device_ids.size + 1) * row
        scores = policy_scores(ctx, "vip", plan.part)
        assert scores[plan.device_ids].min() >= scores[plan.host_ids].max()
        assert np.intersect1d(plan.device_ids, plan.host_ids).size == 0
    # A budget larger than the remote rows caches every remote row once, GPU tier first.
    huge = build_plans(ctx, "degree", Budget(device_bytes=100 * row, host_bytes=10**9))
    for plan in huge:
        assert plan.device_ids.size == 100
        assert plan.num_cached == parts.num_nodes - parts.book.part_size(plan.part)


def test_slot_map_and_local_order(parts, ctx):
    row = _row_bytes(parts)
    plans = build_plans(ctx, "vip", Budget(device_bytes=7 * row, host_bytes=9 * row), device_fraction=0.3)
    for plan in plans:
        slots = plan.slot_map()
        assert slots.shape == (parts.num_nodes,) and slots.dtype == np.int64
        np.testing.assert_array_equal(slots[plan.device_ids], np.arange(7))
        np.testing.assert_array_equal(slots[plan.host_ids], np.arange(7, 16))
        assert (slots >= 0).sum() == 16
        assert np.all(slots[parts.book.owned(plan.part)] == -1)
        n_k = parts.book.part_size(plan.part)
        np.testing.assert_array_equal(np.sort(plan.owned_order), np.arange(n_k))
        scores = policy_scores(ctx, "vip", plan.part)[parts.book.offsets[plan.part]:][:n_k]
        assert np.all(np.diff(scores[plan.owned_order]) <= 0)
        assert plan.num_device_owned == math.floor(0.3 * n_k)


def test_plan_round_trips_through_disk(parts, ctx, tmp_path):
    row = _row_bytes(parts)
    plans = build_plans(ctx, "vip", Budget(device_bytes=5 * row, host_bytes=8 * row), device_fraction=0.15)
    save_plans(plans, tmp_path / "plan")
    loaded = load_plans(tmp_path / "plan")
    assert len(loaded) == len(plans)
    for a, b in zip(plans, loaded):
        for name in ("device_ids", "host_ids", "owned_order"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
            assert getattr(b, name).dtype == np.int64
        assert (a.part, a.device_fraction, a.num_device_owned, a.meta) == (b.part, b.device_fraction, b.num_device_owned, b.meta)
        np.testing.assert_array_equal(a.slot_map(), b.slot_map())
    with pytest.raises(InputError, match="already exists"):
        save_plans(plans, tmp_path / "plan")
    with pytest.raises(InputError, match="partitions 0..3"):
        load_plan(tmp_path / "plan", 4)


def test_plan_info_and_a_copy_with_another_device_fraction(parts, ctx, tmp_path):
    row = _row_bytes(parts)
    plans = build_plans(ctx, "vip", Budget(device_bytes=3 * row, host_bytes=5 * row), 0.2)
    save_plans(plans, tmp_path / "p")
    info = read_plan_info(tmp_path / "p")  # meta.json only, no arrays
    assert info.num_device == (3,) * 4 and info.num_host == (5,) * 4 and info.max_cached_rows == 8
    assert info.device_fraction == 0.2 and info.num_device_owned == tuple(p.num_device_owned for p in plans)
    half = plans[1].with_device_fraction(0.5)
    assert half.num_device_owned == plans[1].owned_order.size // 2 and half.device_fraction == 0.5
    assert half.device_ids is plans[1].device_ids and plans[1].device_fraction == 0.2  # the same cache, the original kept
    for fraction in (2, -0.1, float("nan"), True, "0.5"):
        with pytest.raises(InputError, match=re.escape(f"the device fraction must be a number in [0, 1], got {fraction!r}")):
            plans[1].with_device_fraction(fraction)


def test_mismatched_plan_is_refused(parts, ctx, tmp_path):
    save_plans(build_plans(ctx, "degree", Budget(replication=0.1)), tmp_path / "plan")
    info = read_plan_info(tmp_path / "plan")
    # what the default location's plan must match: every option it was built with (ctx's epochs)
    found = PlanOptions("degree", Budget(replication=0.1), 0.0, epochs=ctx.epochs)

    def check(fanouts=FANOUTS, batch_size=16, built_with=found, data=parts):
        check_plan(info, data, PlanRequest((Workload(fanouts, batch_size),), built_with))
    check()  # the right setup passes
    check(built_with=None)  # a plan the user chose, with any options
    check_plan(info, parts)  # a loader's cache serves any workload of its partitioning
    with pytest.raises(InputError, match="fanouts 10,5 but training uses 15,10,5"):
        check(fanouts=(15, 10, 5))
    with pytest.raises(InputError, match=r"batch size 16 but training uses 32; remove .*plan and build"):
        check(batch_size=32)
    with pytest.raises(InputError, match=r"uses 32; build a fitting plan with `salientpp analyze .* --batch-size 32 "):
        check(batch_size=32, built_with=None)  # a plan the user chose is not removed
    with pytest.raises(InputError, match="built with policy degree but this run asks for vip"):
        check(built_with=PlanOptions("vip", Budget(replication=0.1), 0.0, epochs=ctx.epochs))
    with pytest.raises(InputError, match="built with device fraction 0.0 but this run asks for 0.5"):
        check(built_with=PlanOptions("degree", Budget(replication=0.1), 0.5, epochs=ctx.epochs))
    with pytest.raises(InputError, match="built with seed 0 but this run asks for 3"):
        check(built_with=PlanOptions("degree", Budget(replication=0.1), 0.0, seed=3, epochs=ctx.epochs))
    with pytest.raises(InputError, match=f"built with epochs {ctx.epochs} but this run asks for 10"):
        check(built_with=PlanOptions("degree", Budget(replication=0.1), 0.0))
    other = make_partitioned(tmp_path / "other", parts=4, method="random")
    with pytest.raises(InputError, match="another partitioning"):
        check(data=other)
    with pytest.raises(InputError, match="another partitioning"):
        check_plan(info, other)


@pytest.mark.parametrize("built_with", [None, PlanOptions("degree", Budget(replication=0.1), 0.0)],
                         ids=["given", "found"])
def test_the_one_plan_check_refuses_a_node_plan_for_link_training(parts, ctx, tmp_path, built_with):
    save_plans(build_plans(ctx, "degree", Budget(replication=0.1)), tmp_path / "node")
    link = Workload(FANOUTS, 16, edges=EdgeSeeds())  # the same fanouts and batch size, edge seeds
    with pytest.raises(InputError, match="built for node seeds but training uses link seeds"):
        check_plan(read_plan_info(tmp_path / "node"), parts, PlanRequest((link,), built_with))


def test_custom_policy_in_a_few_lines(parts, ctx):
    @register_policy("test-low-degree")
    def low_degree(ctx, k):
        return -ctx.degree().astype(float)

    for plan in build_plans(ctx, "test-low-degree", Budget(replication=0.2)):
        degree = np.diff(parts.rowptr)
        remote = np.setdiff1d(np.arange(parts.num_nodes), parts.book.owned(plan.part))
        assert degree[plan.device_ids].max() <= degree[np.setdiff1d(remote, plan.device_ids)].min()

    @register_policy("test-broken")
    def broken(ctx, k):
        return np.ones(3)

    with pytest.raises(InputError, match="one score per vertex"):
        build_plans(ctx, "test-broken", Budget(replication=0.2))
    with pytest.raises(InputError, match="unknown cache policy"):
        build_plans(ctx, "no-such-policy", Budget(replication=0.2))


def test_parse_bytes():
    assert parse_bytes("512MiB") == 512 * 2**20
    assert parse_bytes("2GB") == 2 * 10**9
    assert parse_bytes("1000") == 1000
    for bad in ("lots", "-5", "3 parsecs"):
        with pytest.raises(InputError):
            parse_bytes(bad)


def _analyze(parts, *extra):
    return main(["analyze", str(parts.path), "--fanouts", "10,5", "--batch-size", "16", *extra])


def test_analyze_writes_plans_next_to_the_data(parts, tmp_path, capsys):
    assert _analyze(parts, "--replication", "0.1", "--out", str(tmp_path / "p")) == 0
    plan = load_plan(tmp_path / "p", 2)
    check_plan(read_plan_info(tmp_path / "p"), parts, PlanRequest((Workload(FANOUTS, 16),)))
    assert plan.device_ids.size == math.floor(0.1 * parts.num_nodes / 4)
    assert "predicted remote rows per epoch" in capsys.readouterr().out
    assert _analyze(parts, "--policy", "degree", "--device-cache-bytes", "1KiB", "--host-cache-bytes", "0",
                    "--name", "deg") == 0
    plan = load_plan(parts.path / "cache" / "deg", 0)
    assert plan.device_ids.size == 1024 // _row_bytes(parts) and plan.host_ids.size == 0


def test_a_plan_that_caches_every_remote_row_predicts_exactly_zero_rows_with_it(parts, tmp_path, capsys):
    # with the cache, the sum runs over the rows left uncached, not a difference of two float sums,
    # which for this workload printed "-5.684e-14 with it"
    every_row = str(parts.num_parts - 1)
    assert main(["analyze", str(parts.path), "--fanouts", "10,5", "--batch-size", "8", "--replication", every_row,
                 "--out", str(tmp_path / "all")]) == 0
    assert "without a cache, 0 with it (100.0% fewer)" in capsys.readouterr().out
    ctx = PolicyContext(parts, (Workload(FANOUTS, 8),))
    no_cache, with_cache = predicted_rows(ctx, build_plans(ctx, "vip", Budget(replication=parts.num_parts - 1)))
    assert (no_cache > 0).all() and (with_cache == 0).all()
    no_cache, with_cache = predicted_rows(ctx, build_plans(ctx, "vip", Budget(replication=0.3)))
    assert (0 < with_cache).all() and (with_cache < no_cache).all()


@pytest.mark.parametrize("after_rename", [True, False])
def test_an_interrupt_once_the_plan_directory_is_renamed_exits_0_saying_the_plan_is_complete(
        parts, tmp_path, capsys, monkeypatch, after_rename):
    # Ctrl-C as save_plans returns (the rename done, analyze not yet back): the plan is complete,
    # so the run must not exit 130 beside it; before the rename it still does, leaving nothing
    from salientpp.cache import plan as plan_module

    save = plan_module.save_plans

    def interrupted(plans, out_dir):
        if after_rename:
            save(plans, out_dir)
        raise KeyboardInterrupt
    monkeypatch.setattr(plan_module, "save_plans", interrupted)
    out = tmp_path / "p"
    assert _analyze(parts, "--replication", "0.1", "--out", str(out)) == (0 if after_rename else 130)
    err = capsys.readouterr().err
    if after_rename:
        assert err.splitlines()[-1] == f"salientpp analyze: interrupted after its output was complete: {out}"
        check_plan(read_plan_info(out), parts, PlanRequest((Workload(FANOUTS, 16),)))
    else:
        assert err == "salientpp analyze: interrupted\n" and not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--fanouts", "", "--replication", "0.1"], "--fanouts is empty"),
    (["--fanouts", "10,0", "--replication", "0.1"], "fanout 0 is invalid"),
    (["--fanouts", "10,-3", "--replication", "0.1"], "fanout -3 is invalid"),
    (["--eval-fanouts", "x,5", "--replication", "0.1"], "--eval-fanouts must be comma-separated integers"),
    (["--eval-fanouts", "10,0", "--replication", "0.1"], "every entry of --eval-fanouts must be an integer"),
    (["--eval-fanouts", "", "--replication", "0.1"], "--eval-fanouts is empty"),
    (["--replication", "-0.1"], "outside [0, 3]"),
    (["--replication", "3.5"], "outside [0, 3]"),
    (["--device-cache-bytes", "10"], "smaller than one feature row"),
    (["--host-cache-bytes", "1"], "smaller than one feature row"),
    (["--replication", "0.1", "--device-cache-bytes", "1MiB"], "not both"),
    ([], "say how much to cache"),
    (["--replication", "0.1", "--policy", "magic"], "unknown cache policy"),
    (["--replication", "0.1", "--device-fraction", "1.5"], "--device-fraction must be a number in [0, 1]"),
    (["--replication", "0.1", "--batch-size", "0"], "batch size"),
])
def test_analyze_bad_input_is_one_sentence_and_exit_2(parts, capsys, args, message):
    before = sorted(p.name for p in parts.path.rglob("*"))
    assert main(["analyze", str(parts.path), "--fanouts", "10,5", "--batch-size", "16", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert sorted(p.name for p in parts.path.rglob("*")) == before  # nothing left behind


def test_analyze_refuses_a_missing_partitioned_dir(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "nope"), "--fanouts", "10,5", "--batch-size", "16",
                 "--replication", "0.1"]) == 2
    assert "not a directory" in capsys.readouterr().err


# ---- typed graphs: fanout tables, one byte budget across node types ------------------------------

@pytest.fixture(scope="module")
def typed_parts(tmp_path_factory):
    from cache_support import make_typed_partitioned

    return make_typed_partitioned(tmp_path_factory.mktemp("typed-plan") / "parts")


def test_a_typed_workloads_fanouts_are_its_graphs_table_and_survive_json(typed_parts):
    schema = typed_parts.schema
    every = Workload((4, 2), 4, schema=schema)
    assert every.fanouts == ((4,) * schema.num_relations, (2,) * schema.num_relations)
    assert every.fanout_table.dtype == np.int64 and every.fanout_table.shape == (2, schema.num_relations)
    lists = {str(r): (3, 1) for r in schema.relations} | {"author__writes__paper": (0, 5)}
    typed = Workload(lists, 4, schema=schema)
    assert typed.fanout_table[:, schema.relation_index("writes")].tolist() == [0, 5]
    assert Workload.from_json(typed.to_json()) == typed
    # A homogeneous workload's JSON and fanouts are what they were before typed graphs.
    assert Workload((10, 5), 16).to_json() == {"fanouts": [10, 5], "batch_size": 16, "replace": False,
                                               "splits": ["train"], "weight": 1.0, "sampler": "nodewise",
                                               "edges": None}
    assert Workload((10, 5), 16, schema=GraphSchema.homogeneous(10)) == Workload((10, 5), 16)


def test_a_homogeneous_workload_is_the_table_of_its_one_relation_and_reads_its_old_json_back():
    workload = Workload((10, 5), 16, schema=GraphSchema.homogeneous(10))
    relation = str(GraphSchema.homogeneous(10).relations[0])
    assert workload.relations == (relation,) and workload.fanouts == ((10,), (5,))
    assert workload.fanout_table.tolist() == [[10], [5]] and workload.hop_fanouts == (10, 5)
    written = workload.to_json()  # the one list of hops, as plans written before typed graphs hold it
    assert written["fanouts"] == [10, 5] and "relations" not in written
    assert Workload.from_json(written) == workload
    # the same table named by its relation is the same workload
    assert Workload.from_json({**written, "fanouts": [[10], [5]], "relations": [relation]}) == workload


@pytest.mark.parametrize("alpha, num_nodes, num_parts, width", [
    (0.57, 100, 1, 512), (0.3, 10, 1, 4), (0.1, 30, 3, 100), (1.1, 7_000_003, 4, 516), (0.0, 10, 2, 8),
    (0.999, 12_345, 7, 1 << 20), (2.0, 10, 3, 8)])
def test_a_byte_budget_over_rows_of_one_width_takes_exactly_the_rows_of_the_row_budget(alpha, num_nodes, num_parts,
                                                                                       width):
    # Every plan and simulation gives Budget.rows each ranked row's bytes, a homogeneous graph's too;
    # rows of one width must take what the row form (floor(alpha N / K)) takes, whatever the rounding.
    budget, remote = Budget(replication=alpha), num_nodes - num_nodes // num_parts
    ranked = np.full(remote, width, dtype=np.int64)
    assert (budget.rows(remote, num_nodes, num_parts, width, ranked, num_nodes * width)
            == budget.rows(remote, num_nodes, num_parts, width))
    tiers = Budget(device_bytes=3 * width + 1, host_bytes=5 * width)
    assert tiers.rows(remote, num_nodes, num_parts, width, ranked, num_nodes * width) == tiers.rows(
        remote, num_nodes, num_parts, width)


def test_a_typed_plan_name_shows_each_relations_fanout_only_where_they_differ(typed_parts):
    schema = typed_parts.schema
    lists = {str(r): (3, 1) for r in schema.relations} | {"author__writes__paper": (0, 5)}
    name = lambda fanouts: PlanRequest((Workload(fanouts, 4, schema=schema),),  # noqa: E731
                                       PlanOptions("vip", Budget(replication=0.1))).default_dir("P").name
    assert name((4, 2)) == "vip-f4-2-b4-r0.1"
    hop0 = ".".join("0" if str(r) == "author__writes__paper" else "3" for r in schema.relations)
    assert name(lists).startswith(f"vip-f{hop0}-")


def test_alpha_on_a_typed_graph_is_bytes_of_an_average_partitions_feature_rows(typed_parts):
    from salientpp.cache.plan import node_row_bytes

    ctx = PolicyContext(typed_parts, (Workload((4, 2), 4, schema=typed_parts.schema),))
    node_bytes = node_row_bytes(typed_parts)
    node_type = typed_parts.book.type_of(np.arange(typed_parts.num_nodes))
    assert set(node_bytes[node_type == typed_parts.schema.type_index("author")]) == {0}  # no features
    assert set(node_bytes[node_type == typed_parts.schema.type_index("paper")]) == {5 * 4}
    assert set(node_bytes[node_type == typed_parts.schema.type_index("inst")]) == {2 * 4}
    for alpha in (0.1, 0.3, 0.6):
        budget = alpha * node_bytes.sum() / 2
        for plan in build_plans(ctx, "vip", Budget(replication=alpha)):
            assert (node_bytes[plan.device_ids] > 0).all()  # a type without features is never cached
            spent = node_bytes[plan.device_ids].sum()
            assert spent <= budget
            remote = np.setdiff1d(np.flatnonzero(node_bytes), typed_parts.book.owned(plan.part))
            left = np.setdiff1d(remote, plan.device_ids)
            scores = policy_scores(ctx, "vip", plan.part)
            if left.size:  # the next row in score order would not fit: the rows are taken until the bytes run out
                assert scores[plan.device_ids].min(initial=np.inf) >= scores[left].max()
                best_left = left[np.argmax(scores[left])]
                assert spent + node_bytes[best_left] > budget
    full = build_plans(ctx, "vip", Budget(replication=1.0))  # K - 1: every remote row with features
    for plan in full:
        assert plan.device_ids.size == np.setdiff1d(np.flatnonzero(node_bytes), typed_parts.book.owned(plan.part)).size


def test_byte_tiers_on_a_typed_graph_take_rows_of_different_widths_until_the_bytes_run_out(typed_parts):
    from salientpp.cache.plan import node_row_bytes

    ctx = PolicyContext(typed_parts, (Workload((4, 2), 4, schema=typed_parts.schema),))
    node_bytes = node_row_bytes(typed_parts)
    for plan in build_plans(ctx, "degree", Budget(device_bytes=50, host_bytes=30)):
        device, host = node_bytes[plan.device_ids], node_bytes[plan.host_ids]
        assert device.sum() <= 50 and host.sum() <= 30 and (device > 0).all() and (host > 0).all()


def test_analyze_takes_fanouts_per_relation_on_a_typed_graph(typed_parts, tmp_path, capsys):
    schema = typed_parts.schema
    text = ";".join(f"{r}={'0,5' if r.name == 'writes' else '3,1'}" for r in schema.relations)
    assert main(["analyze", str(typed_parts.path), "--fanouts", text, "--batch-size", "4", "--replication", "0.2",
                 "--out", str(tmp_path / "p")]) == 0
    meta = read_plan_info(tmp_path / "p").meta
    assert meta.training.relations == tuple(str(r) for r in schema.relations)
    assert meta.training.fanout_table[:, schema.relation_index("writes")].tolist() == [0, 5]
    assert f"fanouts {text}," in capsys.readouterr().out


@pytest.mark.parametrize("fanouts, message", [
    ("nope=5,5", "unknown relation nope; the graph's relations are author__writes__paper"),
    ("writes=5,5", "gives no list for the relations"),
    ("5,0", "fanout 0 is invalid"),
])
def test_a_bad_typed_fanout_list_is_one_sentence_before_anything_is_written(typed_parts, capsys, fanouts, message):
    before = sorted(p.name for p in typed_parts.path.rglob("*"))
    assert main(["analyze", str(typed_parts.path), "--fanouts", fanouts, "--batch-size", "4",
                 "--replication", "0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert sorted(p.name for p in typed_parts.path.rglob("*")) == before


def test_the_analyze_command_of_a_typed_request_reads_back_as_that_request(typed_parts):
    import argparse
    import shlex

    from salientpp.cache.options import add_plan_options, analyze_command, plan_request_from

    schema = typed_parts.schema
    parser = argparse.ArgumentParser()
    add_plan_options(parser)
    lists = {str(r): (3, 1) for r in schema.relations} | {"author__writes__paper": (0, 5)}
    for fanouts in (lists, (4, 2), {str(r): (0, 2) for r in schema.relations}):  # uniform, but no hop draws at 0
        request = PlanRequest((Workload(fanouts, 4, schema=schema),), PlanOptions("vip", Budget(replication=0.1)))
        words = shlex.split(analyze_command(str(typed_parts.path), request))
        args = parser.parse_args(words[2:words.index("--out")])
        assert plan_request_from(args, schema) == request


def test_a_typed_workloads_hop_fanout_is_the_most_a_node_type_draws_over_the_relations_into_it(typed_parts):
    # Into paper: writes and cites; into author: rev_writes and rev_at; into inst: at. A node draws
    # only over the relations into its own type, so summing every relation would overcount.
    schema = typed_parts.schema
    assert Workload((3, 1), 4, schema=schema).hop_fanouts == (6, 2)
    lists = {str(r): ((0, 0) if r.name == "writes" else (2, -1)) for r in schema.relations}
    assert Workload(lists, 4, schema=schema).hop_fanouts == (4, -1)  # an author's 2 + 2; -1 takes them all
    assert Workload({str(r): (0,) for r in schema.relations}, 4, schema=schema).hop_fanouts == (1,)


def test_analyze_with_a_sampling_policy_on_a_typed_graph_estimates_its_batches_from_its_relations(typed_parts, tmp_path, capsys):
    # The oracle samples batches, whose size analyze estimates from the relations' fanouts of a hop.
    text = ";".join(f"{r}={'0,0' if r.name == 'writes' else '2,-1'}" for r in typed_parts.schema.relations)
    assert main(["analyze", str(typed_parts.path), "--fanouts", text, "--batch-size", "4", "--replication", "0.2",
                 "--policy", "oracle", "--out", str(tmp_path / "p")]) == 0
    assert "the oracle analysis of 2 partitions" in capsys.readouterr().out
