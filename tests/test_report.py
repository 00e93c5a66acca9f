"""``salientpp bench report`` on JSON files that the real benchmarks write in the test (tiny
graph): the Markdown tables carry the measured numbers, and the plots have one line per policy,
one stacked bar per variant and one scaling line per variant measured at two rank counts."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

import salientpp
from salientpp.bench import report
from salientpp.bench import sampler as bench_sampler
from salientpp.bench import simulate as bench_simulate
from salientpp.bench import step as bench_step
from salientpp.bench import train as bench_train
from salientpp.bench import vip as bench_vip
from salientpp.bench.results import VERSION_KEY
from salientpp.cache.simulator import RESULT_KIND as SIMULATE_KIND
from salientpp.cli import main as cli

pytest.importorskip("matplotlib")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _train_flags() -> list[str]:
    """Skip the PyG baseline where bench train has it (it needs a PyG sampling backend and is slow)."""
    parser = argparse.ArgumentParser()
    bench_train.add_arguments(parser)
    return ["--no-baseline"] if "--no-baseline" in parser.format_help() else []


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, Path]:
    """The --json outputs of every benchmark on a 600-node graph, 1 and 2 partitions."""
    d = tmp_path_factory.mktemp("bench")
    assert cli(["prepare", "synthetic:tiny,num_nodes=600", str(d / "ds")]) == 0
    for k in (1, 2):
        assert cli(["partition", str(d / "ds"), str(d / f"p{k}"), "--parts", str(k)]) == 0
    small = ["--fanouts", "5,5", "--batch-size", "64"]
    runs = {
        "sampler": ["bench", "sampler", str(d / "ds"), *small, "--sampler-threads", "1", "--batches", "2", "--repeats", "1",
                    "--no-pyg"],
        "vip": ["bench", "vip", str(d / "p2"), *small, "--methods", "exact"],
        "bench-simulate": ["bench", "simulate", str(d / "p2"), "--setting", "5,5:64", "--policies", "vip,degree,oracle",
                           "--replication", "0,0.1,0.5,1", "--epochs", "1"],
        "simulate": ["simulate", str(d / "p2"), *small, "--policies", "vip,random", "--replication", "0,0.2",
                     "--epochs", "1"],
        "train-1": ["bench", "train", str(d / "p1"), *small, "--epochs", "1", "--replication", "", "--hidden", "8",
                    "--pipeline-depth", "4", *_train_flags()],
        "train-2": ["bench", "train", str(d / "p2"), *small, "--epochs", "1", "--replication", "", "--hidden", "8",
                    "--pipeline-depth", "4", *_train_flags()],
    }
    paths = {}
    for name, argv in runs.items():
        paths[name] = d / f"{name}.json"
        assert cli([*argv, "--json", str(paths[name])]) == 0, name
    return paths


# The kind each output declares, and the list of the report it lands in.
DECLARED = {"sampler": (bench_sampler.KIND, "sampler"), "vip": (bench_vip.KIND, "vip"),
            "bench-simulate": (bench_simulate.KIND, "simulate"), "simulate": (SIMULATE_KIND, "simulate"),
            "train-1": (bench_train.KIND, "train"), "train-2": (bench_train.KIND, "train")}


def test_every_output_declares_the_kind_of_the_benchmark_that_wrote_it(outputs):
    for name, path in outputs.items():
        data = json.loads(path.read_text())
        assert isinstance(data, dict) and data["kind"] == DECLARED[name][0], name
        assert data[VERSION_KEY] == salientpp.__version__, name
        assert list(data)[:2] == ["kind", VERSION_KEY], name
    assert len({kind for kind, _ in DECLARED.values()}) == 5  # bench simulate and simulate differ in shape


def test_each_file_is_read_by_its_declared_kind(outputs, tmp_path):
    for name, path in outputs.items():
        results = report.load_results([path])
        filled = {part for part in ("sampler", "vip", "simulate", "train") if getattr(results, part)}
        assert filled == {DECLARED[name][1]}, name
    # The kind alone decides: plain simulate's file declared as bench vip's is read as a VIP result
    # (it has no VIP fields, so only its table would fail), not recognised by its keys.
    sim = json.loads(outputs["simulate"].read_text())
    relabelled = tmp_path / "relabelled.json"
    relabelled.write_text(json.dumps({**sim, "kind": bench_vip.KIND}))
    results = report.load_results([relabelled])
    assert len(results.vip) == 1 and not results.simulate


def test_classifies_and_tabulates_every_benchmark(outputs):
    results = report.load_results(list(outputs.values()))
    assert len(results.sampler) == 1 and len(results.vip) == 1
    assert len(results.simulate) == 2  # bench simulate (one setting) and plain simulate
    train_1 = json.loads(outputs["train-1"].read_text())["rows"]
    train_2 = json.loads(outputs["train-2"].read_text())["rows"]
    assert len(results.train) == len(train_1) + len(train_2)
    markdown = report.render_markdown(results)
    sampler = json.loads(outputs["sampler"].read_text())["rows"][0]
    assert f"| sampler.json | salientpp | - | 1 | {sampler['edges_per_batch']:,.0f} | {sampler['edges_per_s'] / 1e6:.2f} |" \
        in markdown
    vip = json.loads(outputs["vip"].read_text())["timings"][0]
    assert f"| exact | {vip['seconds']:.2f} |" in markdown
    sim = json.loads(outputs["bench-simulate"].read_text())["rows"][0]
    assert "| vip | " + " | ".join(f"{v:.4g}" for v in sim["rows_per_epoch"]["vip"]) + " |" in markdown
    assert "### bench-simulate.json: 2 partitions, fanouts 5,5, batch 64, 1 epochs" in markdown
    for row in train_2:
        pipe = "pipeline depth 4" if row["depth"] > 1 else "no pipeline"
        assert f"| train-2.json | 2 | no cache, {pipe} | {row['epoch_s']:.3f} |" in markdown
    assert markdown.count("| train-") == len(train_1) + len(train_2)


def test_plots_have_one_line_per_policy_and_one_bar_per_variant(outputs):
    results = report.load_results([outputs["bench-simulate"], outputs["simulate"], outputs["train-2"]])
    figs = dict(report.figures(results))
    comm = [f for name, f in figs.items() if name.startswith("comm-volume")]
    assert [len(f.axes[0].get_lines()) for f in comm] == [3, 2]  # vip,degree,oracle / vip,random
    sim = json.loads(outputs["simulate"].read_text())
    line = comm[1].axes[0].get_lines()[1]
    assert list(line.get_xdata()) == sim["replication"] and list(line.get_ydata()) == sim["rows_per_epoch"]["random"]
    bars = figs["epoch-breakdown.png"].axes[0].patches
    rows = [t.row for t in results.train]
    # sampling, fetch (CPU, waiting), compute (CPU, waiting), rest per variant
    assert len(bars) == 6 * len(rows)
    for i, row in enumerate(rows):
        # The segments of one bar end at the epoch time, or at the sum of the stages when the
        # pipeline overlaps them (sum > epoch time).
        segments = bars[i::len(rows)]
        # fetch and compute split into the thread's CPU seconds and the rest, waiting
        assert segments[1].get_width() == pytest.approx(row["fetch_cpu_s"]) and row["fetch_cpu_s"] > 0
        assert segments[1].get_width() + segments[2].get_width() == pytest.approx(row["fetch_s"])
        assert segments[3].get_width() == pytest.approx(min(row["compute_cpu_s"], row["compute_s"]))
        assert segments[3].get_width() + segments[4].get_width() == pytest.approx(row["compute_s"])
        end = max(s.get_x() + s.get_width() for s in segments)
        assert end == pytest.approx(max(row["epoch_s"], row["sample_s"] + row["fetch_s"] + row["compute_s"]))
    assert "scaling.png" not in figs  # one rank count only: nothing to scale over


def test_scaling_with_rank_counts(outputs, tmp_path):
    # bench train records its rank count (1 and 2 partitions here) in every row.
    tagged = []
    for k in (1, 2):
        data = json.loads(outputs[f"train-{k}"].read_text())
        rows = data["rows"]
        assert all(r["num_parts"] == k for r in rows)
        path = tmp_path / f"ranks-{k}.json"
        path.write_text(json.dumps(data))
        tagged.append((path, rows))
    results = report.load_results([p for p, _ in tagged])
    series = report.scaling_series(results.train)
    assert set(series) == {"no cache, no pipeline", "no cache, pipeline depth 4"}
    for variant, points in series.items():
        depth = 1 if variant.endswith("no pipeline") else 4
        expected = [(k, next(r["epoch_s"] for r in rows if r["depth"] == depth)) for k, (_, rows) in
                    zip((1, 2), tagged)]
        assert points == expected
    fig = report.plot_scaling(series)
    assert len(fig.axes[0].get_lines()) == 2
    assert "| ranks-2.json | 2 | no cache, no pipeline |" in report.render_markdown(results)


def test_a_bfloat16_run_is_a_variant_of_its_own_and_float32_keeps_the_old_names():
    row = {"cache": "vip", "alpha": 0.1, "depth": 4}
    names = {report.variant_name({**row, **extra}, 2) for extra in ({}, {"precision": "fp32"})}
    assert names == {"vip α=0.1, pipeline depth 4"}  # rows written before --precisions read the same
    assert report.variant_name({**row, "precision": "bf16"}, 2) == "vip α=0.1, pipeline depth 4, bf16"


def test_the_outside_load_and_freed_memory_rows_are_named_apart_from_the_plain_run():
    row = {"cache": "none", "alpha": 0.0, "depth": 1}
    names = [report.variant_name({**row, **extra}, 2) for extra in
             ({}, {"outside_load": 0}, {"reuse_freed_memory": True}, {"outside_load": 2},
              {"reuse_freed_memory": False})]
    assert names[:3] == ["no cache, no pipeline"] * 3  # idle and kept are the plain run
    assert names[3:] == ["no cache, no pipeline, under 2 busy processes", "no cache, no pipeline, freed memory returned"]


def test_cli_writes_report_and_valid_pngs(outputs, tmp_path):
    from PIL import Image

    out = tmp_path / "report"
    assert cli(["bench", "report", *map(str, outputs.values()), "--out", str(out)]) == 0
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) == 4  # two communication plots, the breakdown, and scaling (train-1 and train-2: 1 and 2 ranks)
    markdown = (out / "report.md").read_text()
    for png in pngs:
        assert png.read_bytes()[:8] == PNG_SIGNATURE and f"]({png.name})" in markdown
        with Image.open(png) as image:
            assert image.format == "PNG" and min(image.size) > 100


def test_bad_input(outputs, tmp_path, capsys, monkeypatch):
    def fails(argv, needle):
        assert cli(["bench", "report", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, err

    fails([str(tmp_path / "missing.json")], "does not exist")
    (tmp_path / "other.json").write_text('{"hello": 1}')
    fails([str(tmp_path / "other.json")], "other.json declares no kind")
    # bench train's rows as written before the benchmarks declared their kinds: refused, not guessed
    (tmp_path / "old.json").write_text(json.dumps(json.loads(outputs["train-2"].read_text())["rows"]))
    fails([str(tmp_path / "old.json")], "old.json declares no kind")
    (tmp_path / "unknown.json").write_text('{"kind": "salientpp-bench-nothing", "rows": []}')
    fails([str(tmp_path / "unknown.json")], "declares the kind salientpp-bench-nothing;")
    (tmp_path / "step.json").write_text(json.dumps({"kind": bench_step.KIND, "rows": []}))  # not a kind it reads
    fails([str(tmp_path / "step.json")], f"declares the kind {bench_step.KIND};")
    for name in ("other", "unknown"):  # the sentence names every kind it reads and the way out
        assert cli(["bench", "report", str(tmp_path / f"{name}.json")]) == 2
        err = capsys.readouterr().err
        assert all(kind in err for kind in report.READERS) and "re-run" in err, err
    (tmp_path / "broken.json").write_text("{")
    fails([str(tmp_path / "broken.json")], "is not valid JSON")
    (tmp_path / "exists").mkdir()
    fails([str(outputs["vip"]), "--out", str(tmp_path / "exists")], "already exists")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    fails([str(outputs["vip"]), "--out", str(tmp_path / "new")], "matplotlib is not installed")
    assert not (tmp_path / "new").exists()
    assert cli(["bench", "report", str(outputs["vip"]), "--out", str(tmp_path / "new"), "--no-plots"]) == 0
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["report.md"]


def test_rows_from_before_the_fetch_cpu_was_measured_show_their_fetch_as_unsplit(outputs, tmp_path):
    data = json.loads(outputs["train-2"].read_text())
    rows = data["rows"]
    for row in rows:
        del row["fetch_cpu_s"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    results = report.load_results([old])
    markdown = report.render_markdown(results)
    for row in rows:  # fetch s, then "-" for the fetch CPU it did not record
        assert f"| {row['fetch_s']:.3f} | - | {row['compute_s']:.3f} |" in markdown
    bars = dict(report.figures(results))["epoch-breakdown.png"].axes[0].patches
    fetch_cpu, fetch_rest = bars[len(rows):2 * len(rows)], bars[2 * len(rows):3 * len(rows)]
    assert [b.get_width() for b in fetch_cpu] == [0.0] * len(rows)
    assert [b.get_width() for b in fetch_rest] == pytest.approx([row["fetch_s"] for row in rows])
