"""Upload an exported model directory to the Hugging Face Hub: exactly the export format's files.

The files ``SHA256SUMS`` lists, the model card ``README.md``, and ``model.pt`` when asked;
each the directory's own regular file (not a link, one hard link: a link could publish a
private key), read once. The bytes read are loaded as :func:`load_model` loads them (every
file parsed, the model built, the weights checked) and are the bytes uploaded: only what a
load accepts goes up. Anything else in the folder stays local.
"""

import dataclasses
import hashlib
import json
import logging
from pathlib import Path
from typing import Callable, List, Optional, Union

from fairseq_dense.hub.loading import ModelDirectory, model_from_files, read_files
from fairseq_dense.hub.schema import CARD_NAME, CONFIG_NAME, PICKLE_NAME, PretrainedModelError, shown

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class UploadFile:
    """One file to upload: its name in the repository and its content."""

    name: str
    data: bytes


def upload_files(model_dir: Union[str, Path], include_pickle: bool = True) -> List[UploadFile]:
    """The files ``push_to_hub`` uploads from ``model_dir``, each read once, checked as a load checks them.

    ``SHA256SUMS`` and the files it lists (:func:`read_files`, then every check of
    :func:`load_model` on those bytes), ``README.md`` when present, and ``model.pt``
    when present and ``include_pickle``, in that order.

    Raises:
        PretrainedModelError: the directory does not load, or files to upload are
            not the directory's own regular files (all of them are named).
    """
    with ModelDirectory(model_dir) as directory:
        optional = [CARD_NAME, PICKLE_NAME] if include_pickle else [CARD_NAME]
        optional = [name for name in optional if directory.refusal(name) != "missing"]
        refused = [f"{name} ({reason})" for name in optional for reason in [directory.refusal(name)] if reason]
        if refused:
            raise PretrainedModelError(
                f"{shown(model_dir)}: not uploaded: {', '.join(refused)}; only regular files of one hard link are "
                "uploaded (copy each file itself)"
            )
        config, data = read_files(directory, own=True)
        data.update((name, directory.read(name, own=True)) for name in optional)
    model_from_files(model_dir, config, dict(data))  # the verdict of a load on these bytes
    return [UploadFile(name, content) for name, content in data.items()]


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
    """Upload :func:`upload_files` to hub repository ``repo_id`` (created when missing); the commit's URL.

    Args:
        revision: branch to commit to (default: the main branch).
        token: hub token (default: huggingface_hub's environment/config lookup).
        dry_run: list the files and upload nothing (the hub is not contacted); returns ``None``.
        announce: called with one line per file to upload (name, size, sha256),
            before anything is uploaded (default: the log, at INFO level).
    """
    upload = upload_files(model_dir, include_pickle)
    for item in upload:
        digest = hashlib.sha256(item.data).hexdigest()
        (announce or logger.info)(f"{item.name}\t{len(item.data)} bytes\tsha256 {digest}")
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
