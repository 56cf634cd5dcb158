"""Data preparation: BPE compatibility with the standard recipe, input checks, the synthetic corpus."""

import filecmp
import json
import random

import pytest

from fairseq_dense.data import prepare as prep
from fairseq_dense.data import synthetic
from tests import helpers

IWSLT = helpers.SHARED_DATA / "iwslt14-deen-eval"


@pytest.mark.skipif(not (IWSLT / "bpe.codes").exists(), reason="../shared/data/iwslt14-deen-eval not present")
@pytest.mark.parametrize("name", ["valid.de", "test.en"])
def test_bpe_application_matches_standard_recipe_byte_for_byte(tmp_path, name):
    split, lang = name.split(".")
    out = tmp_path / f"{split}.bpe.{lang}"
    prep.apply_bpe_file(str(IWSLT / "bpe.codes"), str(IWSLT / name), str(out))
    assert filecmp.cmp(out, IWSLT / f"{split}.bpe.{lang}", shallow=False)


def test_prepare_pipeline_end_to_end(tmp_path):
    raw = helpers.write_copy_corpus(tmp_path / "raw", n_train=200, n_valid=20, n_test=20)
    dest = tmp_path / "prepared"
    prep.prepare(str(raw), str(dest), "src", "tgt", merges=20, lowercase=True, workers=1)
    for split in prep.SPLITS:
        for lang in ("src", "tgt"):
            assert (dest / "bin" / f"{split}.src-tgt.{lang}.bin").exists()
    # lower-casing applies to both sides: the upper-case target becomes the source
    assert (dest / "tok" / "train.tgt").read_text() == (dest / "tok" / "train.src").read_text()
    assert json.loads((dest / "prepare.json").read_text())["merges"] == 20
    assert (dest / "bpecodes").read_text().strip()
    assert not (tmp_path / "prepared.tmp").exists()


def test_prepare_reuses_only_the_same_raw_contents(tmp_path, caplog):
    """Same options and raw files: reused. Other raw contents: rebuilt, and the log says what changed."""
    raw = helpers.write_copy_corpus(tmp_path / "raw", n_train=60, n_valid=10, n_test=10)
    dest = tmp_path / "prepared"
    prep.prepare(str(raw), str(dest), "src", "tgt", merges=10, workers=1)
    inputs = json.loads((dest / "prepare.json").read_text())["inputs"]
    assert inputs["train.src"]["bytes"] == (raw / "train.src").stat().st_size and len(inputs) == 6
    marker = dest / "bin" / "marker"
    marker.write_text("kept while reused")
    with caplog.at_level("INFO", logger=prep.logger.name):
        prep.prepare(str(raw), str(dest), "src", "tgt", merges=10, workers=1)
    assert "reusing prepared data" in caplog.text and marker.exists()

    # fewer training lines (both sides), and one valid line changed in place (same size)
    for lang in ("src", "tgt"):
        lines = (raw / f"train.{lang}").read_text().splitlines(keepends=True)
        (raw / f"train.{lang}").write_text("".join(lines[:20]))
    valid = (raw / "valid.src").read_text()
    (raw / "valid.src").write_text(valid.replace(valid[0], "z" if valid[0] != "z" else "y", 1))
    caplog.clear()
    with caplog.at_level("INFO", logger=prep.logger.name):
        prep.prepare(str(raw), str(dest), "src", "tgt", merges=10, workers=1)
    rebuilt = [r.getMessage() for r in caplog.records if r.getMessage().startswith("rebuilding")]
    assert len(rebuilt) == 1, caplog.text
    assert "train.src changed (" in rebuilt[0] and "train.tgt changed (" in rebuilt[0]
    assert "valid.src changed (same size, other content)" in rebuilt[0]
    assert "test.src" not in rebuilt[0] and "reusing" not in caplog.text
    assert not marker.exists()
    assert len((dest / "tok" / "train.src").read_text().splitlines()) == 20


