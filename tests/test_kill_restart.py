"""SIGKILL a real training process at several moments, inside saves too, and restart it each time.

One ``translation_exact_resume_simplex`` run of ``gru_attention_tiny`` (30 updates, a save every 3
updates and at every epoch end, validation at each save, ``reduce_lr_on_plateau``) is killed eight times and started
again with the same command line after each kill:

1. inside ``torch.save`` of a save's first file (a partial ``checkpoint_1_6.pt.tmp``);
2. as epoch 2 begins, right after epoch 1's save and fairseq's ``reduce_lr_on_plateau`` step
   (the resume must make that step again: the LR halves after epoch 2 only if it did);
3. inside fairseq's copy of a new best to ``checkpoint_best.pt`` (cut at 40%);
4. inside the copy to ``checkpoint_last.pt`` (cut at 30%);
5. right after the copy to ``checkpoint_best.pt`` opened its file (0 bytes);
6. between a save's first file and its copies (a new best not yet copied anywhere);
7. at whatever moment the kill lands two updates after the last of those (not paused: the process runs on);
8. between the last save's first file and its copies: the restart only finishes that save and stops.

The run keeps its best three checkpoints (``--keep-best-checkpoints 3``), its ``checkpoint_last.pt`` is rolled
back by a link to an earlier save after kill 2, and a byte flips in every file of its newest save after kill 7.

For all but the seventh the process stops itself at that point (``SIGSTOP``, after the bytes
written so far are flushed) and the test sends ``SIGKILL``. Each restart must resume from
the newest save that finished before the kill (its "Loaded checkpoint" line), say what it
removed, repaired or set aside, and the finished run must hold the same final and best
checkpoints, bit for bit, as an uninterrupted run (each file); every ``checkpoint*.pt`` loads and no
``*.tmp``/``*.unreadable`` is left. Starting the finished run once more through the
``fairseq-train`` command trains nothing and changes no file.

The runs are processes forked from a server that imported fairseq once
(``multiprocessing``'s forkserver), so the ten runs cost one import.
"""

import io
import logging
import multiprocessing
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import fairseq_cli.train  # noqa: F401  (preloaded in the fork server, like the next import)
import pytest
import torch
import torch._dynamo  # noqa: F401  (torch.optim imports it when the first optimizer is built: ~1.5 s)

import fairseq_dense
from fairseq_dense.resume import BEST, LAST, RESUMABLE_NAME, TrainingFinished
from tests import reliability_helpers as rh

pytestmark = pytest.mark.slow

ARCH = "gru_attention_tiny"
N_TRAIN = 64  # 8 batches of 8: an epoch is 8 updates
MAX_UPDATE = 30
SAVE_EVERY = 3
TIMEOUT = 180


def _args(data: Path, save: Path):
    args = rh.base_train_args(
        data,
        save,
        ARCH,
        MAX_UPDATE,
        "--optimizer",
        "adam",
        "--lr",
        "0.003",
        "--batch-size",
        "8",
        "--save-interval-updates",
        str(SAVE_EVERY),
        "--max-tokens-valid",
        "200",
        *rh.HALVING_PLATEAU,
        "--keep-best-checkpoints",
        "3",
    )
    args.remove("--no-epoch-checkpoints")  # epoch checkpoints too: the newest save may have any name
    return [str(a) for a in args]


# ------------------------------------------------------------------ the training process


def _pause(conn, report):
    """Tell the test where this process is, then stop until the test's SIGKILL arrives."""
    conn.send(report)
    os.kill(os.getpid(), signal.SIGSTOP)


def _arm(moment, conn, now):
    """Install the stop (or the notice) that ``moment`` asks for."""
    from fairseq.file_io import PathManager
    from fairseq.trainer import Trainer

    step = Trainer.train_step

    def train_step(self, samples, raise_oom=False):
        out = step(self, samples, raise_oom)
        now["updates"] = self.get_num_updates()
        if moment and moment[0] == "update" and now["updates"] == moment[1]:
            conn.send(("update", now["updates"]))  # no stop: the kill lands wherever the run is by then
        return out

    Trainer.train_step = train_step
    if moment and moment[0] == "epoch":
        begin = Trainer.begin_epoch

        def begin_epoch(self, epoch):
            if epoch == moment[1]:  # after the end-of-epoch save and fairseq's lr_step for the epoch before
                _pause(conn, ("epoch", epoch, now["updates"]))
            return begin(self, epoch)

        Trainer.begin_epoch = begin_epoch
    if moment and moment[0] == "write":
        _, at, fraction = moment
        save = torch.save

        def cut_save(obj, f, *args, **kwargs):
            if now["updates"] < at:
                return save(obj, f, *args, **kwargs)
            buffer = io.BytesIO()
            save(obj, buffer, *args, **kwargs)
            data = buffer.getvalue()
            f.write(data[: int(len(data) * fraction)])
            f.flush()
            _pause(conn, ("write", f.name, now["updates"]))

        torch.save = cut_save
    if moment and moment[0] == "copy":
        _, name, at, fraction = moment
        copy = PathManager.copy

        def cut_copy(src, dst, overwrite=False):
            if os.path.basename(dst) != name or now["updates"] < at:
                return copy(src, dst, overwrite)
            if fraction is None:
                _pause(conn, ("copy", src, dst, now["updates"]))
            with open(src, "rb") as fin, open(dst, "wb") as fout:
                fout.write(fin.read(int(os.path.getsize(src) * fraction)))
                fout.flush()
                _pause(conn, ("copy", src, dst, now["updates"]))

        PathManager.copy = staticmethod(cut_copy)


