"""``fairseq-dense-push``: upload an exported model directory to the Hugging Face Hub.

    fairseq-dense-push exports/gru-deu-eng my-user/gru-deu-eng --private \\
        --commit-message "GRU baseline, Tatoeba de-en"

The token comes from huggingface_hub's usual lookup (``HF_TOKEN`` or
``hf auth login``); it is never a command-line argument. The directory is checked
first (``config.json`` and every file it names), and the repository is created
when missing.
"""
import argparse
import logging
import sys
from pathlib import Path
from typing import List, Optional, Union


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
        fairseq_dense.hub.PretrainedModelError: the directory is incomplete.
    """
    from huggingface_hub import HfApi

    from fairseq_dense import hub

    model_dir = Path(model_dir)
    config = hub.read_config(model_dir)
    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    info = api.upload_folder(
        repo_id=repo_id,
        folder_path=str(model_dir),
        repo_type="model",
        revision=revision,
        commit_message=commit_message or f"Upload {config['arch']} (fairseq-dense {config.get('package_version')})",
        ignore_patterns=None if include_pickle else [hub.PICKLE_NAME],
    )
    return str(getattr(info, "commit_url", info))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fairseq-dense-push", description=__doc__.split("\n")[0])
    p.add_argument("model_dir", help="directory written by fairseq-dense-export")
    p.add_argument("repo_id", help="hub repository id, owner/name")
    p.add_argument("--private", action="store_true", help="create the repository as private")
    p.add_argument("--commit-message", help="hub commit message")
    p.add_argument("--revision", help="branch to commit to (default: main)")
    p.add_argument("--no-pickle", action="store_true", help="do not upload model.pt even when present")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s | %(levelname)s | %(name)s | %(message)s")
    from fairseq_dense.hub import PretrainedModelError

    try:
        url = push_to_hub(args.model_dir, args.repo_id, private=args.private, commit_message=args.commit_message,
                          revision=args.revision, include_pickle=not args.no_pickle)
    except PretrainedModelError as err:
        print(f"fairseq-dense-push: error: {err}", file=sys.stderr)
        return 1
    print(url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
