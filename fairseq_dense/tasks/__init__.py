"""Tasks registered by fairseq-dense: ``translation_exact_resume`` and ``translation_exact_resume_simplex``
(earlier name ``translation_weighted``)."""

from fairseq_dense.tasks import (
    translation_exact_resume,  # noqa: F401
    translation_exact_resume_simplex,  # noqa: F401
)
