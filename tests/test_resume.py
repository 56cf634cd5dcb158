"""Exact resume, determinism and atomic checkpoint writes, for every ``*_tiny`` architecture.

Per architecture, in this process (no extra fairseq import):

1. an uninterrupted run of ``TOTAL`` updates;
2. the same run again in another folder: the checkpoints must be identical
   (model, optimizer and LR-scheduler state, data iterator) -- determinism;
3. a run that saves every ``STOP`` updates and is killed during update
   ``STOP + 1`` (mid-epoch), then started again with the same command line: it
   resumes from ``checkpoint_last.pt`` and every later update logs the same loss
   (unrounded, within 1e-6) and the final checkpoint equals the uninterrupted one.
   The command line stays the same, so schedules that depend on ``--max-update``
   (freeze windows, decays) are compared fairly.

Dropout stays on (fairseq reseeds with ``seed + num_updates`` every update), the
optimizer is Adam (moments in the checkpoint) and the LR scheduler is
``reduce_lr_on_plateau`` with validation every epoch (plateau state in the
checkpoint). The task is ``translation_exact_resume`` (or ``translation_weighted``,
built on it; :func:`reliability_helpers.default_task`): with fairseq's own
``translation`` task a resumed run batches equal-length sentences differently
(see ``fairseq_dense/tasks/translation_exact_resume.py``), which
``test_plain_translation_task_resume_differs`` pins down.
"""

import re

import pytest
import torch

from tests import reliability_helpers as rh

pytestmark = pytest.mark.slow

N_TRAIN = 24  # 3 batches of 8 -> 3 updates per epoch
TOTAL, STOP = 8, 4  # checkpoint after update 4 (mid-epoch: epoch 2, batch 1 of 3), killed in update 5
EXTRA = [
    "--optimizer",
    "adam",
    "--lr",
    "0.003",
    "--clip-norm",
    "1.0",
    "--batch-size",
    "8",
    "--save-interval-updates",
    str(STOP),
    "--lr-scheduler",
    "reduce_lr_on_plateau",
    "--lr-shrink",
    "0.5",
    "--lr-patience",
    "0",
    "--max-tokens-valid",
    "200",
]


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    return rh.tiny_corpus(tmp_path_factory.mktemp("resume_data"), N_TRAIN)


def _deterministic_parts(ckpt: dict) -> dict:
    """The parts of a checkpoint that must not depend on wall-clock time."""
    hist = ckpt["optimizer_history"][-1]
    return {
        "model": ckpt["model"],
        "optimizer": ckpt["last_optimizer_state"],
        "lr_scheduler": hist["lr_scheduler_state"],
        "num_updates": hist["num_updates"],
        "train_iterator": ckpt["extra_state"]["train_iterator"],
        "val_loss": ckpt["extra_state"]["val_loss"],
    }


def _check_resume(arch, data_bin, tmp_path, extra):
    full = rh.train_inprocess(rh.base_train_args(data_bin, tmp_path / "full", arch, TOTAL, *extra))
    assert sorted(full) == list(range(1, TOTAL + 1)), full

    # determinism: same seed, same data -> identical checkpoints
    again = rh.train_inprocess(rh.base_train_args(data_bin, tmp_path / "again", arch, TOTAL, *extra))
    assert again == full
    ref = _deterministic_parts(rh.load_checkpoint(tmp_path / "full" / "checkpoint_last.pt"))
    rh.assert_tensors_identical(
        ref, _deterministic_parts(rh.load_checkpoint(tmp_path / "again" / "checkpoint_last.pt")), arch
    )

    # killed after update STOP + 1 (its checkpoint is from update STOP), same command line again
    cut = rh.base_train_args(data_bin, tmp_path / "cut", arch, TOTAL, *extra)
    first = rh.train_inprocess(cut, crash_at=STOP + 1)
    assert sorted(first) == list(range(1, STOP + 2))
    mid = rh.load_checkpoint(tmp_path / "cut" / "checkpoint_last.pt")
    assert mid["optimizer_history"][-1]["num_updates"] == STOP
    assert mid["extra_state"]["train_iterator"]["iterations_in_epoch"] not in (0, N_TRAIN // 8), (
        "the interruption should fall mid-epoch"
    )
    second = rh.train_inprocess(cut)
    assert sorted(second) == list(range(STOP + 1, TOTAL + 1)), "did not resume from checkpoint_last.pt"
    for u in range(1, TOTAL + 1):
        got = second.get(u, first.get(u))
        assert abs(got - full[u]) <= 1e-6, f"{arch}: update {u} loss {got} != uninterrupted {full[u]}"
    resumed = _deterministic_parts(rh.load_checkpoint(tmp_path / "cut" / "checkpoint_last.pt"))
    assert rh.max_abs_diff(resumed["model"], ref["model"]) <= 1e-6
    assert resumed["lr_scheduler"] == ref["lr_scheduler"]
    assert resumed["train_iterator"] == ref["train_iterator"]
    return mid["model"], ref["model"]


@pytest.mark.parametrize("arch", rh.tiny_archs())
def test_resume_is_exact_and_training_deterministic(arch, data_bin, tmp_path):
    _check_resume(arch, data_bin, tmp_path, EXTRA)


GROUPED_ARCHS = [a for a in rh.tiny_archs() if rh.parameter_groups(a)]


