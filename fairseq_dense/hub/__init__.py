"""Sharing models: pickle-free export, ``from_pretrained``, hub upload and download.

A model directory, as ``fairseq-dense-export`` (:mod:`fairseq_dense.hub.export`)
writes it:

- ``config.json``: format version, package and fairseq versions, architecture,
  every model option, the task options, tokenizer and BPE choice, dictionary
  files and sizes, weight dtype, the checkpoints it came from;
- ``model.safetensors``: the weights (tied weights stored once, listed in its
  metadata);
- ``dict.<src>.txt``, ``dict.<tgt>.txt``: fairseq dictionaries (text);
- ``bpecodes``: subword-nmt codes, when the model applies BPE;
- ``SHA256SUMS``: the sha256 of each file above (``sha256sum -c`` format);
- ``README.md``: the model card with the metadata block model hubs read;
- optionally ``model.pt``: a pickle-based fairseq checkpoint for
  ``fairseq-generate --path`` users; never read nor downloaded by
  :func:`from_pretrained`.

Everything works for every architecture fairseq-dense registers
(:func:`dense_architectures`): the model is rebuilt through fairseq's
registries, nothing is family-specific. Loading is one pipeline (:mod:`fairseq_dense.hub.loading`): every file read
once and verified against ``SHA256SUMS`` (:mod:`fairseq_dense.hub.files`,
:mod:`fairseq_dense.hub.manifest`), the config checked
(:mod:`fairseq_dense.hub.schema`) before any model code runs, the model built
as an inference load builds it, and the weights checked
(:mod:`fairseq_dense.hub.weights`) before they are loaded.
"""

from fairseq_dense.hub.export import export_checkpoint  # noqa: F401,E402
from fairseq_dense.hub.loading import (  # noqa: F401
    BPE_CODES_NAME,
    CARD_NAME,
    CONFIG_NAME,
    HUB_ALLOW_PATTERNS,
    MANIFEST_NAME,
    PICKLE_NAME,
    WEIGHTS_NAME,
    PretrainedModelError,
    build_fairseq_cfg,
    build_model,
    dense_architectures,
    from_pretrained,
    hub_models,
    load_model_dir,
    read_config,
    read_model_files,
    required_files,
    resolve_model_dir,
)
from fairseq_dense.hub.model_card import ModelCardInfo  # noqa: F401,E402
from fairseq_dense.hub.push import push_to_hub, upload_files  # noqa: F401,E402
