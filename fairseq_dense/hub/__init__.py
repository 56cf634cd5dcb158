"""Sharing models: pickle-free export, ``from_pretrained``, hub upload and download (docs/hub.md).

Nothing is family-specific: every architecture fairseq-dense registers is rebuilt through fairseq's registries.
"""

import contextlib
import importlib
import os
import sys


def import_installed(names=("safetensors.torch", "sacremoses", "subword_nmt.apply_bpe")) -> None:
    """Import ``names`` (by default the libraries a load and a translation import; sacremoses brings ``regex`` and
    ``xml``) without the current directory on ``sys.path``: under ``python -c``, the REPL or Jupyter it comes
    first, and a ``safetensors.py`` in a model folder used as the working directory would run when a load first
    imports safetensors. Imported here, a load imports nothing."""
    try:
        cwd = os.getcwd()
    except OSError:  # removed: nothing can be imported from it
        cwd = None
    hidden = [
        (i, p) for i, p in enumerate(sys.path) if p == "" or cwd and isinstance(p, str) and os.path.abspath(p) == cwd
    ]
    for i, _ in reversed(hidden):
        del sys.path[i]
    try:
        for name in names:
            with contextlib.suppress(ImportError):  # not installed: the load says so when it needs it
                importlib.import_module(name)
    finally:
        for i, path in hidden:
            sys.path.insert(i, path)


import_installed()

from fairseq_dense.hub.export import ModelCardInfo, export_checkpoint  # noqa: E402,F401
from fairseq_dense.hub.loading import from_pretrained, hub_models, load_model  # noqa: E402,F401
from fairseq_dense.hub.push import push_to_hub, upload_files  # noqa: E402,F401
from fairseq_dense.hub.schema import PretrainedModelError, dense_architectures  # noqa: E402,F401
