#!/usr/bin/env bash
# The paper's recipe: Adadelta lr 1.0, lr /10 when validation does not improve
# (reduce_lr_on_plateau, shrink 0.1), separate state / softmax dropout; beam 6
# (MT) or BEAM=10 (summarisation). ARCH: dense_lstm_6l, dense_lstm_10l,
# dense_lstm_baseline_4l, dense_lstm_dc_4l, ... DATA: a fairseq-preprocess folder.
set -euo pipefail
DATA=${DATA:?set DATA}; ARCH=${ARCH:-dense_lstm_6l}; BEAM=${BEAM:-6}
SAVE=${SAVE:-checkpoints/$ARCH}
USER_DIR=${USER_DIR:-$(python -c 'import fairseq_dense, os; print(os.path.dirname(fairseq_dense.__file__))')}
fairseq-train "$DATA" --user-dir "$USER_DIR" --arch "$ARCH" \
    --optimizer adadelta --lr 1.0 --clip-norm 5.0 \
    --lr-scheduler reduce_lr_on_plateau --lr-shrink 0.1 --stop-min-lr 1e-5 \
    --dropout 0.2 --softmax-dropout 0.3 \
    --criterion label_smoothed_cross_entropy_with_stats --label-smoothing 0.0 \
    --batch-size ${BATCH:-128} --save-dir "$SAVE" --log-format simple "$@"
fairseq-generate "$DATA" --user-dir "$USER_DIR" --path "$SAVE/checkpoint_best.pt" \
    --beam "$BEAM" --batch-size 64 --required-batch-size-multiple 1 --remove-bpe --gen-subset test \
    | tee "$SAVE/generate-test.txt" | tail -1
