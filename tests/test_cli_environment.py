"""A bad environment (issue "Reliability round 2"): output paths under a file, read-only
directories, a full disk, SIGTERM, stale temporaries of killed runs, option typos (abbreviated
options, empty list items, plot formats), and the files PyG leaves in the temporary directory.
Every refusal: exit code 2, one line on stderr naming the path and the reason, no traceback,
nothing written, older outputs byte-identical."""
from __future__ import annotations

import argparse
import builtins
import errno
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from salientpp import io
from salientpp.cli import Terminated, build_parser, main, parsers
from salientpp.data.format import load_dataset, save_dataset
from salientpp.errors import InputError
from salientpp.parsing import name_list, number_list
from conftest import fail_probe_in

ROOT = Path(__file__).resolve().parents[1]
SIMULATE = ["--fanouts", "5", "--batch-size", "64", "--epochs", "1", "--policies", "degree", "--replication", "0"]
ANALYZE = ["--fanouts", "5", "--batch-size", "64", "--policy", "vip", "--replication", "0.1"]
NO_SPACE = "no space left on device; free space or choose another output path"


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def assert_refused(capsys, command: str, expected: list[str]) -> None:
    captured = capsys.readouterr()
    err = captured.err.rsplit("\r", 1)[-1]  # after the progress bars of a command that failed late
    assert err.startswith(f"salientpp {command}: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err + captured.out
    for text in expected:
        assert text in err, (text, err)


@pytest.fixture(scope="module")
def dataset_dir(tiny_partitions, tmp_path_factory) -> Path:
    return save_dataset(tiny_partitions[1], tmp_path_factory.mktemp("env") / "dataset")


@pytest.fixture
def parts(tiny_partitions) -> str:
    return str(tiny_partitions[0] / "p2")


def _command(name: str, parts: str, dataset_dir: Path, out: Path) -> list[str]:
    return {"prepare": ["prepare", "synthetic:tiny", str(out)],
            "partition": ["partition", str(dataset_dir), str(out), "--parts", "2"],
            "analyze": ["analyze", parts, *ANALYZE, "--out", str(out)],
            "simulate-json": ["simulate", parts, *SIMULATE, "--json", str(out)],
            "simulate-plot": ["simulate", parts, *SIMULATE, "--plot", str(out)],
            "bench-simulate": ["bench", "simulate", parts, "--setting", "5:64", "--policies", "degree",
                               "--replication", "0.1", "--epochs", "1", "--json", str(out)],
            "bench-vip": ["bench", "vip", parts, "--fanouts", "5", "--batch-size", "64", "--json", str(out)],
            "bench-sampler": ["bench", "sampler", str(dataset_dir), "--no-pyg", "--json", str(out)],
            "bench-train": ["bench", "train", parts, "--json", str(out)],
            "bench-report": ["bench", "report", str(dataset_dir / "meta.json"), "--out", str(out)]}[name]


COMMANDS = ("prepare", "partition", "analyze", "simulate-json", "simulate-plot", "bench-simulate", "bench-vip",
            "bench-sampler", "bench-train", "bench-report")


def _prog(argv: list[str]) -> str:
    return argv[0]  # `salientpp bench: error: ...` for the benchmarks


# ---- output paths that cannot be written ------------------------------------------------------

@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("depth", ["parent", "grandparent"])
def test_an_output_under_a_regular_file_is_refused_before_any_work(command, depth, parts, dataset_dir, tmp_path,
                                                                   capsys):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    out = (afile if depth == "parent" else afile / "sub") / ("out.png" if command == "simulate-plot" else "out")
    before = snapshot(tmp_path)
    argv = _command(command, parts, dataset_dir, out)
    assert main(argv) == 2
    assert_refused(capsys, _prog(argv), [f"cannot write {out}", f"{afile} is a file, not a directory"])
    assert snapshot(tmp_path) == before




@pytest.mark.parametrize("command", COMMANDS + ("train-json", "train-checkpoint-dir", "predict", "demo"))
def test_an_empty_output_path_is_refused_before_any_work(command, parts, dataset_dir, tmp_path, capsys, monkeypatch,
                                                         no_ranks):
    """``''`` would be the current directory (``Path('')`` is ``.``), which no command means to write."""
    monkeypatch.chdir(tmp_path)
    argv = {"train-json": ["train", parts, "--fanouts", "5", "--layers", "1", "--json", ""],
            "train-checkpoint-dir": ["train", parts, "--fanouts", "5", "--layers", "1", "--checkpoint-dir", ""],
            "predict": ["predict", parts, "--checkpoint", str(tmp_path / "ck"), "--out", ""],
            "demo": ["demo", "--out", ""]}.get(command) or _command(command, parts, dataset_dir, "")
    before = snapshot(tmp_path)
    assert main(argv) == 2
    assert_refused(capsys, _prog(argv), ["is an empty path; give the path to write"])
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("code, reason", [(errno.EROFS, "the file system is read-only"),
                                          (errno.EACCES, "permission denied")], ids=["read_only_fs", "no_permission"])
def test_an_unwritable_output_directory_is_refused_before_any_work(command, code, reason, parts, dataset_dir, tmp_path,
                                                                   capsys, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    out = locked / ("out.png" if command == "simulate-plot" else "out")
    fail_probe_in(monkeypatch, locked, code)
    before = snapshot(tmp_path)
    argv = _command(command, parts, dataset_dir, out)
    assert main(argv) == 2
    assert_refused(capsys, _prog(argv), [f"cannot write {out}: {reason}"])
    assert snapshot(tmp_path) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a 0o555 directory anyway")
def test_a_read_only_directory_is_refused_for_real(dataset_dir, tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        assert main(["partition", str(dataset_dir), str(locked / "out"), "--parts", "2"]) == 2
        assert_refused(capsys, "partition", [f"cannot write {locked / 'out'}: permission denied"])
        assert not list(locked.iterdir())
    finally:
        locked.chmod(0o755)


def _disk_full_during(monkeypatch, command: str) -> None:
    """The write of ``command``'s output fails half-way with ENOSPC."""
    full = OSError(errno.ENOSPC, "No space left on device")

    def half_then_full(directory, name, array):
        (Path(directory) / f"{name}.npy").write_bytes(b"\x93NUMPY half")
        raise full

    if command in ("prepare", "partition", "analyze"):
        module = {"prepare": "salientpp.data.format", "partition": "salientpp.partition.assemble",
                  "analyze": "salientpp.cache.plan"}[command]
        monkeypatch.setattr(sys.modules[module], "save_array", half_then_full)
    elif command == "simulate-plot":
        from salientpp.cli import simulate as cli_simulate

        def half_a_plot(result, path):
            Path(path).write_bytes(b"\x89PNG half")
            raise full
        monkeypatch.setattr(cli_simulate, "plot_volume", half_a_plot)
    else:  # JSON: the bytes are written, the disk fills before they are all out
        real_write_text = Path.write_text

        def write_text(self, text, *args, **kwargs):
            if ".tmp-" in self.name:
                real_write_text(self, text[:10])
                raise full
            return real_write_text(self, text, *args, **kwargs)
        monkeypatch.setattr(Path, "write_text", write_text)


@pytest.mark.parametrize("command", ["prepare", "partition", "analyze", "simulate-json", "simulate-plot",
                                     "bench-simulate"])
def test_a_full_disk_gives_one_sentence_and_leaves_no_output_and_no_temporary(command, parts, dataset_dir, tmp_path,
                                                                             capsys, monkeypatch):
    if command == "simulate-plot":
        pytest.importorskip("matplotlib")
    out = tmp_path / ("out.png" if command == "simulate-plot" else "out")
    _disk_full_during(monkeypatch, command)
    argv = _command(command, parts, dataset_dir, out)
    assert main(argv) == 2
    assert_refused(capsys, _prog(argv), [f"cannot write {out}: {NO_SPACE}"])
    assert not list(tmp_path.iterdir())  # neither the output nor .out.tmp-*


def test_a_stray_write_error_escaping_a_command_is_one_sentence(monkeypatch, capsys):
    from salientpp.cli import partition as cli_partition

    def run(args):
        raise OSError(errno.EDQUOT, "Disk quota exceeded", "/data/x.npy")
    monkeypatch.setattr(cli_partition, "run", run)
    assert main(["partition", "a", "b", "--parts", "2"]) == 2
    assert_refused(capsys, "partition", ["cannot write /data/x.npy: the disk quota is exceeded"])


def test_an_os_error_of_another_kind_still_shows_its_traceback(monkeypatch):
    from salientpp.cli import partition as cli_partition

    def run(args):
        raise OSError(errno.EINVAL, "Invalid argument")
    monkeypatch.setattr(cli_partition, "run", run)
    with pytest.raises(OSError):
        main(["partition", "a", "b", "--parts", "2"])


# ---- the reusable checks (the trainer's --checkpoint-dir and --json) ---------------------------

def test_check_writable_dir_contract(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    existing = tmp_path / "ckpt"
    existing.mkdir()
    assert io.check_writable_dir(tmp_path / "new") == tmp_path / "new"
    assert io.check_writable_dir(existing, exist_ok=True) == existing
    assert io.check_writable_dir(tmp_path / "a" / "b" / "c", parents=True) == tmp_path / "a" / "b" / "c"
    with pytest.raises(InputError, match="--checkpoint-dir .*ckpt already exists"):
        io.check_writable_dir(existing, "--checkpoint-dir")
    with pytest.raises(InputError, match="afile is a file, not a directory"):
        io.check_writable_dir(afile, exist_ok=True)
    with pytest.raises(InputError, match="afile is a file, not a directory"):
        io.check_writable_dir(afile / "sub", parents=True)
    with pytest.raises(InputError, match="parent directory .* does not exist"):
        io.check_writable_dir(tmp_path / "a" / "b" / "c")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "ckpt"]  # nothing created, no probe left


def test_check_writable_file_contract(tmp_path, monkeypatch):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"epoch": 1}\n')
    stat = metrics.stat()
    assert io.check_writable_file(metrics, "--json", exist_ok=True) == metrics  # the trainer appends
    assert metrics.read_text() == '{"epoch": 1}\n' and metrics.stat().st_mtime_ns == stat.st_mtime_ns
    assert io.check_writable_file(tmp_path / "new.json") == tmp_path / "new.json"
    with pytest.raises(InputError, match="--json .*metrics.jsonl already exists"):
        io.check_writable_file(metrics, "--json")
    with pytest.raises(InputError, match="is a directory, not a file"):
        io.check_writable_file(tmp_path, "--json", exist_ok=True)
    with pytest.raises(InputError, match="metrics.jsonl is a file, not a directory"):
        io.check_writable_file(metrics / "x.json")
    locked = tmp_path / "locked"
    locked.mkdir()
    fail_probe_in(monkeypatch, locked, errno.EROFS)
    with pytest.raises(InputError, match="cannot write .*x.json: the file system is read-only"):
        io.check_writable_file(locked / "x.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["locked", "metrics.jsonl"]


def test_output_errors_names_the_output_but_leaves_input_errors_alone(tmp_path):
    with pytest.raises(InputError, match=f"cannot write {tmp_path / 'out'}: {NO_SPACE}"):
        with io.output_errors(tmp_path / "out"):
            raise OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(PermissionError):  # a file elsewhere: an input, not the output
        with io.output_errors(tmp_path / "out"):
            raise PermissionError(errno.EACCES, "Permission denied", "/elsewhere/input.npy")


# ---- temporaries of killed runs ---------------------------------------------------------------

@pytest.fixture
def dead_and_live_pids():
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield done.pid, sleeper.pid
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_next_run_removes_stale_temporaries_of_dead_processes_only(dead_and_live_pids, dataset_dir, tmp_path,
                                                                       capsys):
    dead, live = dead_and_live_pids
    for pid in (dead, live):
        (tmp_path / f".parts.tmp-{pid}" / "part_0").mkdir(parents=True)
        (tmp_path / f".parts.tmp-{pid}" / "part_0" / "x.npy").write_bytes(b"half")
    (tmp_path / f".other.tmp-{dead}").mkdir()  # another output's temporary is not ours to judge
    assert main(["partition", str(dataset_dir), str(tmp_path / "parts"), "--parts", "2"]) == 0
    assert (tmp_path / "parts" / "meta.json").is_file()
    assert not (tmp_path / f".parts.tmp-{dead}").exists()
    assert (tmp_path / f".parts.tmp-{live}" / "part_0" / "x.npy").read_bytes() == b"half"
    assert (tmp_path / f".other.tmp-{dead}").is_dir()


def test_stale_temporary_files_of_a_single_output_are_removed_too(dead_and_live_pids, tmp_path):
    dead, live = dead_and_live_pids
    for pid in (dead, live):
        (tmp_path / f".sim.json.tmp-{pid}.json").write_text("{half")
    io.write_text_atomic(tmp_path / "sim.json", "{}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".sim.json.tmp-{live}.json", "sim.json"]


LONGEST = "z" * 255  # the longest file name Linux's file systems take (NAME_MAX bytes)

# A writer killed inside its atomic output: it leaves its temporary, as a SIGKILL would.
KILLED_WRITER = """
import os, sys
from salientpp import io
out = sys.argv[1]
if out.endswith(".png"):
    with io.atomic_output_file(out) as tmp:
        tmp.write_text("half")
        print(tmp.name, flush=True)
        os._exit(9)
with io.atomic_output_dir(out) as tmp:
    (tmp / "x.npy").write_bytes(b"half")
    print(tmp.name, flush=True)
    os._exit(9)
"""


def test_an_output_may_have_the_longest_name_the_file_system_takes(dataset_dir, tmp_path, capsys):
    assert main(["partition", str(dataset_dir), str(tmp_path / LONGEST), "--parts", "2"]) == 0
    assert (tmp_path / LONGEST / "meta.json").is_file()
    plot = "q" * 251 + ".png"
    io.write_text_atomic(tmp_path / plot, "a plot")
    io.replace_file(tmp_path / plot, b"another plot")
    assert sorted(p.name for p in tmp_path.iterdir()) == [plot, LONGEST]  # no temporary left


@pytest.mark.parametrize("name", [LONGEST, "q" * 251 + ".png"], ids=["directory", "file"])
def test_the_temporary_of_a_killed_writer_of_a_long_name_is_removed_by_the_next_run(tmp_path, name):
    def killed_writer() -> str:
        proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(tmp_path / name)], capture_output=True,
                              text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.returncode == 9, proc.stderr
        left = proc.stdout.strip()
        assert (tmp_path / left).exists() and len(os.fsencode(left)) <= 255 and left.startswith("." + name[:200])
        return left

    killed_writer()
    with (io.atomic_output_file if name.endswith(".png") else io.atomic_output_dir)(tmp_path / name) as tmp:
        (tmp.write_text if name.endswith(".png") else (tmp / "x.npy").write_text)("whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # the next run removed the dead one's
    (tmp_path / name).rename(tmp_path / "kept")
    left = killed_writer()
    assert io.remove_stale_temporaries_in(tmp_path) == [tmp_path / left]  # the sweep of a directory finds it too
    assert [p.name for p in tmp_path.iterdir()] == ["kept"]


# ---- SIGTERM and Ctrl-C -----------------------------------------------------------------------

def test_sigterm_runs_the_cleanup_and_exits_143(dataset_dir, tmp_path):
    """A real `python -m salientpp partition`, its writing slowed down, terminated mid-write."""
    out = tmp_path / "parts"
    code = textwrap.dedent(f"""
        import sys, time
        from salientpp.partition import assemble
        real = assemble.save_array
        def slow(directory, name, array):
            entry = real(directory, name, array)
            time.sleep(60)
            return entry
        assemble.save_array = slow
        from salientpp.cli import main
        sys.exit(main(["partition", {str(dataset_dir)!r}, {str(out)!r}, "--parts", "2"]))
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob(".parts.tmp-*/*.npy")) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(tmp_path.glob(".parts.tmp-*/*.npy")), proc.communicate(timeout=5) if proc.poll() is not None else ""
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == "salientpp partition: terminated" and "Traceback" not in err, err
    assert not list(tmp_path.iterdir())  # neither parts/ nor .parts.tmp-*


def test_sigterm_in_process_exits_143_and_restores_the_previous_handler(monkeypatch, capsys):
    from salientpp.cli import partition as cli_partition

    def run(args):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)  # the handler interrupts this
        return 0
    monkeypatch.setattr(cli_partition, "run", run)
    previous = signal.getsignal(signal.SIGTERM)
    start = time.monotonic()
    assert main(["partition", "a", "b", "--parts", "2"]) == 143
    assert time.monotonic() - start < 5
    assert capsys.readouterr().err == "salientpp partition: terminated\n"
    assert signal.getsignal(signal.SIGTERM) is previous


def test_ctrl_c_while_the_commands_load_torch_is_one_line_and_exit_130(monkeypatch, capsys):
    """The `salientpp` script imports salientpp.cli before it calls main; torch (seconds of
    loading) must load inside main, where Ctrl-C is handled, not in that import."""
    loaded = subprocess.run([sys.executable, "-c", "import sys, salientpp.cli; print('torch' in sys.modules)"],
                            capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "False"
    from salientpp import cli

    def interrupted(name, package=None):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli.importlib, "import_module", interrupted)
    assert main(["train", "--help"]) == 130
    assert capsys.readouterr().err == "salientpp: interrupted\n"


@pytest.mark.parametrize("raised, code, word", [(KeyboardInterrupt, 130, "interrupted"),
                                                (Terminated, 143, "terminated")])
def test_interrupts_map_to_their_exit_codes(monkeypatch, capsys, raised, code, word):
    from salientpp.cli import partition as cli_partition

    def run(args):
        raise raised()
    monkeypatch.setattr(cli_partition, "run", run)
    assert main(["partition", "a", "b", "--parts", "2"]) == code
    assert capsys.readouterr().err == f"salientpp partition: {word}\n"


# ---- after the output is complete: an interrupt or a full standard output ----------------------

def _print_failing_once(monkeypatch, module, out: Path, raised: BaseException) -> None:
    """``print`` in ``module`` raises ``raised`` once ``out`` exists: after the command's final
    rename, while it prints its summary."""
    def failing(*args, **kwargs):
        if out.exists():
            raise raised
        builtins.print(*args, **kwargs)
    monkeypatch.setattr(module, "print", failing, raising=False)


@pytest.mark.parametrize("command", ["prepare", "partition", "analyze"])
@pytest.mark.parametrize("raised, word", [(KeyboardInterrupt(), "interrupted"), (Terminated(), "terminated")])
def test_an_interrupt_after_the_output_is_complete_exits_0_and_keeps_it(command, raised, word, parts, dataset_dir,
                                                                        tmp_path, capsys, monkeypatch):
    import importlib
    out = tmp_path / "out"
    _print_failing_once(monkeypatch, importlib.import_module(f"salientpp.cli.{command}"), out, raised)
    assert main(_command(command, parts, dataset_dir, out)) == 0
    last = capsys.readouterr().err.splitlines()[-1]
    assert last == f"salientpp {command}: {word} after its output was complete: {out}"
    assert (out / "meta.json").is_file()
    io.read_meta(out, json.loads((out / "meta.json").read_text())["kind"])  # whole: its meta.json lists its files


@pytest.mark.parametrize("command", ["prepare", "partition", "simulate-json", "bench-report"])
def test_a_full_standard_output_after_the_output_is_complete_exits_0(command, parts, dataset_dir, tmp_path, capsys,
                                                                     monkeypatch):
    import importlib
    out = tmp_path / "out"
    module = {"simulate-json": "salientpp.bench.results", "bench-report": "salientpp.bench.report"}.get(
        command, f"salientpp.cli.{command}")
    _print_failing_once(monkeypatch, importlib.import_module(module), out, OSError(errno.ENOSPC, "No space left on "
                                                                                                "device"))
    argv = _command(command, parts, dataset_dir, out)
    if command == "bench-report":
        simulated = tmp_path / "sim.json"
        assert main(_command("simulate-json", parts, dataset_dir, simulated)) == 0
        argv[2] = str(simulated)
    assert main(argv) == 0
    assert capsys.readouterr().err.splitlines()[-1] == (f"salientpp {argv[0]}: note: the summary could not be printed "
                                                        f"(no space left on device), but the output is complete: {out}")
    assert out.exists()


def test_an_interrupt_before_the_output_is_complete_still_exits_130_and_leaves_nothing(parts, dataset_dir, tmp_path,
                                                                                      capsys, monkeypatch):
    from salientpp.cli import analyze as cli_analyze
    out = tmp_path / "out"

    def interrupted(*args, **kwargs):  # analyze prints its memory estimate before the work
        raise KeyboardInterrupt
    monkeypatch.setattr(cli_analyze, "print", interrupted, raising=False)
    assert main(_command("analyze", parts, dataset_dir, out)) == 130
    assert capsys.readouterr().err == "salientpp analyze: interrupted\n"
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_prepare_into_dev_full_writes_the_dataset_and_exits_0(tmp_path, buffered):
    """``salientpp prepare ... > /dev/full``: the summary fails to print (at once, or at the final
    flush of a buffered standard output, which Python would end with exit code 120)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    out = tmp_path / "out"
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "salientpp", "prepare", "synthetic:tiny", str(out)], cwd=tmp_path,
                              env=env, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1] == ("salientpp prepare: note: the summary could not be printed (no space left "
                                            f"on device), but the output is complete: {out}"), proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    load_dataset(out)


# ---- plot formats and other outputs, before the work ------------------------------------------

@pytest.mark.parametrize("name, expected", [("sim.pdfx", "the suffix .pdfx"), ("sim", "no suffix"),
                                            ("sim.PNGG", "the suffix .pngg")])
def test_simulate_refuses_a_plot_format_matplotlib_cannot_write_before_simulating(name, expected, parts, tmp_path,
                                                                                   capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    from salientpp.cli import simulate as cli_simulate

    monkeypatch.setattr(cli_simulate, "simulate", lambda *a, **k: pytest.fail("simulated before the check"))
    assert main(["simulate", parts, *SIMULATE, "--json", str(tmp_path / "sim.json"), "--plot",
                 str(tmp_path / name)]) == 2
    assert_refused(capsys, "simulate", [str(tmp_path / name), expected, ".png", ".pdf", ".svg"])
    assert not list(tmp_path.iterdir())


def test_simulate_accepts_an_upper_case_pdf_plot(parts, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert main(["simulate", parts, *SIMULATE, "--plot", str(tmp_path / "sim.PDF")]) == 0
    assert (tmp_path / "sim.PDF").read_bytes().startswith(b"%PDF")


def test_simulate_refuses_the_same_file_for_json_and_plot(parts, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = str(tmp_path / "sim.png")
    assert main(["simulate", parts, *SIMULATE, "--json", out, "--plot", out]) == 2
    assert_refused(capsys, "simulate", ["--json and --plot name the same file"])


# ---- comma-separated lists --------------------------------------------------------------------

@pytest.mark.parametrize("text", ["5,,5", "5,", ",5", "5, ,5"])
def test_an_empty_list_item_is_refused(text):
    with pytest.raises(InputError, match=f"--fanouts has an empty item in {text!r}"):
        number_list(text, int, "--fanouts", "15,10,5")
    with pytest.raises(InputError, match="has an empty item"):
        name_list(text.replace("5", "vip"), "--policies", "vip,degree")


def test_list_spacing_and_a_blank_list_are_still_read():
    assert number_list(" 15, 10,5 ", int, "--fanouts", "15,10,5") == (15, 10, 5)
    assert number_list("", float, "--replication", "0.1") == ()
    assert name_list("vip, degree", "--policies", "vip") == ["vip", "degree"]


@pytest.mark.parametrize("argv", [
    ["simulate", "PARTS", "--fanouts", "5,,5", "--batch-size", "64"],
    ["simulate", "PARTS", *SIMULATE[:4], "--replication", "0,0.1,"],
    ["simulate", "PARTS", *SIMULATE[:4], "--policies", "vip,,degree"],
    ["analyze", "PARTS", "--fanouts", "5,", "--batch-size", "64", "--replication", "0.1"],
    ["train", "PARTS", "--fanouts", "5,,5"],
    ["bench", "sampler", "DATASET", "--sampler-threads", "1,,2"],
    ["bench", "train", "PARTS", "--replication", "0.1,,0.5"],
], ids=["simulate-fanouts", "simulate-replication", "simulate-policies", "analyze-fanouts", "train-fanouts",
        "bench-sampler-threads", "bench-train-alphas"])
def test_commands_refuse_an_empty_list_item(argv, parts, dataset_dir, capsys):
    argv = [{"PARTS": parts, "DATASET": str(dataset_dir)}.get(a, a) for a in argv]
    assert main(argv) == 2
    assert_refused(capsys, argv[0], ["has an empty item"])


# ---- no abbreviated options -------------------------------------------------------------------

def _leaves(parser: argparse.ArgumentParser, path: list[str]):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from _leaves(sub, path + [name])


def _value(action: argparse.Action) -> list[str]:
    if action.nargs == 0:
        return []
    return [str(next(iter(action.choices)))] if action.choices else ["1"]


def _required(parser: argparse.ArgumentParser) -> list[str]:
    argv = []
    for action in parser._actions:
        if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
            argv += _value(action)
        elif action.required:
            argv += [action.option_strings[0], *_value(action)]
    return argv


def _abbreviations(parser: argparse.ArgumentParser):
    """(option, an unambiguous prefix of it that is no option itself) for every long option."""
    options = [s for a in parser._actions for s in a.option_strings]
    for action in parser._actions:
        for option in action.option_strings:
            if not option.startswith("--") or option == "--help" or len(option) < 5:
                continue
            for cut in range(len(option) - 1, 3, -1):
                prefix = option[:cut]
                if prefix not in options and [o for o in options if o.startswith(prefix)] == [option]:
                    yield action, prefix
                    break


def test_every_parser_has_abbreviations_off():
    assert all(p.allow_abbrev is False for p in parsers(build_parser()))


def test_no_subcommand_accepts_an_abbreviated_option(capsys):
    checked = 0
    parser = build_parser()  # parsing leaves a parser as it was: one serves every case
    for path, leaf in _leaves(parser, []):
        base = path + _required(leaf)
        for action, prefix in _abbreviations(leaf):
            full = base + [action.option_strings[0], *_value(action)]
            assert parser.parse_args(full) is not None, full  # the spelled-out option parses
            with pytest.raises(SystemExit) as exit_info:
                parser.parse_args(base + [prefix, *_value(action)])
            assert exit_info.value.code == 2, (path, prefix)
            assert f"unrecognized arguments: {prefix}" in capsys.readouterr().err, (path, prefix)
            checked += 1
    assert checked > 50


@pytest.mark.parametrize("argv", [["train", "PART", "--mod", "sage"], ["train", "PART", "--dep", "cache"],
                                  ["partition", "DS", "OUT", "--part", "2"]])
def test_the_reported_typos_are_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err or "required: --parts" in err, err


@pytest.mark.parametrize("argv, prog, unknown", [
    (["train", "PART", "--bogus", "1"], "salientpp train", "--bogus 1"),
    (["partition", "DS", "OUT", "--parts", "2", "extra"], "salientpp partition", "extra"),
    (["bench", "sampler", "DS", "--bogus"], "salientpp bench sampler", "--bogus"),
])
def test_an_unknown_argument_is_reported_by_its_subcommand(argv, prog, unknown, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"{prog}: error: unrecognized arguments: {unknown} (see {prog} --help)\n"


def test_the_experiment_scripts_have_abbreviations_off():
    pytest.importorskip("ogb")
    sys.path.insert(0, str(ROOT / "experiments" / "ogb"))
    try:
        common = pytest.importorskip("common")
        products = pytest.importorskip("products")
    finally:
        sys.path.remove(str(ROOT / "experiments" / "ogb"))
    parser = common.build_parser(products.SETUP)
    assert parser.allow_abbrev is False
    with pytest.raises(SystemExit):
        parser.parse_args(["--work", "w", "--out", "o", "--epoch", "3"])


# ---- PyG's generated modules -----------------------------------------------------------------

PYG_SCRIPT = """
import inspect, json, os, sys
import torch
from torch_geometric.nn import MessagePassing
from salientpp.models.gnn import MFGModel, no_pyg_tempfiles

def generated():
    return {n: m.__file__ for n, m in sys.modules.items() if n.endswith(("_propagate", "_edge_updater"))}

class UserConv(MessagePassing):  # a user's own convolution
    def forward(self, x, edge_index):
        return self.propagate(edge_index, x=x)

report = {}
for model in ("sage", "gat", "gin"):
    MFGModel(model, 8, 16, 3, 2)
    report[model] = generated()
with no_pyg_tempfiles():
    UserConv()
report["user"] = generated()
propagate = sys.modules["torch_geometric.nn.conv.gat_conv_GATConv_propagate"].propagate
report["source_kept"] = "def propagate" in inspect.getsource(propagate)
x, edge_index = torch.randn(5, 8), torch.tensor([[1, 2, 3, 4], [0, 0, 1, 1]])
MFGModel("gat", 8, 16, 3, 2).convs[0]((x, x[:2]), edge_index)  # the generated code still runs
print(json.dumps(report))
"""


def test_building_the_models_leaves_no_pyg_files_in_the_temporary_directory(tmp_path):
    script = tmp_path / "build_models.py"  # a file: PyG compiles only classes whose source it can read
    script.write_text(PYG_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report.pop("source_kept") is True
    assert any("SAGEConv_propagate" in n for n in report["sage"])
    assert any("GATConv_edge_updater" in n for n in report["gat"])
    assert any("GINConv_propagate" in n for n in report["gin"])
    assert any("UserConv_propagate" in n for n in report["user"])
    files = {f for modules in report.values() for f in modules.values()}
    assert all(Path(f).parent == Path(tempfile.gettempdir()) for f in files), files
    assert not [f for f in files if os.path.exists(f)]


def test_a_run_whose_output_reader_goes_away_finishes_quietly(tiny_partitions, tmp_path):
    # `salientpp train P | head -c 1`: the launcher and rank 0 print after the reader has gone.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "salientpp", "train", str(tiny_partitions[0] / "p2"), "--epochs",
                             "2", "--hidden", "8", "--layers", "2", "--fanouts", "5,5", "--batch-size", "64",
                             "--json", str(tmp_path / "m.jsonl"), "--checkpoint-dir", str(tmp_path / "ck")],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.read(1)
    proc.stdout.close()  # the reader goes away
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()[-2000:]
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 2 and (tmp_path / "ck" / "last.pt").is_file()