def _child(args, log_path, moment, conn):
    """One ``fairseq-train`` run (fairseq's own entry point) logging to ``log_path``."""
    from fairseq_dense.cli.train_ddp import run_train

    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(name)s | %(levelname)s | %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    _arm(moment, conn, {"updates": 0})
    try:
        run_train(args)
    except TrainingFinished as e:
        conn.send(("finished", e.message))
        return
    conn.send(("done",))


# ------------------------------------------------------------------ the test's side


def _run(ctx, args, log: Path, moment=None):
    """Run one training process; SIGKILL it when it reports its moment. Returns its report."""
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(args, str(log), moment, theirs))
    proc.start()
    theirs.close()
    try:
        if not ours.poll(TIMEOUT):
            raise AssertionError(f"no report within {TIMEOUT} s")
        report = ours.recv()
    except (EOFError, AssertionError) as e:
        proc.kill()
        proc.join()
        tail = log.read_text()[-3000:] if log.exists() else ""
        raise AssertionError(f"run {log.name} ({moment}) failed: {e!r}, exit code {proc.exitcode}\n{tail}")
    if report[0] in ("done", "finished"):
        proc.join(TIMEOUT)
        assert proc.exitcode == 0, (log.name, proc.exitcode)
        assert moment is None, f"{moment} never came: the run ended ({report})"
    else:
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(TIMEOUT)
        assert proc.exitcode == -signal.SIGKILL, (log.name, proc.exitcode)
    return report


def _loads(path: Path):
    """The number of updates of ``path`` if ``torch.load`` reads it whole, else None."""
    try:
        return rh.load_checkpoint(path)["optimizer_history"][-1]["num_updates"]
    except Exception:
        return None


def _newest_save(save: Path) -> int:
    """The most updates held by a checkpoint that loads (what a restart must resume from)."""
    counts = [_loads(p) for p in save.glob("checkpoint*.pt") if RESUMABLE_NAME.match(p.name)]
    return max(c for c in counts if c is not None)


def _new_bests(save: Path):
    """Update counts of the saves that wrote a new ``checkpoint_best.pt`` (from their interval/epoch files)."""
    out = []
    for p in save.glob("checkpoint*.pt"):
        if re.fullmatch(r"checkpoint(\d+|_\d+_\d+)\.pt", p.name):
            state = rh.load_checkpoint(p)
            if state["extra_state"]["val_loss"] == state["extra_state"]["best"]:
                out.append(state["optimizer_history"][-1]["num_updates"])
    return sorted(out)


def _resumed_at(log: Path) -> int:
    found = re.findall(r"Loaded checkpoint \S*checkpoint_last\.pt \(epoch \d+ @ (\d+) updates\)", log.read_text())
    assert len(found) == 1, (log.name, found)
    return int(found[0])


def _snapshot(save: Path):
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(save.iterdir())}


def _training_state(path: Path):
    ckpt = rh.load_checkpoint(path)
    return {**rh.deterministic_parts(ckpt), "best": ckpt["extra_state"]["best"]}


