"""fairseq-dense: dense and deep NMT architectures as a fairseq plugin.

Importing this package (directly, or through ``--user-dir``) registers every model,
architecture, criterion and LR scheduler with fairseq's registries. This file is
the registration list: every module is imported explicitly.
"""

__version__ = "0.1.0"

from fairseq_dense import logging_setup  # noqa: E402

# quiet by default (FAIRSEQ_DENSE_VERBOSE=1 or an entry point's -v shows all): fairseq's
# import-time notices are held back, its import leaves the root logger as it was, and the
# warnings of fairseq's dependencies about fairseq's calls are hidden
logging_setup.hold_import_notices()
if not logging_setup.verbose_from_env():
    logging_setup.hide_noise()
with logging_setup.keep_root_logger():
    from fairseq_dense import criterions, fairseq_compat, lr_schedulers, models, optim, tasks  # noqa: E402,F401
    from fairseq_dense.hub import from_pretrained  # noqa: E402,F401

# workarounds for fairseq on modern Python/torch; after the registrations (it wraps the models' loading)
fairseq_compat.install()
