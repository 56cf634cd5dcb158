"""Tests for the per-parameter-group LR schedule ``--lr-scheduler grouped``."""

import math

import pytest
import torch
from fairseq import optim, options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.optim.lr_scheduler import build_lr_scheduler

import fairseq_dense  # noqa: F401
from fairseq_dense.lr_schedulers.grouped import (
    GroupedSchedule,
    inverse_sqrt_factor,
    parse_group_values,
)


def make_cfg(*flags):
    """A full fairseq training config parsed from command-line flags."""
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        input_args=[
            "/nonexistent",
            "--arch",
            "transformer_tiny",
            "--optimizer",
            "adam",
            "--lr-scheduler",
            "grouped",
            "--cpu",
            *flags,
        ],
    )
    return convert_namespace_to_omegaconf(args)


class TaggedModel(torch.nn.Module):
    """Default-group weights around a small tagged group (tagged params in the middle)."""

    def __init__(self, tag="branch"):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(4, 4)
        self.w = torch.nn.Parameter(torch.rand(3))
        self.w.param_group = tag
        self.b = torch.nn.Linear(4, 2)

    def loss(self):
        x = torch.arange(8.0).view(2, 4) / 8
        return (self.b(self.a(x) * self.w.sum()) ** 2).sum()


def build(cfg, model):
    opt = optim.build_optimizer(cfg.optimizer, list(model.parameters()))
    sched = build_lr_scheduler(cfg.lr_scheduler, opt)
    sched.step_update(0)
    return opt, sched


def train_steps(model, opt, sched, start, n):
    for u in range(start, start + n):
        opt.zero_grad()
        model.loss().backward()
        opt.step()
        sched.step_update(u + 1)


def test_parse_group_values():
    assert parse_group_values("a=1, b=2.5", "--x", float) == {"a": 1.0, "b": 2.5}
    assert parse_group_values("", "--x", int) == {}
    for bad in ["a", "=1", "a=1,a=2", "a=-1", "a=nan", "a=x"]:
        with pytest.raises(ValueError, match="--x"):
            parse_group_values(bad, "--x", float)


def test_split_groups_default_first():
    model = TaggedModel()
    opt, sched = build(make_cfg("--lr", "0.1", "--group-lr-scale", "branch=0.5"), model)
    groups = opt.param_groups
    assert [g["group_name"] for g in groups] == ["default", "branch"]
    assert groups[1]["params"] == [model.w]
    assert len(groups[0]["params"]) == 4
    # get_lr() (what fairseq prints as "lr") is the default group's rate
    assert opt.get_lr() == pytest.approx(0.1)
    assert groups[1]["lr"] == pytest.approx(0.5)


def test_values_step1_boundary_late_both_groups():
    sd, sb, wd, wb = 512**-0.5, (512 / 6) ** -0.5, 4000, 400
    cfg = make_cfg(
        "--lr",
        "1",
        "--group-lr-scale",
        f"default={sd},branch={sb}",
        "--group-warmup-updates",
        f"default={wd},branch={wb}",
    )
    opt, sched = build(cfg, TaggedModel())

    def lrs(n):
        out = sched.step_update(n)
        assert out == {g["group_name"]: g["lr"] for g in opt.param_groups}
        return out["default"], out["branch"]

    # step_update(n) sets the rate of update n + 1 (update 1 = Vaswani's step_num 1)
    d, b = lrs(0)
    assert d == pytest.approx(sd * 1 * wd**-1.5, rel=1e-12)
    assert b == pytest.approx(sb * 1 * wb**-1.5, rel=1e-12)
    d, b = lrs(wb - 1)  # branch peak
    assert b == pytest.approx(sb * wb**-0.5, rel=1e-12)
    assert d == pytest.approx(sd * wb * wd**-1.5, rel=1e-12)
    d, b = lrs(wd - 1)  # default peak
    assert d == pytest.approx(sd * wd**-0.5, rel=1e-12)
    assert b == pytest.approx(sb * wd**-0.5, rel=1e-12)
    d, b = lrs(99_999)
    assert d == pytest.approx(sd / math.sqrt(100_000), rel=1e-12)
    assert b == pytest.approx(sb / math.sqrt(100_000), rel=1e-12)
    assert inverse_sqrt_factor(10, 0) == 1.0


