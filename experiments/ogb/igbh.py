#!/usr/bin/env python
"""MLPerf Training's GNN benchmark configuration on IGBH with salientpp: R-GAT (3 layers, hidden
512, 4 heads, fanouts 15,10,5 for every relation, batch 1024 per rank, Adam at 0.001: the
reference's, GraphLearn-for-PyTorch's ``examples/igbh``), the 2,983-class labels, float16
features; the SALIENT++ tables (epoch time per cache variant and alpha, accuracy, communication)
on a typed graph. IGBH comes from IGB's download scripts; pass a size's directory, e.g.

    python experiments/ogb/igbh.py --source igbh:/data/igbh/full --work /data/igbh-work \\
        --out results-igbh --machines 8 --gpus-per-machine 1

MLPerf scores validation accuracy; its quality target is 72.0% on IGBH-full.
"""
import sys

from common import PaperSetup, main

SETUP = PaperSetup(
    name="IGBH (MLPerf R-GAT)", source="igbh:igbh/full", fanouts=(15, 10, 5), hidden=512, model="rgat",
    num_classes=2983, alpha_per_part=0.02, device_fraction=0.1, feature_dtype="float16",
    published={"accuracy": "MLPerf Training's quality target: validation accuracy 0.720 on IGBH-full."})

if __name__ == "__main__":
    sys.exit(main(SETUP))
