#!/usr/bin/env bash
# DenseNMT on IWSLT14 + SETimes Turkish-English (Shen et al. 2018, Sec. 4.1): the
# paper's training settings. Data preparation is not automated here: the paper
# removes pairs with length ratio > 9 (360k pairs), learns 30k BPE codes
# separately per language, uses tst2011-2014 as test and dev2010+tst2010 as
# valid; binarise with fairseq-preprocess (separate dictionaries) into $DATA/bin.
# For Tr-En-morph, segment Turkish with Zemberek first and keep English words.
set -euo pipefail
DATA=${DATA:-data/iwslt14-setimes.tr-en}
ARCH=${ARCH:-densenmt_8l_2}
SAVE=${SAVE:-checkpoints/${ARCH}_tr_en}
USER_DIR=${USER_DIR:-$(python -c 'import fairseq_dense, os; print(os.path.dirname(fairseq_dense.__file__))')}

fairseq-train "$DATA/bin" --user-dir "$USER_DIR" --arch "$ARCH" -s tr -t en \
    --optimizer nag --lr 0.25 --momentum 0.99 --clip-norm 0.1 \
    --lr-scheduler convs2s_anneal --lr-shrink 0.1 --stop-min-lr 1e-4 \
    --criterion label_smoothed_cross_entropy_with_stats --label-smoothing 0.0 \
    --batch-size 32 --dropout 0.2 --save-dir "$SAVE" --log-format simple "$@"

fairseq-generate "$DATA/bin" --user-dir "$USER_DIR" --path "$SAVE/checkpoint_best.pt" -s tr -t en \
    --beam 5 --batch-size 64 --required-batch-size-multiple 1 --remove-bpe --gen-subset test \
    | tee "$SAVE/generate-test.txt" | tail -1
