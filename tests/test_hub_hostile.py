"""Hostile model directories and checkpoints: nothing runs, one line names what is wrong.

One tiny ``gru_attention_tiny`` model (and a ``weighted_transformer_tiny`` one for
fairseq's transformer options) is built untrained and exported once per module.
Each case copies the export, tampers with it, and loads it through
``from_pretrained`` on the directory, by repository id from a huggingface_hub
cache, and through ``torch.hub.load(source="local")`` with ``hubconf.py``;
checkpoint cases go through ``fairseq-dense-export``. Every case asserts:

- a ``PretrainedModelError`` (never ``SystemExit``, ``KeyError``, ...) whose one-line
  message names the file or key at fault;
- the marker file of the payload does not exist. Config payloads create it when
  evaluated (fairseq's ``fconv``/``wav2vec2`` ``eval()`` of layer specs, an imported
  ``user_dir``); pickled payloads lie beside the files, and ``torch.load``/``pickle``
  are replaced by tripwires that create it when called at all.

Config edits are re-signed (``SHA256SUMS`` rewritten, as an attacker would) so that
the schema, not the checksum, has to stop them; integrity cases are not re-signed.
"""

import ast
import contextlib
import hashlib
import json
import os
import pickle
import re
import shutil
import struct
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import fairseq_dense
from fairseq_dense import hub
from fairseq_dense.cli import export as export_cli
from fairseq_dense.hub import PretrainedModelError
from fairseq_dense.hub.manifest import parse_manifest, write_manifest
from tests import helpers

GRU, TRANSFORMER = "gru_attention_tiny", "weighted_transformer_tiny"
_EXPORTS = {}


# ---------------------------------------------------------------- the shared tiny models


def build_checkpoint(root: Path, arch: str, task: str = "translation") -> Path:
    """An untrained ``arch`` of ``task`` saved the way fairseq's trainer saves it (``cfg`` as a plain dict)."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    data = root / "bin"
    data.mkdir(parents=True, exist_ok=True)
    for lang in ("src", "tgt"):
        (data / f"dict.{lang}.txt").write_text("".join(f"{c} {100 - i}\n" for i, c in enumerate("abcdefghijkl")))
    args = options.parse_args_and_arch(
        options.get_training_parser(),
        [
            str(data),
            "--arch",
            arch,
            "--task",
            task,
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
            "--cpu",
        ],
    )
    cfg = convert_namespace_to_omegaconf(args)
    torch.manual_seed(0)
    model = tasks.setup_task(cfg.task).build_model(cfg.model)
    ckpt = root / "checkpoint_last.pt"
    torch.save(
        {"args": None, "cfg": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), "model": model.state_dict()},
        ckpt,
    )
    return ckpt


def exported(tmp_path_factory, arch: str) -> SimpleNamespace:
    """``arch`` built and exported with BPE codes and moses, once per module."""
    if arch not in _EXPORTS:
        root = tmp_path_factory.mktemp(arch)
        ckpt = build_checkpoint(root, arch)
        codes = root / "bpecodes"
        codes.write_text("#version: 0.2\nx y\n")
        out = hub.export_checkpoint([ckpt], root / "export", data=root / "bin", bpe_codes=codes)
        _EXPORTS[arch] = SimpleNamespace(dir=out, ckpt=ckpt, data=root / "bin")
    return _EXPORTS[arch]


@pytest.fixture(scope="module")
def gru(tmp_path_factory):
    return exported(tmp_path_factory, GRU)


@pytest.fixture(scope="module")
def transformer(tmp_path_factory):
    return exported(tmp_path_factory, TRANSFORMER)


@pytest.fixture
def marker(tmp_path):
    return tmp_path / "MARKER"


def payload(marker: Path) -> str:
    """A Python expression that creates ``marker`` and evaluates to an fconv layer spec."""
    return f"(__import__('pathlib').Path({str(marker)!r}).touch(), [(32, 3)])[1]"


class _Pickled:
    """Unpickling this creates the marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture
def tripwire(marker, monkeypatch):
    """torch.load and pickle create the marker (and fail) if the loading path calls them at all."""

    def trip(*args, **kwargs):
        marker.touch()
        raise AssertionError("the loading path unpickled")

    for target, name in ((torch, "load"), (pickle, "load"), (pickle, "loads"), (pickle, "Unpickler")):
        monkeypatch.setattr(target, name, trip)


# ---------------------------------------------------------------- tampering helpers


def listed(model_dir: Path):
    """The file names ``SHA256SUMS`` lists."""
    return parse_manifest(model_dir / "SHA256SUMS", (model_dir / "SHA256SUMS").read_bytes())


