"""Hostile model directories: config payloads, integrity, the deeper checks, the manifest, pickles.

Nothing runs, and one line names what is wrong. How the cases are built and
loaded (the shared tiny export, the tampering, the three loading routes, the
marker and the tripwire) is described in ``tests/hub_hostile_helpers.py``.
"""

import hashlib
import json
import re
import shutil

import pytest

from fairseq_dense import hub
from tests.hub_hostile_helpers import (
    GRU,
    LOADERS,
    alias_same_shape,
    assert_refused,
    both,
    config_edit,
    flip_last_weight_byte,
    payload,
    permute_dictionary,
    retype_first_tensor,
    rewrite_weights,
    set_key,
    swap_offsets,
    tamper,
    user_dir_plugin,
    write_file,
)

# ---------------------------------------------------------------- config payloads (re-signed)

CONFIG_CASES = {
    "fconv eval through arch": (
        both(set_key("arch", "fconv"), set_key("model", lambda m: {"encoder_layers": payload(m)})),
        r"config.json: key 'arch': unknown architecture \(fairseq's architecture 'fconv', not one of fairseq-dense's",
    ),
    "fconv eval through task": (
        both(set_key("task.arch", "fconv"), set_key("task.encoder_layers", payload)),
        r"config.json: key 'task.arch'",
    ),
    "task sets a model option": (
        set_key("task.encoder_embed_dim", 8),
        r"key 'task.encoder_embed_dim' is a model option",
    ),
    "wav2vec2 eval": (
        both(set_key("arch", "wav2vec2"), set_key("model", lambda m: {"conv_feature_layers": payload(m)})),
        r"key 'arch': unknown architecture \(fairseq's architecture 'wav2vec2'",
    ),
    "task data outside the folder": (set_key("task.data", "/"), r"key 'task.data' cannot be set"),
    "task user_dir": (set_key("task.user_dir", user_dir_plugin), r"key 'task.user_dir' cannot be set"),
    "top-level user_dir": (set_key("user_dir", user_dir_plugin), r"key 'user_dir' is not accepted"),
    "task name os.system": (set_key("task._name", "os.system"), r"key 'task._name' must be one of \['translation'"),
    "fairseq task name": (set_key("task._name", "translation_lev"), r"key 'task._name'"),
    "model _name": (set_key("model._name", "fconv"), r"key 'model._name' is not accepted"),
    "model arch": (set_key("model.arch", "fconv"), r"key 'model.arch' is not accepted"),
    "expression as an integer": (
        set_key("model.encoder_embed_dim", payload),
        r"key 'model.encoder_embed_dim' must be an integer",
    ),
    "boolean as an integer": (
        set_key("model.encoder_embed_dim", True),
        r"key 'model.encoder_embed_dim' must be an integer",
    ),
    "huge integer": (set_key("model.encoder_embed_dim", 2**40), r"key 'model.encoder_embed_dim' must be an integer"),
    "list as a float": (set_key("model.dropout", [0.1]), r"key 'model.dropout' must be a finite number"),
    "interpolation": (set_key("model.dropout", "${oc.env:HOME}"), r"key 'model.dropout' must be a finite number"),
    "NaN": (lambda c, m: None, None),  # replaced below: JSON constants are written as text
    "tokenizer name": (set_key("tokenizer._name", "os.system"), r"key 'tokenizer._name' must be 'moses'"),
    "tokenizer language path": (set_key("tokenizer.source_lang", "../../etc"), r"key 'tokenizer.source_lang'"),
    "bpe name": (set_key("bpe._name", "gpt2"), r"key 'bpe._name' must be 'subword_nmt'"),
    "bpe codes path": (set_key("bpe.bpe_codes", "/etc/hosts"), r"key 'bpe.bpe_codes' is not accepted"),
    "source language path": (
        both(set_key("task.source_lang", "../x"), set_key("dictionaries.source.file", "dict.../x.txt")),
        r"key 'task.source_lang' must be a language code",
    ),
    "dictionary path": (set_key("dictionaries.target.file", "/etc/hosts"), r"key 'dictionaries.target.file' must be"),
    "weights dtype": (set_key("weights_dtype", "object"), r"key 'weights_dtype' must be one of"),
    "weights dtype, a list": (set_key("weights_dtype", ["float32"]), r"key 'weights_dtype' must be one of"),
    "architecture, a list": (set_key("arch", [GRU]), r"key 'arch': unknown architecture \(a list of 1 items, not a"),
    "unknown architecture": (
        set_key("arch", "future_model_tiny"),
        r"key 'arch': unknown architecture \(a string of 17 characters, not a registered",
    ),
    "old format": (set_key("format_version", 1), r"config.json: format version 1 has no checksums .* re-export"),
    "bpe separator read as an option": (set_key("bpe.bpe_separator", "-h"), r"key 'bpe.bpe_separator' must be"),
    "source language read as an option": (
        both(set_key("task.source_lang", "-h"), set_key("dictionaries.source.file", "dict.-h.txt")),
        r"key 'task.source_lang' must be a language code",
    ),
    "negative task positions": (
        set_key("task.max_target_positions", -5),
        r"key 'task.max_target_positions' must be at least 1 \(a size or position\), not -5",
    ),
    "zero model positions": (set_key("model.max_source_positions", 0), r"key 'model.max_source_positions' must be at"),
    "zero embedding size": (set_key("model.encoder_embed_dim", 0), r"key 'model.encoder_embed_dim' must be at least 1"),
}
del CONFIG_CASES["NaN"]


