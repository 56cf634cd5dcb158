#!/usr/bin/env bash
# Every GPU figure of the paper-size pairs, then the CUDA tests, in at most 8 minutes on one GPU machine
# (Python 3.12, torch + CUDA, no fairseq, no network), from the repository root; results go to $OUT as they come.
#
#   benchmarks/gpu_figures.sh                                  # on the GPU machine (carry .gpu: the wheels)
#   DEVICE=cpu TESTS_S=0 ARGS="--tiny --vocab 200 --max-tokens 256 --steps 1 --warmup 1" benchmarks/gpu_figures.sh
#
# Stages, each under its own time cap (install 60 s + FIGURES_S + TESTS_S <= 8 minutes):
#   install  when fairseq does not import (with SITE on the path: a rerun on the same machine installs
#            nothing): pip install --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl (the
#            wheels prepared by benchmarks/gpu_wheels.sh), then PYTHONPATH=$PWD:/tmp/site -> OUT/install.log
#   figures  python -m benchmarks.gpu_figures (GEMM peak; per pair, in the order of --pairs, and precision:
#            tok/s, MFU, peak memory, beam-5 sent/s; then kernels/step under the profiler, after every
#            timing) -> OUT/gpu_figures.{json,md}, OUT/figures.log
#   tests    pytest tests/test_cuda.py tests/test_precision.py -> OUT/cuda_tests.log (TESTS_S=0 skips it;
#            stopped with SIGINT at its cap, so that pytest still prints its summary)
# Environment: OUT (benchmarks/out/gpu-figures), DEVICE (cuda), PYTHON (python3), FIGURES_S (270), TESTS_S (150),
# ARGS (more benchmarks.gpu_figures options, e.g. "--pairs wt_a deep_att"), SITE (/tmp/site: where the wheels go).
set -uo pipefail
OUT=${OUT:-benchmarks/out/gpu-figures}
DEVICE=${DEVICE:-cuda}
PYTHON=${PYTHON:-python3}
FIGURES_S=${FIGURES_S:-270}
TESTS_S=${TESTS_S:-150}
ARGS=${ARGS:-}
SITE=${SITE:-/tmp/site}
mkdir -p "$OUT"
START=$(date +%s)
log() { echo "[$(($(date +%s) - START)) s] $*" | tee -a "$OUT/stages.log"; }

log "start: DEVICE=$DEVICE FIGURES_S=$FIGURES_S TESTS_S=$TESTS_S ARGS=$ARGS"
probe() {  # the versions, or why fairseq does not import
    "$PYTHON" -c "import sys, torch, fairseq; print('python', sys.version.split()[0], 'torch', torch.__version__,
'cuda', torch.version.cuda, 'fairseq', fairseq.__version__)" >"$OUT/machine.txt" 2>"$OUT/import.log"
}
export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH"
if probe; then
    log "install: fairseq imports already, nothing installed"
else
    if ! ls .gpu/whl/*.whl >/dev/null 2>&1; then
        log "install: error: no wheels in .gpu/whl (prepare them with benchmarks/gpu_wheels.sh, carry .gpu)"
        exit 2
    fi
    timeout -k 5 60 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" \
        .gpu/whl/*.whl >"$OUT/install.log" 2>&1
    log "install: exit $? ($(ls .gpu/whl/*.whl | wc -l) wheels into $SITE)"
    if ! probe; then
        log "error: fairseq does not import: $(grep -E 'Error' "$OUT/import.log" | tail -1) (add the wheel to .gpu/whl)"
        exit 2
    fi
fi
if [ "$DEVICE" = cuda ]; then
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv >>"$OUT/machine.txt" 2>&1
fi
nproc >>"$OUT/machine.txt"
log "machine: $(grep -m1 "^python" "$OUT/machine.txt")"

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
