"""The OGB reproduction scripts (experiments/ogb) end to end on tiny graphs: OGB's raw on-disk
layouts written by the tests (so the ogb readers run for real) and the synthetic preset, 2 ranks,
1 epoch; plus every bad-input path (exit 2, one sentence, nothing left behind)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ogb")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments" / "ogb"))
import igbh  # noqa: E402
import mag240m  # noqa: E402
import papers100m  # noqa: E402
import products  # noqa: E402

from salientpp.data.synthetic import synthetic_dataset  # noqa: E402
from salientpp.io import read_meta  # noqa: E402

SMALL = ["--fanouts", "5,5", "--batch-size", "64", "--hidden", "16", "--epochs", "1", "--accuracy-epochs", "1",
         "--sim-epochs", "1", "--gpus-per-machine", "2", "--device", "cpu"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _graph(num_nodes: int = 600):
    """A tiny learnable graph as OGB ships it: one direction per edge, features, labels, split."""
    ds = synthetic_dataset(f"tiny,num_nodes={num_nodes}")
    rowptr, col = np.asarray(ds.rowptr), np.asarray(ds.col)
    row = np.repeat(np.arange(num_nodes), np.diff(rowptr))
    keep = row < col
    edge_index = np.stack([row[keep], col[keep]])
    return edge_index, np.asarray(ds.x), np.asarray(ds.y), (ds.train_idx, ds.valid_idx, ds.test_idx)


def _write_mag240m(root: Path, edge_index, x, y, splits) -> None:
    """MAG240M's layout: meta.pt and split_dict.pt (torch.save of dicts; numpy arrays as the real one),
    processed/paper/{node_feat (float16), node_label (float, NaN = hidden)}.npy, the citation edges."""
    import torch

    folder = root / "mag240m_kddcup2021"
    (folder / "processed" / "paper").mkdir(parents=True)
    (folder / "processed" / "paper___cites___paper").mkdir(parents=True)
    (folder / "RELEASE_v1.txt").write_text("written by the salientpp tests\n")
    torch.save({"paper": x.shape[0], "author": 0, "institution": 0, "num_classes": int(y.max()) + 1}, folder / "meta.pt")
    labels = y.astype(np.float32)
    labels[splits[2]] = np.nan  # the test labels are hidden, as in the real data
    torch.save({"train": splits[0], "valid": splits[1], "test": splits[2]}, folder / "split_dict.pt")
    np.save(folder / "processed" / "paper" / "node_feat.npy", x.astype(np.float16))
    np.save(folder / "processed" / "paper" / "node_label.npy", labels)
    np.save(folder / "processed" / "paper___cites___paper" / "edge_index.npy", edge_index)


def _results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def _assert_png(path: Path) -> None:
    from PIL import Image

    assert path.read_bytes()[:8] == PNG_SIGNATURE
    with Image.open(path) as image:
        assert image.format == "PNG" and min(image.size) > 100


def test_products_raw_layout_variants_and_communication(tmp_path, ogb_raw_writer):
    edge_index, x, y, splits = _graph()
    ogb_raw_writer(tmp_path / "ogb", "ogbn-products", edge_index, x, y, splits)
    work, out = tmp_path / "work", tmp_path / "out"
    code = products.main(products.SETUP, ["--root", str(tmp_path / "ogb"), "--work", str(work), "--out", str(out),
                                          "--experiments", "variants,communication", *SMALL])
    assert code == 0
    assert read_meta(work / "dataset", "salientpp-dataset")["source"] == "ogb:ogbn-products"
    res = _results(out)
    rows = {r["label"].split(" (")[0]: r for r in res["train"]}
    assert list(rows) == ["full replication", "partitioned, no pipeline, no cache", "pipelined, no cache",
                          "pipelined + VIP cache"]
    assert rows["full replication"]["alpha"] == 1.0 and rows["full replication"]["rows_per_epoch"] == 0
    # The simulator samples the trainer's own batches (same seed, 1 epoch each), so the rows the
    # uncached runs fetched must equal its no-cache count exactly, pipelined or not.
    no_cache = res["simulate"]["no_cache_rows_per_epoch"]
    assert no_cache > 0
    assert rows["partitioned, no pipeline, no cache"]["rows_per_epoch"] == no_cache
    assert rows["pipelined, no cache"]["rows_per_epoch"] == no_cache
    assert rows["partitioned, no pipeline, no cache"]["depth"] == 1 and rows["pipelined, no cache"]["depth"] == 4
    vip = rows["pipelined + VIP cache"]
    assert vip["alpha"] == pytest.approx(0.08) and 0 < vip["rows_per_epoch"] < no_cache
    oracle, vip_sim = (res["simulate"]["rows_per_epoch"][p] for p in ("oracle", "vip"))
    assert all(o <= v for o, v in zip(oracle, vip_sim))  # the oracle is the lower bound
    markdown = (out / "results.md").read_text()
    assert "## Per-epoch time by system variant" in markdown and "818 ms/epoch" in markdown
    for r in res["train"]:  # each timed row shows the fetch stage's CPU seconds beside its wall time
        assert 0 <= r["fetch_cpu_s"] <= r["fetch_s"] + 0.01
        assert f"| {r['fetch_s']:.3f} | {r['fetch_cpu_s']:.3f} | {r['compute_s']:.3f} |" in markdown
    assert "## Communication volume vs α per policy" in markdown and "1.67e7" in markdown
    assert "## Accuracy" not in markdown  # not asked for
    pngs = sorted(out.glob("*.png"))
    assert [p.name.split("-")[0] for p in pngs] == ["comm", "epoch"]
    for png in pngs:
        _assert_png(png)


def test_igbh_layout_trains_rgat_and_its_uncached_runs_fetch_the_simulators_rows(tmp_path):
    """MLPerf's R-GAT configuration on IGBH's layout (a typed graph): the trainer's uncached runs
    fetch exactly the rows the simulator counts for every type together."""
    from test_typed_sources import write_igbh

    write_igbh(tmp_path / "igbh" / "tiny")
    work, out = tmp_path / "work", tmp_path / "out"
    code = igbh.main(igbh.SETUP, ["--source", f"igbh:{tmp_path / 'igbh' / 'tiny'}", "--work", str(work), "--out",
                                  str(out), "--experiments", "variants,communication",
                                  *[a if a != "64" else "4" for a in SMALL]])
    assert code == 0
    res = _results(out)
    assert res["setup"]["model"] == "rgat" and read_meta(work / "dataset", "salientpp-dataset")["num_classes"] == 2983
    rows = {r["label"].split(" (")[0]: r for r in res["train"]}
    no_cache = res["simulate"]["no_cache_rows_per_epoch"]
    assert no_cache > 0 and rows["pipelined, no cache"]["rows_per_epoch"] == no_cache
    assert rows["partitioned, no pipeline, no cache"]["rows_per_epoch"] == no_cache
    assert rows["pipelined + VIP cache"]["rows_per_epoch"] <= no_cache  # α = 0.08 of 47 nodes: a row or two
    assert "2-layer RGAT" in (out / "results.md").read_text()


def test_synthetic_accuracy_resume_and_multi_machine_collect(tmp_path):
    work = tmp_path / "work"
    base = ["--source", "synthetic:tiny", "--work", str(work), "--experiments", "accuracy", *SMALL]
    multi = [a if a != "--gpus-per-machine" else "--machines" for a in base]  # 2 machines x 1 rank: same K
    # Several machines: the data steps run here, the training runs become torchrun commands.
    assert products.main(products.SETUP, [*multi, "--out", str(tmp_path / "out-a")]) == 0
    assert not (tmp_path / "out-a").exists()
    commands = (work / "runs" / "commands.sh").read_text().splitlines()
    runs = [c for c in commands if c.startswith("torchrun")]
    assert len(runs) == 1 and "--nnodes 2 --nproc-per-node 1" in runs[0] and "--eval-every 1" in runs[0]
    metrics = work / "runs" / "part-2" / "vip-a0.08-g0.15-d4-e1-eval.jsonl"
    assert str(metrics.resolve()) in runs[0]
    # The cached run is given its plan's path, which the analyze step wrote; the plan decides the cache.
    plan = work / "plans" / "part-2" / "vip-f5-5-b64-a0.08-g0.15"
    assert f"--plan {plan.resolve()}" in runs[0] and "--replication" not in runs[0]
    assert read_meta(plan, "salientpp-cache-plan")["budget"]["replication"] == pytest.approx(0.08)
    # One machine with 2 ranks runs it (same partitions, same run), then the multi-machine
    # invocation finds it complete and collects the same results.
    assert products.main(products.SETUP, [*base, "--out", str(tmp_path / "out-b")]) == 0
    assert products.main(products.SETUP, [*multi, "--out", str(tmp_path / "out-c")]) == 0
    b, c = _results(tmp_path / "out-b"), _results(tmp_path / "out-c")
    assert b["train"] == c["train"] and c["machines"] == 2
    (acc,) = b["train"]
    assert acc["experiment"] == "accuracy" and acc["epochs"] == 1
    assert 0 <= acc["best_valid"] <= 1 and 0 <= acc["test_at_best"] <= 1
    assert "test accuracy 0.785" in (tmp_path / "out-b" / "results.md").read_text()


def test_gpu_fraction_sweep_scores_once_and_writes_one_plan_per_fraction(tmp_path):
    from common import analyze_step, build_parser, make_plan, partition_step, prepare_step, torchrun_command

    args = build_parser(products.SETUP).parse_args(
        ["--source", "synthetic:tiny", "--work", str(tmp_path / "w"), "--out", str(tmp_path / "out"),
         "--experiments", "gpu-fraction", "--device-fractions", "0,0.5", "--machines", "2", *SMALL[:-4]])
    plan = make_plan(products.SETUP, args)
    prepare_step(plan), partition_step(plan)
    assert list(analyze_step(plan)) == ["vip α=0.15"]  # scored once for both fractions
    (zero, half) = plan.runs
    metas = [read_meta(plan.cache_plan(run), "salientpp-cache-plan") for run in (zero, half)]
    assert [m["device_fraction"] for m in metas] == [0.0, 0.5]
    assert metas[0]["files"]["part_0/device_ids"] == metas[1]["files"]["part_0/device_ids"]  # the same cache
    assert [p["num_device_owned"] for p in metas[1]["parts"]] == [p["num_owned"] // 2 for p in metas[1]["parts"]]
    assert f"--plan {plan.cache_plan(half).resolve()}" in torchrun_command(plan, half)
    assert analyze_step(plan) == {}  # reused


def test_papers100m_binary_layout_communication(tmp_path, ogb_raw_writer):
    edge_index, x, y, splits = _graph()
    y = y.copy()
    unlabelled = np.setdiff1d(np.arange(y.shape[0]), np.concatenate(splits))[:50]
    y[unlabelled] = -1  # papers100M labels only a few papers (NaN in node-label.npz)
    ogb_raw_writer(tmp_path / "ogb", "ogbn-papers100M", edge_index, x, y, splits)
    out = tmp_path / "out"
    assert papers100m.main(papers100m.SETUP, ["--root", str(tmp_path / "ogb"), "--work", str(tmp_path / "w"),
                                              "--out", str(out), "--experiments", "communication", *SMALL]) == 0
    res = _results(out)
    assert res["train"] == [] and res["setup"]["name"] == "ogbn-papers100M"
    sim = res["simulate"]
    assert sim["replication"] == [0.0, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0]  # alpha <= K - 1 = 1
    for policy in sim["policies"]:
        volume = sim["rows_per_epoch"][policy]
        assert volume[0] == sim["no_cache_rows_per_epoch"] and volume[-1] == 0  # alpha = K-1 caches all
    assert "3154 ms/epoch" not in (out / "results.md").read_text()  # no variants table asked for


def test_mag240m_papers_only(tmp_path):
    edge_index, x, y, splits = _graph()
    _write_mag240m(tmp_path / "lsc", edge_index, x, y, splits)
    work = tmp_path / "w"
    assert mag240m.main(mag240m.SETUP, ["--root", str(tmp_path / "lsc"), "--work", str(work), "--out",
                                        str(tmp_path / "out"), "--experiments", "communication", *SMALL]) == 0
    meta = read_meta(work / "dataset", "salientpp-dataset")
    assert meta["source"] == "ogb-lsc:mag240m"
    assert meta["files"]["x"]["dtype"] == "float16"  # kept as shipped
    assert meta["files"]["test_idx"]["shape"] == [0]  # hidden test labels: no test split
    assert meta["files"]["train_idx"]["shape"] == [len(splits[0])]
    assert meta["num_edges"] == 2 * edge_index.shape[1]  # symmetrised citations
    assert _results(tmp_path / "out")["simulate"]["no_cache_rows_per_epoch"] > 0


def _fails(capsys, module, argv, needle: str) -> None:
    assert module.main(module.SETUP, argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err


def test_bad_input_fails_before_any_work(tmp_path, capsys, ogb_raw_writer):
    work, out = tmp_path / "work", tmp_path / "out"
    paths = ["--work", str(work), "--out", str(out)]
    (tmp_path / "empty").mkdir()
    _fails(capsys, products, ["--root", str(tmp_path / "empty"), *paths, *SMALL], "does not exist; download")
    _fails(capsys, products, ["--root", str(tmp_path / "nowhere"), *paths, *SMALL], "is not a directory")
    _fails(capsys, products, [*paths, *SMALL], "pass --root DIR")
    _fails(capsys, mag240m, ["--root", str(tmp_path / "empty"), *paths, *SMALL], "mag240m is not on disk")
    edge_index, x, y, splits = _graph()
    ogb_raw_writer(tmp_path / "ogb", "ogbn-products", edge_index[:, :4], x[:5], y[:5],
                   tuple(np.array([i]) for i in range(3)))
    five = ["--root", str(tmp_path / "ogb"), *paths]
    _fails(capsys, products, [*five, "--gpus-per-machine", "8"], "more than the 5 nodes")
    _fails(capsys, products, [*five, "--machines", "1"], "at least 2 ranks")
    _fails(capsys, products, [*five, *SMALL, "--experiments", "variants,speed"], "--experiments must list")
    _fails(capsys, products, [*five, *SMALL, "--device-fractions", "0.5,2"], "must lie in [0, 1]")
    _fails(capsys, products, [*five, *SMALL, "--epochs", "0"], "--epochs must be a positive integer")
    assert not work.exists() and not out.exists()
    out.mkdir()
    _fails(capsys, products, [*five, *SMALL], "already exists")
    assert not work.exists()
