#!/usr/bin/env bash
# The GPU session's one prepared script (issue #42): everything a lent GPU machine should measure,
# in one run, each step's output in a file of its own, packed into $OUT/results.tgz after every
# step (the device tool brings back only the first few files of $OUT; on 2026-11-27 it returned 8
# of 20), so that one call of the device tool brings all of it back.
#
#   OUT=DIR bash experiments/gpu/run.sh
#
# Settings (environment): DEVICE (cuda), PRESET (products,num_nodes=1200000: the synthetic graph
# to generate; half of the products preset, so that it is generated and written within the
# window), EPOCHS (3), BUILD (1: build the extension in place with every core first; the CPU
# rehearsal in tests/test_gpu_script.py sets 0), KERNEL_TESTS (1: pytest of the CUDA twins,
# tests/test_model_ops.py, where pytest is installed), PYG_TIMEOUT (300: seconds the PyG
# baseline's build may take), DEADLINE (520: seconds after the start past which no step runs on;
# each step's own limit is cut to what is left), WORK (experiments/gpu/work: the generated data,
# and the PyG build, kept, so that a second call on the same machine skips them), SOURCES
# (experiments/gpu/sources: the PyG sources, from fetch-sources.sh), STEPS (every step: the names
# of the steps to run, e.g. "data train" for a second call that reruns only what failed).
#
# Steps, in order; a failed step is logged and the next runs (a GPU window is too short to rerun
# everything for one failure); the exit code is 1 when any step failed or was cut off:
#   env        the device, torch and CUDA versions, the cores
#   pyg        in the background from here: torch_scatter and torch_sparse built in place from
#              their sources for the CPU (PyG's sampler runs there), every extension of both at
#              once (build_inplace.py, without ninja), when experiments/gpu/sources/ holds them
#              (fetch-sources.sh); they join PYTHONPATH once both import
#   build      the extension (ninja, MAX_JOBS = the cores), in place
#   data       in the background: salientpp prepare synthetic:$PRESET, partitioned into 1 part
#   kernels    meanwhile: pytest of the CUDA kernels against their CPU twins
#   selfcheck  meanwhile: salientpp selfcheck on tiny (the kernels' row covers a machine without pytest)
#   train      salientpp bench train: epoch time and stages, pipeline on and off, against PyG's
#              NeighborLoader + SAGEConv on the same GPU (pinned memory, num_workers 3/8 and 3/4 of
#              the cores, the faster counts); ours with the fetch stages on the training thread
#              (--fetch-thread off, the path that ran on 2026-11-27), every owned row that fits on
#              the device, the C++ sampler. Each variant below changes one of these:
#   train-fetch-thread  the fetch stages on a thread of their own (the default on a GPU)
#   train-gpu-sampling  the batches drawn on the GPU (--sampler bulk --sampling-device cuda): the
#              measurement that says where training should sample
#   train-host-rows  15% of the owned rows on the device (--device-fraction 0.15, the default
#              before 2026-11-28)
#   step       salientpp bench step: our kernels and step against PyG's SAGEConv and torch's dropout
#   profile    a few steps of an epoch under torch.profiler (profile_epoch.py: trace.json.gz and
#              profile.txt)
#   sampler    salientpp bench sampler --device cuda: the bulk samplers on the GPU against the C++
#              sampler on the CPU's cores
#   step-4096  bench step with batches of 4096 seeds
# The steps after train-host-rows ran on an H100 on 2026-11-27; past the deadline they are skipped,
# for a second call (STEPS="step profile sampler step-4096").
# steps.log has one line per step with its status and seconds; it is in results.tgz and, for a
# first look, in $OUT too.
set -uo pipefail
cd "$(dirname "$0")/../.."

