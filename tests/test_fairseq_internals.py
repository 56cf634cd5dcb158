"""Every reach into fairseq's internals (``fairseq_dense/fairseq_internals.py``) matches the installed fairseq,
and fails loudly where it does not."""

import functools
import importlib
import inspect
import re
from types import SimpleNamespace

import pytest
from fairseq import checkpoint_utils, trainer
from fairseq.tasks import FairseqTask
from fairseq_cli import train

from fairseq_dense import fairseq_internals
from fairseq_dense.fairseq_internals import FRAME_LOCALS, FairseqInternalsChanged
from fairseq_dense.tasks.translation_exact_resume import TranslationExactResumeTask
from tests import helpers


@pytest.mark.parametrize("where", sorted(FRAME_LOCALS), ids=".".join)
def test_the_local_variables_read_exist(where):
    module, function = where
    code = functools.reduce(getattr, function.split("."), importlib.import_module(module)).__code__
    assert set(FRAME_LOCALS[where]) <= set(code.co_varnames + code.co_cellvars), code.co_varnames


def test_fairseq_calls_the_hooks_where_the_task_reads_its_frames():
    save = inspect.getsource(checkpoint_utils.save_checkpoint)
    assert "trainer.task.get_checkpoint_dict()" in save
    load = inspect.getsource(checkpoint_utils.load_checkpoint)
    assert load.index("trainer.task.set_checkpoint_dict(") < load.rindex("trainer.lr_step(epoch_itr.epoch)")


def test_the_training_starts_at_the_only_training_call_before_the_checkpoint_load():
    """``main`` asks ``has_sharded_data("train")`` as an argument of ``load_checkpoint`` and calls no task or
    model method between building the trainer and that load; the load ends in ``task.load_dataset``."""
    main = inspect.getsource(train.main)
    between = main[main.index("trainer = Trainer(") : main.index("checkpoint_utils.load_checkpoint(")]
    assert not re.search(r"\b(task|model)\.\w+\(", between), between
    call = main[main.index("checkpoint_utils.load_checkpoint(") :]
    assert re.match(r"checkpoint_utils\.load_checkpoint\([^)]*task\.has_sharded_data\(\"train\"\)", call, re.S)
    assert "load_dataset=True" in inspect.getsource(checkpoint_utils.load_checkpoint)
    assert "self.task.load_dataset(" in inspect.getsource(trainer.Trainer.get_train_iterator)
    assert "self.task.begin_epoch(" in inspect.getsource(trainer.Trainer.begin_epoch)


@pytest.mark.parametrize("where", sorted(fairseq_internals.PRIVATE_NAMES), ids=".".join)
def test_private_names_exist(where):
    assert callable(fairseq_internals.private(*where))


def test_rebuild_batches_is_read():
    assert "rebuild_batches" in inspect.getsource(FairseqTask.get_batch_iterator)


def _task(tmp_path):
    d = helpers.dummy_dictionary()
    return TranslationExactResumeTask(SimpleNamespace(save_dir=str(tmp_path / "ckpt")), d, d)


def test_a_changed_fairseq_is_an_error_not_a_silent_no_op(tmp_path):
    task = _task(tmp_path)
    assert task.cfg.rebuild_batches
    with pytest.raises(
        FairseqInternalsChanged, match=r"expects a call from fairseq\.checkpoint_utils\.save_checkpoint"
    ):
        task.get_checkpoint_dict()
    with pytest.raises(FairseqInternalsChanged, match=r"from fairseq\.checkpoint_utils\.load_checkpoint"):
        task.set_checkpoint_dict({})
    task.has_sharded_data("train")  # a query from anywhere but fairseq-train's main: only a query
    assert not (tmp_path / "ckpt").exists()
    with pytest.raises(FairseqInternalsChanged, match=r"without asking task\.has_sharded_data\('train'\)"):
        task.begin_epoch(1, None)  # a training that never started: fairseq no longer asks before its load
    with pytest.raises(FairseqInternalsChanged, match="fairseq-fixed 0.12.3.1"):
        fairseq_internals.parked(SimpleNamespace())
    with pytest.raises(FairseqInternalsChanged, match=r"fairseq\.data\._gone is gone"):
        fairseq_internals.private("fairseq.data", "_gone")


def test_a_training_starts_at_the_load_and_allows_fairseqs_classes_for_that_load_only(tmp_path):
    """A resume in this process of a checkpoint that holds an ``argparse.Namespace`` (``--optimizer sgd``)
    loads (the task's start allows the class while fairseq loads it) and leaves torch's safe globals as they
    were; a run that already finished stops at the start (``TrainingFinished``), before any load."""
    import argparse

    import torch

    from fairseq_dense.resume import TrainingFinished
    from tests import reliability_helpers as rh

    data = rh.tiny_corpus(tmp_path / "data", n_train=16)
    args = ["--optimizer", "sgd", "--lr", "0.1", "--batch-size", "8", "--disable-validation"]
    allowed = torch.serialization.get_safe_globals()  # an in-process load that failed earlier leaves it allowed
    torch.serialization.clear_safe_globals()
    torch.serialization.add_safe_globals([c for c in allowed if c is not argparse.Namespace])
    rh.train_inprocess(rh.base_train_args(data, tmp_path / "ckpt", rh.tiny_archs()[0], 2, *args))
    assert sorted(rh.train_inprocess(rh.base_train_args(data, tmp_path / "ckpt", rh.tiny_archs()[0], 3, *args))) == [3]
    assert argparse.Namespace not in torch.serialization.get_safe_globals()  # (torch adds its DTensor classes)
    with pytest.raises(TrainingFinished):
        rh.train_inprocess(rh.base_train_args(data, tmp_path / "ckpt", rh.tiny_archs()[0], 3, *args))
    torch.serialization.add_safe_globals(allowed)
