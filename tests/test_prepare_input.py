"""``salientpp prepare`` on awkward and bad input (issue "Reliability round 2"): edge lists with
comments, commas, tabs, gzip and byte-order marks are read; extra columns, ragged lines, bad or
huge ids, corrupt archives, impossible counts, sparse ids, repeated or overlapping splits and
featureless graphs are either handled or refused in one sentence (exit code 2, no traceback, no
output directory and no temporary sibling left)."""
from __future__ import annotations

import bz2
import gzip
import io
import json
import os
import re
import signal
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import one_sentence, typed_dataset
from salientpp.cli import main
from salientpp.data.format import load_dataset, save_dataset
from salientpp.data.importers import ImportOptions, load_source
from salientpp.errors import InputError
from salientpp.io import file_checksum

# ---- helpers -------------------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def refused(tmp_path: Path, capsys, args: list[str], *expected: str) -> str:
    """Run ``salientpp prepare ARGS... tmp_path/out``; assert exit code 2, one sentence on one
    line of stderr holding ``expected``, and nothing written under ``tmp_path``."""
    before = snapshot(tmp_path)
    out = tmp_path / "out"
    assert main(["prepare", *args, str(out)]) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.startswith("salientpp prepare: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "Traceback" not in captured.out
    # One sentence: no full stop followed by a new capitalised sentence.
    assert not re.search(r"[.!?] +[A-Z]", err.replace("e.g.", "eg")), err
    for text in expected:
        assert text in err, (text, err)
    assert not out.exists()
    assert snapshot(tmp_path) == before  # no output, no temporary sibling, inputs untouched
    return err


def edge_set(rowptr: np.ndarray, col: np.ndarray) -> set[tuple[int, int]]:
    return {(u, int(v)) for u in range(rowptr.shape[0] - 1) for v in col[rowptr[u]:rowptr[u + 1]]}


def symmetric(pairs) -> set[tuple[int, int]]:
    edges = {(u, v) for u, v in pairs if u != v}
    return edges | {(v, u) for u, v in edges}


def write(path: Path, data: str | bytes) -> str:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return f"edgelist:{path}"


SQUARE = [(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)]


# ---- 1, 2: what an edge list may look like ---------------------------------------------------

def test_two_columns_with_comments_commas_tabs_and_crlf_are_parsed_per_line(tmp_path):
    text = ("# SNAP-style header\n#FromNodeId\tToNodeId\n\n0 1\n1,2\r\n2\t3  # trailing comment\n"
            "   3 ,\t0\n\n# the end\n0 2")  # no final line end
    dataset = load_source(write(tmp_path / "g.txt", text), ImportOptions(num_features=2))
    assert dataset.num_nodes == 4
    assert edge_set(dataset.rowptr, dataset.col) == symmetric(SQUARE)


def test_a_gzip_edge_list_is_read_by_its_magic_bytes_whatever_its_name(tmp_path, capsys):
    text = "# gz\n" + "".join(f"{u}\t{v}\n" for u, v in SQUARE)
    source = write(tmp_path / "edges.txt", gzip.compress(text.encode()))  # no .gz suffix
    assert main(["prepare", source, str(tmp_path / "out"), "--num-features", "2"]) == 0
    loaded = load_dataset(tmp_path / "out")
    assert edge_set(loaded.rowptr, loaded.col) == symmetric(SQUARE)
    assert loaded.input_id is None


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-8-sig", "utf-32"])
def test_text_with_a_byte_order_mark_is_decoded(tmp_path, encoding):
    text = "# naïve comment\n" + "".join(f"{u},{v}\n" for u, v in SQUARE)
    data = text.encode(encoding)
    if encoding == "utf-16-be":
        data = b"\xfe\xff" + data
    dataset = load_source(write(tmp_path / "g.txt", data), ImportOptions(num_features=2))
    assert edge_set(dataset.rowptr, dataset.col) == symmetric(SQUARE)


def test_non_ascii_bytes_in_comments_are_ignored(tmp_path):
    dataset = load_source(write(tmp_path / "g.txt", "# Müller\n".encode("latin-1") + b"0 1\n1 2\n"),
                          ImportOptions(num_features=2))
    assert edge_set(dataset.rowptr, dataset.col) == symmetric([(0, 1), (1, 2)])


def test_a_large_edge_list_is_parsed_exactly(tmp_path, monkeypatch):
    """Random ids of every length in small blocks: block boundaries cut lines anywhere."""
    import salientpp.data.edgelist as edgelist
    rng = np.random.default_rng(0)
    edges = rng.integers(0, 10 ** rng.integers(1, 19, (3000, 2)))
    edges[5] = (2**63 - 1, 0)
    separators = (" ", ",", "\t")
    text = "# header\n" + "".join(f"{u}{separators[i % 3]}{v}\n" for i, (u, v) in enumerate(edges))
    for block in (13, 4096):
        monkeypatch.setattr(edgelist, "_BLOCK_BYTES", block)
        parsed = edgelist._read_edgelist(Path(write(tmp_path / "g.txt", text).removeprefix("edgelist:")))
        np.testing.assert_array_equal(parsed, edges.T)


@pytest.mark.parametrize("text, expected", [
    ("0 1 5\n1 2 7\n", ["line 1 ", "3 columns", "edge weights", "are not supported", "awk '{print $1, $2}'"]),
    ("# weighted\n0,1,0.5\n1,2,0.25\n", ["line 2 ", "edge weights", "cut -d, -f1,2"]),
    ("0 1\n1 2\n2 3 1\n", ["line 3 ", "has 3 columns", "line 1 has 2"]),
    ("0 1\n\n5\n", ["line 3 ", "has 1 column ", "'5'"]),
    ("7\n0 1\n", ["line 1 ", "holds one node id", "two"]),
    ("0 1\n1 1.5\n", ["line 2 ", "'1.5'", "not an integer node id"]),
    ("source,target\n0,1\n", ["line 1 ", "'source'", "'#'"]),
    ("0 1\n1 -4\n", ["line 2 ", "negative node id -4"]),
    ("0 1\n# big\n1 9223372036854775808\n", ["line 3 ", "9223372036854775808", "not below 2**63"]),
    ("0 1\n1 123456789012345678901234567890\n", ["line 2 ", "not below 2**63"]),
    ("# only a comment\n\n", ["holds no edges"]),
    ("", ["holds no edges"]),
], ids=["weighted", "weighted_csv", "ragged_3", "ragged_1", "one_column", "float", "header", "negative",
        "id_2_63", "id_huge", "comments_only", "empty"])
def test_a_malformed_edge_list_is_refused_naming_the_line(tmp_path, capsys, text, expected):
    refused(tmp_path, capsys, [write(tmp_path / "g.txt", text)], *expected)


@pytest.mark.parametrize("data, expected", [
    ("0 1\n1 2\n".encode("utf-16-le"), ["NUL bytes", "not ASCII/UTF-8 text", "iconv"]),
    ("0 1\n1 2é\n".encode("latin-1"), ["line 2 ", "'2\\xe9'", "not UTF-8", "iconv -f LATIN1 -t UTF-8"]),
    ("0 1\n1 2é\n".encode("utf-8"), ["line 2 ", "'2é', which is not an integer node id"]),
    (b"\xff\xfe" + "0 1\n".encode("utf-16-le") + b"\x00\xd8", ["byte-order mark", "not valid utf-16", "iconv"]),
    (gzip.compress(b"0 1\n1 2\n" * 1000)[:-30], ["truncated or corrupt gzip file"]),
    (gzip.compress(b"0 1\n1 2\n")[:2] + b"garbage", ["truncated or corrupt gzip file"]),
    (bz2.compress(b"0 1\n"), ["bzip2-compressed", "bunzip2"]),
    (b"\x01\x02" * 700_000, ["longer than 1 MiB", "line 1 "]),
], ids=["utf16_without_bom", "latin1", "utf8_letter", "bad_utf16", "truncated_gzip", "corrupt_gzip", "bzip2", "binary"])
def test_an_edge_list_in_another_encoding_or_a_corrupt_archive_is_refused(tmp_path, capsys, data, expected):
    refused(tmp_path, capsys, [write(tmp_path / "g.txt", data)], *expected)


# ---- 3, 6: ids that are huge or sparse ---------------------------------------------------------

def test_sparse_ids_are_compacted_and_the_input_ids_kept(tmp_path, capsys):
    source = write(tmp_path / "g.txt", "0 1\n1 1000000000\n")
    assert main(["prepare", source, str(tmp_path / "out"), "--num-features", "3"]) == 0
    assert "input_id.npy" in capsys.readouterr().out
    loaded = load_dataset(tmp_path / "out")
    assert loaded.num_nodes == 3 and loaded.x.shape == (3, 3)
    np.testing.assert_array_equal(loaded.input_id, [0, 1, 1_000_000_000])
    assert edge_set(loaded.rowptr, loaded.col) == symmetric([(0, 1), (1, 2)])
    assert json.loads((tmp_path / "out" / "meta.json").read_text())["files"]["input_id"]["shape"] == [3]


def test_ids_of_which_half_or_more_occur_are_kept(tmp_path):
    dataset = load_source(write(tmp_path / "g.txt", "0 1\n1 3\n"), ImportOptions(num_features=2))
    assert dataset.num_nodes == 4 and dataset.input_id is None


def test_sparse_ids_next_to_an_npy_file_are_read_as_indices_into_it(tmp_path, capsys):
    np.save(tmp_path / "y.npy", np.array([0, 1, 0]))
    refused(tmp_path, capsys, [write(tmp_path / "g.txt", "0 1\n1 1000000000\n"), "--labels", str(tmp_path / "y.npy")],
            "mentions node 1000000000", "3 nodes (one per label in")


def test_sparse_ids_that_cannot_be_compacted_are_refused_by_the_memory_estimate(tmp_path, capsys):
    for name, ids in (("tr", [0]), ("va", [1]), ("te", [1_000_000_000])):
        np.save(tmp_path / f"{name}.npy", np.array(ids))
    refused(tmp_path, capsys, [write(tmp_path / "g.txt", "0 1\n1 1000000000\n"),
                               *(f"--{s}-idx={tmp_path / n}.npy" for s, n in (("train", "tr"), ("valid", "va"),
                                                                              ("test", "te")))],
            "1,000,000,001 nodes (the largest id 1,000,000,000 plus one)", "of memory", "renumber the nodes densely")


def test_a_huge_num_nodes_is_refused_before_any_allocation(tmp_path, capsys):
    refused(tmp_path, capsys, [write(tmp_path / "g.txt", "0 1\n"), "--num-nodes", str(10**12)],
            "1,000,000,000,000 nodes (--num-nodes", "pass a smaller --num-nodes")


# ---- 4: npz archives ----------------------------------------------------------------------------

def small_npz(path: Path, compressed: bool = True, **changes) -> Path:
    rng = np.random.default_rng(0)
    arrays = dict(edge_index=rng.integers(0, 20, (2, 40)), x=rng.standard_normal((20, 3)).astype(np.float32),
                  y=rng.integers(0, 2, 20), train_idx=np.arange(5), val_idx=np.arange(5, 8), test_idx=np.arange(8, 20))
    arrays.update(changes)
    (np.savez_compressed if compressed else np.savez)(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


@pytest.mark.parametrize("cut", [0.2, 0.5, 0.8, 0.97])
def test_a_truncated_npz_is_refused(tmp_path, capsys, cut):
    path = small_npz(tmp_path / "d.npz", compressed=cut < 0.5)
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * cut)])
    refused(tmp_path, capsys, [f"npz:{path}"], str(path), "npz archive")


