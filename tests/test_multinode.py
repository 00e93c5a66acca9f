"""Two machines, as torchrun runs them: two agents (``--nnodes 2 --nproc-per-node 1``) that meet
through a c10d rendezvous on loopback, one rank each, each with its own copy of the partitioned
Cora and its own ``--json`` file, and a shared checkpoint directory (as ``/shared/ckpt`` in the
README). The job must train exactly as local ranks do, survive one machine's worker being killed
under ``--max-restarts 1``, and, when the machines' copies hold no cache plan, build the same one
on both.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch

from salientpp.cli import main as cli_main
from salientpp.data.importers import load_source
from salientpp.distributed.faults import ENV as FAULT_ENV
from salientpp.distributed.group import free_port
from salientpp.partition import load_partitioned
from salientpp.partition.partitioner import partition_dataset

REPO = Path(__file__).resolve().parents[1]
EPOCHS = 3
BATCH = 16
KILL_EPOCH, KILL_STEP = 1, 3  # a mid-epoch step after the checkpoint of step 2 (--checkpoint-every 2steps)
# One configuration for every run: small model, 3 epochs, one evaluation after the last epoch.
ARGS = ["--epochs", str(EPOCHS), "--model", "sage", "--hidden", "32", "--layers", "2", "--fanouts", "5,5",
        "--batch-size", str(BATCH), "--lr", "0.01", "--eval-every", str(EPOCHS), "--eval-fanouts", "10,10",
        "--policy", "vip", "--replication", "0.1", "--checkpoint-every", "2steps", "--timeout", "60", "--quiet",
        # One intra-op thread in every run: the thread budget would give the two local ranks one core
        # each but a lone rank per agent both cores, and a matmul summed in another order moves the
        # weights that Adam steps on near-zero gradients by ~1e-6.
        "--torch-threads", "1"]
JOB_TIMEOUT_S = 150  # per two-agent job; a healthy one takes ~20-40 s on 2 busy cores


@pytest.fixture(scope="module")
def cora_root(tmp_path_factory, cora_npz) -> Path:
    """Cora (row-normalised, as in test_train.py) in 2 METIS parts under ``root / "cora-2"``."""
    root = tmp_path_factory.mktemp("multinode")
    ds = load_source(f"npz:{cora_npz}")
    ds.x = (ds.x / ds.x.sum(1, keepdims=True).clip(min=1)).astype(np.float32)
    partition_dataset(ds, root / "cora-2", 2)
    data = load_partitioned(root / "cora-2")
    steps = max(-(-data.part(k).train_idx.shape[0] // BATCH) for k in range(2))
    assert steps > KILL_STEP + 1, steps  # the kill lands mid-epoch, after a mid-epoch checkpoint
    return root


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@dataclass
class Run:
    lines: list[dict]  # the JSON lines, one per epoch
    ckpt: Path  # the checkpoint directory
    plans: list[Path]  # the cache plans built under cora-2/cache


@pytest.fixture(scope="module")
def local_run(cora_root) -> Run:
    """The reference: the same command without torchrun, so the local launcher starts both ranks.

    It also builds the VIP plan under ``cora-2/cache``; each "machine" below copies the
    partitioned directory, plan included, as one would ship it to the machines.
    """
    out = cora_root / "local"
    out.mkdir()
    code = cli_main(["train", str(cora_root / "cora-2"), *ARGS, "--checkpoint-dir", str(out / "ck"),
                     "--json", str(out / "m.jsonl")])
    assert code == 0
    lines = _lines(out / "m.jsonl")
    assert [line["epoch"] for line in lines] == list(range(EPOCHS))
    assert lines[-1]["cache"]["policy"] == "vip" and lines[-1]["cache"]["cached_rows"] > 0
    return Run(lines, out / "ck", sorted((cora_root / "cora-2" / "cache").iterdir()))


# -- two agents ---------------------------------------------------------------------------------------------


@dataclass
class Agent:
    name: str
    proc: subprocess.Popen
    log: Path
    json: Path
    seen: dict[int, str] = field(default_factory=dict)  # pid -> start time of every process under it

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def _start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (the start time), which tells a process from a later one that
    got its pid; ``None`` when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _note_descendants(agent: Agent) -> None:
    """Remember every live descendant of the agent: torchrun starts its workers in sessions of
    their own, so killing the agent's process group does not reach them, and a worker whose
    agent died is no longer its descendant."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    todo = [agent.proc.pid]
    while todo:
        for child in children.get(todo.pop(), []):
            started = _start_time(child)
            if started is not None:
                agent.seen.setdefault(child, started)
            todo.append(child)


