"""Shared fixtures: real small graphs from ../shared/datasets and tiny OGB raw layouts."""
from __future__ import annotations

import gzip
import os
import resource
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from salientpp._env import OMP_WAIT, set_defaults

# The tests call the `salientpp` command's main in this process, so this process starts as that
# command does: with OpenMP threads that wait passively, set before any test module loads torch
# (and its OpenMP runtime, which reads the variable once). The two pytest-xdist workers share
# CI's 2 cores, and a spinning thread of one holds a core the other needs: the gradcheck of
# test_model_ops.py took 55 s instead of 7 s on a busy machine.
set_defaults(OMP_WAIT)

SHARED_DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def cora_npz() -> Path:
    path = SHARED_DATASETS / "cora.npz"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path


def _write_csv_gz(path: Path, rows: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = rows.reshape(rows.shape[0], -1)
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(",".join(str(v) for v in row) + "\n")


def write_ogb_raw(root: Path, name: str, edge_index: np.ndarray, x: np.ndarray, y: np.ndarray,
                  splits: tuple[np.ndarray, np.ndarray, np.ndarray]) -> Path:
    """Write a node-property dataset in OGB's own on-disk layout under ``root``.

    CSV datasets (ogbn-products, ogbn-arxiv): raw/{edge,node-feat,node-label,num-node-list,
    num-edge-list}.csv.gz; binary ones (ogbn-papers100M): raw/data.npz and raw/node-label.npz
    (float labels, NaN = unlabelled). Splits: split/<split name>/{train,valid,test}.csv.gz.
    """
    import ogb.nodeproppred
    import pandas as pd

    info = pd.read_csv(Path(ogb.nodeproppred.__file__).parent / "master.csv", index_col=0,
                       keep_default_na=False)[name]
    folder = root / name.replace("-", "_")
    raw = folder / "raw"
    raw.mkdir(parents=True)
    if info["binary"] == "True":
        np.savez(raw / "data.npz", edge_index=edge_index, node_feat=x,
                 num_nodes_list=np.array([x.shape[0]]), num_edges_list=np.array([edge_index.shape[1]]))
        np.savez(raw / "node-label.npz", node_label=np.where(y >= 0, y, np.nan).astype(np.float32)[:, None])
    else:
        _write_csv_gz(raw / "edge.csv.gz", edge_index.T)
        _write_csv_gz(raw / "node-feat.csv.gz", x)
        _write_csv_gz(raw / "node-label.csv.gz", y)
        _write_csv_gz(raw / "num-node-list.csv.gz", np.array([x.shape[0]]))
        _write_csv_gz(raw / "num-edge-list.csv.gz", np.array([edge_index.shape[1]]))
    for split_name, ids in zip(("train", "valid", "test"), splits):
        _write_csv_gz(folder / "split" / info["split"] / f"{split_name}.csv.gz", ids)
    (folder / f"RELEASE_v{info['version']}.txt").write_text("written by the salientpp tests\n")
    return folder


@pytest.fixture
def ogb_raw_writer():
    """The :func:`write_ogb_raw` function, for tests that need OGB files on disk."""
    return write_ogb_raw


@pytest.fixture(scope="session")
def tiny_partitions(tmp_path_factory):
    """The ``tiny`` synthetic dataset partitioned with METIS into 1 and 2 parts.

    Returns ``(root, dataset)``: ``root / "p1"`` and ``root / "p2"`` are partitioned directories.
    """
    from salientpp.data.synthetic import synthetic_dataset
    from salientpp.partition.partitioner import partition_dataset

    root = tmp_path_factory.mktemp("tiny-partitions")
    dataset = synthetic_dataset("tiny")
    for k in (1, 2):
        partition_dataset(dataset, root / f"p{k}", k)
    return root, dataset


@pytest.fixture(scope="session")
def typed_partitions(tmp_path_factory):
    """:func:`typed_dataset` partitioned with METIS into 1, 2 and 4 parts, with a degree cache plan
    of six rows per tier (ids of every type, authors without features among them) for 2 and 4.

    Returns ``(root, dataset)``: ``root / "p{k}"`` the partitioned directories, ``root / "plan{k}"``
    the plans.
    """
    from salientpp.cache import Budget, PolicyContext, Workload, build_plans, save_plans
    from salientpp.partition import load_partitioned
    from salientpp.partition.partitioner import partition_dataset

    root = tmp_path_factory.mktemp("typed-partitions")
    dataset, _ = typed_dataset()
    for k in (1, 2, 4):
        partition_dataset(dataset, root / f"p{k}", k)
        if k > 1:
            data = load_partitioned(root / f"p{k}")
            rows = 6 * data.num_features * 4
            save_plans(build_plans(PolicyContext(data, (Workload((3, 3), 4),)), "degree",
                                   Budget(device_bytes=rows, host_bytes=rows), 0.5), root / f"plan{k}")
    return root, dataset


def refuse_ranks(monkeypatch, *starters: str) -> None:
    """Make the functions ``starters`` (dotted paths) that start ranks fail the test when called."""
    def refuse(*args, **kwargs):
        raise AssertionError("a rank was started")
    for starter in starters:
        monkeypatch.setattr(starter, refuse)


@pytest.fixture
def no_ranks(monkeypatch):
    """Fail the test if `salientpp train` would start any rank: the input must be refused before."""
    refuse_ranks(monkeypatch, "salientpp.train.run.launch", "salientpp.train.run.run_rank")


def exit_code(argv: list[str]) -> int:
    """``salientpp ARGV``'s exit code in this process: what ``main`` returns, or the code of the
    ``SystemExit`` an option's own type raised while the arguments were parsed."""
    from salientpp.cli import main
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def one_sentence(capsys) -> str:
    """What the command printed on stderr, checked to be one line and no traceback."""
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def fail_probe_in(monkeypatch, directory: Path, code: int) -> None:
    """``mkstemp`` in ``directory`` fails with ``code``, as on a read-only mount (root ignores chmod)."""
    real = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and Path(dir) == directory:
            raise OSError(code, os.strerror(code), str(Path(dir) / ".salientpp-probe-x"))
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


@contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """Writes past ``limit`` bytes of any file fail (EFBIG) as on a full disk: a short write,
    which numpy reports without an errno."""
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def typed_dataset(seed: int = 0):
    """A small typed :class:`~salientpp.data.format.Dataset` and the edges it was built from.

    Node types ``author`` (global ids 0..19, no features), ``paper`` (20..49, the target: 5
    features, 3 classes) and ``inst`` (50..53, 2 features); relations ``author-writes-paper``,
    ``paper-cites-paper`` (symmetric) and ``author-at-inst`` with their reverses. Returns the
    dataset and, per given relation (its triple), its edges in global ids, int64 ``[2, E]``."""
    from salientpp.data.csr import build_typed_csr
    from salientpp.data.format import Dataset
    from salientpp.data.schema import GraphSchema

    rng = np.random.default_rng(seed)
    schema = GraphSchema.with_reverses(("author", "paper", "inst"), (20, 30, 4),
                                       [("author", "writes", "paper"), ("paper", "cites", "paper"),
                                        ("author", "at", "inst")], "paper")
    given = {("author", "writes", "paper"): np.stack([rng.integers(0, 20, 60), 20 + rng.integers(0, 30, 60)]),
             ("paper", "cites", "paper"): 20 + rng.integers(0, 30, (2, 50)),
             ("author", "at", "inst"): np.stack([np.arange(20), 50 + rng.integers(0, 4, 20)])}
    edges = [given.get(r.key, np.empty((2, 0), dtype=np.int64)) for r in schema.relations]
    rowptr, col, edge_rel = build_typed_csr(edges, schema.reverse, schema.total_nodes)
    order = 20 + rng.permutation(30)
    dataset = Dataset(rowptr=rowptr, col=col, x=rng.standard_normal((30, 5)).astype(np.float32),
                      y=rng.integers(0, 3, 30), train_idx=np.sort(order[:10]), valid_idx=np.sort(order[10:15]),
                      test_idx=np.sort(order[15:]), source="typed-test", schema=schema, edge_rel=edge_rel,
                      features={"inst": rng.standard_normal((4, 2)).astype(np.float32)})
    dataset.validate()
    return dataset, given


def relations_into(schema, node_type: int) -> list[int]:
    """The indices of ``schema``'s relations whose destination is the type ``node_type`` (an index), in order."""
    name = schema.node_types[node_type]
    return [i for i, r in enumerate(schema.relations) if r.dst == name]


def typed_sample(seed: int = 0, num_seeds: int = 4, layers: int = 2, keep: float = 0.6):
    """A hand-built sampled batch of a small typed graph, as the typed sampler gives one, and the
    graph it was drawn from.

    The graph: papers (30, 5 features; the target), authors (20, 6 features) and fields (8, no
    features), with paper-cites-paper (symmetric), author-writes-paper and paper-has-field and
    their reverses. The "sample" is a random subset of the edges (each kept with probability
    ``keep``), reached from ``num_seeds`` papers over ``layers`` hops (every kept in-edge of every
    node reached): ``n_id`` lists the nodes hop by hop, and MFG ``i`` (model order) has as
    destinations the nodes within ``layers - 1 - i`` hops and every kept edge into them, grouped
    by destination, then relation.

    Returns a namespace: ``schema``, ``edges`` (relation index -> int64 [2, E_r] kept edges,
    global ids), ``features`` (type name -> float32 rows of every node of the type), ``n_id``,
    ``node_type``, ``mfgs``, ``num_seeds``, ``hops`` (the hop of each node of ``n_id``) and
    ``x_dict`` (the batch rows per type).
    """
    from types import SimpleNamespace

    import torch

    from salientpp.data.schema import GraphSchema
    from salientpp.sampling import MFG

    g = torch.Generator().manual_seed(seed)
    schema = GraphSchema.with_reverses(("paper", "author", "field"), (30, 20, 8),
                                       [("paper", "cites", "paper"), ("author", "writes", "paper"),
                                        ("paper", "has", "field")], target="paper")
    offsets = schema.offsets
    ids = {t: torch.arange(int(offsets[i]), int(offsets[i + 1])) for i, t in enumerate(schema.node_types)}
    edges = {}
    for r, relation in enumerate(schema.relations):
        if schema.reverse[r] < r:  # the reverse of an earlier relation: its edges turned round
            edges[r] = edges[schema.reverse[r]].flip(0)
            continue
        src, dst = ids[relation.src], ids[relation.dst]
        pairs = torch.cartesian_prod(src, dst).T
        pairs = pairs[:, torch.rand(pairs.shape[1], generator=g) < 0.15]
        pairs = pairs[:, pairs[0] != pairs[1]]
        if schema.reverse[r] == r:  # symmetric
            pairs = torch.unique(torch.cat([pairs, pairs.flip(0)], 1), dim=1)
        edges[r] = pairs
    kept = {}
    for r in edges:  # keep a subset (the reverse of a kept edge need not be kept: sampling is per direction)
        kept[r] = edges[r][:, torch.rand(edges[r].shape[1], generator=g) < keep]
    into = {}  # (node, relation) -> sources in ascending order
    for r, pairs in kept.items():
        for u, v in pairs.T.tolist():
            into.setdefault((v, r), []).append(u)
    type_of = lambda v: int(torch.searchsorted(torch.as_tensor(offsets), v, right=True)) - 1  # noqa: E731
    seeds = ids["paper"][torch.randperm(30, generator=g)[:num_seeds]].tolist()
    order, hop_of = list(seeds), {v: 0 for v in seeds}
    frontier = list(seeds)
    for hop in range(1, layers + 1):
        reached = []
        for v in frontier:
            for r in relations_into(schema, type_of(v)):
                for u in sorted(into.get((v, r), [])):
                    if u not in hop_of:
                        hop_of[u] = hop
                        reached.append(u)
        order += reached
        frontier = reached
    position = {v: i for i, v in enumerate(order)}
    hops = torch.tensor([hop_of[v] for v in order])
    mfgs = []
    for i in range(layers):
        num_dst = int((hops <= layers - 1 - i).sum())
        num_src = int((hops <= layers - i).sum())
        src, dst, rel, rowptr = [], [], [], [0]
        for d in range(num_dst):
            v = order[d]
            for r in relations_into(schema, type_of(v)):
                for u in sorted(into.get((v, r), [])):
                    src.append(position[u])
                    dst.append(d)
                    rel.append(r)
            rowptr.append(len(src))
        mfgs.append(MFG(num_src, num_dst, torch.tensor([src, dst], dtype=torch.int64).view(2, -1),
                        torch.tensor(rowptr), edge_type=torch.tensor(rel, dtype=torch.int64)))
    n_id = torch.tensor(order)
    node_type = torch.tensor([type_of(v) for v in order])
    features = {"paper": torch.randn(30, 5, generator=g), "author": torch.randn(20, 6, generator=g)}
    x_dict = {t: features[t][n_id[node_type == i] - int(offsets[i])]
              for i, t in enumerate(schema.node_types) if t in features}
    return SimpleNamespace(schema=schema, edges=kept, features=features, n_id=n_id, node_type=node_type, mfgs=mfgs,
                           num_seeds=num_seeds, hops=hops, x_dict=x_dict)
