"""Upload an exported model directory to the Hugging Face Hub."""

from pathlib import Path
from typing import Optional, Union

from fairseq_dense.hub.loading import PICKLE_NAME, read_config


def push_to_hub(
    model_dir: Union[str, Path],
    repo_id: str,
    private: bool = False,
    commit_message: Optional[str] = None,
    revision: Optional[str] = None,
    include_pickle: bool = True,
    token: Optional[str] = None,
) -> str:
    """Upload a model directory to a hub repository (created when missing).

    Args:
        model_dir: a directory written by ``fairseq-dense-export`` (checked first).
        repo_id: ``owner/name``.
        private: create the repository as private.
        commit_message: hub commit message.
        revision: branch to commit to (default: the main branch).
        include_pickle: also upload ``model.pt`` when the directory has one.
        token: hub token (default: huggingface_hub's environment/config lookup).

    Returns:
        The URL of the commit.

    Raises:
        PretrainedModelError: the directory is incomplete.
    """
    from huggingface_hub import HfApi

    model_dir = Path(model_dir)
    config = read_config(model_dir)
    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    info = api.upload_folder(
        repo_id=repo_id,
        folder_path=str(model_dir),
        repo_type="model",
        revision=revision,
        commit_message=commit_message or f"Upload {config['arch']} (fairseq-dense {config.get('package_version')})",
        ignore_patterns=None if include_pickle else [PICKLE_NAME],
    )
    return str(getattr(info, "commit_url", info))
