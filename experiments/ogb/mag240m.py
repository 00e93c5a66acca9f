#!/usr/bin/env python
"""SALIENT++ experiments on MAG240M, papers only (the paper-cites-paper graph, as the paper
trains on it): SAGE with fanouts 25,15 (2 layers), hidden 1024, batch 1024 per rank; VIP run:
alpha = 0.02 K, GPU fraction 0.1. Features stay float16 (174 GiB). The test labels are hidden
by OGB-LSC, so accuracy is the validation accuracy. Run with --help for the options, e.g.

    python experiments/ogb/mag240m.py --root ~/ogb-lsc --work /data/mag-work --out results-mag \\
        --machines 8 --gpus-per-machine 1
"""
import sys

from common import PaperSetup, main

SETUP = PaperSetup(
    name="MAG240M (papers)", source="ogb-lsc:mag240m", fanouts=(25, 15), hidden=1024,
    alpha_per_part=0.02, device_fraction=0.1, feature_dtype="float16")

if __name__ == "__main__":
    sys.exit(main(SETUP))
