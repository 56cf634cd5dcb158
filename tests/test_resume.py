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
checkpoint). The task is ``translation_exact_resume`` (or ``translation_exact_resume_simplex``,
built on it; :func:`reliability_helpers.default_task`): with fairseq's own
``translation`` task a resumed run batches equal-length sentences differently
(see ``fairseq_dense/tasks/translation_exact_resume.py``), which
``test_plain_translation_task_resume_differs`` pins down.
"""

import argparse
import os
import shutil
import subprocess

import pytest
import torch

from fairseq_dense.resume import (
    CheckpointInfo,
    SaveFailed,
    TrainingFinished,
    check_after_save,
    finished_reason,
    recover_at_restart,
)
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


def _check_resume(arch, data_bin, tmp_path, extra):
    full = rh.train_inprocess(rh.base_train_args(data_bin, tmp_path / "full", arch, TOTAL, *extra))
    assert sorted(full) == list(range(1, TOTAL + 1)), full

    # determinism: same seed, same data -> identical checkpoints
    again = rh.train_inprocess(rh.base_train_args(data_bin, tmp_path / "again", arch, TOTAL, *extra))
    assert again == full
    ref = rh.deterministic_parts(rh.load_checkpoint(tmp_path / "full" / "checkpoint_last.pt"))
    rh.assert_tensors_identical(
        ref, rh.deterministic_parts(rh.load_checkpoint(tmp_path / "again" / "checkpoint_last.pt")), arch
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
    resumed = rh.deterministic_parts(rh.load_checkpoint(tmp_path / "cut" / "checkpoint_last.pt"))
    assert rh.max_abs_diff(resumed["model"], ref["model"]) <= 1e-6
    assert resumed["lr_scheduler"] == ref["lr_scheduler"]
    assert resumed["train_iterator"] == ref["train_iterator"]
    return mid["model"], ref["model"]


@pytest.mark.parametrize("arch", rh.tiny_archs())
def test_resume_is_exact_and_training_deterministic(arch, data_bin, tmp_path):
    _check_resume(arch, data_bin, tmp_path, EXTRA)


def test_resume_is_exact_with_fused_adam(data_bin, tmp_path):
    """``--optimizer fused_adam`` (its moments and step counts in the checkpoint) resumes exactly too."""
    arch = rh.tiny_archs()[0]
    _check_resume(arch, data_bin, tmp_path, [("fused_adam" if a == "adam" else a) for a in EXTRA])
    ref, resumed = (rh.load_checkpoint(tmp_path / run / "checkpoint_last.pt") for run in ("full", "cut"))
    rh.assert_tensors_identical(rh.deterministic_parts(ref), rh.deterministic_parts(resumed), arch)


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


@pytest.mark.parametrize("arch", rh.tiny_archs() if rh.FULL else rh.tiny_archs()[:1])
def test_resume_is_exact_under_bf16_autocast(arch, data_bin, tmp_path):
    """The same under ``--bf16-autocast`` (tests/test_bf16_autocast.py); every family with the full matrix."""
    _check_resume(arch, data_bin, tmp_path, EXTRA + ["--bf16-autocast"])


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
    before = {p.name: p.read_bytes() for p in save.iterdir() if p.name != "checkpoint_best.pt.unreadable"}
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
    loads, keeps the unreadable file beside it and says so; the next save of ``checkpoint_last.pt``
    removes the kept file."""
    arch = rh.tiny_archs()[0]
    save = tmp_path / "ckpt"
    extra = ["--optimizer", "adam", "--lr", "0.003", "--batch-size", "8", "--save-interval-updates", "2"]
    rh.train_inprocess(rh.base_train_args(data_bin, save, arch, 4, *extra))
    interval = save / "checkpoint_2_4.pt"
    assert rh.load_checkpoint(interval)["optimizer_history"][-1]["num_updates"] == 4
    last = save / "checkpoint_last.pt"
    cut = last.read_bytes()[: last.stat().st_size // 10]  # the copy killed at 10%
    last.write_bytes(cut)

    with caplog.at_level("INFO", logger="fairseq_dense.resume"):
        second = rh.train_inprocess(rh.base_train_args(data_bin, save, arch, 6, *extra))
    assert sorted(second) == [5, 6], "did not continue from the interval checkpoint of update 4"
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "fairseq_dense.resume"]
    assert len(said) == 2, said
    assert said[0][0] == "WARNING" and said[0][1].startswith(f"{last} does not load"), said
    assert f"kept as checkpoint_last.pt.unreadable): resuming from {interval} (4 updates)" in said[0][1]
    assert said[1] == ("INFO", f"removed {last}.unreadable: checkpoint_last.pt loads again")
    assert not (save / "checkpoint_last.pt.unreadable").exists()
    assert rh.load_checkpoint(last)["optimizer_history"][-1]["num_updates"] == 6


