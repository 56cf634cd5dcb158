"""A load reads nothing of the program that loads it, runs in threads, and hears text as it was trained.

Issue 54: the host's ``sys.argv`` (``--user-dir``, ``--beam``, ``--fp16``), loads from
several threads, files opened relative to the directory opened once, BPE time linear
in the input for any codes, one-line refusals (long paths, log lines, manifests,
safetensors headers), and the text preparation of the training data recorded and
applied. The shared tiny exports are described in ``tests/hub_hostile_helpers.py``.
"""

import json
import logging
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from fairseq_dense import hub
from fairseq_dense.hub import PretrainedModelError
from fairseq_dense.hub.loading import ModelDirectory
from tests.hub_hostile_helpers import (
    SECRET,
    assert_refused,
    build_checkpoint,
    tamper,
    user_dir_plugin,
    write_file,
)

# ---------------------------------------------------------------- the host program is not read


def test_load_never_reads_the_host_command_line(gru, tmp_path, monkeypatch, marker):
    """``sys.argv`` holds ``--user-dir=<plugin>``, ``--beam 1``, ``--fp16``: nothing imported, the model settings hold.

    The model folder itself is named ``--user-dir=evil_plugin`` and lies in the
    working directory beside the plugin, as a script given that folder would see it.
    """
    plugin = user_dir_plugin(marker)
    name = f"--user-dir={Path(plugin).name}"
    shutil.copytree(gru.dir, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["translate.py", name, f"--user-dir={plugin}", "--beam", "1", "--fp16"])
    for model in (hub.from_pretrained(name), hub.from_pretrained(gru.dir)):
        assert not marker.exists() and "evil_plugin" not in sys.modules, "the host's --user-dir was imported"
        assert model.cfg.generation.beam == 5 and model.cfg.common.fp16 is False
        assert isinstance(model.translate("a b c", max_len_b=4), str)


@pytest.mark.parametrize("keyword", [{"beam": 2.5}, {"dropout": "high"}])
def test_a_keyword_of_the_wrong_type_is_the_callers_type_error(gru, keyword):
    """The caller's value, not the model directory: a ``TypeError`` naming the keyword, never config.json."""
    with pytest.raises(TypeError, match=rf"^from_pretrained\(\) keyword '{next(iter(keyword))}': Value ") as info:
        hub.from_pretrained(gru.dir, **keyword)
    assert "config.json" not in str(info.value) and "\n" not in str(info.value)


def test_loads_from_several_threads_at_once(gru, transformer):
    """Twelve loads of two models in four threads: each succeeds and translates as a load alone does.

    No process-wide switch is flipped on the way (fairseq's ``omegaconf_no_object_check`` replaces
    an OmegaConf function for every thread while it runs).
    """
    from omegaconf import _utils

    checks = {name: getattr(_utils, name, None) for name in ("is_primitive_type", "is_primitive_type_annotation")}
    dirs = [gru.dir, transformer.dir] * 6
    alone = {d: hub.from_pretrained(d).translate("a b c", beam=2, max_len_b=4) for d in dirs[:2]}
    with ThreadPoolExecutor(max_workers=4) as pool:
        models = list(pool.map(hub.from_pretrained, dirs))
    assert [m.translate("a b c", beam=2, max_len_b=4) for m in models] == [alone[d] for d in dirs]
    assert checks == {name: getattr(_utils, name, None) for name in checks}


# ---------------------------------------------------------------- the directory is opened once


def test_files_are_read_from_the_directory_that_was_opened(gru, tmp_path):
    """Swapping the folder for a link to another one after it was opened changes nothing that is read."""
    model_dir = shutil.copytree(gru.dir, tmp_path / "model")
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(SECRET)
    with ModelDirectory(model_dir) as directory:
        model_dir.rename(tmp_path / "moved")
        model_dir.symlink_to(other)
        assert directory.read("config.json") == (tmp_path / "moved" / "config.json").read_bytes()


