"""The emulated cluster network of the row exchange: a link of RATE per rank takes B/RATE for B
bytes (plus its latency per collective), serialises a rank's collectives, sleeps instead of
spinning, and changes nothing but time: training with and without it gives the same losses."""
from __future__ import annotations

import json
import resource
import time

import pytest
import torch

from salientpp.cli import main as cli_main
from salientpp.distributed import RowExchange, init_distributed, launch, shutdown_distributed
from salientpp.distributed.network import EmulatedLink, Network, parse_network
from salientpp.errors import InputError
from conftest import one_sentence

ROWS, WIDTH = 4096, 256  # 4 MiB of float32 rows each way
RATE = "32mbit"  # 4 MB/s: the 4 MiB take about 1.05 s, far above loopback's few milliseconds
LATENCY_S = 0.05


@pytest.mark.parametrize("text, rate, latency", [("1gbit,50us", 1.25e8, 5e-5), ("200mbit", 2.5e7, 0.0),
                                                 ("125mbps,1ms", 1.25e8, 1e-3), ("2.5gbit,0.5ms", 3.125e8, 5e-4)])
def test_network_specs_use_tcs_units(text, rate, latency):
    network = parse_network(text)
    assert network.rate == pytest.approx(rate) and network.latency == pytest.approx(latency)


@pytest.mark.parametrize("text", ["fast", "1gbit,50", "0gbit", "1gbit,1us,3", "-1gbit"])
def test_a_bad_network_spec_is_one_sentence(text):
    with pytest.raises(InputError, match="--network"):
        parse_network(text)


def test_a_rank_s_collectives_are_serialised_on_its_link():
    link = EmulatedLink(Network(rate=1e6, latency=0.01))
    start = time.monotonic()
    first = link.reserve(100_000, 20_000)  # 0.01 + 0.1 s: the larger direction counts (full duplex)
    second = link.reserve(0, 50_000)  # starts when the first has finished: another 0.06 s
    assert first - start == pytest.approx(0.11, abs=0.005)
    assert second - first == pytest.approx(0.06, abs=1e-9)


def _exchange_seconds(network: str | None, rows: int) -> tuple[float, float, bool]:
    """One rank: the wall and CPU seconds of one all-to-all of ``rows`` rows to the other rank
    and back (after a warm-up exchange), and whether the rows arrived unchanged."""
    ctx = init_distributed("cpu", timeout_s=60, network=None if network is None else parse_network(network))
    try:
        table = torch.arange(ctx.world_size * rows * WIDTH, dtype=torch.float32).view(-1, WIDTH)
        owned = table[ctx.rank * rows:(ctx.rank + 1) * rows]
        exchange = RowExchange(ctx, lambda ids, counts: owned[ids - ctx.rank * rows], WIDTH, torch.float32)
        peer = 1 - ctx.rank
        ids = torch.arange(peer * rows, (peer + 1) * rows)
        counts = torch.tensor([rows if k == peer else 0 for k in range(2)])
        exchange.fetch(ids[:1], torch.tensor([1 if k == peer else 0 for k in range(2)]))  # warm-up
        start, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_utime
        requested_counts = exchange.counts(counts).wait()
        requested = exchange.ids(ids, counts, requested_counts).wait()
        received = exchange.rows(requested, requested_counts, counts).wait().view(-1, WIDTH)
        wall = time.perf_counter() - start
        cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime - cpu
        return wall, cpu, torch.equal(received, table[ids])
    finally:
        shutdown_distributed(ctx)


def test_bytes_over_an_emulated_link_take_bytes_over_rate_and_arrive_unchanged():
    network = parse_network(f"{RATE},{LATENCY_S * 1e3:g}ms")
    rows_bytes = ROWS * WIDTH * 4
    # Three collectives (counts, ids, rows), each with its latency; the ids (8 bytes each) and the
    # rows cross the link, the counts are a few bytes.
    expected = 3 * LATENCY_S + (ROWS * 8 + rows_bytes + 16) / network.rate
    for wall, cpu, same in launch(_exchange_seconds, (f"{RATE},{LATENCY_S * 1e3:g}ms", ROWS), nprocs=2):
        assert same
        assert wall == pytest.approx(expected, rel=0.10), (wall, expected)
        assert cpu < 0.5 * wall  # it slept: waiting costs no CPU
    plain = launch(_exchange_seconds, (None, ROWS), nprocs=2)
    assert all(same for _, _, same in plain) and max(wall for wall, _, _ in plain) < 0.5 * expected


def _losses(part_dir: str, tmp_path, network: str | None) -> list[float]:
    out = tmp_path / f"{network or 'loopback'}.jsonl"
    extra = [] if network is None else ["--network", network]
    assert cli_main(["train", part_dir, "--epochs", "2", "--hidden", "16", "--layers", "2", "--fanouts", "5,5",
                     "--batch-size", "32", "--eval-fanouts", "5,5", "--policy", "none", "--quiet", "--json", str(out),
                     *extra]) == 0
    return [(line["train_loss"], line["valid_metric"], line["comm"]["received"])
            for line in map(json.loads, out.read_text().splitlines())]


def test_training_with_the_emulated_network_gives_the_same_losses_bit_for_bit(tiny_partitions, tmp_path):
    part_dir = str(tiny_partitions[0] / "p2")
    assert _losses(part_dir, tmp_path, "200mbit,20us") == _losses(part_dir, tmp_path, None)


def test_train_refuses_a_bad_network_before_any_rank_starts(tiny_partitions, capsys, no_ranks):
    assert cli_main(["train", str(tiny_partitions[0] / "p2"), "--network", "1gbit,5"]) == 2
    assert "--network '1gbit,5' has no latency with a unit" in one_sentence(capsys)


def test_full_replication_exchanges_nothing_and_trains_exactly_as_fetching(tiny_partitions, tmp_path):
    """Every rank caching every remote row (alpha = K - 1) skips the exchange: no counts, ids or
    rows stage runs, nothing is received, and the losses are those of the run that fetches."""
    part_dir = str(tiny_partitions[0] / "p2")
    runs = {}
    for name, cache in (("fetching", ["--policy", "none"]), ("full", ["--policy", "degree", "--replication", "1"])):
        out = tmp_path / f"{name}.jsonl"
        assert cli_main(["train", part_dir, "--epochs", "2", "--hidden", "16", "--layers", "2", "--fanouts", "5,5",
                         "--batch-size", "32", "--eval-every", "0", "--quiet", "--json", str(out), *cache]) == 0
        runs[name] = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["train_loss"] for r in runs["full"]] == [r["train_loss"] for r in runs["fetching"]]
    for record in runs["full"]:
        assert record["comm"]["received"] == 0 and record["comm"]["device_hits"] > 0
        assert not {"counts", "ids", "rows"} & set(record["stage_s"])
    assert all(r["comm"]["received"] > 0 and "rows" in r["stage_s"] for r in runs["fetching"])