@pytest.mark.parametrize("limit", ["--max-update", "--max-epoch"])
def test_restarting_a_finished_run_trains_nothing_and_changes_no_file(limit, data_bin, tmp_path, caplog):
    """fairseq alone trains one more update and rewrites checkpoint_best.pt/checkpoint_last.pt
    when a run that reached --max-update is started again; the project's tasks stop at once."""
    arch = rh.tiny_archs()[0]
    save = tmp_path / "ckpt"
    extra = ["--optimizer", "adam", "--lr", "0.003", "--batch-size", "8", "--save-interval-updates", "2"]
    args = rh.base_train_args(data_bin, save, arch, 4, *extra)
    if limit == "--max-epoch":  # 3 updates per epoch: --max-epoch 2 ends after update 6
        args[args.index("--max-update") + 1] = "0"
        args += ["--max-epoch", "2"]
    assert len(rh.train_inprocess(args)) in (4, 6)
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in save.iterdir()}
    with caplog.at_level("INFO"), pytest.raises(TrainingFinished) as finished:
        rh.train_inprocess(args)
    assert finished.value.code == 0
    held = "4 updates (--max-update 4)" if limit == "--max-update" else "2 epochs (--max-epoch 2)"
    assert finished.value.message.startswith(f"training already finished: {save / 'checkpoint_last.pt'} holds {held}")
    assert finished.value.message in caplog.text
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in save.iterdir()} == before
    # another command (e.g. a new training given this folder by mistake) is told what differs
    other = [*args[: args.index("--lr") + 1], "0.001", *args[args.index("--lr") + 2 :]]
    with pytest.raises(TrainingFinished) as finished:
        rh.train_inprocess(other)
    assert f"holds {held}, written by a run with other options or data than this command (--lr 0.003 -> 0.001)" in (
        finished.value.message
    )
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in save.iterdir()} == before
    # a higher limit trains on from there
    args[args.index(limit) + 1] = "8" if limit == "--max-update" else "3"
    assert sorted(rh.train_inprocess(args)) == ([5, 6, 7, 8] if limit == "--max-update" else [7, 8, 9])


def test_end_of_training_repairs_a_checkpoint_best_that_does_not_load(data_bin, tmp_path, monkeypatch, caplog):
    """A copy to ``checkpoint_best.pt`` that ends short without an error (here, made to) is found
    after the save and repaired from the file it was copied from: a finished run never leaves an
    unreadable ``checkpoint_best.pt``."""
    from fairseq.file_io import PathManager

    copy = PathManager.copy

    def short_copy(src, dst, overwrite=False):
        if dst.endswith("checkpoint_best.pt"):
            with open(src, "rb") as fin, open(dst, "wb") as fout:
                fout.write(fin.read(1000))
            return True
        return copy(src, dst, overwrite)

    monkeypatch.setattr(PathManager, "copy", staticmethod(short_copy))
    arch = rh.tiny_archs()[0]
    save = tmp_path / "ckpt"
    extra = ["--optimizer", "adam", "--lr", "0.003", "--batch-size", "8", "--save-interval-updates", "2"]
    with caplog.at_level("WARNING", logger="fairseq_dense.resume"):
        rh.train_inprocess(rh.base_train_args(data_bin, save, arch, 2, *extra))
    best = rh.load_checkpoint(save / "checkpoint_best.pt")
    assert best["optimizer_history"][-1]["num_updates"] == 2
    assert caplog.messages == [
        f"{save / 'checkpoint_best.pt'} does not load: it is a copy of checkpoint_1_2.pt cut at 1000 of "
        f"{(save / 'checkpoint_1_2.pt').stat().st_size} bytes (a kill while fairseq copied it); "
        f"repaired from {save / 'checkpoint_1_2.pt'} (2 updates)"
    ]