def test_a_file_linked_outside_never_shows_its_hash(gru, tmp_path, marker):
    """A dictionary hard-linked to an outside file with other content: refused, the outside file's hash not printed."""
    import hashlib

    outside = tmp_path / "secret.txt"
    outside.write_text(SECRET)

    def link(d, m):
        (d / "dict.tgt.txt").unlink()
        os.link(outside, d / "dict.tgt.txt")

    model_dir = tamper(gru.dir, tmp_path, link, marker, resign=False)
    message = assert_refused(lambda: hub.from_pretrained(model_dir), "dict.tgt.txt: sha256 differs", marker)
    assert hashlib.sha256(outside.read_bytes()).hexdigest()[:16] not in message


# ---------------------------------------------------------------- BPE time and input length


def chain_codes(n: int) -> str:
    """Codes merging each neighbour pair of an ``n``-character word: subword-nmt applies them one at a time."""
    chars = [chr(0x4E00 + i) for i in range(n)]
    return "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in zip(chars, chars[1:])), "".join(chars)


def test_bpe_time_is_linear_in_the_input_for_any_codes():
    """A 10,000-character word under chained codes: fairseq's subword-nmt BPE is quadratic, ours linear."""
    from fairseq_dense.hub.text import MAX_BPE_WORD, VerifiedSubwordNMTBPE

    codes, word = chain_codes(10_000)
    bpe = VerifiedSubwordNMTBPE(codes, "@@")
    start = time.perf_counter()
    out = bpe.encode(word)
    elapsed = time.perf_counter() - start
    assert elapsed < 5, elapsed  # fairseq's subword_nmt BPE: over a minute on the same word
    assert bpe.decode(out) == word and len(out.split()) >= len(word) // MAX_BPE_WORD
    assert VerifiedSubwordNMTBPE(codes, "@@").encode(word[:50]) == bpe.bpe.process_line(word[:50])  # short: the same


def test_an_input_longer_than_the_model_reads_is_one_line(gru):
    model = hub.from_pretrained(gru.dir)
    with pytest.raises(ValueError) as info:
        model.translate(" ".join(["a"] * 2000))
    assert "\n" not in str(info.value) and "reads at most 1024" in str(info.value)


# ---------------------------------------------------------------- one line for every failure


def test_a_path_longer_than_the_file_system_allows(tmp_path):
    for name in ("d" * 5000, str(tmp_path / ("d" * 300) / "model")):
        with pytest.raises(PretrainedModelError) as info:
            hub.from_pretrained(name)
        assert "\n" not in str(info.value) and len(str(info.value)) < 400


def test_log_lines_escape_the_directory_name(gru, tmp_path, caplog):
    model_dir = shutil.copytree(gru.dir, tmp_path / "forged\nINFO:root:\x1b[31mline")
    with caplog.at_level(logging.INFO, logger="fairseq_dense.hub.loading"):
        hub.from_pretrained(model_dir)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "fairseq_dense.hub.loading"]
    assert "\n" not in line and "\x1b" not in line and "forged\\nINFO" in line


def _manifest_with(separator: bytes, ending: bytes = b"\n"):
    def edit(d, m):
        lines = (d / "SHA256SUMS").read_bytes().splitlines()
        (d / "SHA256SUMS").write_bytes(separator.join(lines) + ending)

    return edit


@pytest.mark.parametrize(
    "edit",
    [_manifest_with(b"\r\n", b"\r\n"), _manifest_with(b"\x0b"), _manifest_with(b"\x1c"), _manifest_with(b"\n", b"")],
    ids=["crlf", "vertical tab", "file separator", "no final newline"],
)
def test_manifest_lines_are_exactly_sha256sum_lines(gru, tmp_path, marker, edit):
    model_dir = tamper(gru.dir, tmp_path, edit, marker, resign=False)
    assert_refused(lambda: hub.from_pretrained(model_dir), "SHA256SUMS: (line 1 is not|does not end)", marker)