def tamper(source: Path, tmp_path: Path, edit, marker: Path, resign: bool) -> Path:
    """A copy of ``source`` changed by ``edit(dir, marker)``, with live pickles beside its files."""
    model_dir = tmp_path / "model"
    shutil.copytree(source, model_dir)
    for name in ("model.pt", "pytorch_model.bin"):
        with open(model_dir / name, "wb") as f:
            pickle.dump(_Pickled(marker), f)
    edit(model_dir, marker)
    if resign:
        write_manifest(model_dir, [n for n in listed(model_dir) if (model_dir / n).exists()])
    return model_dir


def config_edit(change):
    """An edit applying ``change(config, marker)`` to config.json."""

    def edit(model_dir: Path, marker: Path):
        path = model_dir / "config.json"
        config = json.loads(path.read_text())
        change(config, marker)
        path.write_text(json.dumps(config))

    return edit


def safetensors_header(path: Path):
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return data, n, json.loads(data[8 : 8 + n])


def rewrite_weights(model_dir: Path, change) -> None:
    """``model.safetensors`` saved anew after ``change(state, metadata)``."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    path = model_dir / "model.safetensors"
    with safe_open(str(path), framework="pt") as f:
        metadata, state = f.metadata(), {name: f.get_tensor(name) for name in f.keys()}
    change(state, metadata)
    save_file(state, str(path), metadata=metadata)


def alias_same_shape(state, metadata) -> None:
    """Drop one tensor and name it, in ``tied_weights``, a copy of another of the same shape."""
    a, b = next((a, b) for a in sorted(state) for b in sorted(state) if a < b and state[a].shape == state[b].shape)
    del state[a]
    metadata["tied_weights"] = json.dumps({a: b})


def swap_offsets(model_dir: Path, marker: Path) -> None:
    """Swap the data offsets of two tensors of the same shape (the header keeps its length)."""
    path = model_dir / "model.safetensors"
    data, n, header = safetensors_header(path)
    by_shape = {}
    for name, entry in header.items():
        if name != "__metadata__":
            by_shape.setdefault((entry["dtype"], tuple(entry["shape"])), []).append(name)
    a, b = next(names for names in by_shape.values() if len(names) >= 2)[:2]
    header[a]["data_offsets"], header[b]["data_offsets"] = header[b]["data_offsets"], header[a]["data_offsets"]
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= n
    path.write_bytes(data[:8] + text.ljust(n, b" ") + data[8 + n :])


def retype_first_tensor(model_dir: Path, marker: Path) -> None:
    """F32 -> I32 in the header: same size, so the file stays a valid safetensors file."""
    path = model_dir / "model.safetensors"
    data, n, _ = safetensors_header(path)
    header = data[8 : 8 + n]
    assert b'"F32"' in header
    path.write_bytes(data[:8] + header.replace(b'"F32"', b'"I32"', 1) + data[8 + n :])


def flip_last_weight_byte(model_dir: Path, marker: Path) -> None:
    path = model_dir / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def permute_dictionary(model_dir: Path, marker: Path) -> None:
    path = model_dir / "dict.tgt.txt"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[1:] + lines[:1]))


def user_dir_plugin(marker: Path) -> str:
    """A fairseq --user-dir whose import creates the marker."""
    plugin = marker.parent / "evil_plugin"
    plugin.mkdir(exist_ok=True)
    (plugin / "__init__.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    return str(plugin)


def _set(path: str, value):
    """A config change setting ``a.b.c`` to ``value`` (a callable gets the marker)."""

    def change(config, marker):
        *parents, leaf = path.split(".")
        node = config
        for p in parents:
            node = node.setdefault(p, {}) if isinstance(node.get(p, {}), dict) else node[p]
        node[leaf] = value(marker) if callable(value) else value

    return change


def _both(*changes):
    def change(config, marker):
        for c in changes:
            c(config, marker)

    return change


def _write(name: str, text):
    def edit(model_dir, marker):
        (model_dir / name).write_bytes(text(model_dir) if callable(text) else text)

    return edit


# ---------------------------------------------------------------- loaders


def lay_out_hub_cache(cache: Path, repo_id: str, folder: Path, commit: str = "c" * 40) -> None:
    """A cache as huggingface_hub writes it: blobs by hash, a snapshot of symlinks, refs/main."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    for f in folder.iterdir():
        blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copyfile(f, blob)
        (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)


def load_dir(model_dir: Path, tmp_path: Path):
    return hub.from_pretrained(model_dir)


def load_hub_cache(model_dir: Path, tmp_path: Path):
    cache = tmp_path / "hf-cache"
    lay_out_hub_cache(cache, "someone/tiny", model_dir)
    return fairseq_dense.from_pretrained("someone/tiny", cache_dir=str(cache), local_files_only=True)


def load_torch_hub(model_dir: Path, tmp_path: Path):
    return torch.hub.load(str(helpers.REPO), "from_pretrained", str(model_dir), source="local")


