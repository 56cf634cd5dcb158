"""fairseq-dense: dense and deep NMT architectures as a fairseq plugin.

Importing this package (directly, or through ``--user-dir``) registers every model,
architecture, criterion and LR scheduler with fairseq's registries. This file is
the registration list: every module is imported explicitly.
"""
import argparse

import torch

__version__ = "0.1.0"

# fairseq checkpoints hold an argparse.Namespace; torch >= 2.6 loads with
# weights_only=True, so allow exactly that class and keep the safe loader.
if hasattr(torch.serialization, "add_safe_globals"):
    torch.serialization.add_safe_globals([argparse.Namespace])

from fairseq_dense import criterions  # noqa: E402,F401
from fairseq_dense import lr_schedulers  # noqa: E402,F401
from fairseq_dense import models  # noqa: E402,F401
from fairseq_dense import shutdown  # noqa: E402,F401  (quiet exit of fairseq's prefetch threads)
from fairseq_dense import tasks  # noqa: E402,F401
from fairseq_dense import validation  # noqa: E402,F401  (after models: wraps their loading)
from fairseq_dense.hub import from_pretrained  # noqa: E402,F401