def test_a_tensor_named_twice_in_the_header_is_refused(gru, tmp_path, marker):
    def twice(d, m):
        data = (d / "model.safetensors").read_bytes()
        n = int.from_bytes(data[:8], "little")
        header = data[8 : 8 + n].decode().rstrip()
        name, entry = next((k, v) for k, v in json.loads(header).items() if k != "__metadata__")
        text = header[:-1] + "," + json.dumps(name) + ":" + json.dumps(entry) + "}"
        (d / "model.safetensors").write_bytes(len(text).to_bytes(8, "little") + text.encode() + data[8 + n :])

    model_dir = tamper(gru.dir, tmp_path, twice, marker, resign=True)
    assert_refused(lambda: hub.from_pretrained(model_dir), "model.safetensors: .*names a tensor twice", marker)


@pytest.mark.parametrize("failure", ["MemoryError", "PanicException"])
def test_weights_this_machine_cannot_hold_are_one_line(gru, monkeypatch, marker, failure):
    import safetensors.torch

    panic = type("PanicException", (BaseException,), {})  # pyo3's panic is not an Exception

    def load(data):
        raise MemoryError() if failure == "MemoryError" else panic("capacity overflow")

    monkeypatch.setattr(safetensors.torch, "load", load)
    assert_refused(lambda: hub.from_pretrained(gru.dir), f"model.safetensors: corrupted .*{failure}", marker)


def test_oversized_or_unreadable_files_are_one_line(gru, tmp_path, marker):
    model_dir = tamper(gru.dir, tmp_path, write_file("SHA256SUMS", b"0" * 70_000), marker, resign=False)
    assert_refused(lambda: hub.from_pretrained(model_dir), "SHA256SUMS: larger than 65536 bytes", marker)


# ---------------------------------------------------------------- the text preparation of the training data

TYPOGRAPHIC = "„Das ist’s“ – sagte er: «Nein»… "


def prepared_export(tmp_path: Path, lowercase: bool, record: bool = True) -> Path:
    """``gru_attention_tiny`` exported from data carrying fairseq-dense-prepare's record (or none)."""
    from fairseq_dense.data.prepare import write_text_record

    ckpt = build_checkpoint(tmp_path / "src", "gru_attention_tiny")
    if record:
        write_text_record(str(tmp_path / "src" / "bin"), "src", "tgt", lowercase)
    return hub.export_checkpoint([ckpt], tmp_path / "export", data=tmp_path / "src" / "bin", source_lang="src")


@pytest.mark.parametrize("lowercase", [False, True], ids=["cased", "lower-cased"])
def test_the_model_tokenizes_as_the_training_data_was(tmp_path, lowercase):
    from fairseq_dense.data import prepare

    out = prepared_export(tmp_path, lowercase)
    tokenizer = json.loads((out / "config.json").read_text())["tokenizer"]
    assert tokenizer["moses_normalize_punctuation"] and tokenizer.get("moses_lowercase", False) == lowercase
    prepare._init_tokenizer(prepare.moses_lang("src"), lowercase)
    expected = prepare._tokenize(TYPOGRAPHIC)
    assert hub.from_pretrained(out).tokenize(TYPOGRAPHIC) == expected
    assert ("„" not in expected) and (expected == expected.lower()) == lowercase
    assert "normalize_punctuation" in (out / "README.md").read_text()


def test_an_export_without_the_record_tokenizes_as_before(tmp_path):
    """Older exports and data without the record: fairseq's moses with the recorded options, as before."""
    from fairseq.data.encoders.moses_tokenizer import MosesTokenizer, MosesTokenizerConfig

    out = prepared_export(tmp_path, False, record=False)
    assert set(json.loads((out / "config.json").read_text())["tokenizer"]) == {"_name", "source_lang", "target_lang"}
    moses = MosesTokenizer(MosesTokenizerConfig(source_lang="src", target_lang="tgt"))
    assert hub.from_pretrained(out).tokenize(TYPOGRAPHIC) == moses.encode(TYPOGRAPHIC)


