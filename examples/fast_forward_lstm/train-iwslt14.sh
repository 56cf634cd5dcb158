#!/usr/bin/env bash
# Deep-Att / Deep-ED with the paper's settings (Zhou et al. 2016, Sec. 4.3):
# n_e = 9 (two interleaved columns), n_d = 7, embeddings 256, LSTM 512, dropout 0.1,
# recurrent matrices initialised to zero and everything else N(0, 0.07), Adam with a
# larger learning rate for the recurrent matrices (5e-4) than for all other
# parameters (4e-5), beam 3.
# Data: examples/translation/prepare-iwslt14.sh (writes data/iwslt14.de-en/bin).
#
#   ARCH=deep_ed examples/fast_forward_lstm/train-iwslt14.sh          # the fixed-vector interface
#   ARCH=deep_att_5x3 examples/fast_forward_lstm/train-iwslt14.sh     # or any ablation arch
#   examples/fast_forward_lstm/train-iwslt14.sh --max-update 1000     # extra fairseq-train flags
#
# Needs the `grouped` LR scheduler of fairseq_dense (per-group rates; the recurrent
# matrices carry param.param_group = "recurrent"). The paper also used L2
# regularisation on all layers but the embeddings; fairseq's --weight-decay covers
# all parameters, so it is left out here.
set -euo pipefail
DATA=${DATA:-data/iwslt14.de-en}
ARCH=${ARCH:-deep_att}
SAVE=${SAVE:-checkpoints/$ARCH-iwslt14}
LR=${LR:-4e-5}
RECURRENT_LR=${RECURRENT_LR:-5e-4}
USER_DIR=${USER_DIR:-$(python -c 'import fairseq_dense, os; print(os.path.dirname(fairseq_dense.__file__))')}

fairseq-train "$DATA/bin" --user-dir "$USER_DIR" --arch "$ARCH" \
    --optimizer fused_adam --adam-betas '(0.9, 0.999)' \
    --lr "$LR" --lr-scheduler grouped --group-lr-scale "recurrent=$RECURRENT_LR" \
    --dropout 0.1 --clip-norm 0.0 \
    --criterion label_smoothed_cross_entropy_with_stats --label-smoothing 0.0 \
    --max-tokens 4096 --max-epoch 30 --save-dir "$SAVE" --log-format simple "$@"

fairseq-generate "$DATA/bin" --user-dir "$USER_DIR" --path "$SAVE/checkpoint_best.pt" \
    --beam 3 --batch-size 64 --required-batch-size-multiple 1 --remove-bpe --gen-subset test \
    | tee "$SAVE/generate-test.txt" | tail -1
