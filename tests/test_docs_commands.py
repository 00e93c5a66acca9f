"""Every `salientpp` command in README.md and docs/*.md is checked against the real command line,
and a representative set runs on tiny data.

Which text is a command (docs/history.md is left out: its commands are records of the past):

* In fenced code blocks that are not ``python``: every line (continuation lines ``\\`` joined)
  whose shell words, after a ``$`` prompt and ``NAME=value`` prefixes, start ``salientpp``,
  ``python[3] -m salientpp`` or ``torchrun ... -m salientpp``; a line holds several commands
  joined by ``&&`` or ``;``. ``salientpp CMD: ...`` is a command's output, not a command.
* In inline code spans outside fenced blocks: ```salientpp ...```, often a fragment of a command
  (`salientpp train --model PKG.MODULE:FUNCTION`).

What each gets:

* A **command** (fenced, no synopsis notation) is parsed by salientpp's own parser after the
  substitutions of :data:`SUBSTITUTIONS`, and a ``train`` command becomes a ``TrainConfig``
  (``config_from_args``): an unknown or misspelled option, a value of the wrong type or a value
  argparse misreads fails, naming the file and line.
* A **synopsis** (``[optional]``, ``(a | b)``, ``a|b``, ``FILE...``) and an **inline fragment**
  name their subcommand and options: the subcommand must exist, every ``--option`` must be one
  of its options, and each lower-case alternative of an option with choices
  (``--method metis|multilevel|random``) must be one of the choices.
* The commands of :data:`RUNS`, one or more per subcommand the docs use (``demo`` and
  ``selfcheck`` only parse: the quick start trains a whole pipeline, and the documented
  ``selfcheck`` needs a GPU), **run** in order in one working directory (the documented names
  are the docs' own: ``small`` is what ``prepare synthetic:small small`` writes), after the
  substitutions and with :data:`RUN_OPTIONS` (every training shortened to one epoch), through
  ``salientpp.cli.main``; each must exit 0 and write or print what it should. The rest only
  parse, so that the whole module runs in well under 90 s on two cores (45 s measured): each
  run that starts ranks costs seconds of interpreter start-up per rank.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import SHARED_DATASETS

from salientpp.cli import build_parser, main
from salientpp.train.config import config_from_args

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "history.md")]

# The one table of what replaces a word of a documented command, in every check and run.
# Word as written -> replacement (None: dropped), and why.
SUBSTITUTIONS: dict[str, str | None] = {
    "npz:cora.npz": f"npz:{SHARED_DATASETS / 'cora.npz'}",  # the shared copy of Cora
    "synthetic:small": "synthetic:tiny",  # the tiny preset, so that the runs take seconds
    "PART_DIR": "small-2",  # the partitioned directory docs/training.md's first line writes
    "CKPT": "ckpt-restarts",  # the --checkpoint-dir docs/training.md's fault-tolerant run writes
    "DIR": "predictions",  # README's `salientpp predict ... --out DIR`
    "S,S,S": "1024,1024,1024",  # docs/bulk-sampling.md's LADIES nodes per layer...
    "B": "1024",  # ... and batch size, as the lines around it give them
    "...": None,  # docs/training.md's torchrun line: "and the other options"
}
# Options whose value every run replaces, so that the module fits its time budget.
RUN_OPTIONS = {"--epochs": "1"}

# What runs, in this order, in one working directory: (file, the start of the command, what it
# must write there (a path) or print (text on stdout)). Commands are named by their text, not by
# their line, so that edits elsewhere in a file do not move them.
RUNS: list[tuple[str, str, tuple[str, ...]]] = [
    ("docs/training.md", "prepare synthetic:small small", ("small/meta.json",)),
    ("docs/training.md", "partition small small-2", ("small-2/meta.json",)),
    ("docs/training.md", "train small-2 --epochs 20 --checkpoint-dir ckpt-restarts",
     ("ckpt-restarts/last.pt", "trained 1 epoch")),
    ("README.md", "predict PART_DIR", ("predictions/outputs.npy", "predictions/predicted.npy")),
    ("docs/training.md", "analyze small-2", ("small-2-bytes/meta.json",)),
    ("docs/training.md", "train small-2 --plan", ("trained 1 epoch",)),
    ("docs/bulk-sampling.md", "analyze PART_DIR", ("small-2/cache/vip-ladies-f1024-1024-1024-b1024-r0.1/meta.json",)),
    ("docs/bulk-sampling.md", "simulate PART_DIR", ("Remote rows fetched per epoch",)),
    ("docs/bulk-sampling.md", "bench sampler small --samplers nodewise,bulk,ladies", ("OUT.json", "OUT.png")),
    ("docs/link-prediction.md", "prepare", ("cora-link/meta.json", "held-out edges")),
    ("docs/link-prediction.md", "partition", ("cora-link-2/meta.json",)),
    ("docs/link-prediction.md", "train cora-link-2", ("best valid roc-auc",)),
]

SYNOPSIS = re.compile(r"[\[\]()|]|\S\.\.\.")
INLINE = re.compile(r"`(salientpp [^`]+)`")
PYTHON = ("python", "python3")


@dataclass(frozen=True)
class Command:
    """One documented command: ``where`` is ``FILE:LINE`` (``#N``: the N-th command of a shell
    line, ``@N``: the N-th code span of a line), ``words`` its shell words from the subcommand on,
    ``fragment`` whether it is an inline code span."""

    where: str
    words: tuple[str, ...]
    fragment: bool

    @property
    def synopsis(self) -> bool:
        """Whether only its names are checked: a fragment, or synopsis notation in a word."""
        return self.fragment or any(SYNOPSIS.search(w) for w in self.words if w != "...")


def _salientpp_words(words: list[str]) -> list[str] | None:
    """The words after ``salientpp`` when ``words`` (one shell command) runs salientpp, else None."""
    while words and (words[0] == "$" or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0])):
        words = words[1:]
    if not words:
        return None
    if words[0] == "salientpp":
        rest = words[1:]
    elif words[0] in PYTHON or words[0] == "torchrun":
        module = [i for i in range(len(words) - 1) if words[i] == "-m" and words[i + 1] == "salientpp"]
        rest = words[module[0] + 2:] if module else None
    else:
        return None
    if rest is None or (rest and rest[0].endswith(":")):  # `salientpp train: error: ...` is output
        return None
    return rest


def _commands_on(text: str, where: str, fragment: bool) -> list[Command]:
    if fragment:
        words = text.replace("\\|", "|").split()
    else:
        try:
            words = shlex.split(text, comments=True)
        except ValueError:  # an unclosed quote: output such as `salientpp: ... don't ...`, or a broken command
            words = text.split()
            if _salientpp_words(words) is not None:
                raise AssertionError(f"{where}: the shell cannot read `{text.strip()}`") from None
            return []
    found, current = [], []
    for word in [*words, "&&"]:
        if word not in ("&&", ";", "||"):
            current.append(word)
            continue
        rest = _salientpp_words(current)
        if rest is not None:
            found.append(rest)
        current = []
    return [Command(where if i == 0 else f"{where}#{i + 1}", tuple(rest), fragment) for i, rest in enumerate(found)]


def documented_commands() -> list[Command]:
    """Every command of README.md and docs/*.md (not docs/history.md), in file order."""
    commands = []
    for path in DOCS:
        name = path.relative_to(REPO).as_posix()
        lines = path.read_text().splitlines()
        fence, i = None, 0
        while i < len(lines):
            line, number = lines[i], i + 1
            i += 1
            if line.lstrip().startswith("```"):
                fence = line.strip()[3:].strip() if fence is None else None
                continue
            if fence is None:
                for n, match in enumerate(INLINE.finditer(line)):
                    where = f"{name}:{number}" + (f"@{n + 1}" if n else "")
                    commands += _commands_on(match.group(1), where, fragment=True)
                continue
            if fence == "python":
                continue
            while line.endswith("\\") and i < len(lines):
                line, i = line[:-1] + " " + lines[i], i + 1
            if "salientpp" in line:
                commands += _commands_on(line, f"{name}:{number}", fragment=False)
    return commands


COMMANDS = {c.where: c for c in documented_commands()}
# salientpp's parser, built once (22 ms a build, and the synopses are read at collection): parsing
# leaves it as it was.
PARSER = build_parser()


def substituted(words: tuple[str, ...], run: bool = False) -> list[str]:
    """``words`` with :data:`SUBSTITUTIONS` applied (and :data:`RUN_OPTIONS` for a run)."""
    out = [SUBSTITUTIONS.get(w, w) for w in words]
    out = [w for w in out if w is not None]
    if run:
        out = [RUN_OPTIONS[out[i - 1]] if i and out[i - 1] in RUN_OPTIONS else w for i, w in enumerate(out)]
    return out


def parse(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed by salientpp's parser; argparse's message as an AssertionError."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return PARSER.parse_args(argv)
    except SystemExit:
        raise AssertionError(f"`salientpp {shlex.join(argv)}`: {stderr.getvalue().strip()}") from None


def subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(name)
    return None


def has_subcommands(parser: argparse.ArgumentParser) -> bool:
    return any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)


def synopsis_errors(words: tuple[str, ...]) -> list[str]:
    """What in a synopsis or fragment names no subcommand, option or choice of salientpp's parser."""
    words = tuple(w for part in words for w in re.split(r"[\[\]()]", part) if w and w != "|")
    parser, errors, i = PARSER, [], 0
    while i < len(words) and has_subcommands(parser) and not words[i].startswith("-"):
        names = words[i].split("|")
        missing = [n for n in names if n != "..." and subparser(parser, n) is None]
        if missing:
            return [f"{parser.prog} has no subcommand {', '.join(missing)}"]
        parser, i = subparser(parser, names[0]), i + 1
    options = parser._option_string_actions
    for j, word in enumerate(words[i:], i):
        if not word.startswith("--"):
            continue
        flag = word.split("=")[0]
        if flag not in options:
            errors.append(f"{parser.prog} has no option {flag}")
            continue
        choices = options[flag].choices
        value = word.partition("=")[2] or (words[j + 1] if j + 1 < len(words) else "")
        if choices and "|" in value:
            errors += [f"{flag} has no choice {v!r}" for v in value.split("|") if v.islower() and v not in choices]
    return errors


def shown_defaults(words: tuple[str, ...]) -> list[tuple[str, str, object]]:
    """``(option, value, default)`` of each ``[--option value]`` of a synopsis whose value is a
    value (no placeholder such as ``DIR`` or ``S``, in capitals, and no choices ``a|b``): what a
    reader takes for the option's default, and the default of salientpp's parser."""
    parser, i = PARSER, 0
    while i < len(words) and parser is not None and has_subcommands(parser) and not words[i].startswith("-"):
        parser, i = subparser(parser, words[i].strip("[]()").split("|")[0]), i + 1
    shown = []
    for option, value in zip(words, words[1:]):
        if not (option.startswith("[--") and value.endswith("]")) or value.startswith("["):
            continue
        value = value[:-1]
        action = None if parser is None else parser._option_string_actions.get(option[1:])
        if action is not None and "|" not in value and not re.search("[A-Z]", value):
            shown.append((option[1:], value, action.default))
    return shown


@pytest.mark.parametrize("where", [w for w, c in COMMANDS.items() if c.synopsis and shown_defaults(c.words)])
def test_a_value_a_synopsis_shows_for_an_option_is_its_default(where):
    """``[--epochs 15]`` in a synopsis reads as "15 unless given": the parser's default, so the
    docs follow the code (``demo --epochs`` once read 5 in README.md where the code said 15)."""
    wrong = [f"{option} {value} (the default is {default})" for option, value, default in shown_defaults(
        COMMANDS[where].words) if str(default) != value]
    assert not wrong, f"`salientpp {' '.join(COMMANDS[where].words)}` shows {'; '.join(wrong)}"


@pytest.mark.parametrize("where", [w for w, c in COMMANDS.items() if not c.synopsis])
def test_documented_command_parses_with_salientpps_parser(where):
    args = parse(substituted(COMMANDS[where].words))
    if args.command == "train":
        config_from_args(args)


@pytest.mark.parametrize("where", [w for w, c in COMMANDS.items() if c.synopsis])
def test_documented_synopsis_names_real_subcommands_options_and_choices(where):
    errors = synopsis_errors(COMMANDS[where].words)
    assert not errors, f"`salientpp {' '.join(COMMANDS[where].words)}`: {'; '.join(errors)}"


def test_the_extraction_reads_every_form_of_command_and_leaves_out_output():
    words = [c.words for c in _commands_on(
        "$ OMP_NUM_THREADS=2 salientpp prepare a b && python3 -m salientpp partition b c --parts 2  # note", "f:1",
        fragment=False)]
    assert words == [("prepare", "a", "b"), ("partition", "b", "c", "--parts", "2")]
    assert _commands_on("salientpp train: error: rank 1 failed", "f:1", fragment=False) == []
    assert _commands_on("SALIENTPP_FAULT=\"kill@train:rank=1\"   # SIGKILL rank 1", "f:1", fragment=False) == []
    partition = documented("docs/training.md", "partition small small-2")  # after `&&`
    assert partition.where.endswith("#2") and partition.words == ("partition", "small", "small-2", "--parts", "2")
    link = documented("docs/link-prediction.md", "train cora-link-2")  # two lines joined
    assert link.words[-4:] == ("--eval-fanouts", "-1,-1", "--eval-batch-size", "64") and not link.synopsis
    torchrun = documented("docs/training.md", "train small-2 --checkpoint-dir /shared/ckpt")  # torchrun -m salientpp
    assert torchrun.words[-1] == "..." and not torchrun.synopsis
    assert documented("README.md", "predict PART_DIR").fragment  # README's table of commands
    assert documented("docs/data.md", "prepare SOURCE OUT_DIR [--root DIR]").synopsis


def documented(file: str, start: str) -> Command:
    """The one command of ``file`` whose words begin with ``start``."""
    found = [c for c in COMMANDS.values() if c.where.startswith(f"{file}:") and " ".join(c.words).startswith(start)]
    assert len(found) == 1, f"{file} has {len(found)} commands starting `salientpp {start}`"
    return found[0]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, cora_npz):
    """The working directory of the runs, and the runs done there."""
    return tmp_path_factory.mktemp("docs-runs"), set()


@pytest.mark.parametrize("run", range(len(RUNS)), ids=[f"{file}: {start}" for file, start, _ in RUNS])
def test_documented_command_runs_on_tiny_data(run, run_dir, monkeypatch, capsys):
    directory, done = run_dir
    monkeypatch.chdir(directory)
    for earlier in range(run + 1):  # what it reads was written by those before it
        if earlier in done:
            continue
        file, start, expected = RUNS[earlier]
        command = documented(file, start)
        argv = substituted(command.words, run=True)
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        captured = capsys.readouterr()
        shown = f"{command.where}: `salientpp {shlex.join(argv)}`"
        assert code == 0, f"{shown} exited {code}: {captured.err.strip()[-2000:]}"
        for thing in expected:
            assert (directory / thing).exists() or thing in captured.out, f"{shown} wrote or printed no {thing!r}"
        done.add(earlier)