def test_constant_rates_for_a_recurrent_group():
    """Deep-Att usage: constant rates (W = 0), a different scale for "recurrent"."""
    cfg = make_cfg("--lr", "0.0005", "--group-lr-scale", "recurrent=0.0001")
    opt, sched = build(cfg, TaggedModel(tag="recurrent"))
    for n in (0, 1, 5000):
        assert sched.step_update(n) == {"default": 0.0005, "recurrent": 0.0001}


def test_freeze_window_and_bit_identical_params():
    cfg = make_cfg("--lr", "0.01", "--group-freeze-last", "branch=3", "--max-update", "8")
    model = TaggedModel()
    opt, sched = build(cfg, model)
    assert sched.step_update(4)["branch"] == 0.01  # update 5 still trains
    assert sched.step_update(5)["branch"] == 0.0  # updates 6, 7, 8 are frozen
    assert sched.step_update(5)["default"] == 0.01
    sched.step_update(0)
    train_steps(model, opt, sched, 0, 5)
    w, a = model.w.detach().clone(), model.a.weight.detach().clone()
    train_steps(model, opt, sched, 5, 3)
    assert torch.equal(model.w, w)
    assert not torch.equal(model.a.weight, a)


def test_resume_equals_uninterrupted():
    cfg = make_cfg(
        "--lr",
        "0.01",
        "--group-lr-scale",
        "branch=0.05",
        "--group-warmup-updates",
        "default=4,branch=2",
        "--group-freeze-last",
        "branch=2",
        "--max-update",
        "8",
    )
    ref = TaggedModel()
    opt, sched = build(cfg, ref)
    train_steps(ref, opt, sched, 0, 8)

    half = TaggedModel()
    opt, sched = build(cfg, half)
    train_steps(half, opt, sched, 0, 5)
    saved = (
        {k: v.clone() for k, v in half.state_dict().items()},
        opt.state_dict(),
        sched.state_dict(),
    )
    # a fresh run, built the way fairseq's trainer does: optimizer, scheduler, then state
    resumed = TaggedModel()
    resumed.load_state_dict(saved[0])
    opt, sched = build(cfg, resumed)
    sched.load_state_dict(saved[2])
    opt.load_state_dict(saved[1])
    sched.step_update(5)
    train_steps(resumed, opt, sched, 5, 3)
    for p, q in zip(ref.parameters(), resumed.parameters()):
        assert torch.equal(p, q)


def test_checkpoint_with_other_groups_is_rejected():
    cfg = make_cfg("--lr", "0.01")
    _, sched = build(cfg, TaggedModel(tag="branch"))
    _, other = build(cfg, TaggedModel(tag="recurrent"))
    with pytest.raises(ValueError, match="reset-optimizer"):
        other.load_state_dict(sched.state_dict())


def test_option_errors():
    with pytest.raises(ValueError, match="--group-lr-scale"):
        build(make_cfg("--group-lr-scale", "nosuchgroup=0.1"), TaggedModel())
    with pytest.raises(ValueError, match="--max-update"):
        build(make_cfg("--group-freeze-last", "branch=10"), TaggedModel())


def test_flat_fp16_master_weights_are_rejected():
    class FlatOptimizer(optim.FairseqOptimizer):
        has_flat_params = True

    cfg = make_cfg()
    with pytest.raises(ValueError, match="--fp16-no-flatten-grads"):
        GroupedSchedule(cfg.lr_scheduler, FlatOptimizer(cfg.optimizer))


def test_bf16_master_weights_keep_their_tags():
    """FP16Optimizer (bf16: never flattened) copies ``param_group`` to the fp32 masters."""
    cfg = make_cfg("--bf16", "--lr", "0.1", "--group-lr-scale", "branch=0.5")
    model = TaggedModel().to(torch.bfloat16)
    opt = optim.FP16Optimizer.build_optimizer(cfg, list(model.parameters()))
    sched = build_lr_scheduler(cfg.lr_scheduler, opt)
    assert sched.step_update(0) == {"default": 0.1, "branch": 0.5}
    groups = opt.optimizer.param_groups
    assert [g["group_name"] for g in groups] == ["default", "branch"]
    (master,) = groups[1]["params"]
    assert master.dtype == torch.float32 and master.shape == model.w.shape
