"""The Multi30k pairs' commands parse, and both sides of a pair share what is not the model.

``examples/multi30k/run.py`` builds each side's ``fairseq-train`` command from the pair's
options (``pairs.py``) and the common recipe; here each goes through fairseq's own parser
(architecture defaults applied), so a side cannot silently differ from the other one in
dropout, or lose its task to the common recipe's.
"""

import importlib
import importlib.util
import os
import sys
import threading

import pytest
from fairseq import options

import fairseq_dense  # noqa: F401
from fairseq_dense import logs
from tests.helpers import REPO

TS = "2026-01-01 00:00:00"  # a fairseq log line's timestamp
HERE = os.path.join(REPO, "examples", "multi30k")
spec = importlib.util.spec_from_file_location("multi30k_run", os.path.join(HERE, "run.py"))
run = importlib.util.module_from_spec(spec)
sys.path.insert(0, HERE)
spec.loader.exec_module(run)


SHARED = ("dropout", "attention_dropout", "activation_dropout", "share_all_embeddings")


def parsed(pair, side):
    cmd = run.train_args(pair, side, 1e-3)
    assert cmd[0] == "fairseq-train"
    return options.parse_args_and_arch(options.get_training_parser(), cmd[1:])


@pytest.mark.parametrize("pair", sorted(run.PAIRS))
def test_both_sides_parse_and_share_the_recipe(pair):
    model, base = parsed(pair, "model"), parsed(pair, "baseline")
    for name in SHARED:
        if hasattr(model, name) and hasattr(base, name):
            assert getattr(model, name) == getattr(base, name), (pair, name)
    for name in ("optimizer", "lr", "lr_scheduler", "criterion", "label_smoothing", "max_tokens", "seed"):
        assert getattr(model, name) == getattr(base, name), (pair, name)
    if model.arch.startswith("weighted_transformer"):
        assert model.task == "translation_weighted"


VARIANTS = [(pair, name) for pair in sorted(run.PAIRS) for name in run.PAIRS[pair].get("variants", {})]


@pytest.mark.parametrize("pair, name", VARIANTS)
def test_variants_parse_and_share_the_recipe(pair, name):
    """A variant (``<side>.<label>``) is its side's architecture with the pair's common recipe."""
    side = name.split(".")[0]
    assert side in run.SIDES and "." in name
    variant, original = parsed(pair, name), parsed(pair, side)
    assert variant.arch == original.arch
    for key in ("optimizer", "lr_scheduler", "criterion", "label_smoothing", "max_tokens", "seed", "dropout"):
        assert getattr(variant, key) == getattr(original, key), (pair, name, key)
    assert vars(variant) != vars(original)  # it changes something
    assert set(run.rates(pair, name)) <= set(run.PAIRS[pair]["rates"])


def test_report_walls_continue_across_resumes(tmp_path):
    """fairseq's wall restarts in each process; the report's adds the earlier processes' time."""

    def record(epoch, wall):
        return f'{TS} | INFO | train | {{"epoch": {epoch}, "train_wall": "{wall}"}}\n'

    sweep, train = tmp_path / "sweep.log", tmp_path / "train.log"
    sweep.write_text("# fairseq-train sweep\n" + record(1, 100) + record(2, 200))
    # continued from the sweep, then cut during epoch 4 and resumed from epoch 3's checkpoint
    train.write_text("# fairseq-train\n" + record(3, 90) + "# fairseq-train\n" + record(4, 95) + record(5, 190))
    assert logs.walls_and_devices(logs.processes(str(sweep), str(train))) == (
        {1: 100, 2: 200, 3: 290, 4: 385, 5: 480},
        None,
    )