@pytest.fixture(scope="module")
def saved_run(data_bin, tmp_path_factory):
    """A finished run's folder: checkpoint_1_2.pt, checkpoint_2_4.pt, checkpoint_best.pt, checkpoint_last.pt (4)."""
    save = tmp_path_factory.mktemp("saved_run") / "ckpt"
    extra = ["--optimizer", "adam", "--lr", "0.003", "--batch-size", "8", "--save-interval-updates", "2"]
    rh.train_inprocess(rh.base_train_args(data_bin, save, rh.tiny_archs()[0], 4, *extra))
    return save


def _copy_of(folder, tmp_path):
    dest = tmp_path / "ckpt"
    shutil.copytree(folder, dest)  # keeps the files' times
    return dest


def _updates(path):
    return rh.load_checkpoint(path)["optimizer_history"][-1]["num_updates"]


def test_a_consistent_folder_is_left_alone(saved_run, tmp_path, caplog):
    save = _copy_of(saved_run, tmp_path)
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in save.iterdir()}
    with caplog.at_level("INFO", logger="fairseq_dense.resume"):
        assert recover_at_restart(str(save)).num_updates == 4
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in save.iterdir()} == before
    assert not caplog.records


def test_each_kind_of_damage_is_repaired_or_reported(saved_run, tmp_path, caplog):
    """Leftover ``.tmp``, a cut copy of the best checkpoint, a stale best, a garbage file with a
    fairseq name and one with another name, an old ``.unreadable``, a missing ``checkpoint_last.pt``."""
    save = _copy_of(saved_run, tmp_path)
    last, best = save / "checkpoint_last.pt", save / "checkpoint_best.pt"
    best_loss = rh.load_checkpoint(last)["extra_state"]["best"]
    holder = next(
        p
        for p in sorted(save.glob("checkpoint_*_*.pt"))
        if rh.load_checkpoint(p)["extra_state"]["val_loss"] == best_loss
    )
    (save / "checkpoint_1_8.pt.tmp").write_bytes(b"partial")
    (save / "checkpoint_last.pt.unreadable.tmp").write_bytes(b"part")  # a kill as a restart kept a cut last aside
    (save / "checkpoint_2_4.pt.unreadable").write_bytes(b"")  # its name loads: goes
    (save / "checkpoint9.pt").write_bytes(b"not a checkpoint")  # set aside
    (save / "checkpoint_mine.pt").write_bytes(b"not a checkpoint")  # not fairseq's: reported only
    last.unlink()  # as if killed before fairseq's first copy to checkpoint_last.pt
    best.write_bytes(holder.read_bytes()[:5000])  # a cut copy of the best save
    with caplog.at_level("INFO", logger="fairseq_dense.resume"):
        resumed = recover_at_restart(str(save))
    text = caplog.text
    assert resumed.num_updates == _updates(last) == 4 and last.read_bytes() == (save / "checkpoint_2_4.pt").read_bytes()
    assert best.read_bytes() == holder.read_bytes()
    assert f"removed {save / 'checkpoint_1_8.pt.tmp'} (7 bytes)" in text
    assert f"removed {save / 'checkpoint_last.pt.unreadable.tmp'} (4 bytes)" in text
    assert f"removed {save / 'checkpoint_2_4.pt.unreadable'}: checkpoint_2_4.pt loads again" in text
    assert f"{best} does not load: it is a copy of {holder.name} cut at 5000 of" in text
    assert f"{save / 'checkpoint9.pt'} does not load (truncated or not a torch checkpoint, 16 bytes)" in text
    assert "set aside as checkpoint9.pt.unreadable" in text
    assert f"{save / 'checkpoint_mine.pt'} does not load (truncated or not a torch checkpoint); left as it is" in text
    assert f"{last} is missing but {save / 'checkpoint_2_4.pt'} loads" in text
    assert sorted(p.name for p in save.iterdir()) == [
        "checkpoint9.pt.unreadable",
        "checkpoint_1_2.pt",
        "checkpoint_2_4.pt",
        "checkpoint_best.pt",
        "checkpoint_last.pt",
        "checkpoint_mine.pt",
    ]


