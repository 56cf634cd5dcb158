"""Tests of the ConvS2S/DenseNMT annealing scheduler ``convs2s_anneal``."""

import io

import pytest
import torch
from fairseq.optim.nag import FairseqNAG, FairseqNAGConfig

import fairseq_dense  # noqa: F401
from fairseq_dense.lr_schedulers.convs2s_anneal import ConvS2SAnnealSchedule, ConvS2SAnnealScheduleConfig

LOSSES = [5.0, 4.0, 4.5, 4.2, 4.3, 4.1]


def make(lr=0.25, **kwargs):
    params = [torch.nn.Parameter(torch.zeros(2))]
    optimizer = FairseqNAG(FairseqNAGConfig(lr=[lr]), params)
    return ConvS2SAnnealSchedule(ConvS2SAnnealScheduleConfig(lr=[lr], **kwargs), optimizer)


def run(sched, losses):
    return [sched.step(epoch, loss) for epoch, loss in enumerate(losses, start=1)]


def test_fixed_until_the_loss_rises_then_shrinks_on_every_rise():
    sched = make()
    assert sched.step_update(0) == 0.25
    lrs = run(sched, LOSSES)
    # rises at epochs 3 (4.0 -> 4.5) and 5 (4.2 -> 4.3)
    assert lrs == pytest.approx([0.25, 0.25, 0.025, 0.025, 0.0025, 0.0025])
    assert sched.step_update(123) == pytest.approx(0.0025)
    assert sched.optimizer.get_lr() == pytest.approx(0.0025)


def test_shrinks_every_epoch_after_the_first_rise():
    sched = make(shrink_every_epoch_after_rise=True)
    lrs = run(sched, LOSSES)
    assert lrs == pytest.approx([0.25, 0.25, 0.025, 0.0025, 0.00025, 0.000025])


def test_epochs_without_validation_leave_the_rate_alone():
    sched = make()
    run(sched, [5.0])
    assert sched.step(2, None) == 0.25
    assert sched.step(3, 6.0) == pytest.approx(0.025)


def test_state_survives_resume():
    sched = make(shrink_every_epoch_after_rise=True)
    run(sched, LOSSES[:3])
    buf = io.BytesIO()
    torch.save(sched.state_dict(), buf)  # as in a checkpoint, loaded with the safe loader
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    resumed = make(shrink_every_epoch_after_rise=True)
    resumed.load_state_dict(state)
    assert resumed.optimizer.get_lr() == pytest.approx(0.025)
    assert resumed.step_update(0) == pytest.approx(0.025)
    rest = [resumed.step(e, loss) for e, loss in enumerate(LOSSES[3:], start=4)]
    assert rest == pytest.approx(run(sched, LOSSES[3:])) == [0.0025, 0.00025, 0.000025]
    assert resumed.best == 4.0


def test_training_stops_at_the_minimum_rate():
    """fairseq-train stops when ``lr <= --stop-min-lr`` (fairseq_cli.train); 1e-4 is reached after 4 rises."""
    sched = make()
    stop_min_lr = 1e-4
    losses = [5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    epochs = 0
    lr = sched.step_update(0)
    for epoch, loss in enumerate(losses, start=1):
        if lr <= stop_min_lr:  # the check at the top of fairseq_cli.train's epoch loop
            break
        epochs += 1
        lr = sched.step(epoch, loss)
    assert epochs == 5 and lr == pytest.approx(2.5e-5)


@pytest.mark.parametrize("kwargs, flag", [(dict(lr_shrink=0.0), "--lr-shrink"), (dict(lr_shrink=1.5), "--lr-shrink")])
def test_bad_options_name_the_flag(kwargs, flag):
    with pytest.raises(ValueError, match=flag):
        make(**kwargs)


def test_single_lr_only():
    params = [torch.nn.Parameter(torch.zeros(2))]
    optimizer = FairseqNAG(FairseqNAGConfig(lr=[0.25]), params)
    with pytest.raises(ValueError, match="--lr"):
        ConvS2SAnnealSchedule(ConvS2SAnnealScheduleConfig(lr=[0.25, 0.1]), optimizer)