@pytest.mark.skipif(not GROUPED_ARCHS, reason="no architecture declares parameter groups")
@pytest.mark.parametrize("arch", GROUPED_ARCHS)
def test_resume_with_grouped_schedule_and_freeze_window(arch, data_bin, tmp_path):
    """``--lr-scheduler grouped``: per-group warm-up and a freeze window spanning the resume."""
    group = rh.parameter_groups(arch)[0]
    extra = [
        "--optimizer",
        "adam",
        "--lr",
        "0.003",
        "--batch-size",
        "8",
        "--max-tokens-valid",
        "200",
        "--save-interval-updates",
        str(STOP),
        "--lr-scheduler",
        "grouped",
        "--group-warmup-updates",
        f"default=3,{group}=2",
        "--group-freeze-last",
        f"{group}={TOTAL - STOP}",
        "--fp16-no-flatten-grads",
    ]
    at_stop, final = _check_resume(arch, data_bin, tmp_path, extra)
    from tests.helpers import dummy_dictionary

    frozen = [
        n
        for n, p in rh.build_tiny_model(arch, dummy_dictionary(8)).named_parameters()
        if getattr(p, "param_group", None) == group
    ]
    assert frozen
    moved = [n for n in frozen if not torch.equal(at_stop[n], final[n])]
    assert not moved, f"{arch}: group {group!r} changed inside its freeze window: {moved}"


def test_crash_while_saving_keeps_previous_checkpoint(data_bin, tmp_path, monkeypatch):
    """fairseq writes ``<name>.tmp`` and renames it: a crash mid-write leaves the old files intact.

    The whole checkpoint dict (model, optimizer, LR scheduler, our models' extra
    buffers, iterator state) goes through that one write. fairseq then *copies* the
    file to the other names due at that moment (e.g. ``checkpoint_best.pt`` ->
    ``checkpoint_last.pt``); that copy is not atomic (docs/reliability.md).
    """
    arch = rh.tiny_archs()[0]
    save = tmp_path / "ckpt"
    rh.train_inprocess(rh.base_train_args(data_bin, save, arch, 2, *EXTRA))
    before = {p.name: p.read_bytes() for p in save.iterdir()}
    assert "checkpoint_last.pt" in before

    def crashing_save(obj, f, *a, **k):
        f.write(b"partial garbage")  # half-written bytes, then the crash
        raise KeyboardInterrupt("simulated crash while saving")

    with monkeypatch.context() as m:
        m.setattr(torch, "save", crashing_save)
        with pytest.raises(KeyboardInterrupt):
            rh.train_inprocess(rh.base_train_args(data_bin, save, arch, 4, *EXTRA))

    after = {p.name: p.read_bytes() for p in save.iterdir()}
    torn = sorted(set(after) - set(before))
    assert len(torn) == 1 and torn[0].endswith(".pt.tmp"), torn
    assert {k: after[k] for k in before} == before, "a crash while saving changed a finished checkpoint"
    assert rh.load_checkpoint(save / "checkpoint_last.pt")["optimizer_history"][-1]["num_updates"] == 2
    # resuming after the crash works and the next save replaces the torn file
    rh.train_inprocess(rh.base_train_args(data_bin, save, arch, 4, *EXTRA))
    assert rh.load_checkpoint(save / "checkpoint_last.pt")["optimizer_history"][-1]["num_updates"] == 4


@pytest.mark.skipif(not rh.FULL, reason="documents fairseq's behaviour; FAIRSEQ_DENSE_FULL_RELIABILITY=1")
def test_plain_translation_task_resume_differs(data_bin, tmp_path):
    """With fairseq's ``translation`` task the resumed run sees differently composed batches."""
    arch = rh.tiny_archs()[0]
    extra = EXTRA + ["--task", "translation"]
    full = rh.train_inprocess(rh.base_train_args(data_bin, tmp_path / "full", arch, TOTAL, *extra))
    first = rh.train_inprocess(rh.base_train_args(data_bin, tmp_path / "cut", arch, STOP, *extra))
    second = rh.train_inprocess(rh.base_train_args(data_bin, tmp_path / "cut", arch, TOTAL, *extra))
    assert all(first[u] == full[u] for u in first)
    assert any(abs(second[u] - full[u]) > 1e-6 for u in second)


def test_restart_after_a_kill_during_the_copy_to_checkpoint_last(data_bin, tmp_path, caplog):
    """fairseq copies the interval checkpoint to ``checkpoint_last.pt`` without a rename: a kill
    during that copy leaves it truncated. The restart continues from the newest checkpoint that
    loads, keeps the unreadable file beside it and says so."""
    arch = rh.tiny_archs()[0]
    save = tmp_path / "ckpt"
    extra = ["--optimizer", "adam", "--lr", "0.003", "--batch-size", "8", "--save-interval-updates", "2"]
    rh.train_inprocess(rh.base_train_args(data_bin, save, arch, 4, *extra))
    interval = save / "checkpoint_2_4.pt"
    assert rh.load_checkpoint(interval)["optimizer_history"][-1]["num_updates"] == 4
    last = save / "checkpoint_last.pt"
    cut = last.read_bytes()[: last.stat().st_size // 10]  # the copy killed at 10%
    last.write_bytes(cut)

    with caplog.at_level("WARNING", logger="fairseq_dense.resume"):
        second = rh.train_inprocess(rh.base_train_args(data_bin, save, arch, 6, *extra))
    assert sorted(second) == [5, 6], "did not continue from the interval checkpoint of update 4"
    warning = [r.getMessage() for r in caplog.records if r.name == "fairseq_dense.resume"]
    assert len(warning) == 1 and warning[0].startswith(f"{last} does not load"), warning
    # checkpoint_2_4.pt, or its copy checkpoint_best.pt written after it: the same 4 updates
    assert re.search(rf"resuming from {re.escape(str(save))}/checkpoint_(2_4|best)\.pt \(4 updates\)", warning[0])
    assert (save / "checkpoint_last.pt.unreadable").read_bytes() == cut
    assert rh.load_checkpoint(last)["optimizer_history"][-1]["num_updates"] == 6
