"""Your own PyG model and training loop on a partitioned graph, distributed with a few lines.

    salientpp prepare npz:cora.npz cora && salientpp partition cora cora-2 --parts 2
    torchrun --standalone --nproc-per-node 2 examples/bring_your_own_model.py cora-2

Every rank trains on its own partition; ``DistNeighborLoader`` fetches remote feature rows
(through the cache of ``--plan``, if given) and gives every rank the same number of batches.
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch_geometric.nn import GraphConv

import salientpp


class MyModel(torch.nn.Module):
    def __init__(self, in_dim: int, hidden: int, out_dim: int):
        super().__init__()
        self.conv1 = GraphConv(in_dim, hidden, aggr="mean")
        self.conv2 = GraphConv(hidden, out_dim, aggr="mean")

    def forward(self, x, edge_index):
        x = F.dropout(F.relu(self.conv1(x, edge_index)), p=0.5, training=self.training)
        return self.conv2(x, edge_index)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("part_dir")
    parser.add_argument("--plan", default=None, help="a cache plan written by salientpp analyze")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    ctx = salientpp.init_distributed(device=args.device)     # joins torchrun's group (or runs alone)
    graph = salientpp.DistGraph(args.part_dir, ctx)           # this rank's partition, replicated topology
    loader = salientpp.DistNeighborLoader(graph, split="train", fanouts=[10, 10], batch_size=64,
                                          shuffle=True, plan=args.plan,
                                          prefetch_next_epoch=True)  # the loop calls set_epoch(0, 1, ...)
    torch.manual_seed(0)
    model = MyModel(graph.num_features, 64, graph.num_classes).to(ctx.device)
    model = DDP(model) if ctx.distributed else model
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for epoch in range(args.epochs):
        model.train()
        loader.set_epoch(epoch)
        for batch in loader:                                  # every rank gets the same number of batches
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    model.eval()
    correct = torch.zeros(2, dtype=torch.float64)             # [correct, seen] over this rank's test nodes
    with torch.no_grad():
        for batch in salientpp.DistNeighborLoader(graph, split="test", fanouts=[-1, -1], batch_size=256,
                                                  shuffle=False, plan=args.plan):
            pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(-1)
            correct += torch.tensor([(pred == batch.y).sum().item(), batch.batch_size], dtype=torch.float64)
    if ctx.distributed:
        dist.all_reduce(correct)
    if ctx.rank == 0:
        print(f"test accuracy {correct[0] / correct[1]:.4f}")
    salientpp.shutdown_distributed(ctx)


if __name__ == "__main__":
    main()