def test_a_moved_folder_reuses_its_prepared_data_unchanged(tmp_path, caplog):
    """The raw files are known by their content: moving the raw and prepared folders (as a moved
    quick-start work folder does) reuses the data, and ``prepare.json`` keeps its bytes (the
    quick-start's runs are keyed on them)."""
    import shutil

    raw = helpers.write_copy_corpus(tmp_path / "a" / "raw", n_train=30, n_valid=5, n_test=5)
    prep.prepare(str(raw), str(tmp_path / "a" / "prepared"), "src", "tgt", merges=10, workers=1)
    recorded = (tmp_path / "a" / "prepared" / "prepare.json").read_bytes()
    shutil.move(tmp_path / "a", tmp_path / "b")
    with caplog.at_level("INFO", logger=prep.logger.name):
        prep.prepare(str(tmp_path / "b" / "raw"), str(tmp_path / "b" / "prepared"), "src", "tgt", merges=10, workers=1)
    assert "reusing prepared data" in caplog.text and "rebuilding" not in caplog.text
    assert (tmp_path / "b" / "prepared" / "prepare.json").read_bytes() == recorded


def test_prepared_without_fingerprints_is_rebuilt(tmp_path, caplog):
    """A ``prepare.json`` of an earlier version (no fingerprints) cannot tell whether the raw files changed."""
    raw = helpers.write_copy_corpus(tmp_path / "raw", n_train=30, n_valid=5, n_test=5)
    dest = tmp_path / "prepared"
    prep.prepare(str(raw), str(dest), "src", "tgt", merges=10, workers=1)
    meta_path = dest / "prepare.json"
    old = json.loads(meta_path.read_text())
    del old["inputs"]
    meta_path.write_text(json.dumps(old))
    with caplog.at_level("INFO", logger=prep.logger.name):
        prep.prepare(str(raw), str(dest), "src", "tgt", merges=10, workers=1)
    assert "rebuilding" in caplog.text and "no fingerprint of the raw files" in caplog.text
    assert "inputs" in json.loads(meta_path.read_text())


def test_non_utf8_input_names_file_and_line_and_leaves_nothing(tmp_path):
    raw = helpers.write_copy_corpus(tmp_path / "raw", n_train=20, n_valid=5, n_test=5)
    with open(raw / "train.tgt", "ab") as f:
        f.write(b"caf\xe9 au lait\n")
    dest = tmp_path / "out"
    with pytest.raises(prep.DataError, match=r"train\.tgt:21: not valid UTF-8"):
        prep.prepare(str(raw), str(dest), "src", "tgt", merges=10, workers=1)
    assert not dest.exists() and not (tmp_path / "out.tmp").exists()


def test_a_folder_it_did_not_write_is_never_replaced(tmp_path):
    """``--dest`` naming the raw folder's parent (or ``.``), or ``--corpus``'s DEST-raw naming one's own
    folder, stops with one line: replacing it would delete the raw files."""
    from fairseq_dense.data import tatoeba

    raw = helpers.write_copy_corpus(tmp_path / "data" / "raw", n_train=20, n_valid=5, n_test=5)
    with pytest.raises(prep.DataError, match=r"data: not a folder fairseq-dense-prepare wrote \(no prepare.json\)"):
        prep.prepare(str(raw), str(tmp_path / "data"), "src", "tgt", merges=10, workers=1)
    with pytest.raises(prep.DataError, match=r"raw: not a folder .* \(no \.extracted\)"):
        tatoeba.extract(str(raw), max_lines=5)
    assert len(list(raw.iterdir())) == 6 and not (tmp_path / "data.tmp").exists()
    (tmp_path / "notes").write_text("a file, not a folder")
    with pytest.raises(prep.DataError, match=r"notes: not a folder"):
        prep.prepare(str(raw), str(tmp_path / "notes"), "src", "tgt", merges=10, workers=1)


def test_line_count_mismatch_names_both_files(tmp_path):
    raw = helpers.write_copy_corpus(tmp_path / "raw", n_train=20, n_valid=5, n_test=5)
    with open(raw / "valid.src", "a") as f:
        f.write("x y\n")
    with pytest.raises(prep.DataError, match=r"valid\.src has 6 lines but .*valid\.tgt has 5"):
        prep.check_parallel(str(raw), "src", "tgt")


