"""``salientpp bench step``: its rows and ratios, and that it keeps freed host memory as ranks do."""
from __future__ import annotations

import json

import pytest

from conftest import one_sentence, typed_dataset
from salientpp.bench import step as bench_step
from salientpp.cli import main as cli
from salientpp.data import save_dataset

TINY = ["--fanouts", "4,3", "--batch-size", "32", "--hidden", "8", "--batches", "2", "--repeats", "1"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("step") / "ds"
    assert cli(["prepare", "synthetic:tiny,num_nodes=500", str(path)]) == 0
    return path


@pytest.fixture(autouse=True)
def kept_calls(monkeypatch):
    """Records the bench's calls of keep_freed_memory instead of changing this test process's malloc."""
    calls = []
    monkeypatch.setattr(bench_step, "keep_freed_memory", lambda: calls.append(1) or True)
    return calls


@pytest.mark.parametrize("flags,kept", [([], True), (["--no-reuse-freed-memory"], False)])
def test_bench_step_keeps_freed_memory_like_a_rank_unless_told_not_to(dataset, tmp_path, capsys, kept_calls,
                                                                       flags, kept):
    assert cli(["bench", "step", str(dataset), *TINY, *flags, "--json", str(tmp_path / "rows.json")]) == 0
    assert len(kept_calls) == int(kept)
    header = capsys.readouterr().out.splitlines()[0]
    assert ("freed host memory kept for reuse" in header) == kept
    assert ("returned (glibc default)" in header) == (not kept)


def test_bench_step_ratios_divide_the_first_row_of_each_group(dataset, tmp_path):
    out = tmp_path / "rows.json"
    assert cli(["bench", "step", str(dataset), *TINY, "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["kind"] == bench_step.KIND
    rows = written["rows"]
    groups = list(dict.fromkeys(r["group"] for r in rows))
    assert len(groups) == 3 and rows[0]["impl"] == "PyG scatter (SAGEConv)"
    for group in groups:
        members = [r for r in rows if r["group"] == group]
        first = members[0]["seconds"]
        for r in members:
            assert r["speedup"] == pytest.approx(first / max(r["seconds"], 1e-12))
            assert r["ms_per_batch"] == pytest.approx(1e3 * r["seconds"] / 2)
            assert (r["device"], r["clock"]) == ("cpu", "CPU")


def test_bench_step_times_float16_features_converted_and_read_in_place_only_when_the_dataset_has_them(
        dataset, tmp_path):
    half = tmp_path / "half"
    assert cli(["prepare", "synthetic:tiny,num_nodes=500", str(half), "--feature-dtype", "float16"]) == 0
    groups = {}
    for name, path in (("float32", dataset), ("float16", half)):
        out = tmp_path / f"{name}.json"
        assert cli(["bench", "step", str(path), *TINY, "--json", str(out)]) == 0
        groups[name] = [r for r in json.loads(out.read_text())["rows"] if "float16 features" in r["group"]]
    assert groups["float32"] == []
    assert [r["impl"] for r in groups["float16"]] == ["x converted to float32 first",
                                                      "float16 x read by the first layer"]
    assert all(r["seconds"] > 0 for r in groups["float16"])


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_bench_step_on_cuda_without_a_gpu_is_one_sentence(dataset, capsys):
    assert cli(["bench", "step", str(dataset), *TINY, "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["salientpp bench: error: --device cuda was asked for but torch sees no CUDA "
                                        "GPU; use --device cpu"], err


def test_bench_step_refuses_a_typed_dataset_in_one_sentence(tmp_path, capsys):
    path = save_dataset(typed_dataset()[0], tmp_path / "typed")
    assert cli(["bench", "step", str(path), *TINY]) == 2
    assert one_sentence(capsys) == (
        f"salientpp bench: error: {path} is a typed graph (3 node types, 5 relations) and typed graphs are not "
        "supported by bench step yet; use a homogeneous dataset")
