"""Model families registered by fairseq-dense: one sub-package each."""
from fairseq_dense.models import gru_attention  # noqa: F401
from fairseq_dense.models import dense_lstm  # noqa: F401
from fairseq_dense.models import fast_forward_lstm  # noqa: F401
from fairseq_dense.models import weighted_transformer  # noqa: F401
from fairseq_dense.models import densenmt  # noqa: F401
