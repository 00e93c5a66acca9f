"""A dead, failing or stalled rank: restarts from step checkpoints, messages that name the rank and
the stage, start-up mismatch checks, and the fault-injection spec itself."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

from salientpp.cache import Budget, PolicyContext, Workload, build_plans, save_plans
from salientpp.distributed.faults import ENV, Fault, FaultInjector, InjectedFault, parse_faults
from salientpp.distributed import DistContext, WorkerError
from salientpp.distributed.health import PEER_READ_S, Health, Position
from salientpp.distributed.group import free_port
from salientpp.errors import InputError
from salientpp.partition import load_partitioned
from salientpp.train import RankSetup, TrainConfig, resolve_run, train
from trainers import on_ranks, store_contexts

TINY = dict(hidden=32, layers=2, fanouts=(5, 5), batch_size=16, lr=0.01, eval_fanouts=(10, 10), progress=False)


@pytest.fixture(scope="module")
def p2(tiny_partitions):
    return str(tiny_partitions[0] / "p2")


def _steps_per_epoch(part_dir: str) -> int:
    data = load_partitioned(part_dir)
    return max(-(-data.part(k).train_idx.shape[0] // TINY["batch_size"]) for k in range(data.num_parts))


# -- the fault-injection spec ---------------------------------------------------------------------------


def test_fault_spec_parses_and_fires_once_where_it_matches():
    faults = parse_faults("raise@rows:rank=1,epoch=0,step=2; delay@ids:seconds=0.01,attempt=1")
    assert faults == (Fault("raise", "rows", rank=1, epoch=0, step=2), Fault("delay", "ids", seconds=0.01, attempt=1))
    injector = FaultInjector(faults, rank=1, attempt=0)
    injector(Position("rows", 0, 1))  # wrong step: nothing happens
    injector(Position("ids", 0, 2))  # the delay is meant for the first restart only
    injector(Position("rows", 0, 2, evaluation=True))  # the stage of an evaluation pass, not of training
    with pytest.raises(InjectedFault, match="rows of epoch 0, step 2 on rank 1"):
        injector(Position("rows", 0, 2))
    injector(Position("rows", 0, 2))  # fired once: a resumed run is not stopped again
    assert FaultInjector(faults, rank=0, attempt=0).pending == []


@pytest.mark.parametrize("spec", ["explode@rows", "kill@nowhere", "kill@rows:rank=one", "kill@rows:colour=1"])
def test_bad_fault_specs_are_refused_with_one_sentence(spec):
    with pytest.raises(InputError, match=ENV):
        parse_faults(spec)


# -- kill, restart, resume ---------------------------------------------------------------------------------


def test_killed_rank_restarts_from_the_last_step_checkpoint_and_ends_like_an_uninterrupted_run(p2, tmp_path,
                                                                                                 monkeypatch):
    steps = _steps_per_epoch(p2)
    assert steps >= 4
    kill_step = int(np.random.default_rng().integers(1, steps))  # a random step of epoch 1, not its first
    common = dict(TINY, part_dir=p2, epochs=3, eval_every=3, checkpoint_every="2steps", timeout_s=60)
    straight = train(TrainConfig(checkpoint_dir=str(tmp_path / "a"), json_path=str(tmp_path / "a.jsonl"), **common))

    monkeypatch.setenv(ENV, f"kill@train:rank=1,epoch=1,step={kill_step}")
    restarted = train(TrainConfig(checkpoint_dir=str(tmp_path / "b"), json_path=str(tmp_path / "b.jsonl"),
                                  max_restarts=1, **common))
    where = f"(killed at epoch 1, step {kill_step} of {steps})"
    assert restarted.restarts == 1, where
    # Checkpoints follow every 2nd step and each epoch's end, so the run lost at most one step.
    epoch, step = restarted.resumed_from
    assert (epoch, step) == (1, kill_step - kill_step % 2), where
    assert kill_step - step <= 1
    assert restarted.epochs_done == 3 and [h["epoch"] for h in restarted.history] == [1, 2], where
    lines = [json.loads(line) for line in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert [line["epoch"] for line in lines] == [0, 1, 2], where  # no epoch written twice or lost
    # Same batches, RNG states, model and optimizer state: the resumed run is the same run.
    for a, b in zip(straight.history, [lines[0]] + restarted.history):
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-5), where
        assert b["steps"] == a["steps"]
    assert restarted.final_test == pytest.approx(straight.final_test, abs=1e-9), where
    ckpt_a = torch.load(tmp_path / "a" / "last.pt", weights_only=True)
    ckpt_b = torch.load(tmp_path / "b" / "last.pt", weights_only=True)
    for name, value in ckpt_a["model"].items():
        torch.testing.assert_close(ckpt_b["model"][name], value, rtol=1e-5, atol=1e-6)


def test_a_typed_run_killed_mid_epoch_resumes_from_its_step_checkpoint_with_the_same_sums(tmp_path, monkeypatch):
    """A typed graph's running sums carry the rows received per node type after the fixed counters:
    the step checkpoint holds them, and the resumed epoch reports what an uninterrupted one does."""
    from salientpp.data.synthetic import synthetic_dataset
    from salientpp.partition.partitioner import partition_dataset

    part = tmp_path / "p2"
    partition_dataset(synthetic_dataset("igbh,num_nodes=2000"), part, 2)
    common = dict(TINY, part_dir=str(part), epochs=1, checkpoint_every="2steps", timeout_s=60)
    straight = train(TrainConfig(checkpoint_dir=str(tmp_path / "a"), **common))
    monkeypatch.setenv(ENV, "kill@train:rank=1,epoch=0,step=3")
    restarted = train(TrainConfig(checkpoint_dir=str(tmp_path / "b"), max_restarts=1, **common))
    assert restarted.restarts == 1 and restarted.resumed_from == (0, 2)
    (a,), (b,) = straight.history, restarted.history
    assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-6)
    assert len(a["comm"]["received_by_type"]) == 4 and b["comm"] == a["comm"]


def test_a_macro_f1_run_killed_mid_epoch_resumes_with_its_per_class_counts(p2, tmp_path, monkeypatch):
    """F1-macro keeps 3 counts per class (24 for the tiny graph's 8 classes) in each rank's running
    sums: the step checkpoint holds them all, so the resumed epoch's training metric is the
    uninterrupted one's, counts of the steps before the kill included."""
    common = dict(TINY, part_dir=p2, epochs=1, metric="f1-macro", checkpoint_every="2steps", timeout_s=60)
    straight = train(TrainConfig(checkpoint_dir=str(tmp_path / "a"), **common))
    monkeypatch.setenv(ENV, "kill@train:rank=1,epoch=0,step=3")
    restarted = train(TrainConfig(checkpoint_dir=str(tmp_path / "b"), max_restarts=1, **common))
    assert restarted.restarts == 1 and restarted.resumed_from == (0, 2)
    (a,), (b,) = straight.history, restarted.history
    assert 0 < a["train_metric"] < 1
    assert b["train_metric"] == pytest.approx(a["train_metric"], rel=1e-12)
    assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-6)