LOADERS = {"dir": load_dir, "hub_cache": load_hub_cache, "torch_hub": load_torch_hub}


def assert_refused(load, match: str, marker: Path) -> str:
    """``load()`` raises a one-line PretrainedModelError matching ``match``, and the payload never ran."""
    try:
        with pytest.raises(PretrainedModelError) as info:
            load()
    finally:
        assert not marker.exists(), "the payload ran"
    message = str(info.value)
    assert re.search(match, message), message
    assert "\n" not in message and info.value.__cause__ is None
    return message


# ---------------------------------------------------------------- config payloads (re-signed)

CONFIG_CASES = {
    "fconv eval through arch": (
        _both(_set("arch", "fconv"), _set("model", lambda m: {"encoder_layers": payload(m)})),
        r"config.json: key 'arch': unknown architecture \(fairseq's architecture 'fconv', not one of fairseq-dense's",
    ),
    "fconv eval through task": (
        _both(_set("task.arch", "fconv"), _set("task.encoder_layers", payload)),
        r"config.json: key 'task.arch'",
    ),
    "task sets a model option": (_set("task.encoder_embed_dim", 8), r"key 'task.encoder_embed_dim' is a model option"),
    "wav2vec2 eval": (
        _both(_set("arch", "wav2vec2"), _set("model", lambda m: {"conv_feature_layers": payload(m)})),
        r"key 'arch': unknown architecture \(fairseq's architecture 'wav2vec2'",
    ),
    "task data outside the folder": (_set("task.data", "/"), r"key 'task.data' cannot be set"),
    "task user_dir": (_set("task.user_dir", user_dir_plugin), r"key 'task.user_dir' cannot be set"),
    "top-level user_dir": (_set("user_dir", user_dir_plugin), r"key 'user_dir' is not accepted"),
    "task name os.system": (_set("task._name", "os.system"), r"key 'task._name' must be one of \['translation'"),
    "fairseq task name": (_set("task._name", "translation_lev"), r"key 'task._name'"),
    "model _name": (_set("model._name", "fconv"), r"key 'model._name' is not accepted"),
    "model arch": (_set("model.arch", "fconv"), r"key 'model.arch' is not accepted"),
    "expression as an integer": (
        _set("model.encoder_embed_dim", payload),
        r"key 'model.encoder_embed_dim' must be an integer",
    ),
    "boolean as an integer": (
        _set("model.encoder_embed_dim", True),
        r"key 'model.encoder_embed_dim' must be an integer",
    ),
    "huge integer": (_set("model.encoder_embed_dim", 2**40), r"key 'model.encoder_embed_dim' must be an integer"),
    "list as a float": (_set("model.dropout", [0.1]), r"key 'model.dropout' must be a finite number"),
    "interpolation": (_set("model.dropout", "${oc.env:HOME}"), r"key 'model.dropout' must be a finite number"),
    "NaN": (lambda c, m: None, None),  # replaced below: JSON constants are written as text
    "tokenizer name": (_set("tokenizer._name", "os.system"), r"key 'tokenizer._name' must be 'moses'"),
    "tokenizer language path": (_set("tokenizer.source_lang", "../../etc"), r"key 'tokenizer.source_lang'"),
    "bpe name": (_set("bpe._name", "gpt2"), r"key 'bpe._name' must be 'subword_nmt'"),
    "bpe codes path": (_set("bpe.bpe_codes", "/etc/hosts"), r"key 'bpe.bpe_codes' is not accepted"),
    "source language path": (
        _both(_set("task.source_lang", "../x"), _set("dictionaries.source.file", "dict.../x.txt")),
        r"key 'task.source_lang' must be a language code",
    ),
    "dictionary path": (_set("dictionaries.target.file", "/etc/hosts"), r"key 'dictionaries.target.file' must be"),
    "weights dtype": (_set("weights_dtype", "object"), r"key 'weights_dtype' must be one of"),
    "weights dtype, a list": (_set("weights_dtype", ["float32"]), r"key 'weights_dtype' must be one of"),
    "architecture, a list": (_set("arch", [GRU]), r"key 'arch': unknown architecture \(a list of 1 items, not a"),
    "unknown architecture": (
        _set("arch", "future_model_tiny"),
        r"key 'arch': unknown architecture \(a string of 17 characters, not a registered",
    ),
    "old format": (_set("format_version", 1), r"config.json: format version 1 has no checksums .* re-export"),
    "bpe separator read as an option": (_set("bpe.bpe_separator", "-h"), r"key 'bpe.bpe_separator' must be"),
    "source language read as an option": (
        _both(_set("task.source_lang", "-h"), _set("dictionaries.source.file", "dict.-h.txt")),
        r"key 'task.source_lang' must be a language code",
    ),
    "negative task positions": (
        _set("task.max_target_positions", -5),
        r"key 'task.max_target_positions' must be at least 1 \(a size or position\), not -5",
    ),
    "zero model positions": (_set("model.max_source_positions", 0), r"key 'model.max_source_positions' must be at"),
    "zero embedding size": (_set("model.encoder_embed_dim", 0), r"key 'model.encoder_embed_dim' must be at least 1"),
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
    model_dir = tamper(transformer.dir, tmp_path, config_edit(_set(f"model.{key}", value)), marker, resign=True)
    assert_refused(lambda: hub.from_pretrained(model_dir), f"config.json: key 'model.{key}' {match}", marker)


# ---------------------------------------------------------------- integrity (not re-signed)

INTEGRITY_CASES = {
    "weight byte": (flip_last_weight_byte, "model.safetensors: sha256 .* differs from SHA256SUMS"),
    "dtype in header": (retype_first_tensor, "model.safetensors: sha256 .* differs"),
    "offsets swapped": (swap_offsets, "model.safetensors: sha256 .* differs"),
    "dictionary permuted": (permute_dictionary, "dict.tgt.txt: sha256 .* differs"),
    "bpe codes changed": (_write("bpecodes", b"#version: 0.2\na b\n"), "bpecodes: sha256 .* differs"),
    "config changed": (config_edit(_set("model.dropout", 0.3)), "config.json: sha256 .* differs"),
    "fconv payload, manifest kept": (
        config_edit(_both(_set("arch", "fconv"), _set("model", lambda m: {"encoder_layers": payload(m)}))),
        "config.json: sha256 .* differs",
    ),
    "no manifest (older export)": (lambda d, m: (d / "SHA256SUMS").unlink(), "SHA256SUMS: missing; .* re-export"),
    "manifest lists another file": (
        lambda d, m: open(d / "SHA256SUMS", "a").write(f"{'0' * 64}  model.pt\n"),
        "SHA256SUMS: lists model.pt, which config.json does not load",
    ),
    "manifest garbage": (_write("SHA256SUMS", b"\x80\x81 evil\n"), "SHA256SUMS: line 1 is not"),
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
        config_edit(_set("weights_dtype", "float16")),
        r"model.safetensors: tensor '.*' is stored as float32",
    ),
    "pickle named as safetensors": (
        lambda d, m: shutil.copyfile(d / "model.pt", d / "model.safetensors"),
        "model.safetensors: corrupted",
    ),
    "truncated weights": (
        _write("model.safetensors", lambda d: (d / "model.safetensors").read_bytes()[:999]),
        "model.safetensors: corrupted",
    ),
    "header corrupted": (
        _write(
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
            config_edit(_set("dictionaries.target.size", 17))(d, m),
        ),
        r"model.safetensors: tensor '.*' has shape",
    ),
    "dictionary with an extra line": (
        lambda d, m: open(d / "dict.tgt.txt", "a").write("zz 1\n"),
        "dict.tgt.txt: 17 symbols, but config.json",
    ),
    "dictionary missing": (lambda d, m: (d / "dict.tgt.txt").unlink(), "dict.tgt.txt: missing"),
    "bpe codes malformed": (_write("bpecodes", b"#version: 0.2\na b c\n"), "bpecodes: line 2 is not a BPE merge"),
    "bpe codes version": (_write("bpecodes", b"#version: x\na b\n"), "bpecodes: line 1 is not '#version"),
    "bpe codes not text": (_write("bpecodes", b"\xff\xfe\n"), "bpecodes: not UTF-8"),
    "dictionary not a dictionary": (_write("dict.tgt.txt", b"a\n"), "dict.tgt.txt: line 1 is not '<symbol> <count>'"),
    "weights missing": (lambda d, m: (d / "model.safetensors").unlink(), "model.safetensors: missing"),
    "bpe codes empty": (_write("bpecodes", b""), "bpecodes: holds no BPE merge"),
    "bpe codes version only": (_write("bpecodes", b"#version: 0.2\n"), "bpecodes: holds no BPE merge"),
    "bpe codes blank line": (_write("bpecodes", b"#version: 0.2\na b\n\nc d\n"), "bpecodes: line 3 is not a BPE"),
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
    assert "SHA256SUMS" in hub.HUB_ALLOW_PATTERNS and not any(p.endswith(".pt") for p in hub.HUB_ALLOW_PATTERNS)


# ---------------------------------------------------------------- fairseq-dense-export on crafted checkpoints


def crafted_checkpoint(gru, tmp_path: Path, marker: Path, change) -> Path:
    """The shared checkpoint with ``change(state, marker)`` applied, saved anew."""
    state = torch.load(gru.ckpt, weights_only=True)
    change(state, marker)
    path = tmp_path / "crafted.pt"
    torch.save(state, path)
    return path


def _cfg_set(node, key: str, value) -> None:
    """Set an option in a checkpoint's config node (a dict, or a Namespace for argparse-style models)."""
    if isinstance(node, dict):
        node[key] = value
    else:
        setattr(node, key, value)


def _cfg(section: str, key: str, value):
    def change(state, marker):
        _cfg_set(state["cfg"][section], key, value(marker) if callable(value) else value)

    return change


def _fconv(state, marker):
    state["cfg"]["model"].update(_name="fconv", encoder_layers=payload(marker), decoder_layers=payload(marker))


def _namespace_fconv(state, marker):
    import argparse

    state["args"] = argparse.Namespace(
        arch="fconv",
        task="translation",
        encoder_layers=payload(marker),
        data=str(marker.parent),
        source_lang="src",
        target_lang="tgt",
    )


def _pickle_payload(state, marker):
    state["extra_state"] = _Pickled(marker)


EXPORT_CASES = {
    "fconv eval": (_fconv, r"crafted.pt: architecture 'fconv' is not one of fairseq-dense's"),
    "fconv eval, legacy args": (_namespace_fconv, r"crafted.pt: architecture 'fconv' is not one of"),
    "expression as an integer": (
        _cfg("model", "encoder_embed_dim", payload),
        r"crafted.pt: key 'model.encoder_embed_dim' must be an integer",
    ),
    "interpolation": (_cfg("model", "dropout", "${oc.env:HOME}"), r"crafted.pt: key 'model.dropout' must be"),
    "task name": (_cfg("task", "_name", "os.system"), r"crafted.pt: task 'os.system' of the checkpoint"),
    "language path": (_cfg("task", "source_lang", "../../x"), r"crafted.pt: key 'task.source_lang'"),
    "unknown architecture": (_cfg("model", "_name", "future_model_tiny"), r"'future_model_tiny' is not one of"),
    "pickled object": (_pickle_payload, r"crafted.pt: cannot be read safely"),
    "not a tensor": (lambda s, m: s["model"].update(extra=[1, 2]), r"crafted.pt: 'model' entry 'extra' is not"),
}


@pytest.mark.parametrize("case", sorted(EXPORT_CASES))
def test_export_refuses_crafted_checkpoints(gru, tmp_path, marker, capsys, case):
    change, match = EXPORT_CASES[case]
    ckpt = crafted_checkpoint(gru, tmp_path, marker, change)
    out = tmp_path / "out"
    try:
        rc = export_cli.main([str(ckpt), "--out", str(out), "--data", str(gru.data)])
    finally:
        assert not marker.exists(), "the payload ran"
    err = capsys.readouterr().err.strip()
    assert rc == 1 and re.search(match, err), err
    assert len(err.splitlines()) == 1 and err.startswith("fairseq-dense-export: error: ")
    assert not out.exists()


def test_export_refuses_transformer_path_option(transformer, tmp_path, marker, capsys):
    state = torch.load(transformer.ckpt, weights_only=True)
    _cfg_set(state["cfg"]["model"], "encoder_embed_path", str(helpers.REPO / "README.md"))  # fairseq would read it
    torch.save(state, tmp_path / "crafted.pt")
    rc = export_cli.main(
        [str(tmp_path / "crafted.pt"), "--out", str(tmp_path / "out"), "--data", str(transformer.data)]
    )
    err = capsys.readouterr().err
    assert rc == 1 and "key 'model.encoder_embed_path' must be null" in err and len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------- the plugin's own code evaluates nothing


def test_plugin_code_has_no_eval():
    """The architectures the loader builds contain no eval/exec (nor fairseq's eval_str_* helpers)."""
    package = Path(fairseq_dense.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name in ("eval", "exec", "eval_str_list", "eval_str_dict", "eval_bool") and not (
                    name == "eval" and isinstance(node.func, ast.Attribute)  # model.eval(): train/eval mode
                ):
                    found.append(f"{path.relative_to(package)}:{node.lineno}")
    assert found == []


# ---------------------------------------------------------------- every key, hostile values

HOSTILE_VALUES = [
    "(__import__('os').system('true'), 1)[1]",
    None,
    [],
    {},
    True,
    -1,
    0,
    1.5,
    2**40,
    "${oc.env:HOME}",
    "../x",
    ["x"],
    {"a": "b"},
]


def _key_paths(node, prefix=()):
    for key, value in node.items():
        yield prefix + (key,)
        if isinstance(value, dict):
            yield from _key_paths(value, prefix + (key,))


@pytest.mark.parametrize("family", ["gru", "transformer"])
def test_every_config_key_with_hostile_values(request, family):
    """Each key of a real config set to each hostile value: accepted, or one PretrainedModelError naming a key."""
    from fairseq_dense.hub.schema import check_config

    model = request.getfixturevalue(family)
    base = json.loads((model.dir / "config.json").read_text())
    refused = 0
    for path in list(_key_paths(base)) + [("task", "arch"), ("task", "data"), ("model", "_name"), ("user_dir",)]:
        for value in HOSTILE_VALUES:
            config = json.loads(json.dumps(base))
            node = config
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
            try:
                check_config(config, Path("config.json"))
            except PretrainedModelError as err:
                refused += 1
                message = str(err)
                assert "\n" not in message and re.search(r"config.json: (key '|not a fairseq-dense|format)", message)
            else:  # what passes is of a declared type: no hostile string passes, no object but an empty model
                assert not isinstance(value, str) or path[-1] in ("package_version", "fairseq_version"), path
                assert not isinstance(value, dict) or (path, value) == (("model",), {}), path
    assert refused > 10 * len(HOSTILE_VALUES)


# ---------------------------------------------------------------- what a load opens and changes (audit hook)

_AUDIT = {"events": None, "installed": False}
#: Audit events that name files: opening, listing, renaming, removing, copying, changing metadata.
_FILE_EVENTS = {
    "open",
    "os.listdir",
    "os.scandir",
    "os.rename",
    "os.remove",
    "os.rmdir",
    "os.mkdir",
    "os.chmod",
    "os.utime",
    "os.truncate",
    "os.symlink",
    "os.link",
    "shutil.copyfile",
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _audit_hook(event, args):
    events = _AUDIT["events"]
    if events is None or event not in _FILE_EVENTS:
        return
    writes = event != "open" and event not in ("os.listdir", "os.scandir")
    if event == "open":
        mode, flags = args[1], args[2]
        writes = bool(set(mode) & set("wax+")) if isinstance(mode, str) else bool((flags or 0) & _WRITE_FLAGS)
    for arg in args[:1] if event == "open" else args:
        if isinstance(arg, (str, bytes, os.PathLike)):
            events.append((event, os.path.abspath(os.fsdecode(arg)), writes))


@contextlib.contextmanager
def audited():
    """Record every file event of the process (Python's audit hooks: builtins.open, os.open, ...)."""
    if not _AUDIT["installed"]:
        sys.addaudithook(_audit_hook)  # cannot be removed: it records only inside this context
        _AUDIT["installed"] = True
    _AUDIT["events"] = events = []
    try:
        yield events
    finally:
        _AUDIT["events"] = None


def under(path: str, root: Path) -> bool:
    real = Path(os.path.realpath(path))
    return real == root.resolve() or root.resolve() in real.parents


def training_folder(work: Path) -> Path:
    """A fairseq save directory as a kill leaves it: a loadable checkpoint1.pt and a cut checkpoint_last.pt."""
    save = work / "checkpoints"
    save.mkdir(parents=True)
    state = {"model": {"w": torch.zeros(2)}, "optimizer_history": [{"num_updates": 7}], "cfg": None}
    torch.save(state, save / "checkpoint1.pt")
    torch.save(state, save / "full.bin")
    (save / "checkpoint_last.pt").write_bytes((save / "full.bin").read_bytes()[:100])
    (save / "full.bin").unlink()
    return save


def snapshot(folder: Path):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("task", ["translation", "translation_exact_resume", "translation_weighted"])
def test_loading_touches_nothing_but_the_model_files(tmp_path, monkeypatch, task):
    """Export and load a model of each task from inside a training folder: its checkpoints stay as they were.

    The tasks translation_exact_resume and translation_weighted repair a cut
    checkpoint_last.pt when fairseq-train builds a model; an inference load must
    not. Every route is audited: only the model directory's listed files are
    opened, for reading, and nothing of the training folder is opened, listed
    or changed.
    """
    from fairseq.tasks import TASK_REGISTRY

    src = tmp_path / "src"
    ckpt = build_checkpoint(src, GRU, task)
    work = tmp_path / "work"
    save = training_folder(work)
    before = snapshot(save)
    monkeypatch.chdir(work)
    with audited() as events:
        out = hub.export_checkpoint([ckpt], work / "export", data=src / "bin")
    assert json.loads((out / "config.json").read_text())["task"]["_name"] == task
    assert not [e for e in events if under(e[1], save)] and snapshot(save) == before
    cache = tmp_path / "hf-cache"
    lay_out_hub_cache(cache, "someone/tiny", out)
    blobs = next(cache.glob("models--*/blobs"))
    routes = {
        "dir": lambda: hub.from_pretrained(out),
        "hub_cache": lambda: hub.from_pretrained("someone/tiny", cache_dir=str(cache), local_files_only=True),
        "torch_hub": lambda: load_torch_hub(out, tmp_path),
    }
    for route, load in routes.items():
        with audited() as events:
            model = load()
        assert isinstance(model.translate("a b c", beam=2, max_len_b=4), str)
        assert type(model.task) is TASK_REGISTRY[task]
        # nothing written anywhere (but Python's bytecode cache of hubconf.py, on a first torch.hub import)
        written = [e for e in events if e[2] and "__pycache__" not in Path(e[1]).parts]
        assert written == [], (route, written)
        inside = [e for e in events if under(e[1], tmp_path)]
        assert not [e for e in inside if under(e[1], save)], route
        opened = sorted({Path(e[1]).name for e in inside if e[0] == "open"})
        model_files = [e for e in inside if under(e[1], out) or under(e[1], blobs)]
        if route == "hub_cache":  # huggingface_hub reads its ref (and looks for a file list); the loader the files
            inside = [e for e in inside if e not in model_files and Path(e[1]).parent.name not in ("refs", "trees")]
        else:
            inside = [e for e in inside if e not in model_files]
        assert inside == [], (route, inside)
        if route != "hub_cache":
            assert opened == sorted([*listed(out), "SHA256SUMS"]), (route, opened)
    assert snapshot(save) == before


# ---------------------------------------------------------------- any directory name is only a name

ODD_NAMES = [
    "-h",
    "--user-dir=evil_plugin",
    "decoy:v2",
    "${oc.env:DECOY_DIR}",
    'it\'s "quoted"',
    "back\\slash",
    "with space",
    "ünïcødé 模型",
    "new\nline",
    "~nosuchuser",
    "%(x)s {0}",
]


@pytest.fixture(scope="module")
def reference(gru):
    """The untampered export's target symbols and translation of ``a b c``."""
    model = hub.from_pretrained(gru.dir)
    return SimpleNamespace(symbols=model.tgt_dict.symbols, translation=model.translate("a b c", beam=2, max_len_b=4))


@pytest.mark.parametrize("name", ODD_NAMES, ids=ascii)
def test_any_directory_name_loads_its_own_files(gru, reference, tmp_path, monkeypatch, marker, name):
    """The directory is opened by name, never parsed: no option, no second path, no interpolation, no import.

    Beside it lie what a parser would reach instead: a ``decoy`` model whose
    target dictionary differs, named by ``decoy:v2`` (fairseq splits paths at
    ``:``) and by ``$DECOY_DIR`` (OmegaConf's ``${oc.env:...}``), and a
    ``--user-dir`` plugin whose import creates the marker.
    """
    shutil.copytree(gru.dir, tmp_path / name)
    decoy = shutil.copytree(gru.dir, tmp_path / "decoy")
    permute_dictionary(decoy, marker)
    user_dir_plugin(marker)
    monkeypatch.setenv("DECOY_DIR", str(decoy))
    monkeypatch.chdir(tmp_path)
    loads = [lambda: hub.from_pretrained(name)]
    if name in ODD_NAMES[:4]:  # the names a parser would read; torch.hub passes the name on as it is
        loads.append(lambda: load_torch_hub(Path(name), tmp_path))
    for load in loads:
        with audited() as events:
            model = load()
        assert not marker.exists(), "the plugin was imported"
        assert model.tgt_dict.symbols == reference.symbols
        assert model.translate("a b c", beam=2, max_len_b=4) == reference.translation
        stray = [e for e in events if under(e[1], tmp_path) and not under(e[1], tmp_path / name)]
        assert stray == [], stray


@pytest.mark.parametrize("name", ODD_NAMES, ids=ascii)
def test_any_directory_name_fails_in_one_line_naming_it(tmp_path, monkeypatch, name):
    """An empty directory of any name: one line that names it (non-printable characters escaped)."""
    from fairseq_dense.hub.errors import printable

    (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PretrainedModelError) as info:
        hub.from_pretrained(name)
    message = str(info.value)
    assert message.startswith(printable(Path(name) / "config.json") + ": missing") and "\n" not in message


# ---------------------------------------------------------------- messages never quote a refused file

SECRET = "SECRET-7f3a"


def _append(name: str, text: str):
    def edit(model_dir, marker):
        with open(model_dir / name, "a") as f:
            f.write(text)

    return edit


QUOTE_CASES = {
    "config value": (config_edit(_set("model.dropout", SECRET)), "config.json: key 'model.dropout'"),
    "config key": (config_edit(_set(f"model.{SECRET} x", 1)), "config.json: key 'model.<not a plain name>'"),
    "language": (config_edit(_set("task.source_lang", SECRET + "/..")), "config.json: key 'task.source_lang'"),
    "architecture": (config_edit(_set("arch", SECRET)), "config.json: key 'arch'"),
    "dictionary line": (_append("dict.tgt.txt", SECRET + "\n"), "dict.tgt.txt: line 13 is not"),
    "dictionary duplicate": (_append("dict.tgt.txt", "a 1 #fairseq:overwrite\n"), "dict.tgt.txt: line 13"),
    "bpe codes line": (_append("bpecodes", SECRET + " a b\n"), "bpecodes: line 3 is not"),
    "manifest line": (_append("SHA256SUMS", SECRET + "\n"), "SHA256SUMS: line 6 is not"),
    "tensor name": (
        lambda d, m: rewrite_weights(d, lambda state, meta: state.update({f"{SECRET} x": torch.zeros(1)})),
        r"model.safetensors: does not match .*'<not a plain name>'",
    ),
}


@pytest.mark.parametrize("case", sorted(QUOTE_CASES))
def test_messages_never_quote_the_refused_file(gru, tmp_path, marker, case):
    edit, match = QUOTE_CASES[case]
    model_dir = tamper(gru.dir, tmp_path, edit, marker, resign=case != "manifest line")
    message = assert_refused(lambda: hub.from_pretrained(model_dir), match, marker)
    assert SECRET not in message and "fairseq:overwrite" not in message


# ---------------------------------------------------------------- push: exactly the export files


class FakeApi:
    """Records what push_to_hub asks of huggingface_hub's ``HfApi`` (no network)."""

    calls = []

    def __init__(self, token=None):
        self.calls.append(("init",))

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id))

    def create_commit(self, operations, **kwargs):
        self.calls.append(("create_commit", {op.path_in_repo: op.path_or_fileobj for op in operations}))
        return SimpleNamespace(commit_url="https://hub/commit/1")


@pytest.fixture
def fake_hub(monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    FakeApi.calls = []
    return FakeApi.calls


def with_strays(gru, tmp_path: Path, marker: Path) -> Path:
    """The export with model.pt and stray files beside it: notes, a .env, a folder."""
    model_dir = tamper(gru.dir, tmp_path, lambda d, m: None, marker, resign=False)
    (model_dir / ".env").write_text(f"HF_TOKEN={SECRET}\n")
    (model_dir / "notes.txt").write_text(SECRET)
    (model_dir / "extra").mkdir()
    (model_dir / "extra" / "x.txt").write_text(SECRET)
    return model_dir


@pytest.mark.parametrize("pickle_flag", [[], ["--no-pickle"]])
def test_push_uploads_exactly_the_export_files(gru, tmp_path, marker, fake_hub, capsys, pickle_flag):
    from fairseq_dense.cli import push as push_cli

    model_dir = with_strays(gru, tmp_path, marker)
    assert push_cli.main([str(model_dir), "me/tiny", *pickle_flag]) == 0
    ((_, files),) = [c for c in fake_hub if c[0] == "create_commit"]
    expected = sorted([*listed(model_dir), "SHA256SUMS", "README.md"] + ([] if pickle_flag else ["model.pt"]))
    assert sorted(files) == expected
    assert all(files[name] == (model_dir / name).read_bytes() for name in files)
    out = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in out[:-1]] == [f"uploading {name}" for name in files]
    assert out[-1] == "https://hub/commit/1" and not marker.exists()


def test_push_dry_run_lists_and_uploads_nothing(gru, tmp_path, marker, fake_hub, capsys):
    from fairseq_dense.cli import push as push_cli

    model_dir = with_strays(gru, tmp_path, marker)
    assert push_cli.main([str(model_dir), "me/tiny", "--dry-run", "--no-pickle"]) == 0
    assert fake_hub == []
    out = capsys.readouterr().out.splitlines()
    assert sorted(line.split("\t")[0] for line in out) == sorted(
        f"would upload {name}" for name in [*listed(model_dir), "SHA256SUMS", "README.md"]
    )


@pytest.mark.parametrize("what", ["symlinked card", "symlinked pickle", "card is a folder", "pickle is a fifo"])
def test_push_refuses_links_and_special_files(gru, tmp_path, marker, fake_hub, capsys, what):
    from fairseq_dense.cli import push as push_cli

    model_dir = with_strays(gru, tmp_path, marker)
    key = tmp_path / "id_rsa"
    key.write_text(SECRET)
    name = "README.md" if "card" in what else "model.pt"
    (model_dir / name).unlink()
    if "symlinked" in what:
        (model_dir / name).symlink_to(key)
    elif "folder" in what:
        (model_dir / name).mkdir()
    else:
        os.mkfifo(model_dir / name)
    assert push_cli.main([str(model_dir), "me/tiny"]) == 1
    err = capsys.readouterr().err.strip()
    kind = "a symbolic link" if "symlinked" in what else "not a regular file"
    assert err == f"fairseq-dense-push: error: {model_dir / name}: {kind}; only regular files are uploaded " + (
        "(copy the file itself)"
    )
    assert fake_hub == [] and SECRET not in err