@pytest.mark.parametrize("loader", sorted(LOADERS))
@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_config_payloads_are_refused(gru, tmp_path, marker, tripwire, case, loader):
    change, match = CONFIG_CASES[case]
    model_dir = tamper(gru.dir, tmp_path, config_edit(change), marker, resign=True)
    assert_refused(lambda: LOADERS[loader](model_dir, tmp_path), match, marker)


@pytest.mark.parametrize(
    "text, match",
    [
        ('"dropout": NaN', "NaN is not allowed"),
        ('"dropout": 0.1, "dropout": 0.2', "duplicate key in an object"),
    ],
)
def test_json_tricks_are_refused(gru, tmp_path, marker, tripwire, text, match):
    def edit(model_dir, marker):
        path = model_dir / "config.json"
        edited = re.sub(r'"dropout": [-+0-9.e]+', text, path.read_text(), count=1)
        assert edited != path.read_text()
        path.write_text(edited)

    model_dir = tamper(gru.dir, tmp_path, edit, marker, resign=True)
    assert_refused(lambda: hub.from_pretrained(model_dir), f"config.json: not valid JSON .*{match}", marker)


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("encoder_embed_path", "/etc/hosts", r"must be null \(free-text options"),  # fairseq would read the file
        ("encoder_xformers_att_config", '{"name": "x"}', r"must be null \(free-text options"),
        ("adaptive_softmax_cutoff", "(__import__('os'), [2])[1]", "must be a list of finite numbers"),  # eval_str_list
        ("activation_fn", "os.system", "must be one of"),
    ],
)
def test_transformer_options_are_refused(transformer, tmp_path, marker, tripwire, key, value, match):
    if key == "adaptive_softmax_cutoff":
        value = payload(marker)
    model_dir = tamper(transformer.dir, tmp_path, config_edit(set_key(f"model.{key}", value)), marker, resign=True)
    assert_refused(lambda: hub.from_pretrained(model_dir), f"config.json: key 'model.{key}' {match}", marker)


# ---------------------------------------------------------------- integrity (not re-signed)

INTEGRITY_CASES = {
    "weight byte": (flip_last_weight_byte, "model.safetensors: sha256 differs from SHA256SUMS"),
    "dtype in header": (retype_first_tensor, "model.safetensors: sha256 differs"),
    "offsets swapped": (swap_offsets, "model.safetensors: sha256 differs"),
    "dictionary permuted": (permute_dictionary, "dict.tgt.txt: sha256 differs"),
    "bpe codes changed": (write_file("bpecodes", b"#version: 0.2\na b\n"), "bpecodes: sha256 differs"),
    "config changed": (config_edit(set_key("model.dropout", 0.3)), "config.json: sha256 differs"),
    "fconv payload, manifest kept": (
        config_edit(both(set_key("arch", "fconv"), set_key("model", lambda m: {"encoder_layers": payload(m)}))),
        "config.json: sha256 differs",
    ),
    "no manifest (older export)": (lambda d, m: (d / "SHA256SUMS").unlink(), "SHA256SUMS: missing; .* re-export"),
    "manifest lists another file": (
        lambda d, m: open(d / "SHA256SUMS", "a").write(f"{'0' * 64}  model.pt\n"),
        "SHA256SUMS: lists model.pt, which config.json does not load",
    ),
    "manifest garbage": (write_file("SHA256SUMS", b"\x80\x81 evil\n"), "SHA256SUMS: line 1 is not"),
    "manifest lacks a file": (
        lambda d, m: (d / "SHA256SUMS").write_text(
            "".join(line + "\n" for line in (d / "SHA256SUMS").read_text().splitlines() if "bpecodes" not in line)
        ),
        "bpecodes: not listed in SHA256SUMS",
    ),
}