def test_a_line_ends_at_newline_only(tmp_path):
    """U+2028, NEL or a form feed inside a sentence keep it one line (as ``wc -l`` and fairseq count): no
    false line-count error, no pairs shifted against each other; a leading BOM is no part of the text."""
    raw = helpers.write_copy_corpus(tmp_path / "raw", n_train=20, n_valid=5, n_test=5)
    for lang, at, sep in (("src", 2, "\u2028"), ("tgt", 5, "\x85\x0c")):
        lines = (raw / f"train.{lang}").read_text(encoding="utf-8").split("\n")
        lines[at] = lines[at].replace(" ", sep, 1)
        (raw / f"train.{lang}").write_text("\n".join(lines), encoding="utf-8")
    prep.check_parallel(str(raw), "src", "tgt")
    assert len(prep.read_lines(str(raw / "train.tgt"))) == 20
    (raw / "test.src").write_text("\ufeffa b\n", encoding="utf-8")
    assert prep.read_lines(str(raw / "test.src")) == ["a b"]


def test_missing_split_is_named(tmp_path):
    raw = helpers.write_copy_corpus(tmp_path / "raw", n_train=20, n_valid=5, n_test=5)
    (raw / "test.tgt").unlink()
    with pytest.raises(prep.DataError, match=r"test\.tgt: file not found"):
        prep.check_parallel(str(raw), "src", "tgt")


def test_cli_reports_bad_data_in_one_line(tmp_path):
    raw = helpers.write_copy_corpus(tmp_path / "raw", n_train=20, n_valid=5, n_test=5)
    (raw / "test.tgt").unlink()
    with pytest.raises(SystemExit, match=r"^error: .*test\.tgt: file not found$"):
        prep.main(["--raw", str(raw), "--dest", str(tmp_path / "o"), "--src", "src", "--tgt", "tgt"])
    # one suffix for both sides would prepare a copy task without a word
    with pytest.raises(SystemExit, match=r"^error: source and target language are both 'src' .*$"):
        prep.main(["--raw", str(raw), "--dest", str(tmp_path / "o"), "--src", "src", "--tgt", "src"])
    assert not (tmp_path / "o").exists()


def test_synthetic_corpus_reorders_and_agrees():
    rng = random.Random(0)
    verbs_pl = {stem + synthetic.VERB_SUFFIX[True] for stem in synthetic.VERBS.values()}
    verbs_sg = {stem + synthetic.VERB_SUFFIX[False] for stem in synthetic.VERBS.values()}
    for _ in range(200):
        src, tgt = synthetic.sentence_pair(rng)
        s, t = src.split(), tgt.split()
        # verb-final target, and the main verb agrees with the subject's number
        first_noun = next(w for w in s if w in synthetic.NOUNS or w[:-1] in synthetic.NOUNS)
        subject_plural = first_noun not in synthetic.NOUNS
        assert t[-1] in (verbs_pl if subject_plural else verbs_sg), (src, tgt)
        # determiner agrees with the noun that follows it
        for det, noun in zip(t, t[1:]):
            for (definite, plural, gender), word in synthetic.TGT_DET.items():
                if det == word:
                    assert noun.endswith(synthetic.SUFFIX[(gender, plural)]), (det, noun, tgt)


def test_synthetic_corpus_is_seeded_and_held_out(tmp_path):
    a = synthetic.write_corpus(str(tmp_path / "a"), sizes=(300, 30, 30), seed=3)
    b = synthetic.write_corpus(str(tmp_path / "b"), sizes=(300, 30, 30), seed=3)
    for name in ("train.en", "test.xx"):
        assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text()
    train = set((tmp_path / "a" / "train.en").read_text().splitlines())
    assert not train & set((tmp_path / "a" / "test.en").read_text().splitlines())
    assert a != b