def test_newer_by_updates_and_by_time(saved_run, tmp_path, caplog):
    """``checkpoint_last.pt`` gives way to a file with more updates written after it, not to an older one."""
    save = _copy_of(saved_run, tmp_path)
    last, interval = save / "checkpoint_last.pt", save / "checkpoint_2_4.pt"
    shutil.copy2(save / "checkpoint_1_2.pt", last)  # 2 updates, written before checkpoint_2_4.pt
    os.utime(last, ns=(interval.stat().st_mtime_ns - 10**9,) * 2)
    with caplog.at_level("WARNING", logger="fairseq_dense.resume"):
        assert recover_at_restart(str(save)).num_updates == 4
    assert last.read_bytes() == interval.read_bytes()
    assert f"{last} holds 2 updates but checkpoint_2_4.pt, written after it, holds 4" in caplog.text
    # 2 updates again, now written after every other file (which then are, e.g., an earlier run's)
    shutil.copyfile(save / "checkpoint_1_2.pt", last)
    assert recover_at_restart(str(save)).num_updates == 2


def test_finished_reason():
    info = CheckpointInfo("c.pt", 10, 1.0, 1.0, next_epoch=3, training_seconds=7200.0, size=1, mtime_ns=0)

    def reason(**limits):
        return finished_reason(info, argparse.Namespace(**limits))

    assert reason(max_update=10) == "10 updates (--max-update 10)"
    assert reason(max_update=11) is None
    assert reason(max_update=10, reset_optimizer=True) is None
    assert reason(max_epoch=2) == "2 epochs (--max-epoch 2)"
    assert reason(max_epoch=3) is None
    assert reason(max_epoch=2, reset_dataloader=True) is None
    assert reason(stop_time_hours=1.5) == "2.0000 hours of training (--stop-time-hours 1.5)"
    assert reason(stop_time_hours=2.5) is None
    info.runs_without_improvement = 2
    assert reason(patience=2) == "2 validations without a better score (--patience 2)"
    assert reason(patience=2, reset_meters=True) is None  # the count restarts (docs/reliability.md)


def test_a_run_with_a_checkpoint_suffix_leaves_another_runs_files_to_it(saved_run, data_bin, tmp_path):
    """``--checkpoint-suffix _b`` resumes from ``checkpoint_last_b.pt``: the unsuffixed run's finished
    ``checkpoint_last.pt`` beside it neither ends this run nor is checked or repaired (fairseq's behaviour)."""
    save = _copy_of(saved_run, tmp_path)
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in save.iterdir()}
    extra = ["--optimizer", "adam", "--lr", "0.003", "--batch-size", "8", "--checkpoint-suffix", "_b"]
    assert sorted(rh.train_inprocess(rh.base_train_args(data_bin, save, rh.tiny_archs()[0], 1, *extra))) == [1]
    assert _updates(save / "checkpoint_last_b.pt") == 1
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in save.iterdir() if p.name in before} == before


