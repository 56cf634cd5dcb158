#!/usr/bin/env bash
# CPU comparison on Tatoeba De-En: DenseRNN (dense_lstm_small, 7.4M) vs the stacked
# baseline (dense_lstm_baseline_small, 12.4M), same wall-clock budget each. Its corpus (8k BPE merges) has
# its own folder: the other Tatoeba recipes (examples/tatoeba.sh) take data/tatoeba-deu-eng as it is.
set -euo pipefail
RAW=${RAW:-../shared/data/tatoeba-deu-eng}; DEST=${DEST:-data/tatoeba-deu-eng-8k}; MIN=${MIN:-30}
fairseq-dense-prepare --raw "$RAW" --src de --tgt en --dest "$DEST" --bpe-merges 8000
for ARCH in dense_lstm_small dense_lstm_baseline_small; do
  DATA="$DEST/bin" ARCH=$ARCH BATCH=64 bash examples/dense_lstm/train.sh --cpu \
      --stop-time-hours $(python -c "print($MIN/60)") --dropout 0.2 --softmax-dropout 0.2
done