def test_no_damage_to_an_npz_gives_a_traceback(tmp_path):
    """Truncations and flipped bytes everywhere: each one loads or raises InputError."""
    path = small_npz(tmp_path / "d.npz")
    data = path.read_bytes()
    for i in range(0, len(data), max(1, len(data) // 60)):
        for damaged in (data[:i], data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]):
            path.write_bytes(damaged)
            try:
                load_source(f"npz:{path}")
            except InputError as exc:
                assert "\n" not in str(exc)


def test_a_corrupt_compressed_member_is_refused(tmp_path, capsys):
    path = small_npz(tmp_path / "d.npz")
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
        info = archive.getinfo("x.npy")
    local = info.header_offset  # the local header's name and extra lengths are at +26 and +28
    start = local + 30 + int.from_bytes(data[local + 26:local + 28], "little") + \
        int.from_bytes(data[local + 28:local + 30], "little")
    middle = start + info.compress_size // 2
    data[middle:middle + 8] = bytes(b ^ 0xFF for b in data[middle:middle + 8])  # inside x's deflate stream
    path.write_bytes(bytes(data))
    refused(tmp_path, capsys, [f"npz:{path}"], "truncated or corrupt npz archive")


def test_a_text_file_given_as_npz_is_not_called_pickled(tmp_path, capsys):
    path = tmp_path / "edges.txt"
    path.write_text("0 1\n1 2\n")
    err = refused(tmp_path, capsys, [f"npz:{path}"], "is not an npz archive", "numpy.savez")
    assert "pickle" not in err


def test_an_npy_file_given_as_npz_is_refused(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros(3))
    refused(tmp_path, capsys, [f"npz:{tmp_path / 'x.npy'}"], "single .npy array, not an npz archive")


def test_an_npz_with_object_arrays_is_refused_without_unpickling(tmp_path, capsys):
    path = small_npz(tmp_path / "d.npz", y=np.array([{"a": 1}] * 20, dtype=object))
    refused(tmp_path, capsys, [f"npz:{path}"], "pickled (object) arrays")


def test_boolean_split_masks_in_an_npz_are_accepted(tmp_path):
    mask = np.zeros(20, dtype=bool)
    path = small_npz(tmp_path / "d.npz", train_idx=None, train_mask=mask | (np.arange(20) < 4),
                     val_idx=(np.arange(20) >= 4) & (np.arange(20) < 6))
    dataset = load_source(f"npz:{path}")
    np.testing.assert_array_equal(dataset.train_idx, [0, 1, 2, 3])
    np.testing.assert_array_equal(dataset.valid_idx, [4, 5])


# ---- an input path that is no regular file -------------------------------------------------------

def _not_a_file(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "in.npy"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "broken link":
        path.symlink_to(tmp_path / "nowhere")
    return path


@pytest.mark.parametrize("kind, expected", [
    ("directory", "is a directory, not a regular file"),
    ("fifo", "is a named pipe (FIFO), not a regular file"),
    ("link to /dev/zero", "is a character device, not a regular file"),
    ("broken link", "is a symbolic link to"),
    ("absent", "does not exist"),
])
@pytest.mark.parametrize("role", ["npz", "edgelist", "labels"])
def test_an_input_that_is_no_regular_file_is_refused_saying_what_it_is(tmp_path, capsys, kind, expected, role):
    path = _not_a_file(tmp_path, kind)
    args = {"npz": [f"npz:{path}"], "edgelist": [f"edgelist:{path}"],
            "labels": [write(tmp_path / "g.txt", "0 1\n"), "--labels", str(path)]}[role]
    what = {"npz": "npz file", "edgelist": "edge list", "labels": "labels file"}[role]
    handler = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("the command opened the named pipe and blocked"))
    signal.alarm(60)
    try:
        err = refused(tmp_path, capsys, args, f"{what} {path} {expected}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, handler)
    assert kind == "absent" or f"{path} does not exist" not in err


# ---- 5, 8: counts and features --------------------------------------------------------------------

@pytest.mark.parametrize("option, value, expected", [
    ("--num-classes", "0", "--num-classes must be a positive count, got 0"),
    ("--num-features", "-1", "--num-features must be at least 1, got -1"),
    ("--num-features", "0", ("to train on a learned embedding alone, pass --num-features 1 and train with "
                             "--embedding-dim D --no-features")),
    ("--num-nodes", "0", "--num-nodes must be a positive count, got 0"),
    ("--num-nodes", "-5", "--num-nodes must be a positive count, got -5"),
])
def test_non_positive_counts_are_refused_before_reading_the_input(tmp_path, capsys, option, value, expected):
    # The edge list does not exist: the count is refused first.
    refused(tmp_path, capsys, [f"edgelist:{tmp_path / 'absent.txt'}", option, value], expected)


def test_features_without_columns_are_refused(tmp_path, capsys):
    path = small_npz(tmp_path / "d.npz", x=np.zeros((20, 0), dtype=np.float32))
    refused(tmp_path, capsys, [f"npz:{path}"], "have no columns", "at least one feature column is needed",
            "--embedding-dim D --no-features")


# ---- 7: splits ----------------------------------------------------------------------------------

def edgelist_with_splits(tmp_path: Path, train, valid, test) -> list[str]:
    write(tmp_path / "g.txt", "".join(f"{u} {v}\n" for u, v in SQUARE))
    args = [f"edgelist:{tmp_path / 'g.txt'}", "--num-features", "2"]
    for name, ids in (("train", train), ("valid", valid), ("test", test)):
        np.save(tmp_path / f"{name}.npy", np.array(ids, dtype=np.int64))
        args += [f"--{name}-idx", str(tmp_path / f"{name}.npy")]
    return args


def test_repeated_training_ids_are_refused_at_prepare(tmp_path, capsys):
    refused(tmp_path, capsys, edgelist_with_splits(tmp_path, [0, 1, 0], [2], [3]), "train_idx of",
            "holds node 0 more than once", "numpy.unique")


def test_repeated_ids_in_an_npz_split_are_refused(tmp_path, capsys):
    path = small_npz(tmp_path / "d.npz", test_idx=np.array([9, 8, 9, 10]))
    refused(tmp_path, capsys, [f"npz:{path}"], "test_idx of", "holds node 9 more than once")


def test_overlapping_splits_are_refused_naming_both_and_an_example(tmp_path, capsys):
    refused(tmp_path, capsys, edgelist_with_splits(tmp_path, [0, 1], [2], [3, 1]),
            "the train and test splits of", "share 1 node id such as 1")


def test_partition_refuses_a_hand_made_dataset_with_repeated_ids(tmp_path, capsys):
    dataset = load_source(f"npz:{small_npz(tmp_path / 'd.npz')}")
    d = save_dataset(dataset, tmp_path / "dataset")
    train = np.array([0, 1, 1, 2], dtype=np.int64)
    np.save(d / "train_idx.npy", train)
    meta = json.loads((d / "meta.json").read_text())
    meta["files"]["train_idx"].update(shape=[4], checksum=file_checksum(d / "train_idx.npy"))
    (d / "meta.json").write_text(json.dumps(meta))
    before = snapshot(tmp_path)
    assert main(["partition", str(d), str(tmp_path / "parts"), "--parts", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds node 1 more than once" in err and "re-partition" not in err, err
    assert snapshot(tmp_path) == before


# ---- typed graphs -------------------------------------------------------------------------------

def test_prepare_writes_a_typed_source_and_refuses_a_link_split_without_a_known_relation(tmp_path, capsys,
                                                                                           monkeypatch):
    typed, _ = typed_dataset()
    monkeypatch.setattr("salientpp.cli.prepare.load_source", lambda source, options: typed)
    relations = ", ".join(str(r) for r in typed.schema.relations)
    assert main(["prepare", "synthetic:tiny", str(tmp_path / "typed"), "--link-split", "0.8,0.1,0.1"]) == 2
    assert one_sentence(capsys) == (
        "salientpp prepare: error: synthetic:tiny has 5 relations, so link prediction needs the one whose edges to "
        f"hold out; name it with --link-relation, one of {relations}")
    assert main(["prepare", "synthetic:tiny", str(tmp_path / "typed"), "--link-split", "0.8,0.1,0.1",
                 "--link-relation", "author__reads__paper"]) == 2
    assert one_sentence(capsys) == (f"salientpp prepare: error: unknown relation author__reads__paper; the graph's "
                                    f"relations are {relations}")
    assert main(["prepare", "synthetic:tiny", str(tmp_path / "typed"), "--link-relation", "writes"]) == 2
    assert "--link-relation names the relation of --link-split, which is not given" in one_sentence(capsys)
    assert not (tmp_path / "typed").exists()
    assert main(["prepare", "synthetic:tiny", str(tmp_path / "typed")]) == 0
    assert "54 nodes, 244 directed edges of 3 types and 5 relations (features, labels and splits of the paper nodes)" \
        in capsys.readouterr().out
    back = load_dataset(tmp_path / "typed")
    assert back.schema == typed.schema and np.array_equal(back.edge_rel, typed.edge_rel)
    assert np.array_equal(back.features["inst"], typed.features["inst"])