@pytest.mark.parametrize("loader", sorted(LOADERS))
@pytest.mark.parametrize("case", sorted(INTEGRITY_CASES))
def test_changed_files_fail_their_checksum(gru, tmp_path, marker, tripwire, case, loader):
    edit, match = INTEGRITY_CASES[case]
    model_dir = tamper(gru.dir, tmp_path, edit, marker, resign=False)
    assert_refused(lambda: LOADERS[loader](model_dir, tmp_path), match, marker)


# ---------------------------------------------------------------- the checks behind the checksums (re-signed)

DEEP_CASES = {
    "dtype in header": (
        retype_first_tensor,
        r"model.safetensors: tensor '.*' is stored as int32, but config.json says weights_dtype float32",
    ),
    "weights_dtype float16 over float32 weights": (
        config_edit(set_key("weights_dtype", "float16")),
        r"model.safetensors: tensor '.*' is stored as float32",
    ),
    "pickle named as safetensors": (
        lambda d, m: shutil.copyfile(d / "model.pt", d / "model.safetensors"),
        "model.safetensors: corrupted",
    ),
    "truncated weights": (
        write_file("model.safetensors", lambda d: (d / "model.safetensors").read_bytes()[:999]),
        "model.safetensors: corrupted",
    ),
    "header corrupted": (
        write_file(
            "model.safetensors",
            lambda d: (
                (d / "model.safetensors").read_bytes()[:8] + b'{"x": [' + (d / "model.safetensors").read_bytes()[15:]
            ),
        ),
        "model.safetensors: corrupted",
    ),
    "tied_weights metadata": (lambda d, m: None, None),  # built below (needs the header)
    "wrong shapes": (
        lambda d, m: (
            open(d / "dict.tgt.txt", "a").write("zz 1\n"),
            config_edit(set_key("dictionaries.target.size", 17))(d, m),
        ),
        # the model's own load_state_dict names the tensor and the dictionary sizes
        r"model.safetensors: the weights do not load into .*the dictionaries do not match the checkpoint",
    ),
    "dictionary with an extra line": (
        lambda d, m: open(d / "dict.tgt.txt", "a").write("zz 1\n"),
        "dict.tgt.txt: 17 symbols, but config.json",
    ),
    "dictionary missing": (lambda d, m: (d / "dict.tgt.txt").unlink(), "dict.tgt.txt: missing"),
    "bpe codes malformed": (write_file("bpecodes", b"#version: 0.2\na b c\n"), "bpecodes: line 2 is not a BPE merge"),
    "bpe codes version": (write_file("bpecodes", b"#version: x\na b\n"), "bpecodes: line 1 is not '#version"),
    "bpe codes version subword-nmt parses in quadratic time": (
        write_file("bpecodes", b"#version: 1" + b".0" * 32_000 + b".1\na b\n"),
        "bpecodes: line 1 is not '#version",
    ),
    "dictionary count of 4,301 digits": (
        lambda d, m: open(d / "dict.tgt.txt", "a").write("zz " + "9" * 4301 + "\n"),
        "dict.tgt.txt: line 13 is not '<symbol> <count>'",
    ),
    "bpe codes not text": (write_file("bpecodes", b"\xff\xfe\n"), "bpecodes: not UTF-8"),
    "dictionary not a dictionary": (
        write_file("dict.tgt.txt", b"a\n"),
        "dict.tgt.txt: line 1 is not '<symbol> <count>'",
    ),
    "weights missing": (lambda d, m: (d / "model.safetensors").unlink(), "model.safetensors: missing"),
    "bpe codes empty": (write_file("bpecodes", b""), "bpecodes: holds no BPE merge"),
    "bpe codes version only": (write_file("bpecodes", b"#version: 0.2\n"), "bpecodes: holds no BPE merge"),
    "bpe codes blank line": (write_file("bpecodes", b"#version: 0.2\na b\n\nc d\n"), "bpecodes: line 3 is not a BPE"),
    "NaN weights": (
        lambda d, m: rewrite_weights(d, lambda state, meta: state[sorted(state)[0]].fill_(float("nan"))),
        r"model.safetensors: tensor '.*' holds non-finite values",
    ),
    "infinite weights": (
        lambda d, m: rewrite_weights(d, lambda state, meta: state[sorted(state)[-1]].fill_(float("inf"))),
        r"model.safetensors: tensor '.*' holds non-finite values",
    ),
    "tied_weights alias replaces an untied tensor": (
        lambda d, m: rewrite_weights(d, alias_same_shape),
        r"model.safetensors: metadata 'tied_weights' makes tensor '.*' a copy of '.*', which architecture "
        "'gru_attention_tiny' does not tie",
    ),
    "dictionary overwrites a symbol": (
        lambda d, m: open(d / "dict.tgt.txt", "a").write("a 1 #fairseq:overwrite\n"),
        "dict.tgt.txt: line 13 repeats the symbol of line 1",
    ),
    "dictionary overwrites a special symbol": (
        lambda d, m: open(d / "dict.tgt.txt", "a").write("<unk> 1 #fairseq:overwrite\n"),
        "dict.tgt.txt: line 13 repeats a special symbol",
    ),
    "dictionary blank line": (lambda d, m: open(d / "dict.tgt.txt", "a").write("\n"), "dict.tgt.txt: line 13 is not"),
}
del DEEP_CASES["tied_weights metadata"]


