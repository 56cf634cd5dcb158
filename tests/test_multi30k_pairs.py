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

import pytest
from fairseq import options

import fairseq_dense  # noqa: F401
from tests.helpers import REPO

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


def test_report_walls_continue_across_resumes(tmp_path):
    """fairseq's wall restarts in each process; the report's adds the earlier processes' time."""
    report = importlib.import_module("report")

    def record(epoch, wall):
        return f'2026-01-01 00:00:00 | INFO | train | {{"epoch": {epoch}, "train_wall": "{wall}"}}\n'

    sweep, train = tmp_path / "sweep.log", tmp_path / "train.log"
    sweep.write_text("# fairseq-train sweep\n" + record(1, 100) + record(2, 200))
    # continued from the sweep, then cut during epoch 4 and resumed from epoch 3's checkpoint
    train.write_text("# fairseq-train\n" + record(3, 90) + "# fairseq-train\n" + record(4, 95) + record(5, 190))
    assert report.walls([str(sweep), str(train)]) == {1: 100, 2: 200, 3: 290, 4: 385, 5: 480}


def test_sweep_reuses_committed_points_and_trains_the_rest(tmp_path, monkeypatch):
    """A sweep point whose committed log is complete is not trained again when the work folder
    lost it; an incomplete one is trained; the line search stops once the loss grows."""
    monkeypatch.setattr(run, "WORK", str(tmp_path / "work"))
    monkeypatch.setattr(run, "LOGS", str(tmp_path / "logs"))
    monkeypatch.setitem(run.PAIRS, "toy", {"rates": (1e-3, 2e-3, 4e-3, 8e-3), "model": [], "baseline": [], "warmup": 1})

    def log_lines(losses):
        return "".join(
            '2026 | INFO | valid | {"epoch": %d, "valid_loss": "%s"}\n' % (e, loss) for e, loss in enumerate(losses, 1)
        )

    (tmp_path / "logs" / "toy" / "model").mkdir(parents=True)
    (tmp_path / "logs" / "toy" / "model" / "sweep-lr0.001.log").write_text(log_lines([9, 8, 7, 6]))
    (tmp_path / "logs" / "toy" / "model" / "sweep-lr0.002.log").write_text(log_lines([9, 8]))  # cut short
    trained = []

    def fake_run(cmd, log=None, threads=None):
        lr = float(cmd[cmd.index("--lr") + 1])
        trained.append(lr)
        with open(log, "a") as f:
            f.write(log_lines({2e-3: [8, 7, 6, 5], 4e-3: [8, 7, 6, 5.5]}[lr]))

    monkeypatch.setattr(run, "run", fake_run)
    assert run.sweep("toy", "model", 1) == 2e-3
    assert trained == [2e-3, 4e-3]  # 1e-3 from its committed log; 8e-3 not tried (4e-3 did worse)
    assert "5.5" in (tmp_path / "logs" / "toy" / "model" / "sweep-lr0.004.log").read_text()


def _toy_sweep(tmp_path, monkeypatch, losses):
    """A four-rate toy pair whose fake trainings write the given final valid losses per rate."""
    monkeypatch.setattr(run, "WORK", str(tmp_path / "work"))
    monkeypatch.setattr(run, "LOGS", str(tmp_path / "logs"))
    monkeypatch.setitem(run.PAIRS, "toy", {"rates": tuple(losses), "model": [], "baseline": [], "warmup": 1})
    started = []

    class Done:
        returncode = 0

        def __init__(self, args):
            self.args = args

        def wait(self):
            return 0

    def fake_start(cmd, log, threads=None):
        lr = float(cmd[cmd.index("--lr") + 1])
        started.append(lr)
        with open(log, "a") as f:
            for epoch in range(1, run.SWEEP_EPOCHS + 1):
                loss = losses[lr] + run.SWEEP_EPOCHS - epoch
                f.write('2026 | INFO | valid | {"epoch": %d, "valid_loss": "%s"}\n' % (epoch, loss))
        return Done(cmd)

    monkeypatch.setattr(run, "start", fake_start)
    monkeypatch.setattr(run, "run", lambda cmd, log=None, threads=None: fake_start(cmd, log, threads).wait())
    return started


@pytest.mark.parametrize(
    "losses, chosen",
    [
        ({1e-3: 6.0, 2e-3: 5.0, 4e-3: 5.5, 8e-3: 4.0}, 2e-3),  # the line search never reaches 8e-3
        ({1e-3: 6.0, 2e-3: 5.0, 4e-3: 4.5, 8e-3: 4.8}, 4e-3),
    ],
)
def test_parallel_sweep_chooses_what_the_line_search_chooses(tmp_path, monkeypatch, losses, chosen):
    started = _toy_sweep(tmp_path / "a", monkeypatch, losses)
    assert run.sweep("toy", "model", 1) == chosen
    serial = list(started)
    started = _toy_sweep(tmp_path / "b", monkeypatch, losses)
    assert run.sweep("toy", "model", 1, parallel=True) == chosen
    assert sorted(started) == sorted(losses)  # every rate trained at once
    assert set(serial) <= set(started)


def test_train_hours_stop_the_converging_run_and_the_report_says_so(tmp_path, monkeypatch):
    """--train-hours becomes fairseq's --stop-time-hours: the sweep run's training time plus what is left."""
    import time

    monkeypatch.setattr(run, "WORK", str(tmp_path / "work"))
    monkeypatch.setitem(run.PAIRS, "toy", {"rates": (1e-3,), "model": [], "baseline": [], "warmup": 1})
    os.makedirs(run.side_dir("toy", "model"))
    with open(run._sweep_log("toy", "model", 1e-3), "w") as f:
        f.write('2026 | INFO | train | {"epoch": 4, "train_wall": "360"}\n')
    commands = []
    monkeypatch.setattr(run, "run", lambda cmd, log=None, threads=None: commands.append(cmd))
    monkeypatch.setattr(run, "copy_log", lambda src, name: None)
    run.converge("toy", "model", 1e-3, 1, deadline=time.time() + 1800)
    hours = float(commands[0][commands[0].index("--stop-time-hours") + 1])
    assert 0.59 < hours <= 0.6  # 0.1 h of sweep + 0.5 h left
    commands.clear()
    run.converge("toy", "model", 1e-3, 1)
    assert "--stop-time-hours" not in commands[0]

    report = importlib.import_module("report")
    assert report.stopped({"early_stopped": False, "stopped_by_time": True}) == "no (time limit)"
    assert report.stopped({"early_stopped": True}) == "yes"