def test_sweep_reuses_committed_points_and_trains_the_rest(tmp_path, monkeypatch):
    """A sweep point whose committed log is complete is not trained again when the work folder
    lost it; an incomplete one is trained; the lowest loss of the grid wins."""
    monkeypatch.setattr(run, "WORK", str(tmp_path / "work"))
    monkeypatch.setattr(run, "LOGS", str(tmp_path / "logs"))
    monkeypatch.setitem(run.PAIRS, "toy", {"rates": (1e-3, 2e-3, 4e-3, 8e-3), "model": "", "baseline": "", "warmup": 1})

    def log_lines(losses):
        return "".join(
            TS + ' | INFO | valid | {"epoch": %d, "valid_loss": "%s"}\n' % (e, loss) for e, loss in enumerate(losses, 1)
        )

    (tmp_path / "logs" / "toy" / "model").mkdir(parents=True)
    (tmp_path / "logs" / "toy" / "model" / "sweep-lr0.001.log").write_text(log_lines([9, 8, 7, 6]))
    (tmp_path / "logs" / "toy" / "model" / "sweep-lr0.002.log").write_text(log_lines([9, 8]))  # cut short
    trained = []

    def fake_run(cmd, log, append, threads=None):
        lr = float(cmd[cmd.index("--lr") + 1])
        trained.append(lr)
        with open(log, "a") as f:
            f.write(log_lines({2e-3: [8, 7, 6, 5], 4e-3: [8, 7, 6, 5.5], 8e-3: [8, 7, 6, 6]}[lr]))

    monkeypatch.setattr(run, "run_command", fake_run)
    assert run.sweep("toy", "model", 1) == 2e-3
    assert trained == [2e-3, 4e-3, 8e-3]  # 1e-3 from its committed log, the others one after the other
    assert "5.5" in (tmp_path / "logs" / "toy" / "model" / "sweep-lr0.004.log").read_text()


def test_parallel_sweep_chooses_what_the_serial_sweep_chooses(tmp_path, monkeypatch):
    """Every rate of the grid is trained, at once or one after the other; the lowest loss wins."""
    losses = {1e-3: 6.0, 2e-3: 5.0, 4e-3: 5.5, 8e-3: 4.0}
    monkeypatch.setitem(run.PAIRS, "toy", {"rates": tuple(losses), "model": "", "baseline": "", "warmup": 1})

    def fake_run(cmd, log, append, threads=None):
        lr = float(cmd[cmd.index("--lr") + 1])
        running.append(lr)
        if barrier:
            barrier.wait()  # passes only once every point has started
        with open(log, "a") as f:
            for epoch in range(1, run.SWEEP_EPOCHS + 1):
                loss = losses[lr] + run.SWEEP_EPOCHS - epoch
                f.write(TS + ' | INFO | valid | {"epoch": %d, "valid_loss": "%s"}\n' % (epoch, loss))
        ended.append(len(running))  # how many had started when it ends

    monkeypatch.setattr(run, "run_command", fake_run)
    for parallel in (False, True):
        monkeypatch.setattr(run, "WORK", str(tmp_path / f"work{parallel}"))
        monkeypatch.setattr(run, "LOGS", str(tmp_path / f"logs{parallel}"))
        running, ended, barrier = [], [], parallel and threading.Barrier(len(losses), timeout=20)
        assert run.sweep("toy", "model", 1, parallel=parallel) == 8e-3
        assert sorted(running) == sorted(losses) and ended == ([4] * 4 if parallel else [1, 2, 3, 4])


