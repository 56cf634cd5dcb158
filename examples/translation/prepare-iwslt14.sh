#!/usr/bin/env bash
# Standard IWSLT14 German-English benchmark data (needs internet access, perl, git).
#
# Produces the data used by most IWSLT14 De-En papers and by fairseq's recipe:
#   * Moses tokenizer.perl, then lowercase.perl; training pairs cleaned with
#     clean-corpus-n.perl (ratio 1.5, 1-175 tokens);
#   * valid = every 23rd line of the cleaned training data (removed from train);
#   * test  = dev2010 + TEDX.dev2012 + tst2010 + tst2011 + tst2012, in that order;
#   * 10k joint BPE merges learned with subword-nmt on train.de + train.en;
#   * fairseq-preprocess with a joined dictionary into $OUT/bin.
# Its valid/test output is what ../shared/data/iwslt14-deen-eval holds (tests check
# that our subword-nmt application reproduces those files byte for byte).
#
# Usage: examples/translation/prepare-iwslt14.sh [OUT_DIR]   (default: data/iwslt14.de-en)
#   IWSLT14_TGZ=/path/de-en.tgz   use an already downloaded archive
#   IWSLT14_URL=...               download address of de-en.tgz
#   MOSES_DIR=/path/mosesdecoder  use an existing Moses checkout
set -euo pipefail

OUT=${1:-data/iwslt14.de-en}
URL=${IWSLT14_URL:-https://wit3.fbk.eu/archive/2014-01/texts/de/en/de-en.tgz}
MERGES=${BPE_MERGES:-10000}
PYTHON=${PYTHON:-python}
SRC=de
TGT=en
PAIR=de-en

WORK="$OUT/work"
mkdir -p "$WORK"

if [ -z "${MOSES_DIR:-}" ]; then
    MOSES_DIR="$WORK/mosesdecoder"
    [ -d "$MOSES_DIR" ] || git clone --depth 1 https://github.com/moses-smt/mosesdecoder.git "$MOSES_DIR"
fi
TOKENIZE="perl $MOSES_DIR/scripts/tokenizer/tokenizer.perl -threads 4 -q"
LOWERCASE="perl $MOSES_DIR/scripts/tokenizer/lowercase.perl"
CLEAN="perl $MOSES_DIR/scripts/training/clean-corpus-n.perl"

ARCHIVE=${IWSLT14_TGZ:-$WORK/de-en.tgz}
if [ ! -f "$ARCHIVE" ]; then
    echo "downloading $URL"
    curl -fL "$URL" -o "$ARCHIVE.part" && mv "$ARCHIVE.part" "$ARCHIVE"
fi
tar -xzf "$ARCHIVE" -C "$WORK"
ORIG="$WORK/$PAIR"

strip_train_markup() {  # drop talk metadata lines, keep title/description text
    grep -v -e '<url>' -e '<talkid>' -e '<keywords>' "$1" \
        | sed -e 's#</\?title>##g' -e 's#</\?description>##g'
}

extract_segments() {  # text of <seg id="N"> ... </seg> elements
    grep '<seg id' "$1" \
        | sed -e 's/<seg id="[0-9]*">[[:space:]]*//' -e 's#[[:space:]]*</seg>[[:space:]]*##' \
        | sed -e "s/’/'/g"
}

echo "tokenising training data"
for l in $SRC $TGT; do
    strip_train_markup "$ORIG/train.tags.$PAIR.$l" | $TOKENIZE -l $l > "$WORK/train.tok.$l"
done
$CLEAN -ratio 1.5 "$WORK/train.tok" $SRC $TGT "$WORK/train.clean" 1 175
for l in $SRC $TGT; do
    $LOWERCASE < "$WORK/train.clean.$l" > "$WORK/train.all.$l"
    awk 'NR % 23 == 0' "$WORK/train.all.$l" > "$WORK/valid.$l"
    awk 'NR % 23 != 0' "$WORK/train.all.$l" > "$WORK/train.$l"
done

echo "tokenising dev/test sets"
for l in $SRC $TGT; do
    : > "$WORK/test.$l"
    for part in TED.dev2010 TEDX.dev2012 TED.tst2010 TED.tst2011 TED.tst2012; do
        extract_segments "$ORIG/IWSLT14.$part.$PAIR.$l.xml" | $TOKENIZE -l $l | $LOWERCASE >> "$WORK/test.$l"
    done
done

echo "learning $MERGES joint BPE merges"
cat "$WORK/train.$SRC" "$WORK/train.$TGT" | subword-nmt learn-bpe -s "$MERGES" > "$OUT/bpecodes"
for split in train valid test; do
    for l in $SRC $TGT; do
        subword-nmt apply-bpe -c "$OUT/bpecodes" < "$WORK/$split.$l" > "$OUT/$split.$l"
    done
done

fairseq-preprocess --source-lang $SRC --target-lang $TGT \
    --trainpref "$OUT/train" --validpref "$OUT/valid" --testpref "$OUT/test" \
    --destdir "$OUT/bin" --joined-dictionary --workers 4
echo "done: $OUT/bin"
