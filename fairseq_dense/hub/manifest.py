"""``SHA256SUMS``: the checksums of every file a model directory is loaded from.

The export writes it in ``sha256sum`` format (``<hex>  <name>``, so
``sha256sum -c SHA256SUMS`` checks a directory by hand); the loader refuses a
directory whose files differ from it. It detects files changed, corrupted or
mixed up after the export (a flipped weight byte, a permuted dictionary, a
patched safetensors header); it is not a signature: whoever can rewrite the
files can rewrite it too, so the loader's other checks never rely on it.
"""

import hashlib
import re
from pathlib import Path
from typing import Dict, Iterable, Optional

from fairseq_dense.hub.errors import PretrainedModelError, short_repr

MANIFEST_NAME = "SHA256SUMS"
_LINE_RE = re.compile(r"([0-9a-f]{64})  ([A-Za-z0-9_.+-]{1,128})")
_MAX_BYTES = 64 * 1024
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


def read_manifest(model_dir: Path) -> Dict[str, str]:
    """``{file name: sha256}`` from ``model_dir/SHA256SUMS``.

    Raises:
        PretrainedModelError: the manifest is missing (an export of fairseq-dense
            0.1.0, before checksums: re-export it) or malformed.
    """
    path = model_dir / MANIFEST_NAME
    if not path.is_file():
        raise PretrainedModelError(
            f"{path}: missing; fairseq-dense loads only directories whose checksums it can verify "
            "(exports before format version 2 have none): re-export the training checkpoint with "
            "fairseq-dense-export CHECKPOINT --out DIR"
        )
    with open(path, "rb") as f:
        data = f.read(_MAX_BYTES + 1)
    if len(data) > _MAX_BYTES:
        raise PretrainedModelError(f"{path}: larger than {_MAX_BYTES} bytes; not a fairseq-dense manifest")
    sums: Dict[str, str] = {}
    for number, line in enumerate(data.decode("ascii", errors="replace").splitlines(), 1):
        match = _LINE_RE.fullmatch(line)
        if not match:
            raise PretrainedModelError(f"{path}: line {number} is not '<sha256>  <file name>': {short_repr(line)}")
        digest, name = match.groups()
        if name in sums:
            raise PretrainedModelError(f"{path}: line {number} lists {name} twice")
        sums[name] = digest
    return sums


def verify_file(model_dir: Path, name: str, sums: Dict[str, str], data: Optional[bytes] = None) -> None:
    """``model_dir/name`` (or its content ``data``, already read) has the checksum ``SHA256SUMS`` records.

    Raises:
        PretrainedModelError: naming the file that is not listed or differs.
    """
    path = model_dir / name
    if name not in sums:
        raise PretrainedModelError(f"{path}: not listed in {MANIFEST_NAME}; the directory is incomplete or altered")
    actual = sha256_of(path) if data is None else hashlib.sha256(data).hexdigest()
    if actual != sums[name]:
        raise PretrainedModelError(
            f"{path}: sha256 {actual[:16]}... differs from {MANIFEST_NAME} ({sums[name][:16]}...): the file was "
            "changed or corrupted after export"
        )
