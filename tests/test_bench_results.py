"""The benchmarks' list and their declared kinds: every listed benchmark is a module (none is
skipped), every benchmark module is listed, each declares its own kind, and its ``--json`` file
carries that kind with the results (``salientpp.bench.results``)."""
from __future__ import annotations

import importlib
import json
import pkgutil

import pytest

import salientpp
import salientpp.bench
from salientpp.bench.results import ROWS_KEY, VERSION_KEY, declared_kind, write_results
from salientpp.cli import bench as bench_cli
from salientpp.cli import build_parser


def _modules() -> dict[str, object]:
    return {info.name: importlib.import_module(f"salientpp.bench.{info.name}")
            for info in pkgutil.iter_modules(salientpp.bench.__path__)}


def test_the_listed_benchmarks_are_the_bench_modules_with_a_main():
    modules = _modules()
    assert set(bench_cli.BENCHMARKS) == {name for name, m in modules.items() if callable(getattr(m, "main", None))}
    assert len(set(bench_cli.BENCHMARKS)) == len(bench_cli.BENCHMARKS)
    for name in bench_cli.BENCHMARKS:
        module = modules[name]
        assert isinstance(module.SUMMARY, str) and module.SUMMARY and "\n" not in module.SUMMARY, name
        assert callable(module.add_arguments), name


def test_every_benchmark_that_writes_json_declares_its_own_kind():
    kinds = {name: getattr(importlib.import_module(f"salientpp.bench.{name}"), "KIND", None)
             for name in bench_cli.BENCHMARKS}
    # report writes no --json; every other benchmark declares salientpp-bench-<its name>
    assert kinds == {name: None if name == "report" else f"salientpp-bench-{name}" for name in bench_cli.BENCHMARKS}


def test_the_command_line_offers_every_listed_benchmark_with_its_summary(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in bench_cli.BENCHMARKS:
        summary = importlib.import_module(f"salientpp.bench.{name}").SUMMARY
        assert f"{name} {summary}" in text, name


def test_a_listed_benchmark_without_its_module_fails_the_command_line_instead_of_being_skipped(monkeypatch):
    monkeypatch.setattr(bench_cli, "BENCHMARKS", (*bench_cli.BENCHMARKS, "no_such_benchmark"))
    with pytest.raises(ModuleNotFoundError, match="no_such_benchmark"):
        build_parser()


def test_a_dict_keeps_its_keys_at_the_top_and_a_list_goes_under_rows(tmp_path):
    write_results(tmp_path / "d.json", "salientpp-bench-x", {"config": {"a": 1}, "rows": [{"b": float("nan")}]})
    write_results(tmp_path / "l.json", "salientpp-bench-y", [{"c": 2}, {"c": float("inf")}])
    d = json.loads((tmp_path / "d.json").read_text())
    listed = json.loads((tmp_path / "l.json").read_text())
    assert list(d) == ["kind", VERSION_KEY, "config", "rows"] and d["config"] == {"a": 1}
    assert d["kind"] == "salientpp-bench-x" and d[VERSION_KEY] == salientpp.__version__
    assert d["rows"] == [{"b": None, "null_reasons": {"b": "not a number"}}]  # strict JSON, as before
    assert list(listed) == ["kind", VERSION_KEY, ROWS_KEY] and listed["kind"] == "salientpp-bench-y"
    assert listed[ROWS_KEY] == [{"c": 2}, {"c": None, "null_reasons": {"c": "infinite"}}]
    assert [declared_kind(x) for x in (d, listed, [{"kind": "salientpp-bench-y"}], {"kind": 3}, {})] == [
        "salientpp-bench-x", "salientpp-bench-y", None, None, None]


def test_results_that_would_hide_the_declared_kind_are_refused(tmp_path):
    with pytest.raises(ValueError, match="kind"):
        write_results(tmp_path / "x.json", "salientpp-bench-x", {"kind": "other"})
    assert not (tmp_path / "x.json").exists()
