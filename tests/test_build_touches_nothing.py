"""Building a model with any project task touches no file and never ends the program.

The project's tasks check and repair ``--save-dir`` where ``fairseq-train`` starts a
training (the task's ``start_training``, right before it loads ``checkpoint_last.pt``),
never in ``setup_task`` or ``build_model``. Here every family is built with every project
task from a folder whose ``./checkpoints`` (fairseq's default ``--save-dir``) holds a cut
``checkpoint_last.pt`` and an intact checkpoint of a finished run (7 updates,
``--max-update 5``): a restart check there would repair the cut file and end the program
(``TrainingFinished``). Through fairseq's ``task.build_model`` with its default, its
``build_criterion`` and ``checkpoint_utils.load_model_ensemble``, nothing of that folder is
opened, listed or changed.
"""

import pytest
import torch

from fairseq_dense.checkpoints import safe_loading
from tests import reliability_helpers as rh
from tests.hub_hostile_helpers import build_checkpoint
from tests.test_hub_isolation import audited, snapshot, training_folder, under


def project_tasks():
    from fairseq.tasks import TASK_REGISTRY

    return sorted(name for name, cls in TASK_REGISTRY.items() if cls.__module__.startswith("fairseq_dense."))


@pytest.mark.parametrize("task", project_tasks())
def test_building_touches_no_file_and_never_exits(task, tmp_path, monkeypatch):
    from fairseq import checkpoint_utils, options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    work = tmp_path / "work"
    save = training_folder(work)  # checkpoint1.pt (7 updates) and a cut checkpoint_last.pt
    before = snapshot(save)
    built = []
    for arch in rh.tiny_archs():
        src = tmp_path / arch
        ckpt = build_checkpoint(src, arch, task)  # saved with fairseq's default --save-dir: ./checkpoints
        with safe_loading():
            state = torch.load(ckpt, weights_only=True)
        state.update(
            optimizer_history=[{"optimizer_name": "Adam", "lr_scheduler_state": {}, "num_updates": 0}], extra_state={}
        )
        torch.save(state, ckpt)  # as fairseq's trainer saves it
        args = options.parse_args_and_arch(
            options.get_training_parser(),
            [str(src / "bin"), "--arch", arch, "--task", task, "--source-lang", "src", "--target-lang", "tgt"]
            + ["--cpu", "--max-update", "5", "--criterion", "label_smoothed_cross_entropy"],
        )
        cfg = convert_namespace_to_omegaconf(args)
        monkeypatch.chdir(work)
        with audited() as events:
            try:
                fairseq_task = tasks.setup_task(cfg.task)
                built.append(fairseq_task.build_model(cfg.model))
                fairseq_task.build_criterion(cfg.criterion)
                with safe_loading():  # as fairseq-generate with FAIRSEQ_DENSE_CLI=1 loads
                    built.extend(checkpoint_utils.load_model_ensemble([str(ckpt)])[0])
            except SystemExit as e:  # pragma: no cover - the failure this test is for
                pytest.fail(f"{arch} with {task}: building ended the program ({e!r})")
        touched = [e for e in events if under(e[1], save)]
        assert touched == [], (arch, touched)
        assert snapshot(save) == before, arch
    assert len(built) == 2 * len(rh.tiny_archs())
