"""Sharing models: pickle-free export, ``from_pretrained``, hub upload and download.

A model directory, as ``fairseq-dense-export`` writes it: ``config.json`` (the
architecture, every model option, the task, tokenizer, BPE, dictionaries and weight
dtype), ``model.safetensors`` (tied weights stored once), ``dict.<src>.txt`` and
``dict.<tgt>.txt``, ``bpecodes`` when the model applies BPE, ``SHA256SUMS``, the
``README.md`` model card, and optionally a pickle-based ``model.pt`` for
``fairseq-generate --path`` that :func:`from_pretrained` never reads.

Modules: :mod:`~fairseq_dense.hub.schema` (the format: file names, ``SHA256SUMS``, what
a config may say, the one error), :mod:`~fairseq_dense.hub.loading` (the one load,
:func:`load_model`, read top to bottom), :mod:`~fairseq_dense.hub.text` (how a model
reads text), :mod:`~fairseq_dense.hub.export` (export and model card),
:mod:`~fairseq_dense.hub.push` (upload). Every architecture fairseq-dense registers
is rebuilt through fairseq's registries; nothing is family-specific.
"""

import importlib
import os
import sys

#: the third-party modules a load and a translation import (sacremoses brings ``regex`` and ``xml``)
LOAD_IMPORTS = ("safetensors.torch", "sacremoses", "subword_nmt.apply_bpe")


def import_installed(names=LOAD_IMPORTS) -> None:
    """Import ``names`` (and what they import) without the current directory on ``sys.path``.

    Under ``python -c``, the REPL or Jupyter the current directory comes first on ``sys.path``: a
    ``safetensors.py`` in a model folder used as the working directory would run when a load first
    imports safetensors. Imported here, with the package, a load imports nothing from ``sys.path``.
    """
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
            try:
                importlib.import_module(name)
            except ImportError:  # not installed: the load says so when it needs it
                pass
    finally:
        for i, path in hidden:
            sys.path.insert(i, path)


import_installed()

from fairseq_dense.hub.export import ModelCardInfo, export_checkpoint  # noqa: E402
from fairseq_dense.hub.loading import from_pretrained, hub_models, load_model  # noqa: E402
from fairseq_dense.hub.push import push_to_hub, upload_files  # noqa: E402
from fairseq_dense.hub.schema import PretrainedModelError, dense_architectures  # noqa: E402

__all__ = [
    "ModelCardInfo",
    "PretrainedModelError",
    "dense_architectures",
    "export_checkpoint",
    "from_pretrained",
    "hub_models",
    "load_model",
    "push_to_hub",
    "upload_files",
]
