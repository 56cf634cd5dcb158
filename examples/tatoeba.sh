# Sourced by the Tatoeba CPU recipes (tatoeba-cpu.sh of examples/densenmt and examples/weighted_transformer),
# after their own defaults: the corpus prepared once (10k joint BPE merges), its languages, the plugin
# folder, the device, and the test decoding of a trained model.
RAW=${RAW:-../shared/data/tatoeba-deu-eng}
DATA=${DATA:-data/tatoeba-deu-eng}
USER_DIR=${USER_DIR:-$(python -c 'import fairseq_dense, os; print(os.path.dirname(fairseq_dense.__file__))')}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# DEVICE=cuda trains and decodes on the GPU (float32; add --amp for float16 autocast)
DEVICE=${DEVICE:-cpu}
DEV=(); [ "$DEVICE" = cpu ] && DEV=(--cpu)

[ -f "$DATA/bin/dict.en.txt" ] || \
    fairseq-dense-prepare --raw "$RAW" --src de --tgt en --dest "$DATA" --bpe-merges 10000
SRC=$(ls "$DATA/bin" | sed -n 's/^train\.\([a-z]*\)-\([a-z]*\)\.\1\.idx$/\1/p' | head -1)
TGT=$(ls "$DATA/bin" | sed -n 's/^train\.\([a-z]*\)-\([a-z]*\)\.\1\.idx$/\2/p' | head -1)

decode_test() {  # ARCH SAVE: beam 5 on the test split from SAVE/checkpoint_last.pt; its sentences and BLEU
    fairseq-generate "$DATA/bin" --user-dir "$USER_DIR" --path "$2/checkpoint_last.pt" -s "$SRC" -t "$TGT" \
        "${DEV[@]}" --beam 5 --batch-size 128 --required-batch-size-multiple 1 --remove-bpe --gen-subset test \
        > "$2.test.txt" 2>&1
    echo "$1: $(grep -c '^H-' "$2.test.txt") test sentences; $(tail -1 "$2.test.txt")"
}
