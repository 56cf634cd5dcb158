"""Upload an exported model directory to the Hugging Face Hub: exactly the export format's files.

``SHA256SUMS`` and the files it lists, the card ``README.md``, and ``model.pt`` when present and asked; each the
directory's own regular file (not a link, one hard link: a link could publish a private key), read once,
loaded as :func:`~fairseq_dense.hub.loading.load_model` loads them, and those very bytes uploaded.
"""

import hashlib
import json
import logging
from pathlib import Path
from typing import Callable, Dict, Optional, Union

from fairseq_dense.hub.loading import ModelDirectory, load_model, read_files
from fairseq_dense.hub.schema import CARD_NAME, CONFIG_NAME, PICKLE_NAME, PretrainedModelError, one_line, shown

logger = logging.getLogger(__name__)


def upload_files(model_dir: Union[str, Path], include_pickle: bool = True) -> Dict[str, bytes]:
    """``{file name: bytes}`` that ``push_to_hub`` uploads from ``model_dir`` (the module docstring says which).

    Raises:
        PretrainedModelError: the directory does not load, or names every file that is not its own regular file.
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
    load_model(model_dir, files=(config, dict(data)))  # the verdict of a load on these bytes
    return data


def push_to_hub(
    model_dir: Union[str, Path],
    repo_id: str,
    private: bool = False,
    commit_message: Optional[str] = None,
    revision: Optional[str] = None,
    include_pickle: bool = True,
    dry_run: bool = False,
    announce: Optional[Callable[[str], None]] = None,
) -> Optional[str]:
    """Upload :func:`upload_files` to hub repository ``repo_id`` (created when missing); the commit's URL.

    Args:
        revision: branch to commit to (default: the main branch).
        dry_run: list the files and upload nothing (the hub is not contacted); returns ``None``.
        announce: called with one line per file to upload (name, size, sha256) before anything is
            uploaded (default: the log, at INFO level).
    """
    upload = upload_files(model_dir, include_pickle)
    for name, data in upload.items():
        (announce or logger.info)(f"{name}\t{len(data)} bytes\tsha256 {hashlib.sha256(data).hexdigest()}")
    if dry_run:
        return None
    from huggingface_hub import CommitOperationAdd, HfApi

    config = json.loads(upload[CONFIG_NAME])  # checked above
    try:
        api = HfApi()  # the token of huggingface_hub's environment/config lookup
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        info = api.create_commit(
            repo_id=repo_id,
            repo_type="model",
            revision=revision,
            operations=[CommitOperationAdd(path_in_repo=name, path_or_fileobj=data) for name, data in upload.items()],
            commit_message=commit_message or f"Upload {config['arch']} (fairseq-dense {config.get('package_version')})",
        )
    except Exception as err:  # an id or revision the hub refuses, no token, no network: huggingface_hub's many types
        raise PretrainedModelError(
            f"{shown(repo_id)}: cannot upload to the hub: {type(err).__name__}: {one_line(err, 300)}"
        ) from None
    return str(getattr(info, "commit_url", info))
