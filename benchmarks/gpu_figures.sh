#!/usr/bin/env bash
# Every GPU figure of the paper-size pairs, then the CUDA tests, in at most 8 minutes on one GPU machine
# (Python 3.12, torch + CUDA, no fairseq, no network), from the repository root; results go to $OUT as they come.
#
#   benchmarks/gpu_figures.sh                                  # on the GPU machine (.gpu/, the wheels, copied there)
#   DEVICE=cpu TESTS_S=0 ARGS="--tiny --vocab 200 --max-tokens 256 --steps 1 --warmup 1" benchmarks/gpu_figures.sh
#
# Stages, each under its own time cap (install 60 s + FIGURES_S + TESTS_S <= 8 minutes):
#   install  when fairseq does not import (with SITE on the path: a rerun on the same machine installs
#            nothing): pip install --no-index --no-deps --no-compile --target $SITE .gpu/whl/*.whl (the
#            wheels prepared by benchmarks/gpu_wheels.sh), then PYTHONPATH=$PWD:$SITE -> OUT/install.log
#   figures  python -m benchmarks.gpu_figures (GEMM peak; per pair, in the order of --pairs, and precision:
#            tok/s, MFU, peak memory, beam-5 sent/s; then kernels/step under the profiler, after every
#            timing) -> OUT/gpu_figures.{json,md}, OUT/figures.log
#   tests    pytest tests/test_cuda.py tests/test_precision.py -> OUT/cuda_tests.log (TESTS_S=0 skips it;
#            stopped with SIGINT at its cap, so that pytest still prints its summary)
# Environment: OUT (benchmarks/out/gpu-figures), DEVICE (cuda), PYTHON (python3), FIGURES_S (270), TESTS_S (150),
# ARGS (more benchmarks.gpu_figures options, e.g. "--pairs wt_a deep_att"), SITE ($TMPDIR/site: where the wheels go).
set -uo pipefail
OUT=${OUT:-benchmarks/out/gpu-figures}
DEVICE=${DEVICE:-cuda}
PYTHON=${PYTHON:-python3}
FIGURES_S=${FIGURES_S:-270}
TESTS_S=${TESTS_S:-150}
ARGS=${ARGS:-}
SITE=${SITE:-${TMPDIR:-/tmp}/site}
mkdir -p "$OUT"
START=$(date +%s)
log() { echo "[$(($(date +%s) - START)) s] $*" | tee -a "$OUT/stages.log"; }

log "start: DEVICE=$DEVICE FIGURES_S=$FIGURES_S TESTS_S=$TESTS_S ARGS=$ARGS"
# shellcheck source=benchmarks/gpu_install.sh
source "$(dirname "$0")/gpu_install.sh"
gpu_install

# shellcheck disable=SC2086
timeout -k 10 "$FIGURES_S" "$PYTHON" -m benchmarks.gpu_figures --device "$DEVICE" --out "$OUT" \
    --budget-s $((FIGURES_S * 85 / 100)) $ARGS >"$OUT/figures.log" 2>&1
log "figures: exit $? (OUT/gpu_figures.md)"

if [ "$TESTS_S" -gt 0 ]; then
    timeout -s INT -k 15 "$TESTS_S" "$PYTHON" -m pytest -q -rs -p no:cacheprovider tests/test_cuda.py \
        tests/test_precision.py >"$OUT/cuda_tests.log" 2>&1
    log "tests: exit $? ($(tail -1 "$OUT/cuda_tests.log"))"
fi
log "done"
