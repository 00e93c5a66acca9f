"""Synthetic graphs: determinism, CSR invariants, degree tails, communities, label signal, specs."""
from __future__ import annotations

import dataclasses

import numba
import numpy as np
import pytest
import scipy.sparse as sp

from salientpp.data.format import load_dataset, save_dataset
from salientpp.data.synthetic import (PRESETS, SyntheticConfig, generate, parse_spec, synthetic_dataset,
                                      write_synthetic)
from salientpp.errors import InputError

ARRAYS = ("rowptr", "col", "x", "y", "train_idx", "valid_idx", "test_idx")
# 20k nodes: enough for tail statistics, still ~0.1 s to generate.
MEDIUM = "tiny,num_nodes=20000,avg_degree=20,max_degree=1000,num_communities=40"


def _edge_rows(rowptr: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(rowptr.shape[0] - 1, dtype=np.int64), np.diff(rowptr))


def _ridge_accuracy(features: np.ndarray, y: np.ndarray, num_classes: int) -> float:
    """Held-out accuracy of a least-squares one-vs-all linear classifier (train/test halves)."""
    f = np.hstack([features.astype(np.float64), np.ones((features.shape[0], 1))])
    order = np.random.default_rng(0).permutation(f.shape[0])
    train, test = order[: f.shape[0] // 2], order[f.shape[0] // 2:]
    w = np.linalg.solve(f[train].T @ f[train] + 1e-2 * np.eye(f.shape[1]), f[train].T @ np.eye(num_classes)[y[train]])
    return float(np.mean((f[test] @ w).argmax(1) == y[test]))


def test_same_seed_gives_identical_arrays_and_another_seed_differs():
    a, b = generate(parse_spec("tiny,seed=5")), generate(parse_spec("tiny,seed=5"))
    c = generate(parse_spec("tiny,seed=6"))
    for name in ARRAYS:
        assert np.array_equal(getattr(a.dataset, name), getattr(b.dataset, name)), name
    assert np.array_equal(a.community, b.community)
    assert a.dataset.num_edges != c.dataset.num_edges or not np.array_equal(a.dataset.col, c.dataset.col)
    assert not np.array_equal(a.dataset.x, c.dataset.x)
    assert not np.array_equal(a.dataset.train_idx, c.dataset.train_idx)


def test_thread_count_does_not_change_the_graph():
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has a single thread here")
    config = parse_spec("tiny,seed=2")
    default = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        single = generate(config).dataset
    finally:
        numba.set_num_threads(default)
    multi = generate(config).dataset
    assert np.array_equal(single.rowptr, multi.rowptr) and np.array_equal(single.col, multi.col)


@pytest.mark.parametrize("spec", ["tiny", "tiny,intra_fraction=1,num_communities=3", "tiny,num_nodes=50,avg_degree=30,max_degree=49"])
def test_csr_is_symmetric_sorted_without_duplicates_or_self_loops(spec):
    d = generate(parse_spec(spec)).dataset
    assert d.rowptr.dtype == np.int64 and d.col.dtype == np.int64
    row = _edge_rows(d.rowptr)
    assert not np.any(row == d.col), "self loop"
    same_row = row[1:] == row[:-1]
    assert np.all(d.col[1:][same_row] > d.col[:-1][same_row]), "row not strictly increasing (unsorted or duplicate)"
    n = d.num_nodes
    assert np.array_equal(np.sort(row * n + d.col), np.sort(d.col * n + row)), "edge set differs from its transpose"


def test_average_degree_is_met():
    # The generator draws extra edges until nnz / N is within 1% of avg_degree.
    for spec, target in (("tiny", PRESETS["tiny"].avg_degree), (MEDIUM, 20.0)):
        d = generate(parse_spec(spec)).dataset
        assert 0.99 * target <= d.num_edges / d.num_nodes <= 1.01 * target, spec


def _hill_tail_index(degree: np.ndarray, fraction: float = 0.01) -> float:
    """Hill estimator of alpha in P(D > d) ~ d^-alpha from the top ``fraction`` of degrees."""
    top = np.sort(degree)[::-1]
    k = int(degree.shape[0] * fraction)
    return float(1.0 / np.mean(np.log(top[:k] / top[k])))


def test_degrees_are_heavy_tailed_unlike_equal_weights():
    heavy = generate(parse_spec(MEDIUM)).dataset.degree()
    # Control: degree_exponent=20 makes weights nearly equal, i.e. an almost Poisson graph.
    light = generate(parse_spec(MEDIUM + ",degree_exponent=20")).dataset.degree()
    # Poisson(20) has p99 / median ~ 1.6 and max / mean ~ 2; the Pareto weights (gamma = 2.5)
    # put ~1% of the nodes above 10x the median, so both ratios must be far larger.
    assert np.percentile(light, 99) / np.median(light) < 2.0
    assert np.percentile(heavy, 99) / np.median(heavy) > 5.0
    assert heavy.max() / heavy.mean() > 20.0
    # The true tail index is gamma - 1 = 1.5; the cap (max_degree) and Poisson noise bias the
    # Hill estimate upward, but it stays far from the light-tailed control's (> 10).
    assert 1.0 < _hill_tail_index(heavy) < 3.0
    assert _hill_tail_index(light) > 8.0


def test_most_edges_stay_inside_communities():
    g = generate(parse_spec(MEDIUM))
    row = _edge_rows(g.dataset.rowptr)
    intra = float(np.mean(g.community[row] == g.community[g.dataset.col]))
    # intra_fraction = 0.85 of the draws stay inside; inter draws land inside by chance
    # (~1/40 here); merging duplicate draws removes slightly more intra edges. Without
    # communities in the draws (intra_fraction=0) only the chance term is left.
    assert 0.80 <= intra <= 0.90
    g0 = generate(parse_spec(MEDIUM + ",intra_fraction=0"))
    row0 = _edge_rows(g0.dataset.rowptr)
    assert float(np.mean(g0.community[row0] == g0.community[g0.dataset.col])) < 0.15


def test_labels_follow_communities():
    config = parse_spec(MEDIUM)
    g = generate(config)
    counts = np.zeros((config.num_communities, config.num_classes), dtype=np.int64)
    np.add.at(counts, (g.community, g.dataset.y), 1)
    agree = counts.max(1).sum() / g.dataset.num_nodes
    # A node keeps its community's class with probability purity, and a random relabel hits it
    # again with probability 1/K: expected purity + (1 - purity) / K = 0.9125; the binomial
    # standard deviation over 20k nodes is 0.002, so 0.02 is a wide margin.
    expected = config.label_purity + (1 - config.label_purity) / config.num_classes
    assert abs(agree - expected) < 0.02
    assert set(np.unique(g.dataset.y)) == set(range(config.num_classes))


def test_neighbour_features_beat_own_features_clearly():
    d = generate(parse_spec("tiny")).dataset
    adj = sp.csr_matrix((np.ones(d.num_edges), d.col, d.rowptr), shape=(d.num_nodes, d.num_nodes))
    mean_nbr = (adj @ d.x.astype(np.float64)) / np.maximum(d.degree(), 1)[:, None]
    own = _ridge_accuracy(d.x, d.y, d.num_classes)
    both = _ridge_accuracy(np.hstack([d.x, mean_nbr]), d.y, d.num_classes)
    # Measured on seeds 0-1: own ~0.60, with neighbours ~0.82. With 1000 test nodes the
    # standard error of an accuracy is <= 0.016, so the bounds below are > 5 errors away:
    # features alone are informative but weak, and neighbours add at least 10 points.
    assert 0.40 < own < 0.75
    assert both > own + 0.10


def test_split_fractions_and_disjointness():
    d = generate(parse_spec("tiny")).dataset
    n = d.num_nodes
    sizes = [d.train_idx.shape[0], d.valid_idx.shape[0], d.test_idx.shape[0]]
    assert sizes == [round(0.08 * n), round(0.02 * n), round(0.90 * n)]
    union = np.concatenate([d.train_idx, d.valid_idx, d.test_idx])
    assert np.unique(union).shape[0] == union.shape[0]
    for idx in (d.train_idx, d.valid_idx, d.test_idx):
        assert np.all(np.diff(idx) > 0)


def test_spec_overrides_and_dataset_metadata_round_trip(tmp_path):
    config = parse_spec(" tiny , seed = 3,num_nodes=3e3,feature_noise=0.4,feature_dtype=float16")
    assert config == dataclasses.replace(PRESETS["tiny"], seed=3, num_nodes=3000, feature_noise=0.4,
                                         feature_dtype="float16")
    assert parse_spec("tiny") == PRESETS["tiny"]
    spec = "tiny,seed=3,feature_dtype=float16"
    d = synthetic_dataset(spec)
    assert d.source == f"synthetic:{spec}" and d.x.dtype == np.float16
    assert d.extra_meta["synthetic"] == dataclasses.asdict(parse_spec(spec))
    loaded = load_dataset(save_dataset(d, tmp_path / "ds"), verify=True)
    assert loaded.source == d.source and loaded.extra_meta == d.extra_meta
    assert np.array_equal(loaded.col, d.col)


@pytest.mark.parametrize("spec, words", [
    ("", "preset"),
    ("huge", "tiny, small, products"),
    ("tiny,seed", "key=value"),
    ("tiny,=3", "key=value"),
    ("tiny,colour=red", "num_nodes"),
    ("tiny,seed=abc", "seed"),
    ("tiny,num_nodes=2.5", "num_nodes"),
    ("tiny,seed=1,seed=2", "twice"),
    ("tiny,intra_fraction=1.5", "intra_fraction"),
    ("tiny,avg_degree=nan", "avg_degree"),
    ("tiny,feature_dtype=int8", "feature_dtype"),
    ("tiny,seed=-1", "seed"),
    ("tiny,num_nodes=\uff16\uff10\uff10", "num_nodes"),   # fullwidth digits, which int() would read
    ("tiny,num_nodes=6_00", "num_nodes"),
    ("tiny,feature_noise=0_5", "feature_noise"),
    ("tiny,num_nodes=1", "num_nodes"),
    ("tiny,max_degree=5", "max_degree"),
    ("tiny,num_classes=1", "num_classes"),
    ("tiny,train_fraction=0.5,test_fraction=0.9", "sum"),
    ("tiny,train_fraction=0", "training node"),
    ("tiny,degree_exponent=1", "degree_exponent"),
    ("products,num_nodes=1e10", "memory"),
    ("tiny,venues=1", "num_nodes"),
    ("igbh,venues=2", "venues"),
    ("igbh,author_features=-1", "author_features"),
    ("igbh,topics_per_paper=5000", "topic edges per paper"),
    ("igbh,fos_ratio=0", "ratio"),
    ("igbh,relation_intra=2", "relation_intra"),
])
def test_bad_specs_raise_one_sentence(spec, words):
    with pytest.raises(InputError) as info:
        synthetic_dataset(spec)
    message = str(info.value)
    assert words in message and "\n" not in message


def test_every_field_has_a_preset_value_of_its_declared_type():
    # parse_spec converts values with the field's annotation; presets must agree with it.
    assert isinstance(PRESETS["igbh"], SyntheticConfig)
    for name, preset in PRESETS.items():
        preset.validate()
        for f in dataclasses.fields(preset):
            assert type(getattr(preset, f.name)).__name__ == f.type, (name, f.name)


# ---- out of core ---------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["tiny", MEDIUM + ",feature_dtype=float16", "tiny,num_tasks=3,unknown_fraction=0.2"])
def test_out_of_core_generation_writes_the_arrays_of_the_in_memory_one(tmp_path, spec):
    # buckets of ~5,000 directed edges: the 24k to 400k edges pass through 5 to 80 bucket files
    written = write_synthetic(spec, tmp_path / "out", bucket_keys=5000)
    expected = synthetic_dataset(spec)
    loaded = load_dataset(tmp_path / "out", verify=True, validate=True)
    for name in ARRAYS:
        assert np.array_equal(np.asarray(getattr(loaded, name)), np.asarray(getattr(expected, name)),
                              equal_nan=loaded.y.dtype.kind == "f"), name
    assert loaded.source == written.source == f"synthetic:{spec}"
    assert loaded.extra_meta["synthetic"] == dataclasses.asdict(parse_spec(spec))
    assert not list((tmp_path / "out").glob(".edges-*"))  # the bucket files are gone


def test_prepare_generates_out_of_core_what_does_not_fit_in_memory(tmp_path, monkeypatch, capsys):
    from salientpp.cli import main, prepare

    monkeypatch.setattr(prepare, "fits_in_memory", lambda config: False)
    assert main(["prepare", "synthetic:tiny,seed=4", str(tmp_path / "d")]) == 0
    assert "out of core" in capsys.readouterr().out
    loaded, expected = load_dataset(tmp_path / "d"), synthetic_dataset("tiny,seed=4")
    assert all(np.array_equal(getattr(loaded, name), getattr(expected, name)) for name in ARRAYS)


# ---- homogeneous presets are the one-type case of the typed generator -------------------------

# sha256 of (name, dtype, bytes) of every array and of the communities, taken before the generator
# learnt typed graphs: the homogeneous presets must keep drawing exactly these graphs.
BEFORE_TYPED = {
    "tiny": "436a0a2f72c84553b9aa69bcd83657b0bf60c469dbb6caf85a19533e1a7c2ff4",
    "tiny,seed=7,num_nodes=3000,feature_dtype=float16":
        "ac254ccee92025485e451fafe22f8d8db84c9492a3f59d0579eca666a92573c0",
    "tiny,num_tasks=3,unknown_fraction=0.2": "efee0dc7b5f8ad1d128540d628714f57f2eb0d134a5ee93f97e4aedd47a5b321",
    "small,num_nodes=5000,max_degree=500": "c2bf224d04735b4fbf2264a3dd5b81f81994f27c8de5218a8cc0d7d6a25eba1b",
}


@pytest.mark.parametrize("spec", list(BEFORE_TYPED))
def test_homogeneous_presets_draw_the_same_arrays_as_before_typed_graphs(spec):
    import hashlib

    g = generate(parse_spec(spec))
    digest = hashlib.sha256()
    for name in ARRAYS:
        array = np.ascontiguousarray(getattr(g.dataset, name))
        digest.update(name.encode())
        digest.update(str(array.dtype).encode())
        digest.update(array.tobytes())
    digest.update(np.ascontiguousarray(g.community).tobytes())
    assert digest.hexdigest() == BEFORE_TYPED[spec]
    assert not g.dataset.is_typed and g.dataset.edge_rel.strides == (0,) and g.dataset.features == {}


# ---- the igbh preset (typed) ---------------------------------------------------------------------

IGBH_RELATIONS = ["paper__cites__paper", "paper__written_by__author", "author__rev_written_by__paper",
                  "author__affiliated_to__institute", "institute__rev_affiliated_to__author", "paper__topic__fos",
                  "fos__rev_topic__paper"]
VENUE_RELATIONS = ["paper__published__journal", "journal__rev_published__paper", "paper__venue__conference",
                   "conference__rev_venue__paper"]


@pytest.fixture(scope="module")
def igbh():
    return generate(parse_spec("igbh"))


def _typed_edges(d):
    """(row, col, relation) of every CSR entry of a typed dataset."""
    return _edge_rows(d.rowptr), np.asarray(d.col), np.asarray(d.edge_rel).astype(np.int64)


def test_igbh_has_the_types_relations_and_reverses_of_igbh(igbh):
    d, config = igbh.dataset, parse_spec("igbh")
    s = d.schema
    assert d.is_typed and s.node_types == ("paper", "author", "institute", "fos") and s.target == "paper"
    assert [str(r) for r in s.relations] == IGBH_RELATIONS
    papers = config.num_nodes
    # IGBH-small's ratios: 1.93 authors, 0.0148 institutes (at least one per community), 0.19 fos per paper
    assert s.num_nodes == (papers, round(1.926066 * papers), max(16, round(0.014751 * papers)),
                           round(0.190449 * papers))
    assert d.x.shape == (papers, 32) and d.y.shape == (papers,) and d.y.dtype == np.int64
    assert {t: f.shape for t, f in d.features.items()} == {"author": (s.num_nodes[1], 32),
                                                          "institute": (s.num_nodes[2], 16), "fos": (s.num_nodes[3], 16)}
    assert all(f.dtype == np.float32 and np.isfinite(f).all() for f in d.x_dict.values())
    for split in (d.train_idx, d.valid_idx, d.test_idx):
        assert split.min() >= 0 and split.max() < papers
    # entries per relation (with its reverse) within 1% of the target: 24 per paper from the citations,
    # 2 x 4.55 authors and 2 x 7.23 topics per paper, 2 x 0.85 institutes per author
    counts = np.bincount(d.edge_rel, minlength=s.num_relations)
    got = [counts[0], counts[1] + counts[2], counts[3] + counts[4], counts[5] + counts[6]]
    targets = [24 * papers, 2 * 4.553516 * papers, 2 * 0.846531 * s.num_nodes[1], 2 * 7.234122 * papers]
    for entries, target in zip(got, targets):
        assert 0.99 * target <= entries <= 1.01 * target


def test_igbh_csr_entries_join_the_types_of_their_relation_and_mirror_their_reverse(igbh):
    d = igbh.dataset
    s = d.schema
    row, col, rel = _typed_edges(d)
    types = s.type_of(np.arange(s.total_nodes))
    for r, relation in enumerate(s.relations):
        mine = rel == r
        # row v lists the in-neighbours u of v: u of the source type, v of the destination type
        assert np.all(types[col[mine]] == s.type_index(relation.src)), relation
        assert np.all(types[row[mine]] == s.type_index(relation.dst)), relation
    n = s.total_nodes
    forward = np.sort((row * s.num_relations + rel) * n + col)
    backward = np.sort((col * s.num_relations + np.asarray(s.reverse)[rel]) * n + row)
    assert np.array_equal(forward, backward)  # entry u (r) in row v <=> entry v (reverse r) in row u
    same_group = (row[1:] == row[:-1]) & (rel[1:] == rel[:-1])
    assert np.all(rel[1:][row[1:] == row[:-1]] >= rel[:-1][row[1:] == row[:-1]])  # grouped by relation
    assert np.all(col[1:][same_group] > col[:-1][same_group])  # sorted, no repeats
    assert not np.any(row == col)


def test_igbh_communities_hold_in_every_relation(igbh):
    d, config = igbh.dataset, parse_spec("igbh")
    row, col, rel = _typed_edges(d)
    same = igbh.community[row] == igbh.community[col]
    # destinations follow the source's community with probability relation_intra (0.9) or, for the
    # citations, intra_fraction (0.5), plus the 1/16 chance of an outside draw landing inside
    for r, relation in enumerate(d.schema.relations):
        intra = config.intra_fraction if relation.name == "cites" else config.relation_intra
        expected = intra + (1 - intra) / config.num_communities
        assert abs(float(same[rel == r].mean()) - expected) < 0.06, relation


def test_igbh_same_seed_gives_identical_arrays_and_another_seed_differs(igbh):
    again, other = generate(parse_spec("igbh")).dataset, generate(parse_spec("igbh,seed=1")).dataset
    d = igbh.dataset
    for name in ARRAYS + ("edge_rel",):
        assert np.array_equal(getattr(d, name), getattr(again, name)), name
    assert all(np.array_equal(d.features[t], again.features[t]) for t in d.features)
    assert not np.array_equal(d.features["author"], other.features["author"])
    assert not np.array_equal(d.col, other.col) or not np.array_equal(d.x, other.x)


def test_igbh_venues_add_journal_and_conference():
    d = generate(parse_spec("igbh,venues=1,num_nodes=1500,venue_features=4")).dataset
    s = d.schema
    assert s.node_types[4:] == ("journal", "conference")
    assert [str(r) for r in s.relations] == IGBH_RELATIONS + VENUE_RELATIONS
    assert d.features["journal"].shape[1] == d.features["conference"].shape[1] == 4
    counts = np.bincount(d.edge_rel, minlength=s.num_relations)
    assert counts[7] > 0.95 * 1500 and counts[9] > 0.9 * 1500  # about one venue of each kind per paper


def _mean_over(d, relation: str, features: np.ndarray) -> np.ndarray:
    """float64 [papers, F]: the mean of ``features`` over each paper's in-neighbours of ``relation``."""
    s = d.schema
    r = s.relation_index(relation)
    row, col, rel = _typed_edges(d)
    mine = rel == r
    first = s.offsets[s.type_index(s.relations[r].src)]
    adj = sp.csr_matrix((np.ones(int(mine.sum())), (row[mine], col[mine] - first)),
                        shape=(s.total_nodes, features.shape[0]))[:s.num_nodes[0]]
    return (adj @ features.astype(np.float64)) / np.maximum(np.asarray(adj.sum(1)).ravel(), 1)[:, None]


def test_authors_and_topics_make_papers_measurably_easier_to_classify_than_citations(igbh):
    # The cheap proxy of a typed GNN: a linear classifier on a paper's features and the mean features of
    # its neighbours of some relations. Measured on seeds 0-2: own ~0.41, with citations ~0.62, with
    # authors and topics too ~0.90; over 2,000 test papers the standard error is <= 0.011.
    d = igbh.dataset
    k = parse_spec("igbh").num_classes
    cites = np.hstack([d.x, _mean_over(d, "paper__cites__paper", d.x)])
    relations = np.hstack([cites, _mean_over(d, "author__rev_written_by__paper", d.features["author"]),
                           _mean_over(d, "fos__rev_topic__paper", d.features["fos"])])
    own, with_cites, with_all = (_ridge_accuracy(f, d.y, k) for f in (d.x, cites, relations))
    assert own < with_cites - 0.10
    assert with_all > with_cites + 0.15


# ---- typed presets out of core ------------------------------------------------------------------

def _directory_files(path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(path.iterdir())}


@pytest.mark.parametrize("spec", ["igbh,num_nodes=1500",
                                  "igbh,venues=1,num_nodes=1500,feature_dtype=float16,num_tasks=2,author_features=0",
                                  "tiny"])
def test_out_of_core_generation_writes_the_directory_that_save_dataset_writes_in_memory(tmp_path, spec):
    # buckets of 3,000 directed edges: the ~40k CSR entries of 1,500 papers and their ~3,200 other
    # nodes pass through a dozen bucket files per relation round
    write_synthetic(spec, tmp_path / "ooc", bucket_keys=3000)
    save_dataset(synthetic_dataset(spec), tmp_path / "mem")
    written, expected = _directory_files(tmp_path / "ooc"), _directory_files(tmp_path / "mem")
    assert list(written) == list(expected)
    assert [name for name in written if written[name] != expected[name]] == []  # meta.json included
    loaded = load_dataset(tmp_path / "ooc", verify=True, validate=True)
    if spec.startswith("igbh"):
        assert loaded.is_typed and loaded.edge_rel.strides == (1,)
        featureless = {"author"} if "author_features=0" in spec else set()  # no features, as ogbn-mag's authors
        assert set(loaded.features) == set(loaded.schema.node_types) - {"paper"} - featureless
        assert ("x_1.npy" in written) == (not featureless) and "x_2.npy" in written and "edge_rel.npy" in written


def test_prepare_picks_the_out_of_core_path_for_a_typed_preset_that_does_not_fit_in_memory(tmp_path, monkeypatch,
                                                                                            capsys):
    from salientpp.cli import main
    from salientpp.data import synthetic

    spec = "igbh,num_nodes=1500,seed=2"
    # room for the out-of-core generator (128 bytes per node of every type) but not for the in-memory one
    monkeypatch.setattr(synthetic, "_available_memory", lambda: synthetic._in_memory_bytes(parse_spec(spec)) - 1)
    assert main(["prepare", f"synthetic:{spec}", str(tmp_path / "d")]) == 0
    assert "generated out of core" in capsys.readouterr().out
    save_dataset(synthetic_dataset(spec), tmp_path / "mem")
    assert _directory_files(tmp_path / "d") == _directory_files(tmp_path / "mem")


def test_a_typed_graph_that_does_not_fit_even_out_of_core_is_refused_in_one_sentence(tmp_path, monkeypatch, capsys):
    from conftest import exit_code, one_sentence
    from salientpp.data import synthetic

    config = parse_spec("igbh,num_nodes=1500")
    total = config.schema().total_nodes
    monkeypatch.setattr(synthetic, "_available_memory", lambda: 128 * total - 1)  # one byte short of every type's nodes
    assert exit_code(["prepare", "synthetic:igbh,num_nodes=1500", str(tmp_path / "d")]) == 2
    message = one_sentence(capsys)
    assert "even out of core" in message and f"128 bytes per node of every type, {total:,} in all" in message
    assert "lower num_nodes" in message
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("spec", ["igbh,num_nodes=1e9", "small,num_nodes=4e9"])
def test_a_graph_whose_csr_sort_keys_would_overflow_is_refused_in_one_sentence(tmp_path, monkeypatch, capsys, spec):
    # (N * R + r) * N + c must stay below 2^63: 1e9 papers make ~3.1e9 nodes of 7 relations, and 4e9
    # nodes overflow with one relation; a machine with the memory for them must not wrap around
    from conftest import exit_code, one_sentence
    from salientpp.cli import prepare
    from salientpp.data import synthetic

    monkeypatch.setattr(prepare, "fits_in_memory", lambda config: False)
    monkeypatch.setattr(synthetic, "_available_memory", lambda: 2**62)
    monkeypatch.setattr(synthetic, "_model", lambda config: pytest.fail("refused before any array is built"))
    assert exit_code(["prepare", f"synthetic:{spec}", str(tmp_path / "d")]) == 2
    message = one_sentence(capsys)
    assert "too many for the int64 sort keys of its CSR" in message and "lower num_nodes" in message
    assert not (tmp_path / "d").exists()


def test_the_in_memory_estimate_counts_every_types_features_and_one_byte_of_edge_rel_per_entry():
    from salientpp.data import synthetic

    config = parse_spec("igbh,venues=1,num_nodes=100000,feature_dtype=float16")
    types, relations = config.layout()
    entries = sum(r.entries for r in relations)
    features = sum(2 * t.num_nodes * t.num_features for t in types)  # float16
    nodes = sum(t.num_nodes for t in types)
    assert synthetic._in_memory_bytes(config) == int(49 * entries + 96 * nodes + features)
    wider = dataclasses.replace(config, author_features=config.author_features + 10)
    assert synthetic._in_memory_bytes(wider) - synthetic._in_memory_bytes(config) == 2 * 10 * types[1].num_nodes
    homogeneous = parse_spec("small,num_nodes=100000")   # no edge_rel: 48 bytes per entry
    assert synthetic._in_memory_bytes(homogeneous) == int(48 * 20 * 100000 + 96 * 100000 + 4 * 100 * 100000)


# ---- the spec and prepare's options make one config ------------------------------------------

SMALL_IGBH = "igbh,num_nodes=400,max_degree=300,venues=1"


def _feature_dtypes(directory) -> dict[str, str]:
    import json

    meta = json.loads((directory / "meta.json").read_text())
    arrays = {f.stem: str(np.load(f, mmap_mode="r").dtype) for f in directory.glob("x*.npy")}
    return {**arrays, "meta": meta["feature_dtype"], "config": meta["synthetic"]["feature_dtype"]}


@pytest.mark.parametrize("out_of_core", [False, True])
@pytest.mark.parametrize("spec, flags", [("tiny,num_nodes=300,max_degree=100,feature_dtype=float16", []),
                                         ("tiny,num_nodes=300,max_degree=100", ["--feature-dtype", "float16"]),
                                         (SMALL_IGBH + ",feature_dtype=float16", []),
                                         (SMALL_IGBH, ["--feature-dtype", "float16"])])
def test_prepare_writes_float16_features_of_every_type_from_the_spec_or_the_option(tmp_path, monkeypatch, spec,
                                                                                  flags, out_of_core):
    from salientpp.cli import main, prepare

    if out_of_core:
        monkeypatch.setattr(prepare, "fits_in_memory", lambda config: False)
    assert main(["prepare", f"synthetic:{spec}", str(tmp_path / "d"), *flags]) == 0
    dtypes = _feature_dtypes(tmp_path / "d")
    assert len(dtypes) == 2 + (1 if spec.startswith("tiny") else 6)   # x.npy, or x.npy and x_1..x_5.npy
    assert set(dtypes.values()) == {"float16"}, dtypes


def test_a_spec_feature_dtype_that_the_option_contradicts_is_refused_in_one_sentence(tmp_path, capsys):
    from conftest import exit_code, one_sentence

    argv = ["prepare", "synthetic:tiny,feature_dtype=float32", str(tmp_path / "d"), "--feature-dtype", "float16"]
    assert exit_code(argv) == 2
    message = one_sentence(capsys)
    assert "--feature-dtype float16" in message and "feature_dtype=float32" in message
    assert not (tmp_path / "d").exists()


def test_a_feature_width_beyond_memory_is_refused_before_any_array_is_drawn(tmp_path, monkeypatch, capsys):
    # 2000 x 2^40 features fit neither in memory nor in one out-of-core chunk: refused up front,
    # not when the feature file is created after the graph was drawn
    from conftest import exit_code, one_sentence
    from salientpp.data import synthetic

    monkeypatch.setattr(synthetic, "_model", lambda config: pytest.fail("refused before any array is built"))
    assert exit_code(["prepare", f"synthetic:tiny,num_features={2**40}", str(tmp_path / "d")]) == 2
    message = one_sentence(capsys)
    assert "even out of core" in message and "chunk of features" in message and "feature widths" in message
    assert not (tmp_path / "d").exists()
