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
