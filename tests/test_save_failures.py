"""Saves that fail, a second training on a live save folder, a run ended by ``--patience``.

- A save that fails (here a real file-size limit, ``ulimit -f``, in a ``fairseq-train``
  process) ends the run with one line naming the file and the reason; the checkpoints
  saved before it are intact and a restart resumes from them.
- A save whose failed write fairseq retried into the same, partly written file (a disk
  full for a moment) is found at once: the run stops with one line, the file and its
  copies are set aside, ``checkpoint_best.pt``/``checkpoint_last.pt`` load, and the restart
  resumes from the newest checkpoint that loads and ends as an uninterrupted run.
- A training on a folder that another live process holds is refused with one line naming
  both; a lock left by a killed process does not block.
- A run that ``--patience`` ended trains nothing when started again.
"""

import errno
import io
import os
import resource
import signal
import subprocess
import sys

import pytest

import fairseq_dense
from fairseq_dense.checkpoints import BEST, LAST
from fairseq_dense.cli.fairseq_tools import clear_error_message
from fairseq_dense.resume import SaveFailed, TrainingFinished
from fairseq_dense.save_lock import SaveDirBusy
from tests import reliability_helpers as rh

pytestmark = pytest.mark.slow

N_TRAIN = 24  # 3 updates per epoch
EXTRA = ["--optimizer", "adam", "--lr", "0.003", "--batch-size", "8", "--max-tokens-valid", "200"]


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    return rh.tiny_corpus(tmp_path_factory.mktemp("save_failures_data"), N_TRAIN)


def _args(data_bin, save, max_update=6, *extra):
    return rh.base_train_args(
        data_bin, save, rh.tiny_archs()[0], max_update, *EXTRA, "--save-interval-updates", "2", *extra
    )


def _updates(path):
    return rh.load_checkpoint(path)["optimizer_history"][-1]["num_updates"]


def test_a_save_that_fails_ends_in_one_line_and_the_restart_resumes(data_bin, tmp_path):
    save = tmp_path / "ckpt"
    args = _args(data_bin, save)
    rh.train_inprocess(args, crash_at=3)  # checkpoint_1_2.pt and the end of epoch 1 (best and last: 3)
    size = (save / LAST).stat().st_size

    def limit():  # the next checkpoint cannot be written whole
        resource.setrlimit(resource.RLIMIT_FSIZE, (size // 2, resource.RLIM_INFINITY))

    package = os.path.dirname(os.path.abspath(fairseq_dense.__file__))
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", FAIRSEQ_DENSE_CLI="1")  # one-line errors
    cmd = [sys.executable, "-m", "fairseq_cli.train", *args, "--user-dir", package]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, preexec_fn=limit)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr  # fairseq's log of its last write try is left out
    head = f"fairseq-train: error: cannot save checkpoint {save / 'checkpoint_2_4.pt'}: the write failed (the file size"
    assert err[-1].startswith(head) and err[-1].endswith("run the same command again to resume"), err[-3:]
    assert "(ulimit -f)" in err[-1] and "fairseq would retry it into the partly written file" in err[-1]
    assert _updates(save / LAST) == _updates(save / BEST) == 3
    assert sorted(rh.train_inprocess(args)) == [4, 5, 6]  # the partial .tmp is removed, the run goes on


def test_a_retry_into_a_partly_written_file_is_refused_and_never_copied(data_bin, tmp_path, monkeypatch, caplog):
    from fairseq import checkpoint_utils

    full = rh.train_inprocess(_args(data_bin, tmp_path / "full"))
    save = tmp_path / "ckpt"
    args = _args(data_bin, save)
    save_once = checkpoint_utils.torch.save
    failed = []

    def disk_full_once(obj, f, *a, **kw):  # the first try of update 4's save writes some bytes, then fails
        if "checkpoint_2_4" in getattr(f, "name", "") and not failed:
            failed.append(f.name)
            whole = io.BytesIO()
            save_once(obj, whole, *a, **kw)  # pickled whole, as a real try is before its writes
            f.write(whole.getvalue()[:1000])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return save_once(obj, f, *a, **kw)

    monkeypatch.setattr(checkpoint_utils.torch, "save", disk_full_once)
    monkeypatch.setattr(checkpoint_utils.time, "sleep", lambda s: None)  # fairseq waits 2.5 s before its retry
    with pytest.raises(SaveFailed) as stopped:
        rh.train_inprocess(args)
    monkeypatch.undo()
    assert failed == [str(save / "checkpoint_2_4.pt.tmp")]
    message = clear_error_message(stopped.value)
    assert message == (
        f"cannot save checkpoint {save / 'checkpoint_2_4.pt'}: the write failed (its cause has passed) and fairseq "
        "would retry it into the partly written file; the checkpoints saved before it are intact: free space (or "
        "fix the folder) and run the same command again to resume"
    )
    # nothing was renamed or copied: best and last hold the end of epoch 1 (update 3)
    assert _updates(save / LAST) == _updates(save / BEST) == 3 and not (save / "checkpoint_2_4.pt").exists()
    second = rh.train_inprocess(args)
    assert sorted(second) == [4, 5, 6] and all(second[u] == full[u] for u in second)
    rh.assert_tensors_identical(
        rh.deterministic_parts(rh.load_checkpoint(tmp_path / "full" / LAST)),
        rh.deterministic_parts(rh.load_checkpoint(save / LAST)),
    )
    assert sorted(p.name for p in save.iterdir()) == sorted(p.name for p in (tmp_path / "full").iterdir())


def test_a_second_training_on_a_held_folder_is_refused(data_bin, tmp_path):
    save = tmp_path / "ckpt"
    save.mkdir()
    holder = subprocess.Popen(  # holds the folder as a training does (fairseq_dense.resume.lock_save_dir)
        [sys.executable, "-c", "import fcntl,os,sys,time; fd=os.open(sys.argv[1], os.O_RDONLY); "
         "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(300)", str(save)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(SaveDirBusy) as refused:
            rh.train_inprocess(_args(data_bin, save, 2))
        assert clear_error_message(refused.value) == (
            f"{save} is in use by another training (process {holder.pid}: {sys.executable} -c {holder.args[2]} "
            f"{save}): wait for it to end, or pass another --save-dir"  # the whole command
        )
        assert os.listdir(save) == []  # nothing written
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert sorted(rh.train_inprocess(_args(data_bin, save, 2))) == [1, 2]  # the killed holder does not block


def test_a_run_ended_by_patience_restarts_without_training(data_bin, tmp_path):
    save = tmp_path / "ckpt"
    # with the loss "maximised" no validation after the first is better: --patience 2 ends after the third
    args = _args(data_bin, save, 30, "--patience", "2", "--maximize-best-checkpoint-metric")
    assert sorted(rh.train_inprocess(args)) == [1, 2, 3, 4]  # validations at updates 2, 3 and 4
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in save.iterdir()}
    with pytest.raises(TrainingFinished) as finished:
        rh.train_inprocess(args)
    assert finished.value.message == (
        f"training already finished: {save / LAST} holds 2 validations without a better score (--patience 2); "
        "nothing to train (raise the limit to go on)"
    )
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in save.iterdir()} == before
