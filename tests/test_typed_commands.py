"""Commands that do not handle typed graphs yet refuse one in one sentence, before any work."""
from __future__ import annotations

import pytest
from conftest import exit_code, one_sentence, typed_dataset

from salientpp.errors import InputError


@pytest.fixture(scope="module")
def typed_dirs(tmp_path_factory):
    """A typed dataset directory and its partitioning in two parts."""
    from salientpp.data.format import save_dataset
    from salientpp.partition.partitioner import partition_dataset

    root = tmp_path_factory.mktemp("typed")
    dataset, _ = typed_dataset()
    save_dataset(dataset, root / "data")
    partition_dataset(dataset, root / "parts", 2)
    return root


@pytest.mark.parametrize("argv, command", [
    (["train", "{parts}", "--epochs", "1"], "the trainer"),
    (["bench", "train", "{parts}"], "the trainer"),
    (["bench", "fullgraph", "{parts}"], "the trainer"),
    (["bench", "tradeoff", "{parts}"], "bench tradeoff"),
    (["bench", "cluster", "{parts}", "--network", "10Gbit"], "bench cluster"),
    (["bench", "step", "{data}"], "bench step"),
    (["demo", "--preset", "igbh", "--out", "{root}/demo"], "demo"),
])
def test_a_command_without_typed_graphs_refuses_one_in_one_sentence(typed_dirs, capsys, argv, command):
    argv = [a.format(parts=typed_dirs / "parts", data=typed_dirs / "data", root=typed_dirs) for a in argv]
    assert exit_code(argv) == 2
    message = one_sentence(capsys)
    assert "is a typed graph" in message and f"typed graphs are not supported by {command} yet" in message
    assert not (typed_dirs / "demo").exists()


def test_predict_refuses_a_typed_partitioning(typed_dirs, capsys, tmp_path):
    from salientpp.train.predict import predict

    (tmp_path / "run").mkdir()
    checkpoint = tmp_path / "run" / "last.pt"
    checkpoint.write_bytes(b"")
    with pytest.raises(InputError, match="typed graphs are not supported by predict yet"):
        predict(typed_dirs / "parts", checkpoint, tmp_path / "out", 16)
    assert not (tmp_path / "out").exists()
