#!/usr/bin/env bash
# The GPU session's one prepared script (issue #42): everything a lent GPU machine should measure,
# in one run, each step's output in a file of its own under $OUT, so that one call of the device
# tool brings all of it back.
#
#   OUT=DIR bash experiments/gpu/run.sh
#
# Settings (environment): DEVICE (cuda), PRESET (products: the synthetic preset to generate and
# partition), PARTS (2), EPOCHS (3), BUILD (1: build the extension with every core first; the CPU
# rehearsal in tests/test_gpu_script.py sets 0), KERNEL_TESTS (1: the CUDA twins against the CPU
# kernels, tests/test_model_ops.py), PYG_TIMEOUT (300: seconds the PyG baseline's build may take).
#
# Steps, in order; a failed step is logged and the next runs (a GPU window is too short to rerun
# everything for one failure); the exit code is 1 when any step failed:
#   env       the device, torch and CUDA versions, the cores
#   build     the extension (ninja, MAX_JOBS = the cores)
#   kernels   pytest of the CUDA kernels against their CPU twins
#   pyg       when experiments/gpu/sources/ holds them (fetch-sources.sh), torch_scatter and
#             torch_sparse built from source for the CPU (PyG's sampler runs there), timed
#   data      salientpp prepare synthetic:$PRESET and partition into $PARTS parts, timed
#   step      salientpp bench step: our kernels and step against PyG's SAGEConv and torch's dropout
#   selfcheck salientpp selfcheck on the tiny preset (gather, training, host waits)
#   train     salientpp bench train: epoch time and stages, no cache and VIP, pipeline on and off
#   profile   one epoch of the preset in 1 part (random partition) under torch.profiler
#             (profile_epoch.py: trace.json.gz and profile.txt)
# $OUT/steps.log has one line per step with its status and seconds.
set -uo pipefail
cd "$(dirname "$0")/../.."

OUT=${OUT:?set OUT to the folder for the results}
DEVICE=${DEVICE:-cuda}
PRESET=${PRESET:-products}
PARTS=${PARTS:-2}
EPOCHS=${EPOCHS:-3}
BUILD=${BUILD:-1}
KERNEL_TESTS=${KERNEL_TESTS:-1}
PYG_TIMEOUT=${PYG_TIMEOUT:-300}
SOURCES=experiments/gpu/sources
mkdir -p "$OUT" || exit 2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
failed=0

# step NAME COMMAND...: run COMMAND with its output in $OUT/NAME.log; one line in steps.log.
step() {
    local name=$1 start ms status
    shift
    start=$(date +%s%N)
    if "$@" > "$OUT/$name.log" 2>&1; then status=ok; else status="FAILED (exit $?)"; failed=1; fi
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    printf '%s %s %d.%03d s\n' "$name" "$status" $((ms / 1000)) $((ms % 1000)) | tee -a "$OUT/steps.log"
}

environment() {
    date -u +%Y-%m-%dT%H:%M:%SZ
    nproc
    if command -v nvidia-smi > /dev/null; then nvidia-smi; fi
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda); print('device',
torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')"
}

salientpp() { python3 -m salientpp "$@"; }

step env environment
[ "$BUILD" = 1 ] && step build env MAX_JOBS="$(nproc)" python3 -m pip install --no-build-isolation -e .
[ "$KERNEL_TESTS" = 1 ] && step kernels python3 -m pytest -q -p no:cacheprovider tests/test_model_ops.py
if compgen -G "$SOURCES/torch_sparse-*.tar.gz" > /dev/null; then
    step pyg env MAX_JOBS="$(nproc)" FORCE_ONLY_CPU=1 timeout "$PYG_TIMEOUT" python3 -m pip install --no-deps \
        --no-build-isolation "$SOURCES"/torch_scatter-*.tar.gz "$SOURCES"/torch_sparse-*.tar.gz
fi
step data bash -c "python3 -m salientpp prepare synthetic:$PRESET '$WORK/data' &&
                   python3 -m salientpp partition '$WORK/data' '$WORK/parts' --parts $PARTS &&
                   python3 -m salientpp partition '$WORK/data' '$WORK/one' --parts 1 --method random"
step step salientpp bench step "$WORK/data" --device "$DEVICE" --json "$OUT/bench-step.json"
step selfcheck salientpp selfcheck --device "$DEVICE" --presets tiny --epochs 2 --no-bench
step train salientpp bench train "$WORK/parts" --device "$DEVICE" --epochs "$EPOCHS" --alphas 0.1 \
    --json "$OUT/bench-train.json"
step profile python3 experiments/gpu/profile_epoch.py "$WORK/one" "$DEVICE" "$OUT"
exit $failed