def _kill_everything(agent: Agent) -> None:
    """SIGKILL the agent's process group and every process seen under it that still runs."""
    if agent.proc.poll() is None:
        _note_descendants(agent)
        try:
            os.killpg(agent.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for pid, started in agent.seen.items():
        if _start_time(pid) == started:  # still the process we saw, not a reused pid
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
    agent.proc.wait(10)


def _torchrun_options() -> list[str]:
    """``--local-addr 127.0.0.1`` where this torchrun has it (recent ones): the node's address in
    the rendezvous, which would otherwise be this host's FQDN."""
    from torch.distributed.run import get_args_parser

    return ["--local-addr", "127.0.0.1"] if "--local-addr" in get_args_parser()._option_string_actions else []


def _two_agents(cora_root: Path, out: Path, fault_on_b: str | None = None, max_restarts: int = 0,
                ship_plan: bool = True, extra: tuple[str, ...] = (), stop_on: str | None = None,
                extra_on_b: tuple[str, ...] = ()) -> tuple[Agent, Agent]:
    """Run the job as two machines A and B; returns both agents once both have exited, or once
    either has printed ``stop_on`` (then both are killed).

    Each machine gets its own copy of the partitioned directory (with the cache plan the local
    run built, unless ``ship_plan`` is False) and its own ``--json`` file; the checkpoint
    directory is shared. Machine A hosts the rendezvous store (``is_host=1``), as the machine
    named by ``--rdzv-endpoint`` would. ``fault_on_b``, a ``SALIENTPP_FAULT`` spec, and
    ``extra_on_b``, options after the others, go to B only.
    """
    out.mkdir()
    port, run_id = free_port(), f"salientpp-test-{uuid.uuid4().hex[:12]}"
    base_env = {k: v for k, v in os.environ.items() if k != FAULT_ENV and not k.startswith("TORCHELASTIC_")}
    base_env.update(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",  # 2 workers on 2 cores
                    PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    agents: list[Agent] = []
    try:
        for name, is_host in (("a", 1), ("b", 0)):
            machine = out / name
            part_dir = machine / "cora-2"
            shutil.copytree(cora_root / "cora-2", part_dir,
                            ignore=None if ship_plan else shutil.ignore_patterns("cache"))
            env = dict(base_env)
            if name == "b" and fault_on_b:
                env[FAULT_ENV] = fault_on_b
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                   "--max-restarts", str(max_restarts), "--rdzv-backend", "c10d",
                   "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id,
                   "--rdzv-conf", f"is_host={is_host}", "--monitor-interval", "0.2", *_torchrun_options(),
                   "-m", "salientpp", "train", str(part_dir), *ARGS, *extra, *(extra_on_b if name == "b" else ()),
                   "--checkpoint-dir", str(out / "shared-ck"), "--json", str(machine / "m.jsonl")]
            log = machine / "agent.log"
            with open(log, "w") as f:
                proc = subprocess.Popen(cmd, cwd=machine, env=env, stdout=f, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
            agents.append(Agent(name, proc, log, machine / "m.jsonl"))
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while any(agent.proc.poll() is None for agent in agents):
            if time.monotonic() > deadline:
                pytest.fail(f"the two-agent job ran past {JOB_TIMEOUT_S} s\n" + _report(agents))
            for agent in agents:
                _note_descendants(agent)
            if stop_on and any(stop_on in agent.output() for agent in agents):
                break
            time.sleep(0.5)
    finally:
        for agent in agents:
            _kill_everything(agent)
    return agents[0], agents[1]


def _report(agents) -> str:
    return "\n\n".join(f"== agent {a.name} (exit {a.proc.returncode})\n{a.output()[-5000:]}" for a in agents)


def _rank0(agents) -> Agent:
    """The agent whose worker was rank 0 at the end: it printed the job's one summary."""
    summaries = [a for a in agents if f"trained {EPOCHS} epochs" in a.output()]
    assert len(summaries) == 1, _report(agents)
    return summaries[0]


def _assert_same_run(lines: list[dict], reference: Run, ckpt: Path, where: str = "") -> None:
    """Per-epoch loss and steps to 1e-5, equal accuracies, final weights to 1e-5."""
    assert [line["epoch"] for line in lines] == list(range(EPOCHS)), where
    for ref, got in zip(reference.lines, lines):
        assert got["steps"] == ref["steps"], where
        assert got["train_loss"] == pytest.approx(ref["train_loss"], rel=1e-5), where
    for key in ("valid_metric", "test_metric"):
        assert lines[-1][key] == pytest.approx(reference.lines[-1][key], abs=1e-9), where
    ckpt_ref = torch.load(reference.ckpt / "last.pt", weights_only=True)
    ckpt_got = torch.load(ckpt / "last.pt", weights_only=True)
    assert (ckpt_got["epoch"], ckpt_got["step"]) == (EPOCHS, 0), where
    for name, value in ckpt_ref["model"].items():
        torch.testing.assert_close(ckpt_got["model"][name], value, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def unplanned_job(cora_root, local_run) -> tuple[Agent, Agent]:
    """The job as two agents on machines whose copies hold no cache plan, so each builds and saves
    its own: the two tests below assert on its output, one that it trains exactly as the local
    run (whose plan the machines must build again), the other that both saved that plan. The
    killed-worker test's job trains with the shipped plan."""
    a, b = _two_agents(cora_root, cora_root / "unplanned-job", ship_plan=False)
    assert a.proc.returncode == 0 and b.proc.returncode == 0, _report((a, b))
    return a, b


def test_two_torchrun_agents_train_cora_exactly_like_local_ranks(cora_root, local_run, unplanned_job):
    a, b = unplanned_job
    writer = _rank0((a, b))
    other = b if writer is a else a
    assert not other.json.exists(), "only rank 0 writes the JSON lines"
    _assert_same_run(_lines(writer.json), local_run, cora_root / "unplanned-job" / "shared-ck")
    assert f"final test {local_run.lines[-1]['test_metric']:.4f}" in writer.output()
    assert _worker_exits(a) == _worker_exits(b) == [] and "resumed" not in writer.output()  # nothing restarted


def _worker_exits(agent: Agent) -> list[int]:
    """The exit codes of the workers this agent saw fail, in order (torchrun logs each one)."""
    return [int(code) for code in re.findall(r"failed \(exitcode: (-?\d+)\) local_rank", agent.output())]


# What a rank that takes itself for a fresh run says of the shared checkpoint directory.
FRESH_RUN_REFUSAL = "already holds another run's files"



def test_a_killed_worker_on_one_machine_restarts_both_and_the_run_ends_as_if_uninterrupted(cora_root, local_run,
                                                                                           tmp_path):
    fault = f"kill@train:epoch={KILL_EPOCH},step={KILL_STEP}"  # no rank: B's worker, whatever its rank
    a, b = _two_agents(cora_root, tmp_path / "job", fault_on_b=fault, max_restarts=1, stop_on=FRESH_RUN_REFUSAL)
    # Whether A's worker exits (lost peer) before B's agent is back at the rendezvous is a race;
    # when it does not, A's agent restarts its worker without counting a restart. The ranks must
    # still agree that this is a restart (salientpp.distributed.group agrees on it in the store),
    # or that worker takes itself for a fresh run and refuses the checkpoint directory.
    assert FRESH_RUN_REFUSAL not in a.output() + b.output(), _report((a, b))
    assert a.proc.returncode == 0 and b.proc.returncode == 0, _report((a, b))
    # B's worker died of the injected SIGKILL; both agents then went to the next rendezvous round
    # and restarted their workers from the shared checkpoint.
    assert _worker_exits(b)[:1] == [-9], _report((a, b))
    writer = _rank0((a, b))
    # Checkpoints after every 2nd step: the job lost step 2 of epoch 1 only, and rank 0 counts
    # one restart.
    resumed = f"resumed from the checkpoint at step {KILL_STEP - KILL_STEP % 2} of epoch {KILL_EPOCH}"
    assert resumed in writer.output() and "restarted 1 time after a rank failed" in writer.output(), _report((a, b))
    lines = _lines(writer.json)
    assert [line["epoch"] for line in lines] == list(range(EPOCHS)), lines  # no epoch written twice or lost
    _assert_same_run(lines, local_run, tmp_path / "job" / "shared-ck", where=f"(killed at {fault} on B)")
    # One restart of the job: the only worker failures are B's kill and, on A, its worker's own
    # report of the lost peer (exit code 1) when A's agent saw it exit before B's agent was back.
    exits = f"worker exits: A {_worker_exits(a)}, B {_worker_exits(b)}"
    assert _worker_exits(a) in ([], [1]) and _worker_exits(b) == [-9], exits + "\n" + _report((a, b))



def test_machines_without_a_cache_plan_both_build_and_save_the_same_one(local_run, unplanned_job):
    a, b = unplanned_job
    plans = [sorted((agent.log.parent / "cora-2" / "cache").iterdir()) for agent in (a, b)]
    assert [p.name for p in plans[0]] == [p.name for p in plans[1]] == [p.name for p in local_run.plans]
    for plan_a, plan_b in zip(*plans):
        assert (plan_a / "meta.json").read_text() == (plan_b / "meta.json").read_text()


def test_two_machines_started_with_different_samplers_are_refused_in_one_sentence_naming_the_option(
        cora_root, tmp_path):
    a, b = _two_agents(cora_root, tmp_path / "job", extra=("--epochs", "1"),
                       extra_on_b=("--sampler", "bulk"))
    assert a.proc.returncode != 0 and b.proc.returncode != 0, _report((a, b))
    refusals = re.findall(r"salientpp train: error: (.*)", a.output() + b.output())
    assert refusals, _report((a, b))
    for sentence in refusals:
        assert re.fullmatch(r"rank 1 has sampler = '(bulk|nodewise)' but rank 0 has '(bulk|nodewise)'; start every "
                            r"rank with the same options and package versions", sentence), sentence
    assert not (tmp_path / "job" / "shared-ck" / "last.pt").exists()  # nothing trained
