#!/usr/bin/env bash
# The prepared GPU command: the CUDA tests, every paper preset in mixed precision, then the training
# figures, in one call of at most 9 minutes on one GPU machine (Python 3.12, torch + CUDA, no fairseq, no
# network), from the repository root. Each stage writes to $OUT as it finishes: a time-out returns what ran.
#
#   benchmarks/gpu_figures.sh      # device tool: run(command="benchmarks/gpu_figures.sh", carry=[".gpu"], timeout_s=600)
#   DEVICE=cpu TESTS_S=0 PRESETS_ARGS="--tiny ..." FIGURES_ARGS="--tiny ..." benchmarks/gpu_figures.sh   # dry run
#
# stage    cap (s)           expected on one H100/H200                      writes to OUT
# install  INSTALL_S=30      8 s (2026-11-27: 7-8 s; none on a rerun)        install.log, machine.txt
# tests    TESTS_S=140       102-128 s (2026-11-27, H200)                    cuda_tests.log
# presets  PRESETS_S=100     60-90 s, estimated (2026-11-27 steps of 25-170  presets.{json,md}, presets.log
#                            ms at 8k tokens): 6 presets x 2 precisions x
#                            50 updates + a build and a decode each
# figures  FIGURES_S=260     170-230 s, estimated: 9 jobs x (2 builds, a     gpu_figures.{json,md}, figures.log
#                            count, per shape 2 warm-up + 5 x 2 timed
#                            updates a side), 7 amp jobs, kernel profiles
# The caps add up to 530 s; stages.log has each stage's exit status and start time.
#   install  only when fairseq does not import (SITE on the path): the wheels of benchmarks/gpu_wheels.sh
#            (.gpu/whl) into SITE (benchmarks/gpu_install.sh)
#   tests    pytest tests/test_cuda.py tests/test_precision.py, stopped with SIGINT at its cap (pytest still
#            prints its summary)
#   presets  python -m benchmarks.gpu_presets (50 updates of each paper preset under --amp and bfloat16, loss
#            and loss scale logged, one beam-5 decode each); stops starting presets at 80% of its cap
#   figures  python -m benchmarks.gpu_figures (the A/A pair first; 32,768-token batches and 8,192 x
#            --update-freq 4; interleaved rounds; bfloat16 headline, --amp skipped updates; fused optimizer
#            and fairseq's adam once; 6N MFU); stops starting measurements at 85% of its cap
# Environment: OUT (benchmarks/out/gpu-figures), DEVICE (cuda), PYTHON (python3), SITE (/tmp/site), the caps
# above (0 skips a stage), PRESETS_ARGS / FIGURES_ARGS (more options of each module, e.g. "--pairs wt_a gru").
set -uo pipefail
OUT=${OUT:-benchmarks/out/gpu-figures}
DEVICE=${DEVICE:-cuda}
PYTHON=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
INSTALL_S=${INSTALL_S:-30}
TESTS_S=${TESTS_S:-140}
PRESETS_S=${PRESETS_S:-100}
FIGURES_S=${FIGURES_S:-260}
PRESETS_ARGS=${PRESETS_ARGS:-"--presets deep_att dense_rnn gru densenmt_wmt densenmt_iwslt wt_a"}
FIGURES_ARGS=${FIGURES_ARGS:-}
mkdir -p "$OUT"
START=$(date +%s)
log() { echo "[$(($(date +%s) - START)) s] $*" | tee -a "$OUT/stages.log"; }

log "start: DEVICE=$DEVICE TESTS_S=$TESTS_S PRESETS_S=$PRESETS_S FIGURES_S=$FIGURES_S"
# shellcheck source=benchmarks/gpu_install.sh
source "$(dirname "$0")/gpu_install.sh"
gpu_install

if [ "$TESTS_S" -gt 0 ]; then
    timeout -s INT -k 15 "$TESTS_S" "$PYTHON" -m pytest -q -rs -p no:cacheprovider tests/test_cuda.py \
        tests/test_precision.py >"$OUT/cuda_tests.log" 2>&1
    log "tests: exit $? ($(tail -1 "$OUT/cuda_tests.log"))"
fi
if [ "$PRESETS_S" -gt 0 ]; then
    # shellcheck disable=SC2086
    timeout -k 10 "$PRESETS_S" "$PYTHON" -m benchmarks.gpu_presets --device "$DEVICE" --out "$OUT" \
        --budget-s $((PRESETS_S * 80 / 100)) $PRESETS_ARGS >"$OUT/presets.log" 2>&1
    log "presets: exit $? (OUT/presets.md)"
fi
if [ "$FIGURES_S" -gt 0 ]; then
    # shellcheck disable=SC2086
    timeout -k 10 "$FIGURES_S" "$PYTHON" -m benchmarks.gpu_figures --device "$DEVICE" --out "$OUT" \
        --budget-s $((FIGURES_S * 85 / 100)) $FIGURES_ARGS >"$OUT/figures.log" 2>&1
    log "figures: exit $? (OUT/gpu_figures.md)"
fi
log "done"