def test_interactive_applies_the_record_of_its_data(tmp_path, capsys, monkeypatch):
    """``fairseq-dense-interactive DATA --tokenizer moses``: the source line is the training data's preparation."""
    from fairseq_dense.cli import interactive
    from fairseq_dense.data import prepare

    (tmp_path / "bin").mkdir()
    prepare.write_text_record(str(tmp_path / "bin"), "src", "tgt", lowercase=True)
    prepare._init_tokenizer("en", True)
    expected = prepare._tokenize(TYPOGRAPHIC)
    symbols = sorted(set(expected.split()))
    for lang in ("src", "tgt"):  # every prepared token is a symbol, so the source line shows them all
        (tmp_path / "bin" / f"dict.{lang}.txt").write_text("".join(f"{s} 1\n" for s in symbols))
    ckpt = build_checkpoint(tmp_path, "gru_attention_tiny")
    state = torch.load(ckpt, weights_only=True)
    state["optimizer_history"] = [{"criterion_name": "CrossEntropyCriterion", "best_loss": None, "num_updates": 0}]
    state["extra_state"] = {"epoch": 1, "train_iterator": {"epoch": 1}, "val_loss": None}
    torch.save(state, ckpt)
    source = tmp_path / "input.txt"
    source.write_text(TYPOGRAPHIC + "\n")
    argv = [str(tmp_path / "bin"), "--path", str(ckpt), "--source-lang", "src", "--target-lang", "tgt"]
    argv += ["--tokenizer", "moses", "--cpu", "--beam", "1", "--max-len-b", "2", "--input", str(source)]
    monkeypatch.setattr(sys, "argv", ["fairseq-dense-interactive"])
    assert interactive.main(argv) == 0
    captured = capsys.readouterr()
    (line,) = [line for line in captured.out.splitlines() if line.startswith("S-0\t")]
    assert line == "S-0\t" + expected
    assert "moses_normalize_punctuation" in captured.err and "moses_lowercase" in captured.err


# ---------------------------------------------------------------- the fairseq every Python installs


def test_setup_requires_the_fairseq_with_the_hooks_on_every_python():
    """Upstream fairseq 0.12.2 has neither rebuild_batches nor post_save: setup.py never installs it."""
    import ast

    from tests import helpers

    tree = ast.parse((helpers.REPO / "setup.py").read_text(encoding="utf-8"))
    (requires,) = [n.value for n in ast.walk(tree) if isinstance(n, ast.keyword) and n.arg == "install_requires"]
    fairseq = [e.value for e in requires.elts if e.value.split(";")[0].strip().startswith("fairseq")]
    assert fairseq == ["fairseq-fixed==0.12.3.1"]


def test_prepare_records_its_text_steps_beside_the_dictionaries(tmp_path):
    """A fresh preparation writes the record; one prepared before the record existed gets it when reused."""
    from fairseq_dense.data import prepare
    from fairseq_dense.hub.text import read_record
    from tests import helpers

    raw = helpers.write_copy_corpus(tmp_path / "raw", n_train=40, n_valid=5, n_test=5, src="deu", tgt="eng")
    dest = tmp_path / "prepared"
    prepare.prepare(str(raw), str(dest), "deu", "eng", merges=10, lowercase=True, workers=1)
    expected = {"source_lang": "de", "target_lang": "en", "moses_normalize_punctuation": True}
    expected.update(moses_no_escape=True, moses_no_dash_splits=True, moses_lowercase=True)
    assert read_record(dest / "bin") == expected
    (dest / "bin" / prepare.TEXT_RECORD).unlink()
    prepare.prepare(str(raw), str(dest), "deu", "eng", merges=10, lowercase=True, workers=1)
    assert read_record(dest / "bin") == expected
