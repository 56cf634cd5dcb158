#!/usr/bin/env bash
# DenseNMT-En-De-15 on WMT14 English-German (Shen et al. 2018, Sec. 4.2-4.3).
#   * data: the Stanford WMT14 En-De release, 40k joint BPE codes, valid =
#     newstest2012 + newstest2013, test = newstest2014, binarised with a joined
#     dictionary into $DATA/bin (fairseq's examples/translation/prepare-wmt14en2de.sh
#     produces a comparable set).
#   * NAG lr 0.25; as in ConvS2S the rate shrinks by 10 every epoch from the first
#     rise of the validation loss on (--shrink-every-epoch-after-rise); stop below
#     1e-4; batches of 48 sentences; beam 5 with a tuned length penalty.
set -euo pipefail
DATA=${DATA:-data/wmt14.en-de}
SAVE=${SAVE:-checkpoints/densenmt_wmt_en_de_15}
LENPEN=${LENPEN:-1.0}
USER_DIR=${USER_DIR:-$(python -c 'import fairseq_dense, os; print(os.path.dirname(fairseq_dense.__file__))')}

fairseq-train "$DATA/bin" --user-dir "$USER_DIR" --arch densenmt_wmt_en_de_15 -s en -t de \
    --optimizer nag --lr 0.25 --momentum 0.99 --clip-norm 0.1 \
    --lr-scheduler convs2s_anneal --lr-shrink 0.1 --shrink-every-epoch-after-rise --stop-min-lr 1e-4 \
    --criterion label_smoothed_cross_entropy_with_stats --label-smoothing 0.0 \
    --batch-size 48 --save-dir "$SAVE" --log-format simple "$@"

fairseq-generate "$DATA/bin" --user-dir "$USER_DIR" --path "$SAVE/checkpoint_best.pt" -s en -t de \
    --beam 5 --lenpen "$LENPEN" --batch-size 64 --required-batch-size-multiple 1 --remove-bpe \
    --gen-subset test | tee "$SAVE/generate-test.txt" | tail -1
