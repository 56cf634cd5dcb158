#!/usr/bin/env bash
# What a CUDA GPU should measure, in stages, from the repository root with the package installed:
#
#   benchmarks/gpu_suite.sh                      # tests, harness, convergence
#   FAMILIES="densenmt_4l_2" MINUTES=1 benchmarks/gpu_suite.sh harness
#
# tests        pytest tests/test_cuda.py tests/test_precision.py -> OUT/cuda_tests.log
# harness      benchmarks.run for FAMILIES, MINUTES each (--amp training, bfloat16 decoding, 16k-token
#              batches, validation every 200 updates) -> OUT/harness/
# convergence  loss at equal updates: Weighted Transformer and DenseNMT-4L-2 against their counterparts,
#              both of a pair trained at once on the GPU (--concurrent) for UPDATES updates, one run per
#              seed in SEEDS -> OUT/convergence-<model>-seed<N>/
#
# Environment: CORPUS (raw {train,valid,test}.{de,en}; default ../shared/data/tatoeba-deu-eng), OUT
# (benchmarks/out/gpu-suite), MINUTES (2), FAMILIES (one arch per family), UPDATES (3000), SEEDS ("1"),
# PYTHON (python3); DEVICE=cpu checks the plumbing on a CPU.
set -euo pipefail
CORPUS=${CORPUS:-../shared/data/tatoeba-deu-eng}
OUT=${OUT:-benchmarks/out/gpu-suite}
MINUTES=${MINUTES:-2}
FAMILIES=${FAMILIES:-"gru_attention_small densenmt_4l_2 dense_lstm_small fast_forward_lstm_small weighted_transformer_small"}
UPDATES=${UPDATES:-3000}
SEEDS=${SEEDS:-1}
PYTHON=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
STAGES=${*:-tests harness convergence}

for STAGE in $STAGES; do
    case $STAGE in tests | harness | convergence) ;;
    *) echo "error: unknown stage '$STAGE' (tests, harness, convergence)" >&2; exit 2 ;;
    esac
done
if [ "$DEVICE" = cuda ]; then
    "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'error: torch sees no CUDA device')"
    PRECISION=(--amp --bf16)
else
    PRECISION=()
fi
mkdir -p "$OUT"
RUN=("$PYTHON" -m benchmarks.run --corpus "$CORPUS" --src de --tgt en --device "$DEVICE" "${PRECISION[@]}"
     --max-tokens 16384 --validate-interval-updates 200 --paired-train-batches 50 --work-dir "$OUT/work")

for STAGE in $STAGES; do
    case $STAGE in
    tests)
        "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_precision.py 2>&1 \
            | tee "$OUT/cuda_tests.log" | tail -15
        ;;
    harness)
        # shellcheck disable=SC2086
        "${RUN[@]}" --budget-minutes "$MINUTES" --out "$OUT/harness" --models $FAMILIES \
            || echo "harness: a model failed (see $OUT/harness/results.md)"
        ;;
    convergence)
        for SEED in $SEEDS; do
            for MODEL in weighted_transformer_small densenmt_4l_2; do
                "${RUN[@]}" --budget-minutes 600 --max-update "$UPDATES" --validate-interval-updates 100 \
                    --concurrent --seed "$SEED" --models "$MODEL" --out "$OUT/convergence-$MODEL-seed$SEED" \
                    || echo "convergence: $MODEL failed (see $OUT/convergence-$MODEL-seed$SEED/results.md)"
            done
        done
        ;;
    esac
done