def test_without_restarts_a_killed_rank_fails_the_job_and_the_peer_names_it(p2, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, "kill@train:rank=1,epoch=0,step=2")
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        train(TrainConfig(part_dir=p2, epochs=2, timeout_s=60, **TINY))
    assert time.monotonic() - start < 50  # not the 60 s timeout: the dead peer is noticed at once
    assert "rank 1 failed: the process was killed by SIGKILL" in str(info.value)
    # Rank 0 lost its peer mid-collective and says where rank 1 was.
    reports = dict(info.value.others)
    assert 0 in reports, info.value.others
    assert "rank 1 was last in the forward/backward and gradient all-reduce of epoch 0, step 2" in reports[0]


def test_torchrun_max_restarts_resumes_from_the_checkpoint(p2, tmp_path):
    port = free_port()
    env = dict(os.environ, **{ENV: "kill@train:rank=0,epoch=0,step=3"}, GLOO_SOCKET_IFNAME="lo")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts", "1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--local-addr", "127.0.0.1",
           "-m", "salientpp", "train", p2, "--epochs", "2", "--layers", "2", "--fanouts", "5,5", "--hidden", "32",
           "--batch-size", "16", "--eval-every", "2", "--checkpoint-dir", str(tmp_path / "ck"),
           "--checkpoint-every", "2steps", "--quiet", "--timeout", "60"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed from the checkpoint at step 2 of epoch 0" in proc.stdout, proc.stdout
    assert proc.stdout.count("trained 2 epochs") == 1  # one summary, from rank 0
    ckpt = torch.load(tmp_path / "ck" / "last.pt", weights_only=True)
    assert (ckpt["epoch"], ckpt["step"]) == (2, 0) and [h["epoch"] for h in ckpt["history"]] == [0, 1]


# -- failures name the rank and the stage, within the timeout ----------------------------------------------


@pytest.mark.parametrize("spec, stage_text", [
    ("raise@rows:rank=1,epoch=0,step=2", "rank 1 stopped in the all-to-all of feature rows of epoch 0, step 2"),
    ("raise@eval:rank=1,epoch=0", "rank 1 stopped in the evaluation of epoch 0"),
])
def test_a_raising_rank_names_itself_and_its_stage(p2, monkeypatch, spec, stage_text):
    monkeypatch.setenv(ENV, spec)
    with pytest.raises(WorkerError) as info:
        train(TrainConfig(part_dir=p2, epochs=1, timeout_s=60, **TINY))
    assert info.value.rank == 1 and stage_text in str(info.value)
    assert "InjectedFault" in str(info.value)


def test_a_stalled_rank_is_named_by_its_peer_within_the_timeout(p2, monkeypatch):
    monkeypatch.setenv(ENV, "delay@train:rank=1,epoch=0,step=1,seconds=120")
    timeout = 4.0
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        train(TrainConfig(part_dir=p2, epochs=1, timeout_s=timeout, **TINY))
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert info.value.rank == 0, message  # the stalled rank never fails by itself: its peer times out
    assert "rank 1 was last in the forward/backward and gradient all-reduce of epoch 0, step 1" in message
    assert "rank 1 reported least recently" in message
    assert elapsed < 60, elapsed  # start-up (~10 s on 2 busy cores) + the 4 s timeout, far below the 120 s stall