def test_train_hours_stop_the_converging_run_and_the_report_says_so(tmp_path, monkeypatch):
    """--train-hours becomes fairseq's --stop-time-hours: the training time the checkpoint it
    continues carries (the sweep run's, or the run's own from earlier processes) plus what is left."""
    import time

    import torch

    monkeypatch.setattr(run, "WORK", str(tmp_path / "work"))
    monkeypatch.setitem(run.PAIRS, "toy", {"rates": (1e-3,), "model": "", "baseline": "", "warmup": 1})
    os.makedirs(run.side_dir("toy", "model"))
    with open(run.sweep_log("toy", "model", 1e-3), "w") as f:
        f.write(TS + ' | INFO | train | {"epoch": 4, "train_wall": "300"}\n')  # the log's wall leaves out validation
    commands = []
    monkeypatch.setattr(run, "run_command", lambda cmd, log, append, threads=None: commands.append(cmd))
    monkeypatch.setattr(run, "copy_log", lambda src, name: None)
    run.converge("toy", "model", 1e-3, 1, deadline=time.time() + 1800)
    hours = float(commands[0][commands[0].index("--stop-time-hours") + 1])
    assert 0.49 < hours <= 0.5  # no sweep checkpoint to continue: the run starts at update 0
    os.makedirs(os.path.join(run.side_dir("toy", "model"), "lr0.001"))
    checkpoint = os.path.join(run.side_dir("toy", "model"), "lr0.001", "checkpoint_last.pt")

    def save_checkpoint(seconds):  # the parts of a fairseq checkpoint that fairseq's loader reads
        state = {"model": {}, "args": None, "cfg": None, "last_optimizer_state": {}}
        state["optimizer_history"] = [{"criterion_name": "c", "optimizer_name": "o", "lr_scheduler_state": {}}]
        state["extra_state"] = {"previous_training_time": seconds, "train_iterator": {"epoch": 4}}
        torch.save(state, checkpoint)

    save_checkpoint(360.0)
    commands.clear()
    run.converge("toy", "model", 1e-3, 1, deadline=time.time() + 1800)
    hours = float(commands[0][commands[0].index("--stop-time-hours") + 1])
    assert 0.59 < hours <= 0.6  # 0.1 h of sweep + 0.5 h left
    # stopped by that limit and continued later: its checkpoint carries both processes' time,
    # while the log's last record has the second process's only
    with open(os.path.join(run.side_dir("toy", "model"), "train.log"), "w") as f:
        f.write("# fairseq-train\n" + TS + ' | INFO | train | {"epoch": 9, "train_wall": "1500"}\n')
    save_checkpoint(2160.0)
    commands.clear()
    run.converge("toy", "model", 1e-3, 1, deadline=time.time() + 1800)
    hours = float(commands[0][commands[0].index("--stop-time-hours") + 1])
    assert 1.09 < hours <= 1.1  # 0.6 h carried + 0.5 h left
    commands.clear()
    run.converge("toy", "model", 1e-3, 1)
    assert "--stop-time-hours" not in commands[0]

    report = importlib.import_module("report")
    ends = {"stopped by time": "no (time limit)", "early stopped": "yes", "training": "no (interrupted)"}
    for ending, word in {**ends, "epoch cap": "no"}.items():  # the epoch cap: --max-epoch reached
        assert report.stopped({"ending": ending, "epochs": 9, "patience_out": None}) == word


def _valid_line(epoch, loss):
    """fairseq's validation record of ``epoch`` (10 updates an epoch)."""
    return TS + ' | INFO | valid | {"epoch": %d, "valid_loss": "%.3f", "valid_num_updates": "%d"}\n' % (
        epoch,
        loss,
        epoch * 10,
    )


def _epoch_lines(epochs, wall_per_epoch, loss0=9.0):
    """fairseq's epoch records (train and valid) for ``epochs``, one process's wall from 0."""
    lines = []
    for i, epoch in enumerate(epochs, 1):
        lines.append(_valid_line(epoch, loss0 - epoch / 10))
        wall = i * wall_per_epoch
        lines.append(TS + ' | INFO | train | {"epoch": %d, "train_wall": "%d", "train_wps": "100"}\n' % (epoch, wall))
    return "".join(lines)