@pytest.mark.parametrize(
    "schedule, epochs, crash_at",
    [
        (rh.HALVING_PLATEAU, 3, 6),
        (["--lr-scheduler", "inverse_sqrt", "--warmup-updates", "2"], 3, 6),
        (["--lr-scheduler", "fixed"], 3, 6),
        (["--lr-scheduler", "convs2s_anneal", "--lr-shrink", "0.5"], 3, 6),  # its previous loss is in its state
        # --lr-patience 1, killed mid-epoch 3: the plateau's count of bad epochs must survive the resume
        ([*rh.HALVING_PLATEAU, "--lr-patience", "1"], 4, 7),
    ],
    ids=["plateau-epoch-end", "inverse_sqrt-epoch-end", "fixed-epoch-end", "convs2s-epoch-end", "plateau-patience-mid"],
)
def test_resume_keeps_every_lr_scheduler_step(schedule, epochs, crash_at, data_bin, tmp_path):
    """fairseq saves the end-of-epoch checkpoint before ``lr_step(epoch, val_loss)`` and on load
    steps without the loss, and leaves the plateau's count of bad epochs out of the checkpoint;
    the project's tasks give the resumed run both back."""
    arch = rh.tiny_archs()[0]
    extra = ["--optimizer", "adam", "--lr", "0.003", "--batch-size", "8", "--max-tokens-valid", "200"]
    extra += ["--save-interval-updates", "1", *schedule]
    per_epoch = N_TRAIN // 8
    total = epochs * per_epoch
    full = rh.train_inprocess(rh.base_train_args(data_bin, tmp_path / "full", arch, total, *extra))
    cut = rh.base_train_args(data_bin, tmp_path / "cut", arch, total, *extra)
    rh.train_inprocess(cut, crash_at=crash_at)
    mid = rh.load_checkpoint(tmp_path / "cut" / "checkpoint_last.pt")
    assert mid["optimizer_history"][-1]["num_updates"] == crash_at
    assert (mid["extra_state"]["train_iterator"]["iterations_in_epoch"] == 0) == (crash_at % per_epoch == 0)
    second = rh.train_inprocess(cut)
    assert sorted(second) == list(range(crash_at + 1, total + 1))
    ref = rh.load_checkpoint(tmp_path / "full" / "checkpoint_last.pt")
    resumed = rh.load_checkpoint(tmp_path / "cut" / "checkpoint_last.pt")
    if schedule[1] == "reduce_lr_on_plateau":  # the final save comes before the last epoch's step
        lrs = [g["lr"] for g in ref["last_optimizer_state"]["param_groups"]]
        assert lrs == [0.003 * 0.5], "the uninterrupted run should have halved the LR once"
    for u in second:
        assert second[u] == full[u], f"update {u}: loss {second[u]} != uninterrupted {full[u]}"
    rh.assert_tensors_identical(rh.deterministic_parts(ref), rh.deterministic_parts(resumed), arch)


def test_a_saved_file_that_does_not_load_stops_the_run(saved_run, tmp_path):
    """The check after every save: a first file that does not load (and its copies) is set aside,
    ``checkpoint_last.pt``/``checkpoint_best.pt`` come from the newest that load, and the run stops."""
    save = _copy_of(saved_run, tmp_path)
    saved = save / "checkpoint_2_4.pt"
    broken = b"bytes of a failed try" + saved.read_bytes()
    for path in (saved, save / "checkpoint_best.pt", save / "checkpoint_last.pt"):
        path.write_bytes(broken)
    with pytest.raises(SaveFailed) as stopped:
        check_after_save(str(save), str(saved))
    assert str(stopped.value).startswith(f"the checkpoint save failed: {saved}: cannot be read safely")
    assert str(stopped.value).endswith(f"a restart resumes from {save / 'checkpoint_last.pt'} (2 updates)")
    assert _updates(save / "checkpoint_last.pt") == 2 and (save / "checkpoint_2_4.pt.unreadable").exists()
    assert not saved.exists()


# ------------------------------------------------------------------ what a restart resumes

SAVED_RUN_EXTRA = ["--optimizer", "adam", "--lr", "0.003", "--batch-size", "8", "--save-interval-updates", "2"]


def _variant(data_bin, dest, pick):
    """A data-bin with ``data_bin``'s dictionary whose training set holds the sentences ``pick(n)`` names."""
    raw = data_bin.parent / "raw"
    shutil.copytree(raw, dest / "raw")
    for side in ("src", "tgt"):
        lines = (raw / f"train.{side}").read_text().splitlines(keepends=True)
        (dest / "raw" / f"train.{side}").write_text("".join(lines[i] for i in pick(len(lines))))
    return rh.preprocess_inprocess(dest / "raw", dest / "bin", srcdict=data_bin / "dict.src.txt")


