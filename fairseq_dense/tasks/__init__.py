"""Tasks registered by fairseq-dense."""

from fairseq_dense.tasks import translation_exact_resume  # noqa: F401
