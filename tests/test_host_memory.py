"""Keeping freed host memory: a large block freed and allocated again is not faulted in again."""
from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc's malloc's")

BLOCK = 256 * 2**20  # bytes: far above glibc's largest mmap threshold (32 MiB)
PAGES = BLOCK // 4096
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")

# Fills a fresh BLOCK-byte tensor and frees it, as a training step does, eight times, and prints
# the fewest minor page faults of the last four fills; with the argument "keep",
# keep_freed_memory() runs first. (A freed block may not fit the next request, since aligned
# allocations ask for a little more than they keep, so the heap can grow again before its blocks
# are reused; and with every thread in one arena, a small allocation by one of torch's threads
# between two fills can leave the heap's top above a freed block. Both settle within a few
# steps, as a training run's steps do: the fewest of the last four is the steady state. One
# torch thread keeps the fills' own threads out of the heap.)
PROBE = f"""
import json, resource, sys, torch
from salientpp.distributed.host_memory import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else False
torch.set_num_threads(1)
def fill():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = torch.empty({BLOCK} // 4)
    t.fill_(1.0)
    del t
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults = [fill() for _ in range(8)]
print(json.dumps({{"kept": kept, "faults": min(faults[-4:])}}))
"""


def _last_fill(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@glibc_only
def test_a_block_freed_and_allocated_again_step_after_step_is_not_faulted_in_again():
    # The fewer faults of two probes: the allocator's policy can only be blurred from outside by
    # more faults (the kernel reclaiming pages of a busy machine), never by fewer; one such
    # probe during a full suite on 2 busy cores faulted the whole block in again.
    probes = [_last_fill("keep") for _ in range(2)]
    assert all(probe["kept"] is True for probe in probes)
    assert min(probe["faults"] for probe in probes) < PAGES / 20  # a few pages of bookkeeping, not the block


@glibc_only
@pytest.mark.skipif(THP.exists() and "[always]" in THP.read_text(),
                    reason="with transparent huge pages always on a block faults in 2 MiB at a time")
def test_without_it_glibc_faults_every_page_of_a_large_block_in_again():
    plain = _last_fill("plain")
    assert plain["kept"] is False
    assert plain["faults"] > PAGES / 2


def test_train_keeps_freed_memory_unless_told_not_to():
    from salientpp.cli import build_parser
    from salientpp.cli.train import config_from_args

    parse = lambda *extra: config_from_args(build_parser().parse_args(["train", "parts", *extra]))
    assert parse().reuse_freed_memory is True
    assert parse("--no-reuse-freed-memory").reuse_freed_memory is False
