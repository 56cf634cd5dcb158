"""The files of a model directory and its ``SHA256SUMS``: names, the one reader, the checksums.

:class:`ModelDirectory` opens the directory once and every file relative to that
open directory, never following a link: a path component swapped for a link
after the directory was opened changes nothing. The only links it reads are a
huggingface_hub snapshot's links into its ``blobs`` folder (opened once too) and
links to a plain name in the directory itself. Each file must be a regular file
and is read once; the bytes checked against ``SHA256SUMS`` are the bytes parsed.

``SHA256SUMS`` is in ``sha256sum`` format (``<hex>  <name>`` and a newline, so
``sha256sum -c SHA256SUMS`` checks a directory by hand). It detects files
changed, corrupted or mixed up after the export; it is not a signature: whoever
can rewrite the files can rewrite it too, so no other check relies on it.
"""

import errno
import hashlib
import os
import re
import stat
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Union

from fairseq_dense.hub.errors import PretrainedModelError, shown

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
PICKLE_NAME = "model.pt"
BPE_CODES_NAME = "bpecodes"
CARD_NAME = "README.md"
MANIFEST_NAME = "SHA256SUMS"
#: What is fetched from a hub repository: never ``*.pt`` or any other pickle.
HUB_ALLOW_PATTERNS = [CONFIG_NAME, WEIGHTS_NAME, "dict.*.txt", BPE_CODES_NAME, MANIFEST_NAME, CARD_NAME]
FILE_NAME_RE = re.compile(r"[A-Za-z0-9_.+-]{1,128}")
MAX_MANIFEST_BYTES = 64 * 1024
MAX_CONFIG_BYTES = 1 << 20
_MANIFEST_LINE_RE = re.compile(rb"([0-9a-f]{64})  ([A-Za-z0-9_.+-]{1,128})")
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def model_files(config: Dict[str, Any]) -> List[str]:
    """The files a checked ``config.json`` loads from: itself, the weights, the dictionaries, the BPE codes."""
    names = [CONFIG_NAME, WEIGHTS_NAME] + [config["dictionaries"][side]["file"] for side in ("source", "target")]
    return names + ([BPE_CODES_NAME] if config.get("bpe") else [])


class ModelDirectory:
    """A model directory opened once; its files are read relative to it (use as a context manager).

    Args:
        path: the directory (any name the file system allows).
    """

    def __init__(self, path: Union[str, Path]):
        self.path = Path(path)
        self._fd = self._blobs = None
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            if Path(os.path.realpath(self.path)).parent.name == "snapshots":  # a huggingface_hub cache
                self._blobs = os.open("../../blobs", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=self._fd)
        except OSError as err:
            self.close()
            reason = "no such model directory" if err.errno in (errno.ENOENT, errno.ENOTDIR) else _reason(err)
            raise PretrainedModelError(f"{shown(self.path)}: {reason}") from None

    def __enter__(self) -> "ModelDirectory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for fd in (self._fd, self._blobs):
            if fd is not None:
                os.close(fd)
        self._fd = self._blobs = None

    def where(self, name: str) -> str:
        """File ``name`` as messages name it (escaped, a very long path cut)."""
        return shown(self.path / name)

    def exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self._fd, follow_symlinks=False)
        except OSError:
            return False
        return True

    def refusal(self, name: str) -> Optional[str]:
        """Why file ``name`` is not a file of its own (a link, not regular, several hard links), or ``None``."""
        try:
            return _refusal(os.stat(name, dir_fd=self._fd, follow_symlinks=False), own=True)
        except OSError as err:
            return _reason(err)

    def _open(self, name: str, own: bool) -> int:
        try:
            return os.open(name, _OPEN, dir_fd=self._fd)
        except OSError as err:
            if err.errno != errno.ELOOP or own:
                raise
        target = os.readlink(name, dir_fd=self._fd)
        head, _, blob = target.rpartition("/")
        if FILE_NAME_RE.fullmatch(blob) and not head:  # a link to a file beside it
            return os.open(blob, _OPEN, dir_fd=self._fd)
        if FILE_NAME_RE.fullmatch(blob) and head == "../../blobs" and self._blobs is not None:
            return os.open(blob, _OPEN, dir_fd=self._blobs)
        raise PretrainedModelError(f"{self.where(name)}: resolves outside the model directory")

    def read(self, name: str, limit: Optional[int] = None, own: bool = False) -> bytes:
        """The content of file ``name``, a regular file of at most ``limit`` bytes.

        Args:
            own: the file must be the directory's own: not a link, one hard link (what push uploads).

        Raises:
            PretrainedModelError: missing, a link leaving the directory, not a
                regular file, too large, or unreadable; never quoting the file.
        """
        try:
            with os.fdopen(self._open(name, own), "rb") as f:
                info = os.fstat(f.fileno())
                reason = _refusal(info, own)
                if reason:
                    raise PretrainedModelError(f"{self.where(name)}: {reason}")
                data = f.read(-1 if limit is None else limit + 1)
        except OSError as err:
            reason = "a symbolic link" if own and err.errno == errno.ELOOP else _reason(err)
            raise PretrainedModelError(f"{self.where(name)}: {reason}") from None
        except MemoryError:
            raise PretrainedModelError(f"{self.where(name)}: too large to read into memory") from None
        if limit is not None and len(data) > limit:
            raise PretrainedModelError(f"{self.where(name)}: larger than {limit} bytes")
        return data


