"""The files of a model directory, checked before fairseq or any model code sees them.

:func:`read_config` checks ``config.json`` (schema: :mod:`fairseq_dense.hub.schema`)
and that every file it names is present, inside the directory and matches
``SHA256SUMS`` (:mod:`fairseq_dense.hub.manifest`); :func:`load_dictionaries`,
:func:`check_bpe_codes` and :func:`read_weights` parse the other files. Nothing
here unpickles or runs model code.
"""

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple, Union

from fairseq_dense.hub.errors import PretrainedModelError, one_line
from fairseq_dense.hub.manifest import MANIFEST_NAME, read_manifest, verify_file
from fairseq_dense.hub.schema import check_config, parse_config

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
PICKLE_NAME = "model.pt"
BPE_CODES_NAME = "bpecodes"
CARD_NAME = "README.md"
#: What is fetched from a hub repository: never ``*.pt`` or any other pickle.
HUB_ALLOW_PATTERNS = [CONFIG_NAME, WEIGHTS_NAME, "dict.*.txt", BPE_CODES_NAME, MANIFEST_NAME, CARD_NAME]
_MAX_CONFIG_BYTES = 1 << 20


def _missing(path: Path, required: List[str]) -> PretrainedModelError:
    return PretrainedModelError(
        f"{path}: missing; a model directory must hold {', '.join(required)} (see fairseq-dense-export)"
    )


def check_inside(model_dir: Path, name: str) -> Path:
    """``model_dir/name`` is a regular file that resolves inside the model directory.

    In a huggingface_hub cache the snapshot's files link to the repository's
    ``blobs`` folder, which counts as inside.
    """
    path = model_dir / name
    root = model_dir.resolve()
    roots = [root] + ([root.parent.parent / "blobs"] if root.parent.name == "snapshots" else [])
    real = path.resolve()
    if not any(real.parent == r or r in real.parents for r in roots):
        raise PretrainedModelError(f"{path}: resolves outside the model directory (to {real})")
    if not real.is_file():
        raise PretrainedModelError(f"{path}: not a regular file")
    return path


def required_files(config: Dict[str, Any]) -> List[str]:
    """The files a (checked) config loads from: config, weights, dictionaries, BPE codes."""
    names = [CONFIG_NAME, WEIGHTS_NAME] + [config["dictionaries"][side]["file"] for side in ("source", "target")]
    return names + ([BPE_CODES_NAME] if config.get("bpe") else [])


def read_config(model_dir: Union[str, Path]) -> Dict[str, Any]:
    """Read and check ``config.json``, and check every file it names against ``SHA256SUMS``.

    Order: the manifest, the checksum of ``config.json``, its schema
    (:func:`~fairseq_dense.hub.schema.check_config`), then the presence,
    location and checksum of every other file. Nothing here runs model code.

    Raises:
        PretrainedModelError: naming the missing, altered or malformed file (and key).
    """
    model_dir = Path(model_dir)
    path = model_dir / CONFIG_NAME
    if not path.is_file():
        raise _missing(path, [CONFIG_NAME, WEIGHTS_NAME, "dict.<lang>.txt", MANIFEST_NAME])
    check_inside(model_dir, CONFIG_NAME)
    with open(path, "rb") as f:  # read once: what is verified is what is parsed
        data = f.read(_MAX_CONFIG_BYTES + 1)
    if len(data) > _MAX_CONFIG_BYTES:
        raise PretrainedModelError(f"{path}: larger than {_MAX_CONFIG_BYTES} bytes; not a fairseq-dense config")
    if (model_dir / MANIFEST_NAME).exists():
        check_inside(model_dir, MANIFEST_NAME)
    sums = read_manifest(model_dir)
    verify_file(model_dir, CONFIG_NAME, sums, data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise PretrainedModelError(f"{path}: not valid JSON ({err})") from None
    config = parse_config(text, path)
    try:
        check_config(config, path)
    except PretrainedModelError:
        raise
    except Exception as err:  # a shape of JSON the schema did not foresee is refused all the same
        raise PretrainedModelError(
            f"{path}: not a fairseq-dense model config ({type(err).__name__}: {one_line(err, 120)})"
        ) from None
    required = required_files(config)
    for name in required:
        if not (model_dir / name).is_file():
            raise _missing(model_dir / name, required)
    for name in required:
        check_inside(model_dir, name)
    extra = sorted(set(sums) - set(required))
    if extra:
        raise PretrainedModelError(
            f"{model_dir / MANIFEST_NAME}: lists {extra[0]}, which {CONFIG_NAME} does not load; "
            "the directory is altered"
        )
    for name in required[1:]:
        verify_file(model_dir, name, sums)
    return config


def load_dictionaries(model_dir: Path, config: Dict[str, Any]) -> None:
    """Each dictionary parses and has the size recorded in ``config.json``."""
    from fairseq.data import Dictionary

    for side, entry in config["dictionaries"].items():
        path = model_dir / entry["file"]
        try:
            size = len(Dictionary.load(str(path)))
        except (Exception, SystemExit) as err:
            raise PretrainedModelError(f"{path}: not a fairseq dictionary ({one_line(err, 120)})") from None
        if size != int(entry["size"]):
            raise PretrainedModelError(
                f"{path}: {size} symbols, but {CONFIG_NAME} and {WEIGHTS_NAME} expect {entry['size']} "
                f"for the {side} side (the file does not belong to this model)"
            )


def check_bpe_codes(path: Path) -> None:
    """subword-nmt codes: an optional ``#version: X.Y`` line, then one ``left right`` pair a line.

    subword-nmt itself ends the program (``sys.exit``) on a malformed line.
    """
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as err:
        raise PretrainedModelError(f"{path}: not UTF-8 text ({err})") from None
    if lines and lines[-1] == "":
        lines.pop()
    start = 1 if lines and lines[0].startswith("#version:") else 0
    if start and not re.fullmatch(r"#version: \d+(\.\d+)*", lines[0].rstrip("\r ")):
        raise PretrainedModelError(f"{path}: line 1 is not '#version: <number>'")
    for number, line in enumerate(lines[start:], start + 1):
        if len(line.strip("\r\n ").split(" ")) != 2:
            raise PretrainedModelError(f"{path}: line {number} is not a BPE merge ('<left> <right>')")


def read_weights(path: Path) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """The tensors of ``model.safetensors`` and its tied-weight aliases ``{alias: stored name}``."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            state = {name: f.get_tensor(name) for name in f.keys()}
        aliases = json.loads(metadata.get("tied_weights", "{}"))
    except (Exception, SystemExit) as err:
        raise PretrainedModelError(f"{path}: corrupted or not a safetensors file ({one_line(err, 120)})") from None
    if not isinstance(aliases, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v in state and k not in state for k, v in aliases.items()
    ):
        raise PretrainedModelError(f"{path}: metadata 'tied_weights' is not a map of stored tensor names")
    return state, aliases
