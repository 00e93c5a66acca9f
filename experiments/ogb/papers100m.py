#!/usr/bin/env python
"""SALIENT++ experiments on ogbn-papers100M (3-layer SAGE, fanouts 15,10,5, hidden 256, batch 1024
per rank; VIP run: alpha = 0.04 K, GPU fraction 0.15). Run with --help for the options, e.g.

    python experiments/ogb/papers100m.py --root ~/ogb --work /data/papers-work --out results-papers \\
        --machines 8 --gpus-per-machine 1
"""
import sys

from common import PaperSetup, main

SETUP = PaperSetup(
    name="ogbn-papers100M", source="ogb:ogbn-papers100M", fanouts=(15, 10, 5), hidden=256,
    alpha_per_part=0.04, device_fraction=0.15,
    published={
        "variants": "8 x g5.8xlarge (one A10G each): SALIENT++ (VIP cache, pipelined) 3154 ms/epoch; SALIENT "
                    "(full replication) 3060 ms/epoch; partitioned, no pipeline, no cache 11582 ms/epoch.",
        "accuracy": "test accuracy 0.647 (SALIENT++, 8 machines).",
    })

if __name__ == "__main__":
    sys.exit(main(SETUP))