class _UnansweredStore:
    """A rendezvous store whose host is stopped: a read or a write waits until the test releases it
    (torch's store applies no timeout to it)."""

    def __init__(self):
        self.released = threading.Event()

    def check(self, keys):
        self.released.wait()
        return False

    def set(self, key, value):
        self.released.wait()


def test_a_failing_rank_reports_within_its_timeout_when_the_store_never_answers():
    store = _UnansweredStore()
    cpu = torch.device("cpu")
    health = Health(DistContext(1, 2, 1, cpu, cpu, "gloo", rendezvous_store=store, timeout_s=0.2))
    start = time.monotonic()
    try:
        message = str(health.failure(RuntimeError("Connection closed by peer")))
    finally:
        store.released.set()
        health.close()
    assert time.monotonic() - start < PEER_READ_S
    assert "Connection closed by peer" in message and "the rendezvous store did not answer" in message


# -- start-up mismatches -----------------------------------------------------------------------------------
# The ranks check their options, data and plans through the rendezvous store (health.agree), so
# two ranks that share a store in this process check them as launched ranks do, without a launch.


def _mismatch(configs, monkeypatch=None, version_of_rank_1: str | None = None) -> str:
    """What the ranks of a job started with ``configs`` (rank r's) say when they open their
    set-up and their cache plan's feature store; with ``version_of_rank_1``, rank 1 runs another
    salientpp version. Every rank must refuse, with one sentence."""
    import salientpp.train.setup as setup_module

    if version_of_rank_1 is not None:
        real = setup_module.agree

        def agree(ctx, topic, facts):
            assert "salientpp" in facts and "torch" in facts  # the versions are among the facts
            return real(ctx, topic, {**facts, "salientpp": version_of_rank_1} if ctx.rank == 1 else facts)
        monkeypatch.setattr(setup_module, "agree", agree)

    def open_rank(ctx):
        setup = RankSetup.open(resolve_run(configs[ctx.rank], 2), ctx)
        return setup.graph.feature_store(setup.open_cache().plan)
    errors = on_ranks(open_rank, store_contexts(2))
    assert all(isinstance(e, InputError) for e in errors), errors
    return str(errors[1])


def test_startup_refuses_ranks_with_different_options(p2):
    a = TrainConfig(part_dir=p2, epochs=1, timeout_s=30, **TINY).validate()
    b = TrainConfig(part_dir=p2, epochs=1, timeout_s=30, **dict(TINY, fanouts=(4, 4))).validate()
    assert "rank 1 has fanouts = [4, 4] but rank 0 has [5, 5]" in _mismatch([a, b])


@pytest.mark.parametrize("option, values, others", [("sampler", ("nodewise", "bulk"), {}),
                                                    ("minibatches_per_bulk", (8, 4), {"sampler": "bulk"}),
                                                    ("pipeline_depth", (1, 2), {})])
def test_startup_refuses_ranks_with_different_sampling_options(p2, option, values, others):
    a, b = (TrainConfig(part_dir=p2, epochs=1, timeout_s=30, policy="none", **{**TINY, **others, option: value})
            for value in values)
    message = _mismatch([a, b])
    assert f"rank 1 has {option} = {values[1]!r} but rank 0 has {values[0]!r}" in message, message


def test_startup_refuses_ranks_with_different_package_versions(p2, monkeypatch):
    a = TrainConfig(part_dir=p2, epochs=1, timeout_s=30, **TINY).validate()
    assert "rank 1 has salientpp = '0.0.0-other' but rank 0 has" in _mismatch([a, a], monkeypatch, "0.0.0-other")


def test_startup_refuses_ranks_with_different_cache_plans(p2, tmp_path):
    # Each rank is given its own --plan (as on machines that keep their copy elsewhere): the paths
    # may differ, the plans may not. Rank 1's plan is scored by degree instead of VIP.
    ctx = PolicyContext(load_partitioned(p2), (Workload((5, 5), 16),), seed=0)
    for name, policy in (("a", "vip"), ("b", "degree")):
        save_plans(build_plans(ctx, policy, Budget(replication=0.2)), tmp_path / name)
    a = TrainConfig(part_dir=p2, epochs=1, timeout_s=30, plan=str(tmp_path / "a"), **TINY).validate()
    b = TrainConfig(**{**a.to_dict(), "plan": str(tmp_path / "b")}).validate()
    message = _mismatch([a, b])
    assert "rank 1 has the cache plan's policy = 'degree' but rank 0 has 'vip'" in message, message
    assert "start every rank with the same cache plan" in message and len(message) < 300, message


def test_startup_refuses_more_ranks_than_partitions(tiny_partitions):
    p1 = str(tiny_partitions[0] / "p1")
    a = TrainConfig(part_dir=p1, epochs=1, timeout_s=30, **TINY).validate()
    assert "has 1 partitions but the job has 2 ranks" in _mismatch([a, a])