def test_sigkill_at_any_moment_then_restart(tmp_path):
    data = rh.tiny_corpus(tmp_path / "data", N_TRAIN)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    ref, save = tmp_path / "uninterrupted", tmp_path / "killed"
    assert _run(ctx, _args(data, ref), tmp_path / "uninterrupted.log") == ("done",)
    bests = [u for u in _new_bests(ref) if 9 < u < MAX_UPDATE - 2]
    # a best copy cut, then checkpoint_last.pt cut at the next save (and one whole save after that
    # restart), then the next two new bests, then a kill wherever it lands two updates later
    b1 = bests[0]
    b2 = min((u for u in bests if u > b1 + 2 * SAVE_EVERY), default=None)
    b3 = min((u for u in bests if b2 is not None and u > b2), default=None)
    assert b2 is not None and b3 is not None, f"the reference run's new bests do not fit the moments: {bests}"
    moments = [
        ("write", 6, 0.5),
        ("epoch", 2),
        ("copy", BEST, b1, 0.4),
        ("copy", LAST, b1 + 1, 0.3),
        ("copy", BEST, b2, 0.0),
        ("copy", BEST, b3, None),
        ("update", b3 + 2),
        ("copy", BEST, MAX_UPDATE, None),  # the last save: the restart only repairs, then finds the run finished
        None,
    ]
    args = _args(data, save)
    resume, expect = None, []  # where the next run must resume, what its log must say about the kill
    for i, moment in enumerate(moments):
        log = tmp_path / f"run{i}.log"
        report = _run(ctx, args, log, moment)
        if i > 0:  # the restart after kill i - 1
            text = log.read_text()
            if report[0] == "finished":
                assert resume == MAX_UPDATE and "Loaded checkpoint" not in text, log.name
            else:
                assert _resumed_at(log) == resume, (log.name, moments[i - 1])
            for line in expect:
                assert line in text, f"{log.name} does not say {line!r}"
        if moment is None:
            break
        resume = _newest_save(save)
        expect = []
        kind = report[0]
        if kind == "write":
            tmp = Path(report[1])
            assert tmp.name == "checkpoint_1_6.pt.tmp" and tmp.exists() and _loads(tmp) is None
            assert resume == 3, resume  # the save of update 6 never finished
            expect = [f"removed {tmp} ("]
        elif kind == "copy":
            src, dst, at = Path(report[1]), Path(report[2]), report[3]
            assert _loads(src) == at and resume == at, (report, resume)  # the save itself finished
            if moment[3] is not None:
                cut = dst.read_bytes()
                assert _loads(dst) is None and src.read_bytes()[: len(cut)] == cut
                assert len(cut) == int(src.stat().st_size * moment[3])
            if dst.name == BEST and moment[3] is not None:
                expect = [f"{dst} does not load: it is a copy of {src.name} cut at {len(cut)} of"]
            elif dst.name == LAST:
                expect = [f"{dst} does not load", f"kept as {LAST}.unreadable", f"removed {dst}.unreadable"]
            else:  # a new best that never reached checkpoint_best.pt nor checkpoint_last.pt
                assert _loads(dst) is not None and _loads(dst) < at
                expect = [f"{BEST} holds", "but the best validation score so far is"]
            if dst.name != LAST:
                expect.append(f"{save / LAST} holds")  # checkpoint_last.pt is older: replaced by the newer save
                # and the save's --keep-best-checkpoints copy, due after the best one, is made
                expect.append(f"was missing (a kill before fairseq copied {src.name} there): copied from it")
        elif kind == "epoch":  # right after epoch 1's save: the resume must make that epoch's LR step
            assert report[2] == resume == 8, (report, resume)
            # then rolled back by a link to an earlier save: the restart resumes there and writes no file through it
            (save / LAST).unlink()
            (save / LAST).symlink_to("checkpoint_1_6.pt")
            resume, expect = 6, [f"{save / LAST} was a link to {save / 'checkpoint_1_6.pt'}: replaced by a copy"]
        else:
            assert kind == "update" and resume <= MAX_UPDATE
            # then a byte flips in the newest save's tensors: the restart resumes from the newest intact one
            newest = [p for p in save.glob("checkpoint*.pt") if RESUMABLE_NAME.match(p.name) and _loads(p) == resume]
            for path in newest:
                rh.flip_tensor_byte(path)
                assert _loads(path) == resume  # torch still reads it
            resume = max(
                c
                for p in save.glob("checkpoint*.pt")
                if RESUMABLE_NAME.match(p.name) and p not in newest
                for c in [_loads(p)]
                if c is not None
            )
            expect = ["loads but its archive is damaged (", "fails its CRC check"]

    # the finished run: everything loads, nothing left over, same checkpoints as without kills
    names = sorted(p.name for p in save.iterdir())
    assert not [n for n in names if n.endswith((".tmp", ".unreadable"))], names
    assert sorted(p.name for p in ref.iterdir()) == names
    for name in names:
        assert _loads(save / name) is not None, name
    assert len([n for n in names if n.startswith("checkpoint.best_")]) == 3, names
    for name in names:  # every file: last, best, each epoch and interval save, the kept best three
        rh.assert_tensors_identical(_training_state(ref / name), _training_state(save / name), name)

    # started once more through the command line: trains nothing, changes nothing
    before = _snapshot(save)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    package = os.path.dirname(os.path.abspath(fairseq_dense.__file__))
    cmd = [sys.executable, "-m", "fairseq_cli.train", *args, "--user-dir", package]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=TIMEOUT)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert f"training already finished: {save / LAST} holds {MAX_UPDATE} updates (--max-update {MAX_UPDATE})" in out
    assert "train_inner" not in out and "Saving checkpoint" not in out
    assert _snapshot(save) == before
