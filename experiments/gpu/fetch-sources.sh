#!/usr/bin/env bash
# Download the source distributions of PyG's neighbour sampler (torch_sparse, and torch_scatter,
# which it imports) into experiments/gpu/sources/ (git-ignored, 0.3 MB), on a machine with the
# package registries. The GPU machine has no network and neither pyg-lib nor torch_sparse: pass
# this folder in the device tool's `carry`, and experiments/gpu/run.sh builds them there, so that
# `bench train`'s baseline is PyG's own NeighborLoader.
set -euo pipefail
DEST=$(dirname "$0")/sources
mkdir -p "$DEST"
python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: --no-build-isolation \
    -d "$DEST" torch_scatter==2.1.2 torch_sparse==0.6.18
ls -l "$DEST"