@pytest.mark.parametrize("case", sorted(DEEP_CASES))
def test_deeper_checks_hold_without_the_checksums(gru, tmp_path, marker, tripwire, case):
    edit, match = DEEP_CASES[case]
    model_dir = tamper(gru.dir, tmp_path, edit, marker, resign=True)
    assert_refused(lambda: hub.from_pretrained(model_dir), match, marker)


def test_file_linked_outside_the_folder_is_refused(gru, tmp_path, marker, tripwire):
    outside = tmp_path / "outside.txt"
    shutil.copyfile(gru.dir / "dict.tgt.txt", outside)  # same bytes: the checksum alone would pass

    def edit(model_dir, marker):
        (model_dir / "dict.tgt.txt").unlink()
        (model_dir / "dict.tgt.txt").symlink_to(outside)

    model_dir = tamper(gru.dir, tmp_path, edit, marker, resign=False)
    for loader in ("dir", "torch_hub"):
        assert_refused(lambda: LOADERS[loader](model_dir, tmp_path), "dict.tgt.txt: resolves outside", marker)


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_pickles_beside_are_never_opened(gru, tmp_path, marker, tripwire, loader):
    """The untampered export with live pickles beside it loads, and translates, without unpickling."""
    model_dir = tamper(gru.dir, tmp_path, lambda d, m: None, marker, resign=False)
    model = LOADERS[loader](model_dir, tmp_path)
    assert isinstance(model.translate("a b c", beam=2, max_len_b=4), str)
    assert not marker.exists()


# ---------------------------------------------------------------- the manifest as written


def test_manifest_covers_exactly_the_loaded_files(gru):
    lines = (gru.dir / "SHA256SUMS").read_text().splitlines()
    sums = dict(reversed(line.split("  ", 1)) for line in lines)
    assert sorted(sums) == ["bpecodes", "config.json", "dict.src.txt", "dict.tgt.txt", "model.safetensors"]
    for name, digest in sums.items():  # sha256sum -c format
        assert hashlib.sha256((gru.dir / name).read_bytes()).hexdigest() == digest
    config = json.loads((gru.dir / "config.json").read_text())
    assert config["format_version"] == 2 and config["weights_dtype"] == "float32"
    from fairseq_dense.hub.loading import HUB_ALLOW_PATTERNS

    assert "SHA256SUMS" in HUB_ALLOW_PATTERNS and not any(p.endswith(".pt") for p in HUB_ALLOW_PATTERNS)
