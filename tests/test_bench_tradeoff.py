"""``salientpp bench tradeoff``: test accuracy against sampled edges per batch, LADIES vs node-wise."""
from __future__ import annotations

import json

import pytest

from salientpp.cli import main


def test_tradeoff_rows_grow_in_edges_with_the_fanouts_and_write_json_and_plot(tiny_partitions, tmp_path, capsys):
    part_dir = str(tiny_partitions[0] / "p2")
    out, plot = tmp_path / "t.json", tmp_path / "t.png"
    assert main(["bench", "tradeoff", part_dir, "--nodewise", "2,2:8,8", "--ladies", "16,16:128,128", "--epochs", "1",
                 "--batch-size", "32", "--hidden", "16", "--json", str(out), "--plot", str(plot)]) == 0
    table = capsys.readouterr().out
    written = json.loads(out.read_text())
    assert written["kind"] == "salientpp-bench-tradeoff"
    rows = written["rows"]
    assert [(r["sampler"], r["fanouts"]) for r in rows] == [("nodewise", [2, 2]), ("nodewise", [8, 8]),
                                                            ("ladies", [16, 16]), ("ladies", [128, 128])]
    # More neighbours per node / more nodes per layer can only add edges: on this graph (average
    # degree 10) 8 draws per node reach far more than 2, and 128 drawn nodes per layer more than 16.
    assert rows[1]["edges_per_batch"] > 2 * rows[0]["edges_per_batch"]
    assert rows[3]["edges_per_batch"] > 2 * rows[2]["edges_per_batch"]
    assert all(0 <= a <= 1 for r in rows for a in r["test_accuracy"])
    # Each row is printed as it is measured, then again in the final table.
    assert table.count("| nodewise |") == 4 and table.count("| ladies |") == 4
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, message", [
    (["--nodewise", "16,0"], "fanout 0 is invalid"),
    (["--ladies", "16,0"], "LADIES samples a number of nodes per layer"),
    (["--ladies", "16,-1"], "LADIES samples a number of nodes per layer"),
    (["--nodewise", "5,5::5,5"], "empty configuration"),
    (["--nodewise", "", "--ladies", ""], "no configuration to run"),
    (["--seeds", ""], "--seeds is empty"),
    (["--plot", "out.txt"], "not an image format"),
])
def test_tradeoff_refuses_bad_options_before_training(tiny_partitions, capsys, argv, message):
    assert main(["bench", "tradeoff", str(tiny_partitions[0] / "p2"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
