#!/usr/bin/env bash
# CPU-sized comparison on Tatoeba German-English: weighted_transformer against fairseq's
# transformer of the same size (2+2 layers, d_model 128, d_ff 512, 4 heads; M = 4
# branches; same parameters up to the 32 kappa/alpha weights), same batches, same number
# of updates, same Adam and main schedule. Prints validation loss, test BLEU and, for the
# Weighted Transformer, the kappa/alpha plot. The Weighted Transformer is the paper's, with
# kappa/alpha learned (--learned-branch-weights; weighted_transformer_small, the quick-start's
# model, fixes them to 1 by default, by measurement: docs/weighted_transformer.md). Extra
# arguments go to both trainings (e.g. --fixed-alpha for a Table 3 row: it only applies to the weighted model, so pass
# it with ARCHS=weighted_transformer).
#
#   examples/weighted_transformer/tatoeba-cpu.sh                  # ~30 min per model on 2 cores
#   MAX_UPDATE=100 examples/weighted_transformer/tatoeba-cpu.sh   # a quick look
#   PEAK_LR=1e-3 WARM=50 MAX_UPDATE=400 examples/weighted_transformer/tatoeba-cpu.sh
#       # a conventional peak learning rate instead of the paper's d_model^-0.5 scale
#       # (the kappa/alpha group keeps the paper's ratio to the main rate)
set -euo pipefail
OUT=${OUT:-checkpoints/weighted-tatoeba}
MAX_UPDATE=${MAX_UPDATE:-3000}
ARCHS=${ARCHS:-"weighted_transformer transformer"}
# shellcheck source=examples/tatoeba.sh
source "$(dirname "$0")/../tatoeba.sh"

# schedule scaled to the budget: main warm-up MAX_UPDATE/8, branch warm-up a tenth of it,
# kappa/alpha frozen for the last 10% (the paper: 4000, 400, 10k of 60k updates)
# PEAK_LR (optional) sets the main group's peak rate (reached at update WARM) instead of
# the paper's d_model^-0.5 scale; the branch group keeps the paper's ratio sqrt(N) = sqrt(2)
WARM=${WARM:-$((MAX_UPDATE / 8 > 1 ? MAX_UPDATE / 8 : 1))}
BWARM=$((WARM / 10 > 1 ? WARM / 10 : 1))
FREEZE=$((MAX_UPDATE / 10))
read -r LR BRANCH_LR < <(python -c "
import math
scale = float('${PEAK_LR:-0}') * math.sqrt($WARM) or 128 ** -0.5
print(scale, scale * math.sqrt(2))")
SIZE=(--encoder-layers 2 --decoder-layers 2 --encoder-embed-dim 128 --decoder-embed-dim 128
      --encoder-ffn-embed-dim 512 --decoder-ffn-embed-dim 512
      --encoder-attention-heads 4 --decoder-attention-heads 4 --share-all-embeddings
      --dropout 0.1 --attention-dropout 0.1)

# Table 3's "alpha, kappa both fixed to 1" row has no trainable branch weights, hence no
# "branch" parameter group for the schedule to address
fixed() { local f; for f in "${@:2}"; do [ "$f" = "$1" ] && return 0; done; return 1; }
NO_BRANCH_GROUP=0
if fixed --fixed-kappa "$@" && fixed --fixed-alpha "$@"; then NO_BRANCH_GROUP=1; fi

mkdir -p "$OUT"
for ARCH in $ARCHS; do
    SAVE="$OUT/$ARCH"
    LEARNED=(); [ "$ARCH" = transformer ] || LEARNED=(--learned-branch-weights)
    if [ "$ARCH" = transformer ] || [ "$NO_BRANCH_GROUP" = 1 ]; then
        SCHED=(--lr-scheduler grouped --lr "$LR" --group-warmup-updates "default=$WARM")
    else
        SCHED=(--lr-scheduler grouped --lr "$LR" --group-lr-scale "default=$LR,branch=$BRANCH_LR"
               --group-warmup-updates "default=$WARM,branch=$BWARM" --group-freeze-last "branch=$FREEZE")
    fi
    fairseq-train "$DATA/bin" --user-dir "$USER_DIR" --task translation_weighted -s "$SRC" -t "$TGT" "${DEV[@]}" \
        --arch "$ARCH" "${LEARNED[@]}" "${SIZE[@]}" "${SCHED[@]}" \
        --optimizer fused_adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-9 \
        --criterion label_smoothed_cross_entropy_with_stats --label-smoothing 0.1 \
        --max-tokens 4096 --max-update "$MAX_UPDATE" --validate-interval-updates 250 \
        --save-interval-updates 250 --keep-interval-updates 20 --no-epoch-checkpoints \
        --seed 1 --save-dir "$SAVE" --log-format simple --log-interval 50 \
        "$@" 2>&1 | tee "$SAVE.train.log" | grep -E "valid on|done training"
    decode_test "$ARCH" "$SAVE"
    if [ "$ARCH" != transformer ]; then
        shopt -s nullglob
        python -m fairseq_dense.cli.dump_branch_weights "$SAVE"/checkpoint_*_*.pt "$SAVE/checkpoint_last.pt" \
            --out "$SAVE.branch_weights" || true
    fi
done