def test_early_stopping_is_checked_against_an_uninterrupted_run(tmp_path, monkeypatch):
    """fairseq counts patience from a process's start: a run resumed in a plateau stops late,
    and the table says by how many epochs (judged on the whole log, sweep run included)."""
    report = importlib.import_module("report")
    assert report.patience_out(enumerate([5.0, 4.0, 4.1, 4.0, 4.2, 4.3], 3), patience=3) == 7  # ties are not better
    assert report.patience_out(enumerate([5.0, 4.0, 4.1, 3.9, 4.2, 4.3], 3), patience=3) is None
    assert report.patience_out([]) is None

    monkeypatch.setattr(report, "LOGS", str(tmp_path))
    monkeypatch.setitem(report.PAIRS, "toy", {"model": "--arch a", "baseline": "--arch b"})
    folder = tmp_path / "toy" / "model"
    folder.mkdir(parents=True)
    command = "# fairseq-train --lr 0.001\n"
    (folder / "sweep-lr0.001.log").write_text(command + _valid_line(1, 6.0) + _valid_line(2, 5.0))
    losses = [4.0, 4.1, 4.1, 4.2, 4.1, 4.1, 4.2, 4.3, 4.2, 4.3]  # epochs 3-12: best at 3, out at 8
    first = command + "".join(_valid_line(e, loss) for e, loss in zip(range(3, 7), losses))
    resumed = command + "".join(_valid_line(e, loss) for e, loss in zip(range(7, 13), losses[4:]))
    ended = "2026 | INFO | fairseq_cli.train | early stop since valid performance hasn't improved\ndone training\n"
    (folder / "train.log").write_text(first + resumed + ended)
    row = report.summarize("toy", "model")
    assert row["patience_out"] == 8 and row["epochs"] == 12
    assert report.stopped(row) == "yes (4 epochs late: resumed)"
    (folder / "train.log").write_text(first + resumed.split(_valid_line(9, 4.2))[0] + ended)  # stopped at 8
    assert report.stopped(report.summarize("toy", "model")) == "yes"


def test_a_converging_run_restarted_at_update_0_is_not_joined_to_its_sweep(tmp_path, monkeypatch):
    """When the work folder lost the sweep's checkpoint, the converging run starts at epoch 1:
    its curve and wall are its own, not the sweep run's followed by it."""
    report = importlib.import_module("report")
    folder = tmp_path / "toy" / "baseline"
    folder.mkdir(parents=True)
    (folder / "sweep-lr0.001.log").write_text("# fairseq-train sweep\n" + _epoch_lines(range(1, 5), 10, loss0=8.0))
    continued = "# fairseq-train\n" + _epoch_lines(range(5, 8), 10)
    restarted = "# fairseq-train\n" + _epoch_lines(range(1, 8), 100) + "early stop\ndone training\n"
    monkeypatch.setattr(report, "LOGS", str(tmp_path))
    monkeypatch.setitem(report.PAIRS, "toy", {"model": "--arch a", "baseline": "--arch b"})

    (folder / "train.log").write_text(continued)
    row = report.summarize("toy", "baseline")
    assert [c[3] for c in row["curve"]] == [1, 2, 3, 4, 5, 6, 7]
    assert row["curve"][4][1] == 40 + 10  # the sweep's 40 s, then this process's

    # a better sweep point at another rate does not change which run this log continued
    (folder / "sweep-lr0.002.log").write_text("# fairseq-train sweep\n" + _epoch_lines(range(1, 5), 99, loss0=7.0))
    (folder / "train.log").write_text("# fairseq-train --lr 0.001 --seed 1\n" + _epoch_lines(range(5, 8), 10))
    assert report.summarize("toy", "baseline")["curve"][4][1] == 40 + 10

    (folder / "train.log").write_text(restarted)
    row = report.summarize("toy", "baseline")
    assert [c[3] for c in row["curve"]] == [1, 2, 3, 4, 5, 6, 7]
    assert [c[1] for c in row["curve"]] == [100, 200, 300, 400, 500, 600, 700]
    assert row["curve"][0][2] == 8.9  # the restarted run's epoch 1, not the sweep's
    assert row["ending"] == "early stopped"


