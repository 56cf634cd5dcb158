#!/usr/bin/env bash
# DenseNMT on IWSLT14 German-English (Shen et al. 2018, Sec. 4): the paper's settings.
#   * data: examples/translation/prepare-iwslt14.sh with 25k joint BPE merges
#       BPE_MERGES=25000 examples/translation/prepare-iwslt14.sh data/iwslt14.de-en.25k
#   * NAG, lr 0.25, divided by 10 whenever the validation loss rises, stop below 1e-4;
#     batches of 32 sentences; beam 5.
#   * ARCH: densenmt_4l_2 (default), densenmt_4l_1, densenmt_base_4l, the Table 2
#     ablations densenmt_{enc,dec,att}_4l, or the 8-layer densenmt_{base_8l,8l_1,8l_2}.
#   * Table 1's smaller embeddings: pass --factorized-embed-dim 64 (or 128).
# Extra arguments go to fairseq-train, e.g. --max-epoch 2 for a smoke test.
set -euo pipefail
DATA=${DATA:-data/iwslt14.de-en.25k}
ARCH=${ARCH:-densenmt_4l_2}
SAVE=${SAVE:-checkpoints/${ARCH}_iwslt14}
USER_DIR=${USER_DIR:-$(python -c 'import fairseq_dense, os; print(os.path.dirname(fairseq_dense.__file__))')}

fairseq-train "$DATA/bin" --user-dir "$USER_DIR" --arch "$ARCH" \
    --optimizer nag --lr 0.25 --momentum 0.99 --clip-norm 0.1 \
    --lr-scheduler convs2s_anneal --lr-shrink 0.1 --stop-min-lr 1e-4 \
    --criterion label_smoothed_cross_entropy_with_stats --label-smoothing 0.0 \
    --batch-size 32 --dropout 0.2 --save-dir "$SAVE" --log-format simple "$@"

fairseq-generate "$DATA/bin" --user-dir "$USER_DIR" --path "$SAVE/checkpoint_best.pt" \
    --beam 5 --batch-size 64 --required-batch-size-multiple 1 --remove-bpe --gen-subset test \
    | tee "$SAVE/generate-test.txt" | tail -1
