"""Upload an exported model directory to the Hugging Face Hub: exactly the export format's files.

What is uploaded is decided here, not by the folder's content: the files
``SHA256SUMS`` lists (checked as a load checks them), the model card
``README.md``, and ``model.pt`` when asked. Each must be a regular file, not a
symbolic link (a link could publish a file from elsewhere); anything else in
the folder (notes, ``.env``, stray files) stays local.
"""

import dataclasses
import json
import logging
import os
import stat
from pathlib import Path
from typing import Callable, List, Optional, Union

from fairseq_dense.hub.errors import PretrainedModelError
from fairseq_dense.hub.files import CARD_NAME, CONFIG_NAME, PICKLE_NAME, read_model_files
from fairseq_dense.hub.manifest import MANIFEST_NAME

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class UploadFile:
    """One file to upload: its name in the repository and its content."""

    name: str
    data: bytes


def _regular(model_dir: Path, name: str) -> bytes:
    """The content of ``model_dir/name``, which must be a regular file and not a symbolic link."""
    path = model_dir / name
    try:
        mode = os.lstat(path).st_mode
        if not stat.S_ISREG(mode):
            kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
            raise PretrainedModelError(f"{path}: {kind}; only regular files are uploaded (copy the file itself)")
        with os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)), "rb") as f:
            return f.read()
    except OSError as err:
        raise PretrainedModelError(f"{path}: cannot be read ({type(err).__name__}, errno {err.errno})") from None


def upload_files(model_dir: Union[str, Path], include_pickle: bool = True) -> List[UploadFile]:
    """The files ``push_to_hub`` uploads from ``model_dir``, checked and read.

    The directory is first checked as a load checks it
    (:func:`~fairseq_dense.hub.files.read_model_files`: config, ``SHA256SUMS``,
    every file it names); then the upload is ``SHA256SUMS`` and the files it
    lists, ``README.md`` when present, and ``model.pt`` when present and
    ``include_pickle``, in that order. Every other file of the folder is left out.

    Raises:
        PretrainedModelError: the directory does not load, or one of these files
            is a symbolic link or not a regular file.
    """
    model_dir = Path(model_dir)
    files = read_model_files(model_dir)
    names = [MANIFEST_NAME, *files.data]
    names += [name for name, wanted in ((CARD_NAME, True), (PICKLE_NAME, include_pickle)) if wanted]
    upload = []
    for name in names:
        if name in (CARD_NAME, PICKLE_NAME) and not os.path.lexists(model_dir / name):
            continue
        upload.append(UploadFile(name, _regular(model_dir, name)))
        if name in files.data and upload[-1].data != files.data[name]:
            raise PretrainedModelError(f"{model_dir / name}: changed while it was being checked")
    return upload


def push_to_hub(
    model_dir: Union[str, Path],
    repo_id: str,
    private: bool = False,
    commit_message: Optional[str] = None,
    revision: Optional[str] = None,
    include_pickle: bool = True,
    token: Optional[str] = None,
    dry_run: bool = False,
    announce: Optional[Callable[[str], None]] = None,
) -> Optional[str]:
    """Upload a model directory's export files to a hub repository (created when missing).

    Args:
        model_dir: a directory written by ``fairseq-dense-export`` (checked first).
        repo_id: ``owner/name``.
        private: create the repository as private.
        commit_message: hub commit message.
        revision: branch to commit to (default: the main branch).
        include_pickle: also upload ``model.pt`` when the directory has one.
        token: hub token (default: huggingface_hub's environment/config lookup).
        dry_run: list the files and upload nothing (the hub is not contacted).
        announce: called with one line per file to upload, before anything is
            uploaded (default: the log, at INFO level).

    Returns:
        The URL of the commit, or ``None`` for a dry run.

    Raises:
        PretrainedModelError: the directory does not load, or a file to upload
            is a symbolic link or not a regular file (see :func:`upload_files`).
    """
    upload = upload_files(model_dir, include_pickle)
    for item in upload:
        (announce or logger.info)(f"{item.name}\t{len(item.data)} bytes")
    if dry_run:
        return None
    from huggingface_hub import CommitOperationAdd, HfApi

    config = json.loads(next(item.data for item in upload if item.name == CONFIG_NAME))  # checked above
    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    info = api.create_commit(
        repo_id=repo_id,
        repo_type="model",
        revision=revision,
        operations=[CommitOperationAdd(path_in_repo=item.name, path_or_fileobj=item.data) for item in upload],
        commit_message=commit_message or f"Upload {config['arch']} (fairseq-dense {config.get('package_version')})",
    )
    return str(getattr(info, "commit_url", info))