def test_a_run_stopped_by_time_continues_when_its_side_runs_again(tmp_path, monkeypatch):
    """A converging run cut by --train-hours is not finished: the side's command continues it
    (no time limit now), and the report reads how the last command ended."""
    report = importlib.import_module("report")
    monkeypatch.setattr(run, "WORK", str(tmp_path / "work"))
    monkeypatch.setattr(report, "LOGS", str(tmp_path / "logs"))
    monkeypatch.setitem(run.PAIRS, "toy", {"rates": (1e-3,), "model": "--arch a", "baseline": "", "warmup": 1})
    os.makedirs(run.side_dir("toy", "model"))
    log = os.path.join(run.side_dir("toy", "model"), "train.log")
    commands = []
    monkeypatch.setattr(run, "run_command", lambda cmd, log, append, threads=None: commands.append(cmd))
    monkeypatch.setattr(run, "copy_log", lambda src, name: None)
    cut = (
        "# fairseq-train --lr 0.001 --stop-time-hours 0.1\n"
        + _epoch_lines(range(1, 4), 100)
        + f"2026 | INFO | fairseq_cli.train | {logs.TIME_STOP}: 0.1 > 0.1 hour(s)\n"
        + "2026 | INFO | fairseq_cli.train | done training in 300 seconds\n"
    )
    with open(log, "w") as f:
        f.write(cut)
    run.converge("toy", "model", 1e-3, 1)
    assert len(commands) == 1 and "--stop-time-hours" not in commands[0]

    folder = tmp_path / "logs" / "toy" / "model"
    folder.mkdir(parents=True)
    (folder / "sweep-lr0.001.log").write_text("# fairseq-train sweep\n" + _epoch_lines(range(1, 3), 100))
    (folder / "train.log").write_text(cut)
    assert report.stopped(report.summarize("toy", "model")) == "no (time limit)"
    going = cut + "# fairseq-train --lr 0.001\n" + _epoch_lines([4], 100)
    (folder / "train.log").write_text(going)
    assert report.stopped(report.summarize("toy", "model")) == "no (interrupted)"
    ended = going + "2026 | INFO | fairseq_cli.train | early stop since valid performance hasn't improved\n"
    (folder / "train.log").write_text(ended + "2026 | INFO | fairseq_cli.train | done training in 9 seconds\n")
    assert report.stopped(report.summarize("toy", "model")) == "yes"
    with open(log, "w") as f:
        f.write(ended + "done training\n")
    commands.clear()
    run.converge("toy", "model", 1e-3, 1)
    assert not commands  # early stopping ended it for good


def test_the_report_names_both_machines_of_a_run_continued_on_another(tmp_path):
    """A run cut on the GPU machine and continued on the CPU one says so (its hours mix the two)."""
    sweep, train = tmp_path / "sweep.log", tmp_path / "train.log"
    sweep.write_text("# fairseq-train data --lr 0.008\n" + _epoch_lines(range(1, 5), 10))
    train.write_text("# fairseq-train data --lr 0.008\n" + _epoch_lines(range(5, 9), 10))
    assert logs.walls_and_devices(logs.processes(str(sweep), str(train)))[1] is None
    with open(train, "a") as f:
        f.write("# fairseq-train data --cpu --lr 0.008\n" + _epoch_lines(range(8, 10), 60))
        f.write("# fairseq-train data --cpu --lr 0.008\n" + _epoch_lines([10], 60))
    assert logs.walls_and_devices(logs.processes(str(sweep), str(train)))[1] == "GPU, then CPU from epoch 8"
    assert logs.walls_and_devices(logs.processes(str(train)))[1] == "GPU, then CPU from epoch 8"


