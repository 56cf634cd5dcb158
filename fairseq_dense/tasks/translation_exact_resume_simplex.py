"""``translation_exact_resume_simplex``: exact resume, plus the post-step simplex projection.

The Weighted Transformer (Ahmed et al., 2017, https://arxiv.org/abs/1711.02132) projects its branch weights kappa and
alpha onto the probability simplex after every optimizer step. fairseq calls ``task.optimizer_step`` once per update
(also with ``--update-freq``, data-parallel training and fp16/bf16), so the projection runs there, on the weights the
optimizer keeps (:func:`fairseq_dense.modules.simplex.project_parameters_after_step`), for every parameter carrying
``on_simplex = True``. ``translation_weighted`` is its earlier name, still registered.
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
    """Translation with exact resume plus the post-step simplex projection of ``on_simplex`` parameters."""

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
