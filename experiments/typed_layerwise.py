"""Evaluation passes of a typed model: layer-wise inference against sampled batches of every
neighbour (fanout -1 at every layer), on a partitioned typed graph (issue #64, item 2).

Each run opens the trainer of ``salientpp train PART_DIR --model MODEL --layers L --hidden H``
(untrained weights; ``--eval-batch-size B`` destinations per chunk or seeds per batch), runs
``--repeats`` evaluations over the validation and test nodes with ``--inference layerwise`` or
with ``--inference sampled --eval-fanouts -1,...``, and prints one JSON line per rank and pass:
the pass's wall and process CPU seconds, its accuracies (equal for both: the outputs agree
within 1e-4) and the rows it moved.

    salientpp prepare synthetic:igbh,num_nodes=100000 igbh100k
    salientpp partition igbh100k igbh100k-2 --parts 2
    PYTHONPATH=. python experiments/typed_layerwise.py igbh100k-2 --model rsage --inference layerwise
    PYTHONPATH=. python experiments/typed_layerwise.py igbh100k-2 --model rsage --inference sampled
"""
from __future__ import annotations

import argparse
import json
import time

from salientpp.distributed import init_distributed, launch, shutdown_distributed
from salientpp.partition import load_partitioned
from salientpp.train import TrainConfig, trainer_for


def _passes(part_dir: str, model: str, inference: str, layers: int, hidden: int, batch: int, repeats: int,
            torch_threads: int | None) -> list[dict]:
    """One rank: the seconds and metrics of ``repeats`` evaluation passes of one trainer (the first
    builds the layer-wise halo, or the sampled loader)."""
    ctx = init_distributed("cpu", timeout_s=1800)
    try:
        config = TrainConfig(part_dir, model=model, layers=layers, hidden=hidden, inference=inference,
                             eval_fanouts=None if inference == "layerwise" else (-1,) * layers,
                             fanouts=(10,) * layers, eval_batch_size=batch, policy="none", progress=False,
                             torch_threads=torch_threads)
        trainer = trainer_for(config, ctx)
        results = []
        for _ in range(repeats):
            start, cpu = time.perf_counter(), time.process_time()
            metrics = trainer.evaluate(0)
            results.append({"wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu,
                            "valid": metrics["valid_metric"], "test": metrics["test_metric"],
                            "rows_received": metrics["eval_comm"]["received"]})
        return results
    finally:
        shutdown_distributed(ctx)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("part_dir")
    p.add_argument("--model", default="rsage", choices=("rsage", "rgcn", "rgat"))
    p.add_argument("--inference", default="layerwise", choices=("layerwise", "sampled"))
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--eval-batch-size", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=1, help="evaluation passes of one trainer")
    p.add_argument("--torch-threads", type=int, default=None, help="torch intra-op threads per rank (default: "
                   "the machine's cores per rank)")
    args = p.parse_args()
    run = (args.part_dir, args.model, args.inference, args.layers, args.hidden, args.eval_batch_size, args.repeats,
           args.torch_threads)
    parts = load_partitioned(args.part_dir, verify=False, check=False).num_parts
    results = [_passes(*run)] if parts == 1 else launch(_passes, run, nprocs=parts)
    for rank, passes in enumerate(results):
        for i, result in enumerate(passes):
            print(json.dumps({"model": args.model, "inference": args.inference, "rank": rank, "pass": i, **result}))


if __name__ == "__main__":
    main()
