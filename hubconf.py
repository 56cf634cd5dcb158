"""torch.hub entry points of fairseq-dense.

    import torch
    model = torch.hub.load("<owner>/fairseq-dense", "from_pretrained", "<model directory or hub repo id>")
    model.translate("Wie geht es dir?", beam=5)

``from_pretrained`` takes the same arguments as :func:`fairseq_dense.from_pretrained`
(``revision``, ``cache_dir``, ``local_files_only``, fairseq options such as
``beam``); ``list_models()`` returns the named published models (the union of
every model class's ``hub_models()``). It is the same function: nothing is
unpickled, every file is read once and checked (``SHA256SUMS``, config keys and
types, dictionaries, BPE codes, weights) before it is used, the model directory's
name is never parsed, and nothing outside it is opened or written: the guarantees
of docs/hub.md, section "Security", hold here too.
"""

dependencies = ["torch", "fairseq", "safetensors", "huggingface_hub", "sacremoses", "subword_nmt"]

from fairseq_dense.hub import from_pretrained  # noqa: E402,F401
from fairseq_dense.hub import hub_models as list_models  # noqa: E402,F401
