"""Bad and hostile input (issue #7): truncated, garbled or lying files, checksums that do not
match, ids out of range, NaN/Inf features, existing outputs, through ``prepare``, ``partition``,
``simulate`` and ``analyze``. Every case: exit code 2, one line on stderr naming the file or
partition at fault, no output and no temporary created, inputs and old outputs byte-identical."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from salientpp.cache import load_plan
from salientpp.cli import main
from salientpp.data.format import save_dataset
from salientpp.errors import MESSAGE_CHARS, SHOWN_CHARS, InputError, shown
from salientpp.io import file_checksum
from salientpp.partition import load_partitioned
from conftest import exit_code

SIMULATE = ["--fanouts", "5", "--batch-size", "64", "--epochs", "1", "--policies", "degree", "--replication", "0"]
ANALYZE = ["--fanouts", "5", "--batch-size", "64", "--policy", "vip", "--replication", "0.1"]


# ---- helpers -------------------------------------------------------------------------------

def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (``None`` for a directory)."""
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def assert_refused(capsys, command: str, expected: list[str]) -> None:
    err = capsys.readouterr().err
    assert err.startswith(f"salientpp {command}: error: ") and err.count("\n") == 1, err
    for text in expected:
        assert text in err, (text, err)


def npy(d: Path, key: str) -> Path:
    return d / f"{key}.npy"


def read_meta(d: Path) -> dict:
    return json.loads((d / "meta.json").read_text())


def write_meta(d: Path, change: Callable[[dict], None]) -> str:
    meta = read_meta(d)
    change(meta)
    (d / "meta.json").write_text(json.dumps(meta))
    return "meta.json"


