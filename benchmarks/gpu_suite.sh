#!/usr/bin/env bash
# The GPU measurements the issues ask for, on a machine with one CUDA GPU and this
# package installed, run from the repository root, in stages that can be run one by one:
#
#   benchmarks/gpu_suite.sh                      # tests, harness, convergence
#   benchmarks/gpu_suite.sh tests                # CUDA correctness of every family (~1 min on an H100)
#   FAMILIES="densenmt_4l_2 weighted_transformer_small" MINUTES=1 benchmarks/gpu_suite.sh harness
#   SEEDS="1 2" benchmarks/gpu_suite.sh convergence
#
# tests        pytest tests/test_cuda.py tests/test_precision.py -> OUT/cuda_tests.log
# harness      benchmarks.run --suite all on CUDA (fairseq --amp training, bfloat16 decoding,
#              16k-token batches, validation every 200 updates) for FAMILIES -> OUT/harness/;
#              then DenseRNN against a baseline of twice its size -> OUT/harness-dense-lstm-half/
# convergence  runs whose figure is updates, not time, so they train side by side on the one GPU:
#              Weighted Transformer vs Transformer (paper schedule shape, and peak lr 1e-3) for
#              WT_UPDATES updates, DenseNMT-4L-2 vs fairseq's fconv as BASE-4L for
#              DENSENMT_UPDATES updates, one pair per seed in SEEDS; validation every 100
#              updates; tables and loss curves -> OUT/convergence/*.md, *.png
#
# Environment: CORPUS (raw {train,valid,test}.{de,en}; default ../shared/data/tatoeba-deu-eng),
# OUT (default benchmarks/out/gpu-suite), MINUTES (harness training per model, default 2),
# FAMILIES (harness models, default one per family), WT_UPDATES (3000), DENSENMT_UPDATES
# (1000), SEEDS ("1"), PYTHON (default python3); DEVICE=cpu runs every stage on the CPU (a
# check of the plumbing with tiny settings; the figures are the CPU runs' business).
set -euo pipefail
CORPUS=${CORPUS:-../shared/data/tatoeba-deu-eng}
OUT=${OUT:-benchmarks/out/gpu-suite}
MINUTES=${MINUTES:-2}
FAMILIES=${FAMILIES:-"gru_attention_small densenmt_4l_2 dense_lstm_small fast_forward_lstm_small weighted_transformer_small"}
WT_UPDATES=${WT_UPDATES:-3000}
DENSENMT_UPDATES=${DENSENMT_UPDATES:-1000}
SEEDS=${SEEDS:-1}
PYTHON=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
STAGES=${*:-tests harness convergence}

for STAGE in $STAGES; do
    case $STAGE in tests | harness | convergence) ;;
    *) echo "error: unknown stage '$STAGE' (tests, harness, convergence)" >&2; exit 2 ;;
    esac
done

# the recipes call `python`; give them this interpreter under that name (a fresh folder,
# never a link that an earlier run could have left pointing somewhere else)
if ! command -v python >/dev/null || [ "$(command -v python)" != "$(command -v "$PYTHON")" ]; then
    BIN=$(mktemp -d)
    printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v "$PYTHON")" > "$BIN/python"
    chmod +x "$BIN/python"
    export PATH="$BIN:$PATH"
fi
if [ "$DEVICE" = cuda ]; then
    "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'error: torch sees no CUDA device')"
    PRECISION=(--amp --bf16)
else
    PRECISION=()
fi
mkdir -p "$OUT"
WORK="$OUT/work"

for STAGE in $STAGES; do
    case $STAGE in
    tests)
        "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_precision.py 2>&1 \
            | tee "$OUT/cuda_tests.log" | tail -15
        ;;
    harness)
        GPU=(--device "$DEVICE" "${PRECISION[@]}" --max-tokens 16384 --validate-interval-updates 200
             --paired-train-batches 50 --budget-minutes "$MINUTES" --work-dir "$WORK")
        # shellcheck disable=SC2086
        "$PYTHON" -m benchmarks.run --suite all --corpus "$CORPUS" --src de --tgt en "${GPU[@]}" \
            --out "$OUT/harness" --models $FAMILIES || echo "harness: a family failed (see $OUT/harness/results.md)"
        if [[ " $FAMILIES " == *" dense_lstm"* ]]; then
            "$PYTHON" -m benchmarks.run --suite all --corpus "$CORPUS" --src de --tgt en "${GPU[@]}" \
                --out "$OUT/harness-dense-lstm-half" --models dense_lstm_small --baseline-param-ratio 2 \
                || echo "harness: DenseRNN at half size failed"
        fi
        ;;
    convergence)
        C="$OUT/convergence"
        DATA="$C/data"
        mkdir -p "$C"
        [ -f "$DATA/bin/dict.en.txt" ] || \
            "$PYTHON" examples/translation/prepare.py --raw "$CORPUS" --src de --tgt en --dest "$DATA" --bpe-merges 10000
        pids=()
        for SEED in $SEEDS; do
            for SETTING in paper lr1e-3; do
                PEAK=0; [ "$SETTING" = lr1e-3 ] && PEAK=1e-3
                for ARCH in weighted_transformer transformer; do
                    D="$C/wt-$SETTING-seed$SEED"; mkdir -p "$D"
                    DEVICE=$DEVICE DATA="$DATA" OUT="$D" MAX_UPDATE="$WT_UPDATES" ARCHS=$ARCH PEAK_LR=$PEAK \
                        OMP_NUM_THREADS=1 bash examples/weighted_transformer/tatoeba-cpu.sh \
                        --validate-interval-updates 100 --seed "$SEED" > "$D/$ARCH.out" 2>&1 &
                    pids+=($!)
                done
            done
            for ARCH in densenmt_4l_2 fconv_base_4l; do
                D="$C/densenmt-seed$SEED"; mkdir -p "$D"
                DEVICE=$DEVICE DATA="$DATA" OUT="$D" MAX_UPDATE="$DENSENMT_UPDATES" ARCHS=$ARCH OMP_NUM_THREADS=1 \
                    bash examples/densenmt/tatoeba-cpu.sh --validate-interval-updates 100 --seed "$SEED" \
                    > "$D/$ARCH.out" 2>&1 &
                pids+=($!)
            done
        done
        failed=0
        for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
        [ "$failed" = 0 ] || echo "convergence: a run failed (see $C/*/*.out)"
        for D in "$C"/wt-* "$C"/densenmt-*; do
            [ -d "$D" ] || continue
            "$PYTHON" -m benchmarks.recipe_table "$D"/*.train.log --plot "$D.png" > "$D.md" || true
            echo "== $(basename "$D")"; cat "$D.md"
        done
        ;;
    esac
done
