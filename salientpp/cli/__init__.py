"""The ``salientpp`` command line. Each subcommand lives in its own module of this package
and exposes ``register(subparsers)``, which adds its parser and sets ``func(args) -> int``."""
from __future__ import annotations

import argparse
import importlib
import sys

from .. import __version__
from ..errors import InputError

# Order of the subcommands in ``salientpp --help``; each name is a module of this package.
COMMANDS = ("demo", "prepare", "partition", "analyze", "simulate", "train", "bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="salientpp",
        description="Distributed GNN training with VIP-driven caching of remote vertex features.")
    parser.add_argument("--version", action="version", version=f"salientpp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{name}":
                continue  # subcommand not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InputError as exc:
        print(f"salientpp {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"salientpp {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