def test_a_restart_says_what_changed_and_a_smaller_training_set_is_one_line(saved_run, data_bin, tmp_path, caplog):
    """Other options or data than the checkpoint's: one warning naming each; the same command again: none. A training
    set with fewer batches than a mid-epoch checkpoint had done: one line, not fairseq's internal error."""
    import random

    from fairseq_dense.cli.fairseq_tools import clear_error_message

    arch, extra = rh.tiny_archs()[0], [*SAVED_RUN_EXTRA, "--lr", "0.001"]  # the later --lr wins
    save = tmp_path / "ckpt"
    shutil.copytree(saved_run, save)
    shuffled = _variant(data_bin, tmp_path / "shuffled", lambda n: random.Random(1).sample(range(n), n))
    with caplog.at_level("WARNING", logger="fairseq_dense.resume"):
        assert sorted(rh.train_inprocess(rh.base_train_args(shuffled, save, arch, 6, *extra))) == [5, 6]
    said = [r.getMessage() for r in caplog.records if "exact continuation" in r.getMessage()]
    assert said == [
        f"{save / 'checkpoint_last.pt'} was written by a run with other options or data than this command (--lr 0.003 "
        "-> 0.001; data files changed: train.src-tgt.src.bin, train.src-tgt.src.idx, train.src-tgt.tgt.bin, "
        "train.src-tgt.tgt.idx): training goes on from it, but no longer as an exact continuation"
    ], caplog.text  # --max-update and the data path differ too, but decide nothing the checkpoint did
    caplog.clear()
    with caplog.at_level("WARNING", logger="fairseq_dense.resume"):
        assert sorted(rh.train_inprocess(rh.base_train_args(shuffled, save, arch, 7, *extra))) == [7]
    assert "exact continuation" not in caplog.text

    small = _variant(data_bin, tmp_path / "small", lambda n: range(8))  # one batch an epoch
    save = tmp_path / "small_ckpt"
    shutil.copytree(saved_run, save)  # 4 updates: epoch 2, one of its three batches done
    with pytest.raises(RuntimeError) as refused:
        rh.train_inprocess(rh.base_train_args(small, save, arch, 6, *SAVED_RUN_EXTRA))
    assert clear_error_message(refused.value).startswith(
        "cannot resume in the middle of epoch 2: the checkpoint had done 1 of its batches, and the training data or "
        "batch options of this command give no more than that"
    )


def test_a_forked_folder_and_a_linked_file_are_never_written(saved_run, data_bin, tmp_path, caplog):
    """A folder forked with ``cp -al`` and one of its checkpoints a link to a file outside it: training the fork
    writes neither the original folder nor that file; the original, restarted, resumes its own state."""
    arch = rh.tiny_archs()[0]
    a, b, outside = tmp_path / "a", tmp_path / "b", tmp_path / "outside.pt"
    shutil.copytree(saved_run, a)
    subprocess.run(["cp", "-al", str(a), str(b)], check=True)
    shutil.copyfile(b / "checkpoint_best.pt", outside)
    (b / "checkpoint_best.pt").unlink()
    (b / "checkpoint_best.pt").symlink_to(outside)
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in [outside, *a.iterdir()]}
    with caplog.at_level("WARNING", logger="fairseq_dense.save_lock"):
        assert sorted(rh.train_inprocess(rh.base_train_args(data_bin, b, arch, 6, *SAVED_RUN_EXTRA))) == [5, 6]
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in [outside, *a.iterdir()]} == before
    assert f"{b / 'checkpoint_last.pt'} shared its data with 1 other hard link(s)" in caplog.text
    assert f"{b / 'checkpoint_best.pt'} was a link to {outside}: replaced by a copy of it" in caplog.text
    assert all(not p.is_symlink() and p.stat().st_nlink == 1 for p in [*a.iterdir(), *b.iterdir()])
    assert sorted(rh.train_inprocess(rh.base_train_args(data_bin, a, arch, 6, *SAVED_RUN_EXTRA))) == [5, 6]
    rh.assert_tensors_identical(
        rh.deterministic_parts(rh.load_checkpoint(a / "checkpoint_last.pt")),
        rh.deterministic_parts(rh.load_checkpoint(b / "checkpoint_last.pt")),
    )


