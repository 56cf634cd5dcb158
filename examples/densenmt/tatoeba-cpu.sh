#!/usr/bin/env bash
# CPU-sized DenseNMT experiment on Tatoeba German-English: densenmt_4l_2 against the
# residual ConvS2S baseline densenmt_base_4l at the same parameter budget (both about
# 4.5-4.7M parameters outside the embeddings; 12.30M / 12.44M in all with the 10,088-type
# joint vocabulary of 10k BPE merges), same batches, same number of updates, same
# NAG + convs2s_anneal schedule. Prints validation loss and test BLEU of each.
#
#   examples/densenmt/tatoeba-cpu.sh                 # ~25 min per model on 2 cores
#   MAX_UPDATE=100 examples/densenmt/tatoeba-cpu.sh  # a quick look
#
# ARCHS takes any densenmt architecture (e.g. the Table 2 rows densenmt_enc_4l,
# densenmt_dec_4l, densenmt_att_4l, densenmt_4l_1) and `fconv_base_4l`: fairseq's own
# `fconv` configured as BASE-4L (4+4 layers, width 256, kernel 3; 12.17M parameters here).
set -euo pipefail
OUT=${OUT:-checkpoints/densenmt-tatoeba}
MAX_UPDATE=${MAX_UPDATE:-1000}
ARCHS=${ARCHS:-"densenmt_4l_2 densenmt_base_4l"}
# shellcheck source=examples/tatoeba.sh
source "$(dirname "$0")/../tatoeba.sh"

mkdir -p "$OUT"
for ARCH in $ARCHS; do
    SAVE="$OUT/$ARCH"
    MODEL=(--arch "$ARCH")
    if [ "$ARCH" = fconv_base_4l ]; then
        MODEL=(--arch fconv --encoder-embed-dim 256 --decoder-embed-dim 256 --decoder-out-embed-dim 256
               --encoder-layers "[(256, 3)] * 4" --decoder-layers "[(256, 3)] * 4")
    fi
    fairseq-train "$DATA/bin" --user-dir "$USER_DIR" "${MODEL[@]}" -s "$SRC" -t "$TGT" "${DEV[@]}" \
        --optimizer nag --lr 0.25 --momentum 0.99 --clip-norm 0.1 \
        --lr-scheduler convs2s_anneal --lr-shrink 0.1 --stop-min-lr 1e-4 \
        --criterion label_smoothed_cross_entropy_with_stats --label-smoothing 0.1 \
        --max-tokens 4096 --max-update "$MAX_UPDATE" --validate-interval-updates 250 \
        --dropout 0.2 --seed 1 --save-dir "$SAVE" --no-epoch-checkpoints --log-format simple \
        "$@" 2>&1 | tee "$SAVE.train.log" | grep -E "valid on|done training"
    decode_test "$ARCH" "$SAVE"
done
