"""The ``salientpp`` command line. Each subcommand lives in its own module of this package
and exposes ``register(subparsers)``, which adds its parser and sets ``func(args) -> int``.

:func:`main` is where bad input and a bad environment become one sentence and exit code 2
(:class:`~salientpp.errors.InputError`, and an ``OSError`` of a full disk, a read-only file
system, missing permissions... that escaped the commands' own checks), a failed local rank
one line per failed rank and exit code 1, Ctrl-C exit code 130 and SIGTERM exit code 143,
both after the commands' cleanup has run; once a command's output is complete, neither an
interrupt nor a full standard output fails it (exit code 0).
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

from .. import __version__
from .._env import OMP_WAIT, discard_stdout, quiet_broken_pipe, set_defaults
from ..errors import MESSAGE_CHARS, InputError, shown
from ..io import WRITE_ERRNOS, completed_output, os_error_sentence
from ..parsing import NEGATIVE_NUMBERS, integer, real, renamed_flag_notes

# Before any command imports torch and its OpenMP runtime (no import above loads torch).
set_defaults(OMP_WAIT)

# Order of the subcommands in ``salientpp --help``; each name is a module of this package.
COMMANDS = ("demo", "prepare", "partition", "analyze", "simulate", "train", "predict", "bench", "selfcheck")

EXIT_FAILED = 1
EXIT_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when SIGTERM arrives during :func:`main`. A subclass of
    ``KeyboardInterrupt``, so every ``finally`` and ``except BaseException`` cleanup that runs
    for Ctrl-C (temporary output directories, local ranks) runs for SIGTERM too."""


class Parser(argparse.ArgumentParser):
    """salientpp's argument parser (every subcommand's too: argparse builds subparsers of the
    parent's class). Four differences from argparse's:

    * an option's value may be a negative number in any form :func:`~salientpp.parsing.real` reads
      (``--lr -1e-3``, which the option's check then refuses in its own words) or a list of
      numbers (``--eval-fanouts -1,-1``), which argparse would read as an unknown option
      (:data:`~salientpp.parsing.NEGATIVE_NUMBERS`);
    * ``type=int`` and ``type=float`` read ASCII numbers only (:func:`~salientpp.parsing.integer`,
      :func:`~salientpp.parsing.real`): ``5_0`` is not 50, and other scripts' digits are refused;
    * an error is one line (:func:`error_line`) and exit code 2, pointing at ``--help`` instead
      of printing the usage;
    * an argument a subcommand does not know is reported by that subcommand (``salientpp train:
      error: unrecognized arguments: --bogus``): argparse would leave it to the top-level parser,
      whose message names no subcommand.
    """

    # Set on every subcommand's parser by build_parser: whatever it leaves unparsed is an error.
    subcommand = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBERS
        self.register("type", int, integer)
        self.register("type", float, real)

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and self.subcommand:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def error(self, message: str):
        self.exit(EXIT_INPUT, f"{error_line(self.prog, message)} (see {self.prog} --help)\n")


def error_line(prog: str, message: str) -> str:
    """``PROG: error: MESSAGE``, the line every error of the CLI is printed as: the message passes
    through :func:`~salientpp.errors.shown`, so a path or value it echoes can neither split the
    line nor send control sequences to the terminal, and a long one is shortened in its middle."""
    return f"{prog}: error: {shown(message, MESSAGE_CHARS)}"


def parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every subparser below it, depth first."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                yield from parsers(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="salientpp", allow_abbrev=False,
        description="Distributed GNN training with VIP-driven caching of remote vertex features.")
    parser.add_argument("--version", action="version", version=f"salientpp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:  # a listed command without its module fails here, loudly
        importlib.import_module(f".{name}", __name__).register(sub)
    # No option prefixes anywhere (`train --mode x` must not be read as --model): argparse reads
    # allow_abbrev when it parses, so setting it on the finished tree covers every subcommand.
    for p in parsers(parser):
        p.allow_abbrev = False
        p.subcommand = p is not parser
    return parser


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While the block runs, SIGTERM raises :class:`Terminated` in the main thread (once: a
    second SIGTERM during the cleanup is ignored, so the cleanup finishes). The previous handler
    is restored afterwards. Outside the main thread it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    terminating = False

    def handler(signum, frame):
        nonlocal terminating
        if not terminating:
            terminating = True
            raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):  # no signals here (e.g. an embedded interpreter)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _first_line(message: str) -> str:
    """The first line of a rank's report (an exception's message may run over several)."""
    lines = message.strip().splitlines()
    return lines[0] if lines else message


def main(argv: list[str] | None = None, *, step: bool = False) -> int:
    """Run ``salientpp ARGV`` and return its exit code (see the module's docstring).

    Once the command's output is complete (:func:`~salientpp.io.mark_complete`: its final
    rename is done), an interrupt or a standard output that cannot be written (a full disk,
    ``> /dev/full``) while it prints its summary does not fail it: one line on stderr says the
    output is complete, and the exit code is 0. ``step``: this command is one step of another
    (the demo's), whose output is not complete: an interrupt stops it all the same (exit 130 or
    143), so that the caller stops too.
    """
    quiet_broken_pipe()
    try:  # the commands' modules load torch: seconds in which Ctrl-C is likely
        parser = build_parser()
        from ..distributed.group import WorkerError
    except KeyboardInterrupt:
        print("salientpp: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    args = parser.parse_args(argv)
    for note in renamed_flag_notes(sys.argv[1:] if argv is None else argv):
        print(note, file=sys.stderr)
    try:
        with sigterm_as_interrupt():
            code = int(args.func(args) or 0)
            if sys.stdout is not None:
                sys.stdout.flush()  # a full standard output fails here, in the handlers below, not at exit
            return code
    except InputError as exc:
        print(error_line(f"salientpp {args.command}", str(exc)), file=sys.stderr)
        return EXIT_INPUT
    except WorkerError as exc:  # a local rank raised or died: one line per failed rank
        print(error_line(f"salientpp {args.command}", f"rank {exc.rank} failed: {_first_line(exc.message)}"),
              file=sys.stderr)
        for rank, message in exc.others:
            print(f"  then rank {rank} failed: {shown(_first_line(message), MESSAGE_CHARS)}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated)
        terminated = isinstance(exc, Terminated)
        word = "terminated" if terminated else "interrupted"
        complete = completed_output(args)
        if complete is not None and not step:
            print(f"salientpp {args.command}: {word} after its output was complete: {shown(complete, MESSAGE_CHARS)}",
                  file=sys.stderr)
            return 0
        print(f"salientpp {args.command}: {word}", file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    except OSError as exc:
        if exc.errno not in WRITE_ERRNOS:
            raise
        complete = completed_output(args)
        if complete is not None and exc.filename is None:  # the summary of a complete output, on standard output
            discard_stdout()
            reason = (exc.strerror or os.strerror(exc.errno)).lower()
            print(f"salientpp {args.command}: note: the summary could not be printed ({reason}), but the output is "
                  f"complete: {shown(complete, MESSAGE_CHARS)}", file=sys.stderr)
            return 0
        print(error_line(f"salientpp {args.command}", os_error_sentence(exc)), file=sys.stderr)
        return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main())