def _start(save):
    """:func:`fairseq_dense.resume.start_training` on ``save`` as rank 0 of a ``translation_exact_resume`` run."""
    from types import SimpleNamespace

    from fairseq_dense import save_lock
    from fairseq_dense.resume import start_training

    try:
        return start_training(SimpleNamespace(save_dir=str(save), restore_file="checkpoint_last.pt"))
    finally:
        for fd in save_lock._HELD.values():
            os.close(fd)
        save_lock._HELD.clear()


def test_a_damaged_archive_is_set_aside_and_what_cannot_be_used_is_one_line(saved_run, tmp_path, monkeypatch, caplog):
    """A byte flipped in the newest save's tensors (and its copies): the restart resumes from the newest intact one.
    A directory or a dangling link with a checkpoint's name, a full disk during the restart's own repair, fairseq's
    write test in a folder it cannot write: one line each, and the folder as it was."""
    import errno

    from fairseq import checkpoint_utils

    from fairseq_dense import checkpoints
    from fairseq_dense.cli.fairseq_tools import clear_error_message
    from fairseq_dense.save_lock import SaveDirError

    save = _copy_of(saved_run, tmp_path)
    newest = [p for p in save.iterdir() if _updates(p) == 4]
    for path in newest:
        rh.flip_tensor_byte(path)
    with caplog.at_level("WARNING", logger="fairseq_dense.resume"):
        assert _start(save).num_updates == 2
    interval = save / "checkpoint_2_4.pt"
    assert f"{interval} loads but its archive is damaged (" in caplog.text and "fails its CRC check" in caplog.text
    assert f"set aside as {interval.name}.unreadable" in caplog.text
    resumed = f"kept as checkpoint_last.pt.unreadable): resuming from {save / 'checkpoint_1_2.pt'} (2 updates)"
    assert resumed in caplog.text
    assert _updates(save / "checkpoint_last.pt") == 2 and (save / "checkpoint_2_4.pt.unreadable").exists()

    last = save / "checkpoint_last.pt"
    last.write_bytes(last.read_bytes()[:1000])  # a repair is due: the copy of the newest save over it
    before = {p.name: p.read_bytes() for p in save.iterdir() if p.name != "checkpoint_best.pt.unreadable"}

    def disk_full(src, dst, **kwargs):
        with open(dst, "wb") as f:
            f.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), dst)

    monkeypatch.setattr(checkpoints.shutil, "copyfile", disk_full)
    with pytest.raises(SaveDirError) as refused:
        _start(save)
    monkeypatch.undo()
    assert clear_error_message(refused.value) == (
        f"cannot prepare {save} for training: No space left on device ({last}.unreadable.tmp); its checkpoints are "
        "intact: free space (or fix the folder) and run the same command again"
    )
    assert {p.name: p.read_bytes() for p in save.iterdir()} == before  # but a set-aside best that loads again

    last.unlink()
    last.mkdir()
    with pytest.raises(SaveDirError, match=f"^{last} is a directory, not a checkpoint: move it out of {save}$"):
        _start(save)
    last.rmdir()
    last.symlink_to(tmp_path / "gone.pt")
    with pytest.raises(SaveDirError, match=f"^{last} is a link to {tmp_path / 'gone.pt'}, which is missing: remove"):
        _start(save)

    (tmp_path / "finished" / "dummy").mkdir(parents=True)  # as root, a read-only folder cannot be made: the write fails
    with pytest.raises(OSError) as refused:
        checkpoint_utils.verify_checkpoint_directory(str(tmp_path / "finished"))
    assert clear_error_message(refused.value).startswith(
        f"cannot write to the save folder {tmp_path / 'finished'} (Is a directory): fairseq-train writes a test file"
    )
