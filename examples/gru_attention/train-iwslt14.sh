#!/usr/bin/env bash
# The report's IWSLT14 De-En setting: gru_attention_iwslt_de_en, batch 32 sentences,
# dropout 0.5 before the softmax, Adam, beam 5.
# Data: examples/translation/prepare-iwslt14.sh (writes data/iwslt14.de-en/bin).
set -euo pipefail
DATA=${DATA:-data/iwslt14.de-en}
SAVE=${SAVE:-checkpoints/gru_attention_iwslt}
USER_DIR=${USER_DIR:-$(python -c 'import fairseq_dense, os; print(os.path.dirname(fairseq_dense.__file__))')}

fairseq-train "$DATA/bin" --user-dir "$USER_DIR" --arch gru_attention_iwslt_de_en \
    --optimizer fused_adam --lr 0.001 --clip-norm 5.0 --lr-scheduler reduce_lr_on_plateau --lr-shrink 0.5 \
    --criterion label_smoothed_cross_entropy_with_stats --label-smoothing 0.0 \
    --batch-size 32 --max-epoch 20 --save-dir "$SAVE" --log-format simple "$@"

fairseq-generate "$DATA/bin" --user-dir "$USER_DIR" --path "$SAVE/checkpoint_best.pt" \
    --beam 5 --batch-size 64 --required-batch-size-multiple 1 --remove-bpe --gen-subset test \
    | tee "$SAVE/generate-test.txt" | tail -1