def test_an_earlier_run_of_a_side_is_kept_beside_it(tmp_path, monkeypatch):
    """``<side>.<label>`` folders are earlier runs: listed after the two sides, with the side's arch."""
    report = importlib.import_module("report")
    for name in ("baseline.gpu-0.3h", "baseline", "model", "notes"):
        (tmp_path / "toy" / name).mkdir(parents=True)
    monkeypatch.setattr(report, "LOGS", str(tmp_path))
    monkeypatch.setitem(report.PAIRS, "toy", {"model": "--arch a", "baseline": "--arch b"})
    assert report.sides("toy") == ["model", "baseline", "baseline.gpu-0.3h"]
    assert report.arch("toy", "baseline.gpu-0.3h") == "b"


def test_committed_scores_are_reused_only_for_the_run_they_scored(tmp_path, monkeypatch):
    """A side trained again (another best validation loss in the work folder) is scored again."""
    import json

    monkeypatch.setattr(run, "WORK", str(tmp_path / "work"))
    monkeypatch.setattr(run, "LOGS", str(tmp_path / "logs"))
    committed = tmp_path / "logs" / "toy" / "baseline"
    committed.mkdir(parents=True)
    (committed / "eval.json").write_text(json.dumps({"test": {"sacrebleu": 30.0}}))  # no best_valid_loss: older
    decoded = []

    def fake_decode(pair, side, lr, subset, lenpen, threads):
        decoded.append((subset, lenpen))
        return ["cmd"], ["ein Hund."], {"sacrebleu": 40.0}

    monkeypatch.setattr(run, "decode", fake_decode)
    assert run.evaluate("toy", "baseline", 1e-3, 1)["test"]["sacrebleu"] == 30.0  # no work folder: reused
    assert decoded == []
    work = tmp_path / "work" / "toy" / "baseline"
    work.mkdir(parents=True)
    # a training in the work folder (here already copied over the committed log, as converge
    # does before evaluating): scores that record no loss cannot be matched to it
    (work / "train.log").write_text(_epoch_lines(range(1, 12), 10, loss0=8.0))  # best 6.9
    result = run.evaluate("toy", "baseline", 1e-3, 1)
    assert result["test"]["sacrebleu"] == 40.0 and result["best_valid_loss"] == 6.9
    assert ("test", result["lenpen"]) in decoded and len(decoded) == len(run.LENPENS) + 1
    assert json.loads((committed / "eval.json").read_text()) == result
    assert (committed / "test.hyp.de").read_text() == "ein Hund.\n"
    decoded.clear()
    assert run.evaluate("toy", "baseline", 1e-3, 1) == result and decoded == []  # the same run: reused

    (work / "train.log").write_text(_epoch_lines(range(1, 14), 10, loss0=8.0))  # trained on: best 6.7
    assert run.evaluate("toy", "baseline", 1e-3, 1)["best_valid_loss"] == 6.7
    assert len(decoded) == len(run.LENPENS) + 1


def test_a_rate_chosen_by_a_wider_sweep_sets_the_earlier_rates_log_aside(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "WORK", str(tmp_path / "work"))
    os.makedirs(run.side_dir("toy", "baseline"))

    def fake_run(cmd, log, append, threads=None):
        open(log, "a").close()  # fairseq-train appends to the side's log

    monkeypatch.setattr(run, "run_command", fake_run)
    monkeypatch.setattr(run, "copy_log", lambda src, name: None)
    monkeypatch.setitem(run.PAIRS, "toy", {"rates": (4e-3, 8e-3), "model": "", "baseline": "", "warmup": 1})
    folder = tmp_path / "work" / "toy" / "baseline"
    run.converge("toy", "baseline", 4e-3, 1)
    (folder / "train.log").write_text("# fairseq-train ... --lr 0.004\n")
    run.converge("toy", "baseline", 4e-3, 1)  # resumed at the same rate: the same log
    assert (folder / "train.log").read_text().startswith("# fairseq-train ... --lr 0.004")
    run.converge("toy", "baseline", 8e-3, 1)
    assert (folder / "train-lr0.004.log").read_text().startswith("# fairseq-train ... --lr 0.004")
    assert not (folder / "train.log").read_text() and (folder / "chosen_lr").read_text() == "0.008\n"
