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

from fairseq_dense.hub.export import ModelCardInfo, export_checkpoint
from fairseq_dense.hub.loading import from_pretrained, hub_models, load_model
from fairseq_dense.hub.push import push_to_hub, upload_files
from fairseq_dense.hub.schema import PretrainedModelError, dense_architectures

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
