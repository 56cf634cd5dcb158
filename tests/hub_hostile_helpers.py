"""Shared pieces of the hostile-input hub tests (``tests/test_hub_*.py``).

One tiny ``gru_attention_tiny`` model (and a ``weighted_transformer_tiny`` one for
fairseq's transformer options) is built untrained and exported once per test
session (the ``_EXPORTS`` cache below, behind the ``gru`` and ``transformer``
fixtures of ``tests/conftest.py``; each costs a few seconds to build).
Each case copies the export, tampers with it, and loads it through
``from_pretrained`` on the directory, by repository id from a huggingface_hub
cache, and through ``torch.hub.load(source="local")`` with ``hubconf.py``;
checkpoint cases go through ``fairseq-dense-export``. Every case asserts:

- a ``PretrainedModelError`` (never ``SystemExit``, ``KeyError``, ...) whose one-line
  message names the file or key at fault;
- the marker file of the payload does not exist. Config payloads create it when
  evaluated (fairseq's ``fconv``/``wav2vec2`` ``eval()`` of layer specs, an imported
  ``user_dir``); pickled payloads lie beside the files, and ``torch.load``/``pickle``
  are replaced by tripwires (the ``tripwire`` fixture) that create it when called at all.

Config edits are re-signed (``SHA256SUMS`` rewritten, as an attacker would) so that
the schema, not the checksum, has to stop them; integrity cases are not re-signed.
"""

import json
import pickle
import re
import shutil
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import fairseq_dense
from fairseq_dense import hub
from fairseq_dense.hub import PretrainedModelError
from fairseq_dense.hub.schema import parse_manifest, write_manifest
from tests import helpers, test_hub

GRU, TRANSFORMER = "gru_attention_tiny", "weighted_transformer_tiny"
#: A string that messages must never quote from a refused file.
SECRET = "SECRET-7f3a"
_EXPORTS = {}

# ---------------------------------------------------------------- the shared tiny models


def build_checkpoint(root: Path, arch: str, task: str = "translation") -> Path:
    """An untrained ``arch`` of ``task`` saved the way fairseq's trainer saves it (``cfg`` as a plain dict)."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    data = root / "bin"
    data.mkdir(parents=True, exist_ok=True)
    for lang in ("src", "tgt"):  # unless the test wrote its own
        if not (data / f"dict.{lang}.txt").exists():
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
    model = tasks.setup_task(cfg.task).build_model(cfg.model, from_checkpoint=True)  # no training-time work
    ckpt = root / "checkpoint_last.pt"
    torch.save(
        {"args": None, "cfg": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), "model": model.state_dict()},
        ckpt,
    )
    return ckpt


def exported(tmp_path_factory, arch: str) -> SimpleNamespace:
    """``arch`` built and exported with BPE codes and moses, once per test session."""
    if arch not in _EXPORTS:
        root = tmp_path_factory.mktemp(arch)
        ckpt = build_checkpoint(root, arch)
        codes = root / "bpecodes"
        codes.write_text("#version: 0.2\nx y\n")
        out = hub.export_checkpoint([ckpt], root / "export", data=root / "bin", bpe_codes=codes)
        _EXPORTS[arch] = SimpleNamespace(dir=out, ckpt=ckpt, data=root / "bin")
    return _EXPORTS[arch]


def payload(marker: Path) -> str:
    """A Python expression that creates ``marker`` and evaluates to an fconv layer spec."""
    return f"(__import__('pathlib').Path({str(marker)!r}).touch(), [(32, 3)])[1]"


class Pickled:
    """Unpickling this creates the marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


# ---------------------------------------------------------------- tampering helpers


def listed(model_dir: Path):
    """The file names ``SHA256SUMS`` lists."""
    return parse_manifest(str(model_dir / "SHA256SUMS"), (model_dir / "SHA256SUMS").read_bytes())


def tamper(source: Path, tmp_path: Path, edit, marker: Path, resign: bool) -> Path:
    """A copy of ``source`` changed by ``edit(dir, marker)``, with live pickles beside its files."""
    model_dir = tmp_path / "model"
    shutil.copytree(source, model_dir)
    for name in ("model.pt", "pytorch_model.bin"):
        with open(model_dir / name, "wb") as f:
            pickle.dump(Pickled(marker), f)
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
    """The bytes of a safetensors file, its header length and its header."""
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
    """Flip one bit of the last weight byte."""
    path = model_dir / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def permute_dictionary(model_dir: Path, marker: Path) -> None:
    """Move the first line of the target dictionary to its end."""
    path = model_dir / "dict.tgt.txt"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[1:] + lines[:1]))


def user_dir_plugin(marker: Path) -> str:
    """A fairseq --user-dir whose import creates the marker."""
    plugin = marker.parent / "evil_plugin"
    plugin.mkdir(exist_ok=True)
    (plugin / "__init__.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    return str(plugin)


def set_key(path: str, value):
    """A config change setting ``a.b.c`` to ``value`` (a callable gets the marker)."""

    def change(config, marker):
        *parents, leaf = path.split(".")
        node = config
        for p in parents:
            node = node.setdefault(p, {}) if isinstance(node.get(p, {}), dict) else node[p]
        node[leaf] = value(marker) if callable(value) else value

    return change


def both(*changes):
    """A config change applying each of ``changes`` in turn."""

    def change(config, marker):
        for c in changes:
            c(config, marker)

    return change


def write_file(name: str, text):
    """An edit writing ``name`` (``text`` bytes, or ``text(dir)`` if callable)."""

    def edit(model_dir, marker):
        (model_dir / name).write_bytes(text(model_dir) if callable(text) else text)

    return edit


# ---------------------------------------------------------------- loaders


def lay_out_hub_cache(cache: Path, repo_id: str, folder: Path, commit: str = "c" * 40) -> None:
    """A cache as huggingface_hub writes it, with ``folder`` as its one snapshot and refs/main."""
    test_hub.lay_out_hub_cache(cache, repo_id, {commit: folder}, main=commit)


def load_dir(model_dir: Path, tmp_path: Path):
    """Load ``model_dir`` through ``from_pretrained`` on the directory."""
    return hub.from_pretrained(model_dir)


def load_hub_cache(model_dir: Path, tmp_path: Path):
    """Load ``model_dir`` by repository id from a huggingface_hub cache laid out in ``tmp_path``."""
    cache = tmp_path / "hf-cache"
    lay_out_hub_cache(cache, "someone/tiny", model_dir)
    return fairseq_dense.from_pretrained("someone/tiny", cache_dir=str(cache), local_files_only=True)


def load_torch_hub(model_dir: Path, tmp_path: Path):
    """Load ``model_dir`` through ``torch.hub.load(source="local")`` with ``hubconf.py``."""
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
