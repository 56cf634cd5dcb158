#!/usr/bin/env bash
# CPU-sized version of the paper's Table 2/3 question: do fast-forward (FF)
# connections matter more as the model gets deeper? Four Deep-Att models on
# Tatoeba De-En, narrowed to embed 128 / LSTM 128 so a laptop CPU can train them:
#
#   2x2 with FF (deep_att_2x2), 2x2 without FF (deep_att_2x2_no_ff),
#   5x3 with FF (deep_att_5x3), 5x3 without FF (deep_att_5x3 --no-fast-forward)
#
# Each trains for the same wall-clock budget (MINUTES, default 15), then decodes
# the test set with beam 3 (the paper's best beam) and is scored with sacreBLEU.
# The learning rates are raised from the paper's (4e-5 / 5e-4 recurrent, tuned for
# days of GPU training) to 1e-3 / 2e-3 so a short budget shows progress; the
# ratio "recurrent larger" is kept.
#
#   examples/fast_forward_lstm/tatoeba-ff-ablation.sh [CORPUS_DIR] [WORK_DIR]
#   MINUTES=30 examples/fast_forward_lstm/tatoeba-ff-ablation.sh
set -euo pipefail
CORPUS=${1:-../shared/data/tatoeba-deu-eng}
WORK=${2:-work/deep_att_tatoeba}
MINUTES=${MINUTES:-15}
LR=${LR:-1e-3}
RECURRENT_LR=${RECURRENT_LR:-2e-3}
USER_DIR=${USER_DIR:-$(python -c 'import fairseq_dense, os; print(os.path.dirname(fairseq_dense.__file__))')}
HOURS=$(python -c "print($MINUTES / 60)")
SIZES="--encoder-embed-dim 128 --decoder-embed-dim 128 --encoder-hidden-size 128 --decoder-hidden-size 128 --encoder-fc-dim 128 --attention-dim 128"

# sacremoses -> joint BPE (10k merges) -> fairseq-preprocess; skipped when already done
fairseq-dense-prepare --raw "$CORPUS" --src de --tgt en --dest "$WORK/data" --bpe-merges 10000

run() {  # name arch extra-flags...
    local name=$1 arch=$2
    shift 2
    local save="$WORK/$name"
    fairseq-train "$WORK/data/bin" --user-dir "$USER_DIR" --arch "$arch" $SIZES "$@" \
        --optimizer fused_adam --lr "$LR" --lr-scheduler grouped --group-lr-scale "recurrent=$RECURRENT_LR" \
        --dropout 0.1 --clip-norm 5.0 --criterion label_smoothed_cross_entropy_with_stats --label-smoothing 0.1 \
        --max-tokens 4096 --stop-time-hours "$HOURS" --max-epoch 100 --cpu --seed 1 --save-dir "$save" \
        --no-epoch-checkpoints --log-format simple --log-interval 50 > "$save.train.log" 2>&1
    fairseq-generate "$WORK/data/bin" --user-dir "$USER_DIR" --path "$save/checkpoint_best.pt" --cpu \
        --beam 3 --batch-size 64 --required-batch-size-multiple 1 --remove-bpe --gen-subset test \
        > "$save.gen.txt" 2> "$save.gen.log"
    grep ^H- "$save.gen.txt" | sort -t- -k2 -n | cut -f3 > "$save.hyp"
    grep ^T- "$save.gen.txt" | sort -t- -k2 -n | cut -f2 > "$save.ref"
    local valid
    valid=$(grep "valid on 'valid'" "$save.train.log" | sed -E 's/.*\| loss ([0-9.]+).*/\1/' | sort -g | head -1)
    local updates
    updates=$(grep -o "num_updates [0-9]*" "$save.train.log" | tail -1 | cut -d' ' -f2)
    local bleu
    bleu=$(sacrebleu "$save.ref" -i "$save.hyp" -b)
    echo "| $name | $updates | $valid | $bleu |" | tee -a "$WORK/results.md"
}

mkdir -p "$WORK"
echo "| model (${MINUTES} min CPU each) | updates | best valid loss | test BLEU (beam 3) |" > "$WORK/results.md"
echo "|---|---|---|---|" >> "$WORK/results.md"
run 2x2-ff deep_att_2x2
run 2x2-no-ff deep_att_2x2_no_ff
run 5x3-ff deep_att_5x3
run 5x3-no-ff deep_att_5x3 --no-fast-forward
cat "$WORK/results.md"
