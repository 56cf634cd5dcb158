"""The files of a model directory: each read once, verified against ``SHA256SUMS``, then parsed.

:func:`read_model_files` is the only place that opens a model directory's files.
It opens ``SHA256SUMS``, ``config.json`` and the files the (checked) config
names, nothing else; each through its resolved path, which must lie inside the
directory and be a regular file, and each exactly once: the bytes that are
verified are the bytes that are parsed. :func:`parse_dictionary` and
:func:`parse_bpe_codes` check the text files deeply enough that the
third-party code reading them (fairseq's ``Dictionary``, subword-nmt) cannot
fail or end the program. Nothing here unpickles or runs model code.
"""

import dataclasses
import io
import os
import re
import stat
from pathlib import Path
from typing import Any, Dict, List, Optional

from fairseq_dense.hub.errors import PretrainedModelError, describe
from fairseq_dense.hub.manifest import MANIFEST_NAME, MAX_BYTES, parse_manifest, verify
from fairseq_dense.hub.schema import check_config, parse_config

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
PICKLE_NAME = "model.pt"
BPE_CODES_NAME = "bpecodes"
CARD_NAME = "README.md"
#: What is fetched from a hub repository: never ``*.pt`` or any other pickle.
HUB_ALLOW_PATTERNS = [CONFIG_NAME, WEIGHTS_NAME, "dict.*.txt", BPE_CODES_NAME, MANIFEST_NAME, CARD_NAME]
_MAX_CONFIG_BYTES = 1 << 20
_BPE_VERSION_RE = re.compile(r"#version: \d+(\.\d+)*")


@dataclasses.dataclass
class ModelFiles:
    """A model directory's checked config and the verified bytes of every file it loads from.

    Attributes:
        directory: the model directory as the caller named it (for messages).
        config: the parsed ``config.json``, checked by :func:`~fairseq_dense.hub.schema.check_config`.
        data: ``{file name: content}`` for every file of :func:`required_files`.
    """

    directory: Path
    config: Dict[str, Any]
    data: Dict[str, bytes]

    def path(self, name: str) -> Path:
        """The path of file ``name`` as messages name it."""
        return self.directory / name


def required_files(config: Dict[str, Any]) -> List[str]:
    """The files a (checked) config loads from: config, weights, dictionaries, BPE codes."""
    names = [CONFIG_NAME, WEIGHTS_NAME] + [config["dictionaries"][side]["file"] for side in ("source", "target")]
    return names + ([BPE_CODES_NAME] if config.get("bpe") else [])


def _missing(path: Path, required: List[str]) -> PretrainedModelError:
    return PretrainedModelError(
        f"{path}: missing; a model directory must hold {', '.join(required)} (see fairseq-dense-export)"
    )


def _roots(root: Path) -> List[Path]:
    """Where a file of the resolved directory ``root`` may resolve to.

    In a huggingface_hub cache the snapshot's files link to the repository's
    ``blobs`` folder, which counts as inside.
    """
    return [root] + ([root.parent.parent / "blobs"] if root.parent.name == "snapshots" else [])


