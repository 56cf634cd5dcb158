#!/usr/bin/env bash
# The prepared GPU command: the CUDA tests, each family's paper preset in mixed precision, then the training
# figures, in one call of at most 9 minutes on one GPU machine (Python 3.12, torch + CUDA, no fairseq, no
# network), from the repository root. Each stage writes to $OUT as it finishes: a time-out returns what ran.
#
#   benchmarks/gpu_figures.sh      # on the GPU machine, with .gpu/ (the wheels) copied there; one 600-s command
#   DEVICE=cpu TESTS_S=0 FIGURES_ARGS="--tiny ..." benchmarks/gpu_figures.sh   # dry run (the presets' tests skip)
#
# stage    cap (s)           expected on one H100/H200                      writes to OUT
# install  INSTALL_S=30      8 s (2026-11-27: 7-8 s; none on a rerun)        install.log, machine.txt
# tests    TESTS_S=140       102-128 s (2026-11-27, H200)                    cuda_tests.log
# presets  PRESETS_S=100     about 70 s, estimated from 2026-11-27's steps   presets.log
#                            (25-170 ms at 8k tokens): 6 presets x 2
#                            precisions x (build 2 s, 50 updates at 2k
#                            tokens, one decode), deep_att's --fp16 run
# figures  FIGURES_S: what   about 260 s, estimated: 8 bf16 jobs x 15 s     gpu_figures.{json,md}, figures.log
#          is left of        (2 builds, a count, 2 shapes x 2 sides x 12
#          TOTAL_S=540       updates of 0.1-0.4 s), fused/adam 9 s, 7 amp
#                            jobs x 9 s, 13 kernel profiles x 4 s
# stages.log has each stage's exit status and start time.
#   install  only when fairseq does not import (SITE on the path): the wheels of benchmarks/gpu_wheels.sh
#            (.gpu/whl) into SITE (benchmarks/gpu_install.sh)
#   tests    pytest tests/test_cuda.py tests/test_precision.py, stopped with SIGINT at its cap (pytest still
#            prints its summary)
#   presets  pytest tests/test_mixed_precision.py -k "$PRESETS_K": the paper preset of each PAPER_PAIRS entry
#            (benchmarks/counterparts.py), 50 updates under float16 with loss scaling and under bfloat16, a
#            beam-5 decode each, and fairseq-train --fp16 of deep_att; stopped with SIGINT at its cap
#   figures  python -m benchmarks.gpu_figures (the A/A pair first; 32,768-token batches and 8,192 x
#            --update-freq 4; interleaved rounds; bfloat16 headline, --amp skipped updates; fused optimizer
#            and fairseq's adam once; 6N MFU); stops starting measurements at 85% of its cap
# Environment: OUT (benchmarks/out/gpu-figures), DEVICE (cuda), PYTHON (python3), SITE ($TMPDIR/site), the caps
# above (0 skips a stage; FIGURES_S a fixed cap), PRESETS_K (the presets' tests), FIGURES_ARGS (more options of
# benchmarks.gpu_figures).
set -uo pipefail
OUT=${OUT:-benchmarks/out/gpu-figures}
DEVICE=${DEVICE:-cuda}
PYTHON=${PYTHON:-python3}
SITE=${SITE:-${TMPDIR:-/tmp}/site}
INSTALL_S=${INSTALL_S:-30}
TESTS_S=${TESTS_S:-140}
PRESETS_S=${PRESETS_S:-100}
TOTAL_S=${TOTAL_S:-540}
# (one line: pytest reads no expression across a line break)
PRESETS_K=${PRESETS_K:-"gpu and (weighted_transformer_a- or densenmt_wmt_en_de_15- or densenmt_4l_2- or dense_lstm_6l- or deep_att- or gru_attention_iwslt_de_en- or deep_att])"}
FIGURES_ARGS=${FIGURES_ARGS:-}
mkdir -p "$OUT"
START=$(date +%s)
log() { echo "[$(($(date +%s) - START)) s] $*" | tee -a "$OUT/stages.log"; }

log "start: DEVICE=$DEVICE TOTAL_S=$TOTAL_S TESTS_S=$TESTS_S PRESETS_S=$PRESETS_S FIGURES_S=${FIGURES_S:-rest}"
# shellcheck source=benchmarks/gpu_install.sh
source "$(dirname "$0")/gpu_install.sh"
gpu_install

if [ "$TESTS_S" -gt 0 ]; then
    timeout -s INT -k 15 "$TESTS_S" "$PYTHON" -m pytest -q -rs -p no:cacheprovider tests/test_cuda.py \
        tests/test_precision.py >"$OUT/cuda_tests.log" 2>&1
    log "tests: exit $? ($(tail -1 "$OUT/cuda_tests.log"))"
fi
if [ "$PRESETS_S" -gt 0 ]; then
    timeout -s INT -k 15 "$PRESETS_S" "$PYTHON" -m pytest -q -rA -p no:cacheprovider tests/test_mixed_precision.py \
        -k "$PRESETS_K" >"$OUT/presets.log" 2>&1
    log "presets: exit $? ($(tail -1 "$OUT/presets.log"))"
fi
FIGURES_S=${FIGURES_S:-$((TOTAL_S - $(date +%s) + START))}
if [ "$FIGURES_S" -gt 0 ]; then
    # shellcheck disable=SC2086
    timeout -k 10 "$FIGURES_S" "$PYTHON" -m benchmarks.gpu_figures --device "$DEVICE" --out "$OUT" \
        --budget-s $((FIGURES_S * 85 / 100)) $FIGURES_ARGS >"$OUT/figures.log" 2>&1
    log "figures: exit $? (cap $FIGURES_S s; OUT/gpu_figures.md)"
fi
log "done"
