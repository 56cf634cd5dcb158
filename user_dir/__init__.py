"""Thin ``--user-dir`` entry point for a source checkout.

``fairseq-train --user-dir user_dir ...`` imports this folder as a top-level module
named ``user_dir``; importing :mod:`fairseq_dense` registers everything.
"""

import os
import sys

try:
    import fairseq_dense  # noqa: F401
except ImportError:  # running from a checkout that is not installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import fairseq_dense  # noqa: F401