def _read(model_dir: Path, root: Path, name: str, limit: Optional[int] = None) -> bytes:
    """The content of ``model_dir/name``, opened through its resolved path once it is known to be inside."""
    path = model_dir / name
    real = Path(os.path.realpath(root / name))
    if not any(real.parent == r or r in real.parents for r in _roots(root)):
        raise PretrainedModelError(f"{path}: resolves outside the model directory")
    try:
        if not stat.S_ISREG(os.stat(real).st_mode):  # a FIFO or device would block or never end
            raise PretrainedModelError(f"{path}: not a regular file")
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        with os.fdopen(os.open(real, flags), "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # replaced since the check above
                raise PretrainedModelError(f"{path}: not a regular file")
            data = f.read(-1 if limit is None else limit + 1)
    except OSError as err:
        raise PretrainedModelError(f"{path}: cannot be read ({type(err).__name__}, errno {err.errno})") from None
    if limit is not None and len(data) > limit:
        raise PretrainedModelError(f"{path}: larger than {limit} bytes; not a file of a fairseq-dense model")
    return data


def read_model_files(model_dir: Path) -> ModelFiles:
    """Read, verify and check every file a model directory loads from.

    In order: the directory is resolved once; ``SHA256SUMS`` is read and parsed;
    ``config.json`` is read, verified against it, parsed as strict JSON and
    checked (:func:`~fairseq_dense.hub.schema.check_config`); the files it
    names must exist, be exactly the files ``SHA256SUMS`` lists, and are read
    and verified. Nothing else in the directory (``model.pt``, ``README.md``)
    is opened.

    Raises:
        PretrainedModelError: naming the missing, altered or malformed file (and key).
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise PretrainedModelError(f"{model_dir}: no such model directory")
    root = Path(os.path.realpath(model_dir))
    config_path = model_dir / CONFIG_NAME
    if not os.path.lexists(config_path):
        raise _missing(config_path, [CONFIG_NAME, WEIGHTS_NAME, "dict.<lang>.txt", MANIFEST_NAME])
    if not os.path.lexists(model_dir / MANIFEST_NAME):
        raise PretrainedModelError(
            f"{model_dir / MANIFEST_NAME}: missing; fairseq-dense loads only directories whose checksums it can "
            "verify (exports before format version 2 have none): re-export the training checkpoint with "
            "fairseq-dense-export CHECKPOINT --out DIR"
        )
    sums = parse_manifest(model_dir / MANIFEST_NAME, _read(model_dir, root, MANIFEST_NAME, MAX_BYTES))
    data = {CONFIG_NAME: _read(model_dir, root, CONFIG_NAME, _MAX_CONFIG_BYTES)}
    verify(config_path, CONFIG_NAME, sums, data[CONFIG_NAME])
    try:
        text = data[CONFIG_NAME].decode("utf-8")
    except UnicodeDecodeError as err:
        raise PretrainedModelError(f"{config_path}: not valid JSON (not UTF-8 at byte {err.start})") from None
    config = parse_config(text, config_path)
    try:
        check_config(config, config_path)
    except PretrainedModelError:
        raise
    except Exception as err:  # a shape of JSON the schema did not foresee is refused all the same
        raise PretrainedModelError(f"{config_path}: not a fairseq-dense model config ({type(err).__name__})") from None
    required = required_files(config)
    for name in required:
        if not os.path.lexists(model_dir / name):
            raise _missing(model_dir / name, required)
    extra = sorted(set(sums) - set(required))
    if extra:
        raise PretrainedModelError(
            f"{model_dir / MANIFEST_NAME}: lists {extra[0]}, which {CONFIG_NAME} does not load; "
            "the directory is altered"
        )
    for name in required[1:]:
        data[name] = _read(model_dir, root, name)
        verify(model_dir / name, name, sums, data[name])
    return ModelFiles(model_dir, config, data)


def _text(path: Path, data: bytes) -> str:
    """UTF-8 text with universal newlines (as fairseq and subword-nmt open their files)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise PretrainedModelError(f"{path}: not UTF-8 text (line {line})") from None
    return io.StringIO(text, newline=None).read()


def parse_dictionary(path: Path, data: bytes, size: Optional[int] = None, side: str = ""):
    """A fairseq ``Dictionary`` from the bytes of ``dict.<lang>.txt``, checked line by line.

    Each line must be ``<symbol> <count>`` (optionally followed by fairseq's
    ``#fairseq:overwrite`` flag), and no symbol may repeat another or one of
    the four special symbols (fairseq would load a dictionary with two entries
    for one symbol when the flag is set). ``size``: the number of symbols
    ``config.json`` records.

    Raises:
        PretrainedModelError: naming the file and the line (never quoting it).
    """
    from fairseq.data import Dictionary

    text = _text(path, data)
    dictionary = Dictionary()
    seen = {symbol: 0 for symbol in dictionary.symbols}
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, 1):
        parts = line.rstrip().rsplit(" ", 1)
        if len(parts) == 2 and parts[1] == "#fairseq:overwrite":
            parts = parts[0].rsplit(" ", 1)
        if len(parts) != 2 or not parts[0] or not re.fullmatch(r"[0-9]+", parts[1]):
            raise PretrainedModelError(f"{path}: line {number} is not '<symbol> <count>'")
        if parts[0] in seen:
            earlier = f"the symbol of line {seen[parts[0]]}" if seen[parts[0]] else "a special symbol (<s>, <pad>, ...)"
            raise PretrainedModelError(f"{path}: line {number} repeats {earlier}")
        seen[parts[0]] = number
    try:
        dictionary.add_from_file(io.StringIO("\n".join(lines) + "\n"))
    except (Exception, SystemExit) as err:  # checked above; kept as one line all the same
        raise PretrainedModelError(f"{path}: not a fairseq dictionary ({type(err).__name__})") from None
    if size is not None and len(dictionary) != size:
        raise PretrainedModelError(
            f"{path}: {len(dictionary)} symbols, but {CONFIG_NAME} and {WEIGHTS_NAME} expect {describe(size)} "
            f"for the {side} side (the file does not belong to this model)"
        )
    return dictionary


def parse_bpe_codes(path: Path, data: bytes) -> str:
    """subword-nmt codes: an optional ``#version: X.Y`` line, then at least one ``left right`` merge a line.

    subword-nmt itself ends the program (``sys.exit``) on a malformed line or on
    codes without any merge.

    Returns:
        The text, as subword-nmt reads it.
    """
    text = _text(path, data)
    lines = text.rstrip("\n").split("\n")
    start = 1 if lines[0].startswith("#version:") else 0
    if start and not _BPE_VERSION_RE.fullmatch(lines[0].rstrip("\r ")):
        raise PretrainedModelError(f"{path}: line 1 is not '#version: <number>'")
    if len(lines) == start or lines == [""]:
        raise PretrainedModelError(f"{path}: holds no BPE merge (a '<left> <right>' line)")
    for number, line in enumerate(lines[start:], start + 1):
        if len(line.strip("\r\n ").split(" ")) != 2:
            raise PretrainedModelError(f"{path}: line {number} is not a BPE merge ('<left> <right>')")
    return text
