"""Benchmarks, one module per benchmark. Each module exposes ``add_arguments(parser)`` and
``main(args) -> int`` for the ``salientpp bench NAME`` command, plus a library function."""
