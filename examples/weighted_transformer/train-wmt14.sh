#!/usr/bin/env bash
# The paper's WMT'14 recipe (Ahmed et al., 2017, Sec. 4.1) for every configuration of
# Table 2: Adam (0.9, 0.98, eps 1e-9), label smoothing 0.1, shared BPE vocabulary with
# tied embeddings, ~25k source+target tokens per batch, main rate
# d^-0.5 min(u^-0.5, u 4000^-1.5), branch-weight rate (d/N)^-0.5 min(u^-0.5, u 400^-1.5),
# kappa/alpha frozen for the last 10k updates; 60k updates (250k for configuration B).
# kappa/alpha are learned, as in the paper (the default of these paper presets; the recipe
# also passes --learned-branch-weights, so a changed default cannot change what it runs).
#
#   DATA=data-bin/wmt14_en_de ARCH=weighted_transformer_c examples/weighted_transformer/train-wmt14.sh
#
# DATA: a fairseq-preprocess'd joined-dictionary corpus (e.g. fairseq's
# examples/translation/prepare-wmt14en2de.sh then fairseq-preprocess --joined-dictionary).
# GPUS x MAX_TOKENS x UPDATE_FREQ ~ 25,000 tokens. Extra arguments go to fairseq-train
# (e.g. the Table 3 flags, see ablations.sh).
set -euo pipefail
DATA=${DATA:?set DATA to a binarised joined-dictionary corpus}
ARCH=${ARCH:-weighted_transformer_a}
SAVE=${SAVE:-checkpoints/$ARCH}
MAX_TOKENS=${MAX_TOKENS:-3125}
UPDATE_FREQ=${UPDATE_FREQ:-8}
USER_DIR=${USER_DIR:-$(python -c 'import fairseq_dense, os; print(os.path.dirname(fairseq_dense.__file__))')}

case "$ARCH" in
    weighted_transformer_c) D=512; N=2; MAX_UPDATE=${MAX_UPDATE:-60000} ;;
    weighted_transformer_n4) D=512; N=4; MAX_UPDATE=${MAX_UPDATE:-60000} ;;
    weighted_transformer_a|weighted_transformer) D=512; N=6; MAX_UPDATE=${MAX_UPDATE:-60000} ;;
    weighted_transformer_n8) D=512; N=8; MAX_UPDATE=${MAX_UPDATE:-60000} ;;
    weighted_transformer_b) D=1024; N=6; MAX_UPDATE=${MAX_UPDATE:-250000} ;;
    *) echo "unknown ARCH $ARCH" >&2; exit 2 ;;
esac
read -r LR BRANCH_LR < <(python -c "print($D ** -0.5, ($D / $N) ** -0.5)")
# Table 3's "alpha, kappa both fixed to 1" row has no trainable branch weights, hence no
# "branch" parameter group for the schedule to address
fixed() { local f; for f in "${@:2}"; do [ "$f" = "$1" ] && return 0; done; return 1; }
if fixed --fixed-kappa "$@" && fixed --fixed-alpha "$@"; then
    SCHED=(--group-warmup-updates default=4000)
else
    SCHED=(--group-lr-scale "default=$LR,branch=$BRANCH_LR" --group-warmup-updates default=4000,branch=400
           --group-freeze-last branch=10000)
fi

fairseq-train "$DATA" --user-dir "$USER_DIR" --task translation_weighted \
    --arch "$ARCH" --learned-branch-weights --share-all-embeddings \
    --optimizer fused_adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-9 \
    --criterion label_smoothed_cross_entropy_with_stats --label-smoothing 0.1 \
    --lr-scheduler grouped --lr "$LR" "${SCHED[@]}" --max-update "$MAX_UPDATE" \
    --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" \
    --fp16 --fp16-no-flatten-grads \
    --save-dir "$SAVE" --save-interval-updates 5000 --keep-interval-updates 20 \
    --log-format simple --log-interval 100 "$@"

# no checkpoint averaging (the paper returns the final model)
fairseq-generate "$DATA" --user-dir "$USER_DIR" --path "$SAVE/checkpoint_last.pt" \
    --beam 4 --lenpen 0.6 --remove-bpe --batch-size 128 --required-batch-size-multiple 1 \
    --gen-subset test > "$SAVE/test.txt"
tail -1 "$SAVE/test.txt"
# kappa/alpha trajectories over the saved checkpoints (the paper's Figure 3)
python -m fairseq_dense.cli.dump_branch_weights "$SAVE"/checkpoint_*_*.pt "$SAVE/checkpoint_last.pt" --out "$SAVE/branch_weights"
