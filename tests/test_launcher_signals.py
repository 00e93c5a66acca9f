"""The ranks of `salientpp train` die with their launcher, however the launcher ends.

Slurm's ``scancel``, ``docker stop`` and Kubernetes send SIGTERM, then SIGKILL. Either way no
rank may go on training (re-parented to init) and no output may keep growing.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from salientpp.train.checkpoint import LAST


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting for a parent that never reaps it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_until(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid``, parents first: the resource tracker, the fork server and the
    ranks it forked."""
    children = _children(pid)
    return [d for c in children for d in (c, *_descendants(c))]


def _ranks(launcher: int) -> list[int]:
    """The ranks of ``launcher``, oldest (rank 0, which hosts the rendezvous store) first: the
    children of its fork server."""
    server = next(c for c in _children(launcher) if "forkserver" in Path(f"/proc/{c}/cmdline").read_text())
    stats = {pid: Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split() for pid in _children(server)}
    started = {pid: int(fields[19]) for pid, fields in stats.items()}  # the start time, in clock ticks
    return sorted(started, key=started.get)


@pytest.fixture
def start_job(tiny_partitions, tmp_path):
    """Starts a 2-rank `salientpp train` run long enough to be killed mid-way, with extra options:
    ``(launcher, processes, json, ckpt, stderr)`` once both ranks train and the first epoch's line
    is written; ``processes``: every process below the launcher; ``stderr``: the file of its
    standard error, progress bars included (rank 0 holds tqdm's lock, a named semaphore)."""
    json_path, ckpt, stderr = tmp_path / "run.jsonl", tmp_path / "ckpt", tmp_path / "stderr.txt"
    started: list[tuple[subprocess.Popen, list[int]]] = []

    def start(*extra: str):
        with stderr.open("wb") as err:
            launcher = subprocess.Popen(
                [sys.executable, "-m", "salientpp", "train", str(tiny_partitions[0] / "p2"), "--epochs", "10000",
                 "--hidden", "16", "--layers", "2", "--fanouts", "5,5", "--batch-size", "16", "--eval-every", "0",
                 "--policy", "none", "--json", str(json_path), "--checkpoint-dir", str(ckpt), *extra],
                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        started.append((launcher, []))
        assert _wait_until(lambda: json_path.exists() and json_path.stat().st_size > 0, 120), \
            stderr.read_text() if launcher.poll() is not None else "no epoch finished in 120 s"
        processes = _descendants(launcher.pid)
        started[-1][1].extend(processes)
        assert len(_ranks(launcher.pid)) == 2 and all(map(_alive, processes))
        return launcher, processes, json_path, ckpt, stderr

    yield start
    for launcher, processes in started:
        for pid in [launcher.pid, *processes]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        launcher.wait()


@pytest.fixture
def running_job(start_job):
    return start_job()


def _assert_stopped(processes: list[int], json_path: Path) -> None:
    assert _wait_until(lambda: not any(map(_alive, processes)), 10), "a rank outlived its launcher by 10 s"
    size = json_path.stat().st_size
    time.sleep(1.5)
    assert json_path.stat().st_size == size


def test_ranks_die_within_seconds_when_the_launcher_is_sigkilled_even_a_stopped_one(running_job):
    launcher, processes, json_path, _, _ = running_job
    os.kill(_ranks(launcher.pid)[1], signal.SIGSTOP)  # its own watchdog thread cannot run
    os.kill(launcher.pid, signal.SIGKILL)
    assert launcher.wait(10) == -signal.SIGKILL
    _assert_stopped(processes, json_path)


def test_a_stopped_rank_fails_the_job_within_its_timeout_and_no_process_survives(start_job):
    """Rank 0 hosts the rendezvous store: stopped, it leaves the other rank's reads of the store
    waiting without a timeout of torch's, and its SIGTERM pending."""
    launcher, processes, json_path, _, stderr = start_job("--timeout", "2")
    os.kill(_ranks(launcher.pid)[0], signal.SIGSTOP)
    assert launcher.wait(15) == 1
    assert "rank 0 failed: the process was stopped" in stderr.read_text()
    _assert_stopped(processes, json_path)


def test_sigterm_stops_the_launcher_and_its_ranks_like_ctrl_c_and_keeps_the_last_checkpoint(running_job):
    launcher, processes, json_path, ckpt, stderr = running_job
    os.kill(launcher.pid, signal.SIGTERM)
    assert launcher.wait(15) == 128 + signal.SIGTERM
    _assert_stopped(processes, json_path)  # the resource tracker too, which warns of leaked semaphores as it ends
    err = stderr.read_text()
    assert "salientpp train: terminated" in err and "leaked semaphore" not in err, err[-2000:]
    epochs = len(json_path.read_text().splitlines())
    ckpt_epoch = torch.load(ckpt / LAST, weights_only=True)["epoch"] if (ckpt / LAST).exists() else 0
    # Every completed epoch was checkpointed before its line was written, or after: never more than one apart.
    assert epochs - 1 <= ckpt_epoch <= epochs


def test_a_process_armed_by_die_with_parent_ends_when_its_parent_is_killed():
    code = ("import os, sys, time; from salientpp.distributed.group import die_with_parent\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    die_with_parent(os.getppid()); time.sleep(60); os._exit(0)\n"
            "print(pid, flush=True); time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        time.sleep(0.5)  # let the child arm itself
        assert _alive(child)
        parent.kill()
        parent.wait()
        assert _wait_until(lambda: not _alive(child), 5)
    finally:
        parent.kill()


def _say() -> int:
    word = os.environ["SALIENTPP_TEST_WORD"]  # set by the test after the fork server started
    print(f"out {word} {os.environ['RANK']}", flush=True)
    print(f"err {word} {os.environ['RANK']}", file=sys.stderr, flush=True)
    return os.getpid()


def test_ranks_write_where_the_launcher_writes_at_each_launch_and_see_its_environment(capfd, monkeypatch):
    """Ranks are forked from a long-lived fork server, yet each launch's ranks write to the
    launcher's stdout and stderr as they are then (here: each test's capture) and see its
    environment then."""
    from salientpp.distributed import launch

    for word in ("one", "two"):
        monkeypatch.setenv("SALIENTPP_TEST_WORD", word)
        pids = launch(_say, (), 2)
        out, err = capfd.readouterr()
        assert sorted(out.splitlines()) == [f"out {word} 0", f"out {word} 1"], out
        assert sorted(err.splitlines()) == [f"err {word} 0", f"err {word} 1"], err
        assert os.getpid() not in pids and len(set(pids)) == 2


def _hold_a_semaphore_until_terminated(path: str) -> None:
    """Rank 0 makes a named semaphore, as tqdm's lock in a rank with a progress bar or numba's
    thread-launch lock in rank 0 building a cache plan, and works on; rank 1 fails once it is made."""
    if os.environ["RANK"] == "0":
        lock = multiprocessing.RLock()
        Path(path).write_text(lock._semlock.name)
        time.sleep(60)
    assert _wait_until(lambda: Path(path).exists(), 30)
    raise RuntimeError("a peer failed")


def test_a_rank_terminated_because_a_peer_failed_leaves_no_semaphore_to_the_resource_tracker(tmp_path):
    """A SIGTERM (from the launcher, as here, or to the launcher) ends a rank at work: its named
    semaphores were left to the resource tracker's 'There appear to be 1 leaked semaphore objects'."""
    from multiprocessing import resource_tracker
    from multiprocessing.synchronize import sem_unlink

    from salientpp.distributed import WorkerError, launch

    with pytest.raises(WorkerError, match="rank 1 failed: RuntimeError: a peer failed"):
        launch(_hold_a_semaphore_until_terminated, (str(tmp_path / "name"),), 2)
    name = (tmp_path / "name").read_text()
    try:
        sem_unlink(name)
    except FileNotFoundError:
        return
    resource_tracker.unregister(name, "semaphore")  # left behind: removed here, then failed
    pytest.fail(f"rank 0 left the semaphore {name}")


def _kill_the_fork_server() -> None:
    os.kill(os.getppid(), signal.SIGKILL)  # the OOM killer's choice, say
    time.sleep(60)


def test_a_killed_fork_server_is_named_with_its_signal_not_as_an_exit_code():
    from salientpp.distributed import WorkerError, launch

    with pytest.raises(WorkerError, match=r"the fork server that starts the ranks was killed by SIGKILL.*run the "
                                          r"command again"):
        launch(_kill_the_fork_server, (), 1)
