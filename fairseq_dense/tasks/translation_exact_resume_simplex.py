"""``translation_exact_resume_simplex``: exact resume, plus the post-step simplex projection.

The Weighted Transformer (Ahmed et al., 2017, https://arxiv.org/abs/1711.02132)
replaces its branch weights kappa and alpha by their Euclidean projection onto the
probability simplex after every optimizer step. fairseq calls
``task.optimizer_step(optimizer, model, update_num)`` exactly once per update
(also with ``--update-freq``, under data-parallel training and with fp16/bf16), so
this task projects there, on the weights the optimizer keeps (fp32 master copies
included; see :func:`fairseq_dense.modules.simplex.project_parameters_after_step`).
It works for any model whose parameters carry ``on_simplex = True``; for the others
it is :class:`~fairseq_dense.tasks.translation_exact_resume.TranslationExactResumeTask`
(fairseq's ``translation`` with exact resume and a kill-proof save folder).

``translation_weighted`` is its earlier name, still registered: checkpoints and
command lines that name it keep working.
"""

from fairseq.tasks import register_task

from fairseq_dense.modules.simplex import (
    PROJECTED_BY_TASK_ATTR,
    PROJECTION_HOOK_ATTR,
    project_parameters_after_step,
    simplex_parameters,
)
from fairseq_dense.tasks.translation_exact_resume import TranslationExactResumeConfig, TranslationExactResumeTask


@register_task("translation_exact_resume_simplex", dataclass=TranslationExactResumeConfig)
class TranslationExactResumeSimplexTask(TranslationExactResumeTask):
    """Translation with exact resume plus the post-step simplex projection of ``on_simplex`` parameters.

    Args:
        cfg: :class:`TranslationExactResumeConfig` (all ``translation`` options apply).
        src_dict: source dictionary.
        tgt_dict: target dictionary.
    """

    def build_model(self, cfg, from_checkpoint=False):
        """Build the model and mark it (and its ``on_simplex`` parameters) as projected after every step."""
        model = super().build_model(cfg, from_checkpoint)
        setattr(model, PROJECTION_HOOK_ATTR, True)
        for p in simplex_parameters(model):
            setattr(p, PROJECTED_BY_TASK_ATTR, True)  # the optimizer-step hook leaves them to this task
        return model

    def optimizer_step(self, optimizer, model, update_num):
        """Step, then project every ``on_simplex`` parameter the step changed."""
        super().optimizer_step(optimizer, model, update_num)
        if simplex_parameters(model):
            project_parameters_after_step(model, optimizer)


@register_task("translation_weighted", dataclass=TranslationExactResumeConfig)
class TranslationWeightedTask(TranslationExactResumeSimplexTask):
    """``translation_exact_resume_simplex`` under its earlier name (saved checkpoints and commands name it)."""