def truncate(d: Path, key: str) -> str:
    data = npy(d, key).read_bytes()
    npy(d, key).write_bytes(data[:len(data) // 2])
    return f"{key}.npy"


def garble_header(d: Path, key: str) -> str:
    data = bytearray(npy(d, key).read_bytes())
    data[12:60] = b"}{ not a header )(" * 2 + b"x" * 12
    npy(d, key).write_bytes(bytes(data))
    return f"{key}.npy"


def flip_byte(d: Path, key: str) -> str:
    """Flip a low mantissa/value bit inside the last element: shape and dtype still agree."""
    data = bytearray(npy(d, key).read_bytes())
    data[-7] ^= 0x04
    npy(d, key).write_bytes(bytes(data))
    return f"{key}.npy"


def replace(d: Path, key: str, change: Callable[[np.ndarray], np.ndarray]) -> str:
    """Save ``change(array)`` over the file and leave meta.json alone (meta.json now lies)."""
    np.save(npy(d, key), change(np.load(npy(d, key))))
    return f"{key}.npy"


def edit(d: Path, key: str, change: Callable[[np.ndarray], np.ndarray | None]) -> str:
    """Change the array (in place, or by returning a new one) and update its meta.json entry,
    so that only the semantic checks, not the checksum, can tell."""
    array = np.load(npy(d, key))
    changed = change(array)
    array = array if changed is None else changed
    np.save(npy(d, key), array)
    write_meta(d, lambda meta: meta["files"][key].update(dtype=str(array.dtype), shape=list(array.shape),
                                                          checksum=file_checksum(npy(d, key))))
    return key  # messages name it as rowptr.npy, part_1/x.npy or "col of <directory>"


def overwrite(d: Path, name: str, text: str) -> str:
    (d / name).write_text(text)
    return name


def first_owned(d: Path, k: int) -> int:
    return int(np.load(d / "offsets.npy")[k])


def set_at(index, value) -> Callable[[np.ndarray], None]:
    def change(array: np.ndarray) -> None:
        array[index] = value
    return change


def save_npz_as_npy(d: Path, key: str) -> str:
    array = np.load(npy(d, key))
    with open(npy(d, key), "wb") as f:
        np.savez(f, array=array)
    return f"{key}.npy"


def save_object_array(d: Path, key: str) -> str:
    np.save(npy(d, key), np.array([{"payload": "pickled"}], dtype=object), allow_pickle=True)
    return f"{key}.npy"


# ---- a partitioned directory (tiny, 2 parts of 1000 nodes, 32 features, 8 classes) -----------

def _unlabel_first_training_node(d: Path) -> list[str]:
    train = np.load(npy(d, "part_0/train_idx"))
    edit(d, "part_0/y", set_at(int(train[0]) - first_owned(d, 0), -1))
    return ["part_0/train_idx.npy", "unlabelled", str(train[0])]


# name -> corrupt(d) returning the texts the message must contain (file names first).
PART_CASES: dict[str, Callable[[Path], list[str]]] = {
    # files that are damaged or disagree with meta.json
    "truncated": lambda d: [truncate(d, "part_1/x"), "not a readable .npy file"],
    "garbage_header": lambda d: [garble_header(d, "rowptr"), "not a readable .npy file"],
    "npz_under_npy_name": lambda d: [save_npz_as_npy(d, "part_0/y"), ".npz archive"],
    "pickled_object_array": lambda d: [save_object_array(d, "part_0/test_idx"), "not a readable .npy file"],
    "other_dtype": lambda d: [replace(d, "part_1/x", lambda a: a.astype(np.float16)), "meta.json says float32"],
    "forbidden_dtype": lambda d: [replace(d, "col", lambda a: a.astype(np.int32)), "holds int32 values",
                                  "needs int64"],
    "other_shape": lambda d: [replace(d, "part_1/train_idx", lambda a: a[:-1]), "meta.json says"],
    "meta_wrong_shape": lambda d: [write_meta(d, lambda m: m["files"]["part_0/y"].update(shape=[999])),
                                   "part_0/y.npy", "meta.json says int64 [999]"],
    "meta_lies_about_width": lambda d: [write_meta(d, lambda m: m.update(num_features=31)),
                                        "part_0/x.npy", "gives 31 float32 features"],
    "meta_lies_about_dtype": lambda d: [write_meta(d, lambda m: m.update(feature_dtype="float16")),
                                        "part_0/x.npy", "gives 32 float16 features"],
    "meta_lies_about_nodes": lambda d: [write_meta(d, lambda m: m.update(num_nodes=2001)), "num_nodes", "2000"],
    "meta_forgets_a_file": lambda d: [write_meta(d, lambda m: m["files"].pop("part_1/y")), "part_1/y.npy",
                                      "does not list"],
    "meta_malformed_entry": lambda d: [write_meta(d, lambda m: m["files"].update(orig_id={"dtype": 5})),
                                       "orig_id.npy", "lacks a valid"],
    "meta_not_json": lambda d: [overwrite(d, "meta.json", "{not json"), "not valid JSON"],
    "meta_nested_too_deep": lambda d: [overwrite(d, "meta.json", "[" * 100_000), "not valid JSON"],
    "meta_wrong_kind": lambda d: [write_meta(d, lambda m: m.update(kind="salientpp-dataset")),
                                  "is a 'salientpp-dataset' directory"],
    "checksum_part_x": lambda d: [flip_byte(d, "part_1/x"), "checksum"],
    "checksum_col": lambda d: [flip_byte(d, "col"), "checksum"],
    "consistent_wrong_dtype": lambda d: [edit(d, "rowptr", lambda a: a.astype(np.float64)), "holds float64 values",
                                         "needs int64"],
    # arrays that are well-formed files but wrong
    "col_out_of_range": lambda d: [edit(d, "col", set_at(5, 2007)), "col of", "outside [0, 2000)"],
    "col_negative": lambda d: [edit(d, "col", set_at(0, -1)), "col of", "outside [0, 2000)"],
    "rowptr_not_monotone": lambda d: [edit(d, "rowptr", set_at(10, 10**6)), "rowptr of", "decreases at node 10"],
    "offsets_not_a_book": lambda d: [edit(d, "offsets", set_at(1, 2001)), "offsets.npy"],
    "offsets_shifted": lambda d: [f"is corrupt: offsets.npy gives partition 0 {first_owned(d, 1) + 1} ids but "
                                  f"part_0/x.npy holds {first_owned(d, 1)} rows",
                                  edit(d, "offsets", set_at(1, first_owned(d, 1) + 1))],
    "orig_id_not_a_permutation": lambda d: [edit(d, "orig_id", set_at(1, np.load(npy(d, "orig_id"))[0])),
                                            "orig_id.npy", "permutation"],
    "split_out_of_range": lambda d: [edit(d, "part_1/train_idx", set_at(-1, 2005)), "outside", "2005"],
    "split_not_owned": lambda d: [edit(d, "part_1/valid_idx", set_at(0, first_owned(d, 1) - 1)),
                                  "outside", str(first_owned(d, 1) - 1)],
    "split_duplicate": lambda d: [edit(d, "part_0/test_idx", set_at(1, np.load(npy(d, "part_0/test_idx"))[0])),
                                  "not sorted without duplicates"],
    "split_unlabelled": _unlabel_first_training_node,
    "label_out_of_range": lambda d: [edit(d, "part_1/y", set_at(0, 99)), "outside [-1, 8)"],
    "nan_feature": lambda d: [edit(d, "part_1/x", set_at((7, 3), np.nan)), "NaN or infinite",
                              f"global id {first_owned(d, 1) + 7} (partition 1)"],
    "inf_feature": lambda d: [edit(d, "part_0/x", set_at((0, 0), np.inf)), "NaN or infinite",
                              "global id 0 (partition 0)"],
}

@pytest.fixture
def parts_copy(tiny_partitions, tmp_path) -> Path:
    d = tmp_path / "parts"
    # Other tests may have left cache plans in the shared fixture; analyze must start without.
    shutil.copytree(tiny_partitions[0] / "p2", d, ignore=shutil.ignore_patterns("cache"))
    return d


def test_a_pristine_copy_passes_every_check_and_command(parts_copy, tmp_path, capsys):
    data = load_partitioned(parts_copy)
    data.check_graph()
    data.check_parts()
    assert main(["simulate", str(parts_copy), *SIMULATE, "--json", str(tmp_path / "sim.json")]) == 0
    assert main(["analyze", str(parts_copy), *ANALYZE, "--out", str(tmp_path / "plan")]) == 0


@pytest.mark.parametrize("case", PART_CASES)
def test_simulate_refuses_a_corrupt_partitioned_dir(parts_copy, tmp_path, capsys, case):
    expected = PART_CASES[case](parts_copy)
    before = snapshot(tmp_path)
    assert main(["simulate", str(parts_copy), *SIMULATE, "--json", str(tmp_path / "sim.json")]) == 2
    assert_refused(capsys, "simulate", expected)
    assert snapshot(tmp_path) == before  # no JSON, no temporary, the input untouched


@pytest.mark.parametrize("case", PART_CASES)
def test_analyze_refuses_a_corrupt_partitioned_dir(parts_copy, tmp_path, capsys, case):
    expected = PART_CASES[case](parts_copy)
    before = snapshot(tmp_path)
    assert main(["analyze", str(parts_copy), *ANALYZE, "--out", str(tmp_path / "plan")]) == 2
    assert_refused(capsys, "analyze", expected)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("case", PART_CASES)
def test_analyze_with_the_default_plan_dir_leaves_a_corrupt_dir_untouched(parts_copy, tmp_path, capsys, case):
    expected = PART_CASES[case](parts_copy)
    before = snapshot(tmp_path)
    assert main(["analyze", str(parts_copy), *ANALYZE]) == 2
    assert_refused(capsys, "analyze", expected)
    assert snapshot(tmp_path) == before


def test_checks_can_be_skipped_only_on_request(parts_copy):
    flip_byte(parts_copy, "part_1/x")
    edit(parts_copy, "col", set_at(0, 5000))
    edit(parts_copy, "part_0/y", set_at(3, -7))
    unchecked = load_partitioned(parts_copy, verify=False, check=False)
    unchecked.part(0), unchecked.part(1)  # neither the checksums nor the values are looked at
    with pytest.raises(InputError, match="col of"):
        unchecked.check_graph()
    with pytest.raises(InputError, match=r"part_0/y\.npy holds labels outside"):
        unchecked.check_part(0)
    with pytest.raises(InputError, match="col of"):
        load_partitioned(parts_copy, verify=False)
    verified = load_partitioned(parts_copy, check=False)
    with pytest.raises(InputError, match=r"part_1/x\.npy does not match its checksum"):
        verified.part(1)


def test_an_empty_training_split_is_left_to_the_trainer(parts_copy):
    edit(parts_copy, "part_1/train_idx", lambda a: a[:0])
    assert load_partitioned(parts_copy).part(1).train_idx.shape == (0,)


# ---- cache plans -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plan_dir(tiny_partitions, tmp_path_factory) -> Path:
    plan = tmp_path_factory.mktemp("hostile-plan") / "plan"
    assert main(["analyze", str(tiny_partitions[0] / "p2"), *ANALYZE, "--out", str(plan)]) == 0
    return plan


@pytest.mark.parametrize("corrupt, message", [
    (lambda p: edit(p, "part_1/device_ids", set_at(0, 2000)), r"outside \[0, 2000\)"),
    (lambda p: edit(p, "part_1/device_ids", set_at(1, np.load(npy(p, "part_1/device_ids"))[0])), "repeat an id"),
    (lambda p: edit(p, "part_1/owned_order", set_at(0, 1)), "not a permutation"),
    (lambda p: edit(p, "part_1/owned_order", set_at(0, -1)), "outside"),
    (lambda p: write_meta(p, lambda m: m["parts"][1].update(num_device_owned=10**6)), "on the device"),
    (lambda p: write_meta(p, lambda m: m.pop("parts")), "incomplete"),
    (lambda p: flip_byte(p, "part_1/owned_order"), "checksum"),
    (lambda p: write_meta(p, lambda m: (m.pop("format"), m.update(salientpp_version="0.1.0"))),
     r"written by salientpp 0\.1\.0 in a layout this version cannot read; delete it \(rm -r .*plan\)"),
], ids=["id_out_of_range", "id_twice", "order_repeats", "order_negative", "gpu_rows", "no_parts", "checksum",
        "older_layout"])
def test_corrupt_cache_plans_are_refused(plan_dir, tmp_path, corrupt, message):
    plan = tmp_path / "plan"
    shutil.copytree(plan_dir, plan)
    load_plan(plan, 1)
    corrupt(plan)
    with pytest.raises(InputError, match=message):
        load_plan(plan, 1)


# ---- a dataset directory through `partition` ----------------------------------------------

@pytest.fixture(scope="module")
def dataset_dir(tiny_partitions, tmp_path_factory) -> Path:
    return save_dataset(tiny_partitions[1], tmp_path_factory.mktemp("hostile") / "dataset")


DATASET_CASES: dict[str, Callable[[Path], list[str]]] = {
    "truncated": lambda d: [truncate(d, "x"), "not a readable .npy file"],
    "garbage_header": lambda d: [garble_header(d, "col"), "not a readable .npy file"],
    "other_dtype": lambda d: [replace(d, "x", lambda a: a.astype(np.float16)), "meta.json says float32"],
    "forbidden_dtype": lambda d: [replace(d, "y", lambda a: a.astype(np.int32)), "holds int32 values"],
    "other_shape": lambda d: [replace(d, "train_idx", lambda a: a[:-1]), "meta.json says"],
    "meta_wrong_shape": lambda d: [write_meta(d, lambda m: m["files"]["x"].update(shape=[7, 32])),
                                   "x.npy", "meta.json says float32 [7, 32]"],
    "checksum": lambda d: [flip_byte(d, "x"), "checksum"],
    "meta_not_json": lambda d: [overwrite(d, "meta.json", "\x00\xff"), "not valid JSON"],
    "meta_wrong_kind": lambda d: [write_meta(d, lambda m: m.update(kind="salientpp-partitioned")),
                                  "is a 'salientpp-partitioned' directory"],
    "col_out_of_range": lambda d: [edit(d, "col", set_at(-1, 2000)), "col of the dataset directory",
                                   "outside [0, 2000)"],
    "rowptr_not_monotone": lambda d: [edit(d, "rowptr", set_at(3, 0)), "rowptr of the dataset directory",
                                      "decreases"],
    "split_out_of_range": lambda d: [edit(d, "valid_idx", set_at(-1, 4000)), "valid_idx of the dataset directory",
                                     "4000"],
    "split_unlabelled": lambda d: [edit(d, "y", set_at(np.load(npy(d, "test_idx"))[0], -1)), "test_idx of",
                                   "unlabelled"],
    "nan_feature": lambda d: [edit(d, "x", set_at((11, 0), np.nan)), "features (x) of the dataset directory",
                              "node 11"],
    "inf_feature": lambda d: [edit(d, "x", set_at((0, 5), np.inf)), "NaN or infinite", "node 0"],
}


@pytest.mark.parametrize("case", DATASET_CASES)
def test_partition_refuses_a_corrupt_dataset_dir(dataset_dir, tmp_path, capsys, case):
    d = tmp_path / "dataset"
    shutil.copytree(dataset_dir, d)
    expected = DATASET_CASES[case](d)
    before = snapshot(tmp_path)
    assert main(["partition", str(d), str(tmp_path / "parts"), "--parts", "2"]) == 2
    assert_refused(capsys, "partition", [str(d), *expected])
    assert snapshot(tmp_path) == before


def test_partition_refuses_more_parts_than_nodes(dataset_dir, tmp_path, capsys):
    assert main(["partition", str(dataset_dir), str(tmp_path / "parts"), "--parts", "2001"]) == 2
    assert_refused(capsys, "partition", ["2000 nodes into 2001 parts"])
    assert not list(tmp_path.iterdir())


# ---- `prepare` from a bad npz ---------------------------------------------------------------

def npz_source(tmp_path: Path, **changes) -> str:
    """``npz:PATH`` of a small valid graph, with ``changes`` to its arrays (``None`` drops a key)."""
    rng = np.random.default_rng(0)
    arrays = dict(edge_index=rng.integers(0, 20, (2, 40)), x=rng.standard_normal((20, 3)).astype(np.float32),
                  y=rng.integers(0, 2, 20), train_idx=np.arange(5), val_idx=np.arange(5, 8), test_idx=np.arange(8, 20))
    arrays.update(changes)
    path = tmp_path / "bad.npz"
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return f"npz:{path}"


def _with(array: np.ndarray, index, value) -> np.ndarray:
    array = array.copy()
    array[index] = value
    return array


_X = np.random.default_rng(1).standard_normal((20, 3)).astype(np.float32)


@pytest.mark.parametrize("case, expected, names_file", [
    (dict(x=_with(_X, (4, 1), np.nan)), "NaN or infinite values (first in the row of node 4)", True),
    (dict(x=_with(_X, (0, 0), -np.inf)), "NaN or infinite values (first in the row of node 0)", True),
    (dict(train_idx=np.array([0, 50])), "outside [0, 20) such as 50", True),
    (dict(test_idx=np.array([-3, 9])), "outside [0, 20) such as -3", True),
    (dict(y=_with(np.zeros(20, dtype=np.int64), 2, -1)), "unlabelled nodes (label -1) such as 2", True),
    (dict(train_idx=np.array([], dtype=np.int64)), "training split of", True),
    (dict(y=np.zeros(19, dtype=np.int64)), "one label per node", True),
    (dict(test_idx=None), "lacks the key", True),
    (dict(edge_index=np.array([[0, 1], [1, 99]])), "must lie in [0, 20)", False),
    (dict(edge_index=np.zeros((3, 4), dtype=np.int64)), "shape [2, E]", False),
    (dict(x=_X + 1j * _X), "are complex (complex64); give real features", True),
], ids=["nan", "inf", "train_out_of_range", "test_negative", "unlabelled", "empty_train", "labels_short",
        "missing_key", "edge_out_of_range", "edge_shape", "complex_features"])
def test_prepare_refuses_a_bad_npz(tmp_path, capsys, case, expected, names_file):
    source = npz_source(tmp_path, **case)
    before = snapshot(tmp_path)
    assert main(["prepare", source, str(tmp_path / "out")]) == 2
    assert_refused(capsys, "prepare", [expected] + ([source.removeprefix("npz:")] if names_file else []))
    assert snapshot(tmp_path) == before


# ---- existing outputs are never touched, failures leave nothing ------------------------------

def _existing(path: Path, is_dir: bool) -> Path:
    if is_dir:
        path.mkdir()
        (path / "keep.txt").write_text("mine")
    else:
        path.write_text("mine")
    return path


@pytest.mark.parametrize("command", ["prepare", "partition", "analyze", "simulate-json", "simulate-plot"])
def test_an_existing_output_is_refused_and_left_byte_identical(command, tiny_partitions, dataset_dir, tmp_path,
                                                              capsys):
    parts = str(tiny_partitions[0] / "p2")
    is_dir = command in ("prepare", "partition", "analyze")
    out = _existing(tmp_path / ("out.png" if command == "simulate-plot" else "out"), is_dir)
    args = {"prepare": ["prepare", npz_source(tmp_path), str(out)],
            "partition": ["partition", str(dataset_dir), str(out), "--parts", "2"],
            "analyze": ["analyze", parts, *ANALYZE, "--out", str(out)],
            "simulate-json": ["simulate", parts, *SIMULATE, "--json", str(out)],
            "simulate-plot": ["simulate", parts, *SIMULATE, "--plot", str(out)]}[command]
    before = snapshot(tmp_path)
    assert main(args) == 2
    assert_refused(capsys, args[0], [str(out), "already exists"])
    assert snapshot(tmp_path) == before


def test_partition_failing_midway_leaves_no_output_and_no_temporary(dataset_dir, tmp_path, monkeypatch, capsys):
    from salientpp.partition import assemble
    real_save = assemble.save_array

    def disk_full_at_partition_1(directory, name, array):
        if name.startswith("part_1/"):
            raise OSError(28, "No space left on device")
        return real_save(directory, name, array)

    monkeypatch.setattr(assemble, "save_array", disk_full_at_partition_1)
    assert main(["partition", str(dataset_dir), str(tmp_path / "parts"), "--parts", "2"]) == 2
    assert_refused(capsys, "partition", [str(tmp_path / "parts"), "no space left on device"])
    assert not list(tmp_path.iterdir())  # neither parts/ nor .parts.tmp-*


def test_partition_running_out_of_disk_while_streaming_col_leaves_no_output(dataset_dir, tmp_path, monkeypatch,
                                                                             capsys):
    from salientpp.io import NpyWriter

    def full(self, first_row, rows):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(NpyWriter, "write", full)
    assert main(["partition", str(dataset_dir), str(tmp_path / "parts"), "--parts", "2", "--method", "multilevel"]) == 2
    assert_refused(capsys, "partition", [str(tmp_path / "parts"), "no space left on device"])
    assert not list(tmp_path.iterdir())


def test_simulate_failing_while_writing_the_plot_leaves_no_plot(parts_copy, tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    from salientpp.cli import simulate as cli_simulate

    def half_a_plot(result, path):
        Path(path).write_bytes(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli_simulate, "plot_volume", half_a_plot)
    assert main(["simulate", str(parts_copy), *SIMULATE, "--json", str(tmp_path / "sim.json"),
                 "--plot", str(tmp_path / "sim.png")]) == 2
    last = capsys.readouterr().err.split("\r")[-1]  # after the progress bars
    assert last.startswith("salientpp simulate: error: cannot write ") and "no space left on device" in last
    assert (tmp_path / "sim.json").is_file()  # complete before the plot started
    assert not (tmp_path / "sim.png").exists() and not list(tmp_path.glob(".sim.png.tmp-*"))


@pytest.mark.parametrize("command", ["simulate", "analyze"])
def test_a_partition_found_corrupt_after_another_was_used_leaves_nothing(command, parts_copy, tmp_path, capsys):
    flip_byte(parts_copy, "part_1/x")
    out = tmp_path / ("sim.json" if command == "simulate" else "plan")
    before = snapshot(tmp_path)
    flag = "--json" if command == "simulate" else "--out"
    assert main([command, str(parts_copy), *(SIMULATE if command == "simulate" else ANALYZE), flag, str(out)]) == 2
    assert_refused(capsys, command, ["part_1/x.npy", "checksum"])
    assert snapshot(tmp_path) == before


# ---- outputs of every command stay out of what salientpp manages ------------------------------

@pytest.mark.parametrize("argv, expected", [
    (["analyze", "{P}", *ANALYZE, "--out", "{P}/x"], "--out {P}/x lies in the partitioned directory"),
    (["analyze", "{P}", *ANALYZE, "--out", "{D}/x"], "--out {D}/x lies in the dataset directory"),
    (["analyze", "{P}", *ANALYZE, "--name", "../../x"], "--name '../../x' is not a plain directory name"),
    (["analyze", "{P}", *ANALYZE, "--name", "{T}/abs"], "is not a plain directory name"),
    (["analyze", "{P}", *ANALYZE, "--name", "a", "--out", "{T}/plan"], "give one"),
    (["simulate", "{P}", "--fanouts", "5", "--batch-size", "64", "--json", "{P}/s.json"], "--json {P}/s.json lies in"),
    (["simulate", "{P}", "--fanouts", "5", "--batch-size", "64", "--plot", "{C}/s.png"],
     "lies in the checkpoint directory"),
    (["prepare", "synthetic:tiny", "{P}/inner"], "the output directory {P}/inner lies in the partitioned directory"),
    (["partition", "{D}", "{D}/p3", "--parts", "2"], "the output directory {D}/p3 lies in the dataset directory"),
    (["predict", "{P}", "--checkpoint", "{C}", "--out", "{C}/pred"], "--out {C}/pred lies in the checkpoint"),
    (["predict", "{P}", "--checkpoint", "{C}", "--out", "{P}/pred"], "--out {P}/pred lies in the partitioned"),
], ids=["analyze_into_partition", "analyze_into_dataset", "analyze_name_up", "analyze_name_absolute",
        "analyze_name_and_out", "simulate_json", "simulate_plot", "prepare_into_partition", "partition_into_dataset",
        "predict_into_checkpoints", "predict_into_partition"])
def test_no_command_writes_into_a_directory_salientpp_manages(tiny_partitions, dataset_dir, tmp_path, capsys, argv,
                                                              expected):
    part = tmp_path / "p2"
    shutil.copytree(tiny_partitions[0] / "p2", part)
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "last.pt").write_bytes(b"a checkpoint")
    paths = {"P": str(part), "D": str(dataset_dir), "C": str(ck), "T": str(tmp_path)}
    before = snapshot(tmp_path), snapshot(dataset_dir)
    assert main([arg.format(**paths) for arg in argv]) == 2
    assert_refused(capsys, argv[0], [expected.format(**paths)])
    assert (snapshot(tmp_path), snapshot(dataset_dir)) == before


# ---- numbers past their type are bounded where they are parsed ---------------------------------

HUGE = "1" + "0" * 400


@pytest.mark.parametrize("argv, expected", [
    (["prepare", "synthetic:tiny,num_nodes=1e30", "{T}/out"], "num_nodes must be at most 2^40"),
    (["prepare", "synthetic:tiny,num_features=1e15", "{T}/out"], "num_features must be at most 2^40"),
    (["prepare", "synthetic:small,num_nodes=100000000000", "{T}/out"], "GiB of memory even out of core"),
    (["prepare", "synthetic:tiny", "{T}/out", "--seed", "-1"], "a seed must be an integer in [0, 2^63), got -1"),
    (["prepare", "synthetic:tiny", "{T}/out", "--seed", str(2**64)], "a seed must be an integer in [0, 2^63)"),
    (["analyze", "{P}", *ANALYZE, "--seed", "-1", "--out", "{T}/out"], "a seed must be an integer in [0, 2^63)"),
    (["analyze", "{P}", *ANALYZE, "--memory-limit", HUGE, "--out", "{T}/out"], "is not a size of at most 2^63"),
    (["analyze", "{P}", "--fanouts", "5", "--batch-size", "64", "--device-cache-bytes", HUGE, "--host-cache-bytes",
      "0", "--out", "{T}/out"], "bytes is more than 2^63 - 1 bytes"),
    (["simulate", "{P}", "--fanouts", f"{2**63},5", "--batch-size", "64"], f"fanout {2**63} is invalid"),
    (["train", "{P}", "--fanouts", "99999999999999999999,5", "--layers", "2"], "fanout 99999999999999999999 is"),
], ids=["synthetic_nodes", "synthetic_features", "synthetic_memory", "prepare_seed_negative", "prepare_seed_huge",
        "analyze_seed", "memory_limit", "cache_bytes", "simulate_fanout", "train_fanout"])
def test_numbers_past_their_type_are_one_sentence(tiny_partitions, tmp_path, capsys, no_ranks, argv, expected):
    part = tmp_path / "p2"
    shutil.copytree(tiny_partitions[0] / "p2", part)
    before = snapshot(tmp_path)
    assert exit_code([arg.format(P=part, T=tmp_path) for arg in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err and len(err) < 400, err
    assert snapshot(tmp_path) == before  # no plan directory named after a fanout, no output


@pytest.mark.parametrize("argv, expected", [
    (["analyze", "{P}", *ANALYZE, "--num-negatives", "3", "--out", "{T}/out"],
     "--num-negatives 3 applies only with --task link; drop it, or use --task link"),
    (["analyze", "{P}", *ANALYZE, "--negative-sampling", "per-source", "--out", "{T}/out"],
     "--negative-sampling per-source applies only with --task link"),
    (["analyze", "{P}", *ANALYZE, "--eval-batch-size", "32", "--out", "{T}/out"],
     "--eval-batch-size 32 applies only with --eval-fanouts"),
    (["analyze", "{P}", *ANALYZE, "--eval-splits", "test", "--out", "{T}/out"],
     "--eval-splits test applies only with --eval-fanouts"),
    (["analyze", "{P}", "--fanouts", "5", "--batch-size", "64", "--policy", "degree", "--vip-method", "cavity",
      "--out", "{T}/out"], "--vip-method chooses the estimate of the vip policy, and degree does not use one"),
    (["simulate", "{P}", "--fanouts", "5", "--batch-size", "64", "--policies", "degree,halo", "--vip-method",
      "exact"], "and degree, halo do not use one"),
    (["prepare", "synthetic:tiny", "{T}/out", "--features", "{T}/x.npy"], "/x.npy applies only with edgelist: sources"),
    (["prepare", "synthetic:tiny", "{T}/out", "--root", "{T}"], "applies only with ogb: or ogb-lsc: sources"),
    (["prepare", "synthetic:tiny", "{T}/out", "--self-loops"], "--self-loops applies only with npz: or edgelist:"),
    (["prepare", "synthetic:tiny", "{T}/out", "--num-features", "8"], "--num-features 8 applies only with edgelist: sources"),
])
def test_an_option_the_command_would_ignore_is_refused(tiny_partitions, tmp_path, capsys, argv, expected):
    part = tmp_path / "p2"
    shutil.copytree(tiny_partitions[0] / "p2", part)
    before = snapshot(tmp_path)
    assert exit_code([arg.format(P=part, T=tmp_path) for arg in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err, err
    assert snapshot(tmp_path) == before


def test_an_option_the_command_uses_is_accepted_with_what_it_needs(tiny_partitions, tmp_path):
    part = str(tiny_partitions[0] / "p2")
    assert exit_code(["simulate", part, "--fanouts", "5", "--batch-size", "64", "--policies", "vip,degree",
                      "--vip-method", "cavity", "--eval-fanouts", "5", "--eval-splits", "test", "--eval-weight", "0.5",
                      "--replication", "0,0.1", "--epochs", "1"]) == 0


# ---- paths and values echoed in a message stay one short line ------------------------------------

HOSTILE_NAMES = {
    "newline": ("no\nsuch", "no\\nsuch"),  # (the name, how the message shows it)
    "escape": ("no\x1b[2Jsuch", "no\\x1b[2Jsuch"),  # would clear the terminal
    "long": ("a" * 100_000, "a…a"),  # a name no file system takes
    "deep": ("a/" * 1_500, "a/a/…/a/a"),  # 3,000 characters: a path the system could still look up
}


@pytest.mark.parametrize("kind", HOSTILE_NAMES)
@pytest.mark.parametrize("argv", [
    ["train", "{X}"], ["prepare", "npz:{X}", "{T}/out"], ["prepare", "synthetic:tiny", "{X}/out"],
    ["partition", "{X}", "{T}/out", "--parts", "2"], ["partition", "{D}", "{X}/out", "--parts", "2"],
], ids=["train", "prepare_source", "prepare_output", "partition_input", "partition_output"])
def test_a_path_that_would_break_the_line_is_shown_escaped_and_shortened(dataset_dir, tmp_path, capsys, no_ranks,
                                                                         argv, kind):
    name, expected = HOSTILE_NAMES[kind]
    before = snapshot(tmp_path)
    assert main([arg.format(X=tmp_path / name, T=tmp_path, D=dataset_dir) for arg in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"salientpp {argv[0]}: error: ") and err.count("\n") == 1 and err.endswith("\n"), err
    assert "\x1b" not in err and len(err) < 1_000 and expected.split("…")[0] in err, err
    if "…" in expected:
        assert "…" in err and err.index("…") < 400, err  # shortened where the path is, not at the end
    assert snapshot(tmp_path) == before


def test_an_option_value_that_would_break_the_line_is_shown_escaped_and_shortened(tiny_partitions, capsys):
    for value, expected in (("1\n\x1b[2J", "1\\n\\x1b[2J"), ("x" * 100_000, "…")):
        assert exit_code(["train", str(tiny_partitions[0] / "p2"), "--lr", value]) == 2
        err = capsys.readouterr().err
        assert err.startswith("salientpp train: error: argument --lr: invalid") and err.count("\n") == 1, err
        assert "\x1b" not in err and len(err) < 1_000 and expected in err and err.endswith("--help)\n"), err


def test_shown_escapes_control_characters_and_shortens_long_runs_in_the_middle():
    assert shown("a\tb\nc\x1b[2J\x7f\u2028d é") == "a\\tb\\nc\\x1b[2J\\x7f\\u2028d é"
    assert shown(shown("a\nb")) == shown("a\nb")  # what it wrote is shown as it is
    path = "/data/" + "x" * 1_000 + "/meta.json"
    assert len(shown(path)) == SHOWN_CHARS and shown(path).startswith("/data/x") and shown(path).endswith("x/meta.json")
    message = f"{path} is missing, so {path} is not a dataset directory; pass one"
    line = shown(message, MESSAGE_CHARS)  # each long path shortened, the words around them kept
    assert line.count("…") == 2 and line.endswith(" is not a dataset directory; pass one") and len(line) < 2 * SHOWN_CHARS + 60
    assert len(shown("word " * 1_000, MESSAGE_CHARS)) == MESSAGE_CHARS  # and the whole bounded
    assert shown(["a\n"]) == "['a\\n']"  # not a string: its repr


def _seeded_commands() -> list[list[str]]:
    """The words of every (sub)command that takes --seed, read off the parser."""
    from salientpp.cli import build_parser, parsers
    return [p.prog.split()[1:] for p in parsers(build_parser()) if "--seed" in p._option_string_actions]


@pytest.mark.parametrize("command", _seeded_commands(), ids=" ".join)
def test_a_seed_of_2_to_the_64_is_refused_by_every_command_that_takes_one(command, tiny_partitions, tmp_path, capsys,
                                                                          no_ranks):
    argv = [*command, "--seed", str(2**64)]
    if command == ["train"]:  # a TrainConfig field, checked with the others (the rest: argparse's type)
        argv = ["train", str(tiny_partitions[0] / "p2"), "--fanouts", "5", "--layers", "1", "--seed", str(2**64)]
    before = snapshot(tmp_path)
    assert exit_code(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "must be an integer in [0, 2^63)" in err and "18446744073709551616" in err, err
    assert snapshot(tmp_path) == before
