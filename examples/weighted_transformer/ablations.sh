#!/usr/bin/env bash
# Table 3 (training ablations) and Table 4 (test-time weights) of Ahmed et al., 2017, on
# configuration (C). Each Table 3 row is a flag of the model; Table 4 overrides the
# learned weights of the full model at generation time.
#
#   DATA=data-bin/wmt14_en_de examples/weighted_transformer/ablations.sh
#   CPU-sized, one Table 3 row a run (its own OUT; see README):
#   OUT=checkpoints/wt-kappa-only ARCHS=weighted_transformer examples/weighted_transformer/tatoeba-cpu.sh --fixed-alpha
set -euo pipefail
DATA=${DATA:?set DATA to a binarised joined-dictionary corpus}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-checkpoints/ablations}
USER_DIR=${USER_DIR:-$(python -c 'import fairseq_dense, os; print(os.path.dirname(fairseq_dense.__file__))')}

declare -A ROWS=(
    [full]=""                                   # Weighted Transformer            24.8
    [kappa_only]="--fixed-alpha"                # train kappa, alpha fixed to 1   24.5
    [alpha_only]="--fixed-kappa"                # train alpha, kappa fixed to 1   23.9
    [neither]="--fixed-kappa --fixed-alpha"     # alpha, kappa both fixed to 1    23.6
    [no_simplex]="--no-simplex"                 # without the simplex constraints 24.5
)
for ROW in full kappa_only alpha_only neither no_simplex; do
    # shellcheck disable=SC2086
    ARCH=weighted_transformer_c SAVE="$OUT/$ROW" DATA="$DATA" "$HERE/train-wmt14.sh" ${ROWS[$ROW]}
done

# Table 4: the full model with uniform (1/M) or random (fixed draw from the simplex) weights
for W in uniform random; do
    fairseq-generate "$DATA" --user-dir "$USER_DIR" --path "$OUT/full/checkpoint_last.pt" \
        --model-overrides "{'branch_weights_at_inference': '$W'}" \
        --beam 4 --lenpen 0.6 --remove-bpe --batch-size 128 --required-batch-size-multiple 1 \
        --gen-subset test > "$OUT/full/test.$W.txt"
    echo "test-time weights $W: $(tail -1 "$OUT/full/test.$W.txt")"
done