OUT=${OUT:?set OUT to the folder for the results}
DEVICE=${DEVICE:-cuda}
PRESET=${PRESET:-products,num_nodes=1200000}
EPOCHS=${EPOCHS:-3}
BUILD=${BUILD:-1}
KERNEL_TESTS=${KERNEL_TESTS:-1}
PYG_TIMEOUT=${PYG_TIMEOUT:-300}
STEPS=${STEPS:-}
DEADLINE=${DEADLINE:-520}
WORK=${WORK:-experiments/gpu/work}
SOURCES=${SOURCES:-experiments/gpu/sources}
CORES=$(nproc)
mkdir -p "$OUT" "$WORK" || exit 2
RESULTS=$(mktemp -d) || exit 2  # every step's files, packed into $OUT/results.tgz after each step
trap 'rm -rf "$RESULTS"' EXIT
WORK=$(realpath "$WORK")
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
START=$(date +%s)

# pack: $RESULTS into $OUT/results.tgz (replaced whole, so a cut-off run leaves the last one).
pack() {
    local tmp="$OUT/.results.tgz.$BASHPID"  # the background steps pack too
    tar czf "$tmp" -C "$RESULTS" . && mv "$tmp" "$OUT/results.tgz"
    cp "$RESULTS/steps.log" "$OUT/steps.log"
}

# step NAME LIMIT COMMAND...: run COMMAND with its output in $RESULTS/NAME.log, for at most LIMIT
# seconds and never past DEADLINE; one line in steps.log; then pack.
step() {
    local name=$1 limit=$2 start ms status left
    shift 2
    [ -n "$STEPS" ] && [[ " $STEPS " != *" $name "* ]] && return  # not asked for in STEPS
    left=$(( DEADLINE - ($(date +%s) - START) ))
    if (( left < 10 )); then
        echo "$name SKIPPED (the deadline of $DEADLINE s has passed)" | tee -a "$RESULTS/steps.log"
        pack
        return
    fi
    (( limit > left )) && limit=$left
    start=$(date +%s%N)
    timeout --kill-after=5 "$limit" bash -c '"$@"' "$name" "$@" > "$RESULTS/$name.log" 2>&1
    status=$?
    case $status in
        0) status=ok ;;
        124|137) status="FAILED (cut off after $limit s)" ;;
        *) status="FAILED (exit $status)" ;;
    esac
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    printf '%s %s %d.%03d s\n' "$name" "$status" $((ms / 1000)) $((ms % 1000)) | tee -a "$RESULTS/steps.log"
    pack
}

environment() {
    date -u +%Y-%m-%dT%H:%M:%SZ
    echo "cores $CORES"
    if command -v nvidia-smi > /dev/null; then nvidia-smi; fi
    python3 -c "import sys, torch, torch_geometric as pyg; print('python', sys.version.split()[0], 'torch', torch.__version__,
'cuda', torch.version.cuda, 'torch_geometric', pyg.__version__); print('device',
torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')"
    python3 -c "import pytest" 2> /dev/null && echo "pytest available" || echo "no pytest"
    python3 -c "import ninja" 2> /dev/null && echo "ninja available" || echo "no ninja module"
}

# torch_scatter and torch_sparse in $WORK/pyg, each built in place; $WORK/pyg/ok once both import.
PYG_DIRS="$WORK/pyg/torch_scatter:$WORK/pyg/torch_sparse"
build_pyg() {
    [ -f "$WORK/pyg/ok" ] && { echo "$WORK/pyg is built: kept"; return 0; }
    rm -rf "$WORK/pyg" && mkdir -p "$WORK/pyg/torch_scatter" "$WORK/pyg/torch_sparse" || return 1
    tar xzf "$SOURCES"/torch_scatter-*.tar.gz -C "$WORK/pyg/torch_scatter" --strip-components 1 &&
        tar xzf "$SOURCES"/torch_sparse-*.tar.gz -C "$WORK/pyg/torch_sparse" --strip-components 1 || return 1
    local pids=() pid status=0
    for package in torch_scatter torch_sparse; do
        FORCE_ONLY_CPU=1 python3 experiments/gpu/build_inplace.py "$WORK/pyg/$package" "$CORES" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
    [ "$status" = 0 ] && PYTHONPATH="$PYG_DIRS:$PYTHONPATH" python3 -c "import torch_scatter, torch_sparse
print('torch_scatter', torch_scatter.__version__, 'torch_sparse', torch_sparse.__version__)" && touch "$WORK/pyg/ok"
}

