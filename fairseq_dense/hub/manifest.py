"""``SHA256SUMS``: the checksums of every file a model directory is loaded from.

The export writes it in ``sha256sum`` format (``<hex>  <name>``, so
``sha256sum -c SHA256SUMS`` checks a directory by hand); the loader
(:mod:`fairseq_dense.hub.files`) reads each file once and checks those bytes
against it, so what is verified is what is parsed. It detects files changed, corrupted or
mixed up after the export (a flipped weight byte, a permuted dictionary, a
patched safetensors header); it is not a signature: whoever can rewrite the
files can rewrite it too, so the loader's other checks never rely on it.
"""

import hashlib
import re
from pathlib import Path
from typing import Dict, Iterable

from fairseq_dense.hub.errors import PretrainedModelError

MANIFEST_NAME = "SHA256SUMS"
_LINE_RE = re.compile(r"([0-9a-f]{64})  ([A-Za-z0-9_.+-]{1,128})")
MAX_BYTES = 64 * 1024
_CHUNK = 1 << 20


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file's content."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(model_dir: Path, names: Iterable[str]) -> Path:
    """Write ``SHA256SUMS`` for the files ``names`` of ``model_dir`` (sorted)."""
    lines = [f"{sha256_of(model_dir / name)}  {name}\n" for name in sorted(set(names))]
    path = model_dir / MANIFEST_NAME
    path.write_text("".join(lines), encoding="ascii")
    return path


def parse_manifest(path: Path, data: bytes) -> Dict[str, str]:
    """``{file name: sha256}`` from the bytes of ``SHA256SUMS`` (read by the caller from ``path``).

    Raises:
        PretrainedModelError: the manifest is malformed (naming the line, never quoting it).
    """
    if len(data) > MAX_BYTES:
        raise PretrainedModelError(f"{path}: larger than {MAX_BYTES} bytes; not a fairseq-dense manifest")
    sums: Dict[str, str] = {}
    for number, line in enumerate(data.decode("ascii", errors="replace").splitlines(), 1):
        match = _LINE_RE.fullmatch(line)
        if not match:
            raise PretrainedModelError(f"{path}: line {number} is not '<sha256>  <file name>'")
        digest, name = match.groups()
        if name in sums:
            raise PretrainedModelError(f"{path}: line {number} lists {name} twice")
        sums[name] = digest
    if not sums:
        raise PretrainedModelError(f"{path}: lists no file; not a fairseq-dense manifest")
    return sums


def verify(path: Path, name: str, sums: Dict[str, str], data: bytes) -> None:
    """The content ``data`` of ``path`` (file ``name`` of the directory) has the checksum ``SHA256SUMS`` records.

    Raises:
        PretrainedModelError: naming the file that is not listed or differs.
    """
    if name not in sums:
        raise PretrainedModelError(f"{path}: not listed in {MANIFEST_NAME}; the directory is incomplete or altered")
    actual = hashlib.sha256(data).hexdigest()
    if actual != sums[name]:
        raise PretrainedModelError(
            f"{path}: sha256 {actual[:16]}... differs from {MANIFEST_NAME} ({sums[name][:16]}...): the file was "
            "changed or corrupted after export"
        )
