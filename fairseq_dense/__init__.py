"""fairseq-dense: dense and deep NMT architectures as a fairseq plugin.

Importing this package (directly, or through ``--user-dir``) registers every model, architecture, criterion, LR
scheduler and task with fairseq's registries, and does nothing else: the program's warnings filters, loggers,
``sys.excepthook`` and exit handlers stay as they were (importing fairseq changes the root logger; that is undone). One
exception: torch's safe loader is allowed ``argparse.Namespace`` (see below). This file is the registration list: every
module is imported explicitly. ``FAIRSEQ_DENSE_CLI=1`` asks for more in fairseq's command-line tools
(:mod:`fairseq_dense.cli.fairseq_tools`).
"""

__version__ = "0.1.0"

import torch

from fairseq_dense import logging_setup  # noqa: E402

with logging_setup.importing_fairseq():
    from fairseq_dense import checkpoints, criterions, lr_schedulers, models, optim, tasks  # noqa: E402,F401
    from fairseq_dense.cli import fairseq_tools  # noqa: E402

# The one process-wide change, and why: fairseq's commands (fairseq-generate, -interactive, -validate, a resume
# under fairseq's own tasks) load checkpoints in their own code, with no plugin hook around the load, and the
# checkpoints of argparse-registered architectures (the Weighted Transformer; fairseq's fconv and lstm) hold
# their options as an ``argparse.Namespace``, which torch >= 2.6's weights-only loader refuses. A Namespace is a
# plain attribute container: allowing it lets no code run. Without it, every such checkpoint fails to decode.
torch.serialization.add_safe_globals(checkpoints.FAIRSEQ_GLOBALS)

if logging_setup.env_flag(fairseq_tools.CLI_ENV):  # opt-in, for fairseq's command-line tools (docs/cli.md)
    fairseq_tools.set_up()


def __getattr__(name: str):
    """``fairseq_dense.from_pretrained``: :func:`fairseq_dense.hub.from_pretrained`, imported when first used."""
    if name == "from_pretrained":
        from fairseq_dense.hub import from_pretrained

        return from_pretrained
    raise AttributeError(f"module 'fairseq_dense' has no attribute {name!r}")