def _refusal(info: os.stat_result, own: bool) -> Optional[str]:
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link"
    if not stat.S_ISREG(info.st_mode):  # a FIFO or device would block or never end
        return "not a regular file"
    return f"{info.st_nlink} hard links" if own and info.st_nlink > 1 else None


def _reason(err: OSError) -> str:
    if err.errno == errno.ENOENT:
        return "missing"
    return f"cannot be read ({errno.errorcode.get(err.errno, err.errno)}: {os.strerror(err.errno or 0)})"


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file's content."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(model_dir: Path, names: Iterable[str]) -> Path:
    """Write ``SHA256SUMS`` for the files ``names`` of ``model_dir`` (sorted)."""
    path = model_dir / MANIFEST_NAME
    path.write_bytes(b"".join(f"{sha256_of(model_dir / n)}  {n}\n".encode() for n in sorted(set(names))))
    return path


def parse_manifest(where: str, data: bytes) -> Dict[str, str]:
    """``{file name: sha256}`` from the bytes of ``SHA256SUMS``: exactly ``<hex>  <name>\\n`` lines.

    Raises:
        PretrainedModelError: naming the line at fault, never quoting it.
    """
    lines = data.split(b"\n")
    if lines.pop() != b"":
        raise PretrainedModelError(f"{where}: does not end with a newline; not a sha256sum file")
    sums: Dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        match = _MANIFEST_LINE_RE.fullmatch(line)
        if not match:
            raise PretrainedModelError(f"{where}: line {number} is not '<sha256>  <file name>'")
        digest, name = (group.decode("ascii") for group in match.groups())
        if name in sums:
            raise PretrainedModelError(f"{where}: line {number} lists {name} twice")
        sums[name] = digest
    if not sums:
        raise PretrainedModelError(f"{where}: lists no file; not a fairseq-dense manifest")
    return sums


def verify(where: str, name: str, sums: Dict[str, str], data: bytes) -> None:
    """``data`` (file ``name``) has the sha256 ``SHA256SUMS`` records; the message never gives the file's own hash."""
    if name not in sums:
        raise PretrainedModelError(f"{where}: not listed in {MANIFEST_NAME}; the directory is incomplete or altered")
    if hashlib.sha256(data).hexdigest() != sums[name]:
        raise PretrainedModelError(
            f"{where}: sha256 differs from {MANIFEST_NAME} ({sums[name][:16]}...): the file was changed or "
            "corrupted after export"
        )
