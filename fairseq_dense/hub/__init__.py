"""Sharing models: pickle-free export, ``from_pretrained``, hub upload and download.

A model directory, as ``fairseq-dense-export`` (:mod:`fairseq_dense.hub.export`)
writes it:

- ``config.json``: format version, package and fairseq versions, architecture,
  every model option, the task options, tokenizer (with the text preparation
  of the training data) and BPE choice, dictionary files and sizes, weight
  dtype, the checkpoints it came from;
- ``model.safetensors``: the weights (tied weights stored once, listed in its
  metadata);
- ``dict.<src>.txt``, ``dict.<tgt>.txt``: fairseq dictionaries (text);
- ``bpecodes``: subword-nmt codes, when the model applies BPE;
- ``SHA256SUMS``: the sha256 of each file above (``sha256sum -c`` format);
- ``README.md``: the model card with the metadata block model hubs read;
- optionally ``model.pt``: a pickle-based fairseq checkpoint for
  ``fairseq-generate --path`` users; never read nor downloaded by
  :func:`from_pretrained`.

Everything works for every architecture fairseq-dense registers: the model is
rebuilt through fairseq's registries, nothing is family-specific. Loading is one
function, :func:`fairseq_dense.hub.loading.load_model`, read top to bottom; the
files it reads are in :mod:`~fairseq_dense.hub.files`, what a config may say in
:mod:`~fairseq_dense.hub.schema`, the text steps in :mod:`~fairseq_dense.hub.text`,
the weight checks in :mod:`~fairseq_dense.hub.weights`.
"""

from fairseq_dense.hub.errors import PretrainedModelError
from fairseq_dense.hub.export import export_checkpoint
from fairseq_dense.hub.loading import from_pretrained, hub_models, load_model
from fairseq_dense.hub.model_card import ModelCardInfo
from fairseq_dense.hub.push import push_to_hub, upload_files
from fairseq_dense.hub.schema import dense_architectures

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