make_data() {
    [ -f "$WORK/one/meta.json" ] && { echo "$WORK/one exists: kept"; return 0; }
    rm -rf "$WORK/data" "$WORK/one"
    python3 -m salientpp prepare "synthetic:$PRESET" "$WORK/data" &&
        python3 -m salientpp partition "$WORK/data" "$WORK/one" --parts 1 --method random
}

salientpp() { python3 -m salientpp "$@"; }
export -f environment build_pyg make_data salientpp  # step runs each command under timeout, in a new bash
export CORES WORK PRESET SOURCES PYG_DIRS

step env 60 environment
# PyG's build first, in the background: its longest extension (torch_sparse's neighbour sampler,
# two files of 96 and 70 s on one core of the 2-core VM) is its critical path, and it leaves most
# cores to the extension's build meanwhile.
if compgen -G "$SOURCES/torch_sparse-*.tar.gz" > /dev/null; then
    step pyg "$PYG_TIMEOUT" build_pyg &
fi
[ "$BUILD" = 1 ] && step build 240 env MAX_JOBS="$CORES" python3 setup.py build_ext --inplace
step data 240 make_data &
[ "$KERNEL_TESTS" = 1 ] && step kernels 90 python3 -m pytest -q -p no:cacheprovider tests/test_model_ops.py
step selfcheck 150 salientpp selfcheck --device "$DEVICE" --presets tiny --epochs 2 --no-bench
wait
[ -f "$WORK/pyg/ok" ] && export PYTHONPATH="$PYG_DIRS:$PYTHONPATH"
step train 200 salientpp bench train "$WORK/one" --device "$DEVICE" --epochs "$EPOCHS" --fetch-thread off \
    --baselines pyg --pyg-workers "$(( CORES * 3 / 8 )),$(( CORES * 3 / 4 ))" --json "$RESULTS/bench-train.json"
step train-fetch-thread 90 salientpp bench train "$WORK/one" --device "$DEVICE" --epochs "$EPOCHS" --no-baseline \
    --fetch-thread on --json "$RESULTS/bench-train-fetch-thread.json"
step train-gpu-sampling 90 salientpp bench train "$WORK/one" --device "$DEVICE" --epochs "$EPOCHS" --no-baseline \
    --fetch-thread off --sampler bulk --sampling-device "$DEVICE" --json "$RESULTS/bench-train-gpu-sampling.json"
step train-host-rows 90 salientpp bench train "$WORK/one" --device "$DEVICE" --epochs "$EPOCHS" --no-baseline \
    --fetch-thread off --device-fraction 0.15 --json "$RESULTS/bench-train-host-rows.json"
step step 120 salientpp bench step "$WORK/data" --device "$DEVICE" --json "$RESULTS/bench-step.json"
step profile 90 python3 experiments/gpu/profile_epoch.py "$WORK/one" "$DEVICE" "$RESULTS" 6
step sampler 90 salientpp bench sampler "$WORK/data" --device "$DEVICE" --samplers nodewise,bulk \
    --sampler-threads "$(( CORES * 3 / 4 )),$CORES" --bulk-sizes 1,4,16 --batches 16 --repeats 3 --json "$RESULTS/bench-sampler.json"
step step-4096 90 salientpp bench step "$WORK/data" --device "$DEVICE" --batch-size 4096 --batches 2 \
    --json "$RESULTS/bench-step-4096.json"
! grep -qE "FAILED|SKIPPED" "$RESULTS/steps.log"
