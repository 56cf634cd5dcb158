"""``--optimizer fused_adam`` against fairseq's ``adam``: same weights over 100 updates (float32, fairseq's
``--fp16`` and ``--amp`` wrappers), states that load into each other, fewer kernels per step.

Each side trains its own copy of one tiny model on the same batches the way fairseq's Trainer drives an
optimizer (``backward``, ``clip_grad_norm``, ``step``, ``set_lr``), with clipping active and the learning
rate changed at every update. On the CPU, fairseq's flattened ``--fp16`` master weights are built on
``torch.cuda.current_device()`` (patched to the CPU's device index, None) and ``--amp``'s
``torch.cuda.amp.GradScaler`` disables itself (replaced by the same scaler on the CPU).
"""

import functools

import pytest
import torch
from fairseq import optim, options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

import fairseq_dense  # noqa: F401  (registers fused_adam)
from benchmarks import op_counts
from fairseq_dense.optim.fused_adam import FusedAdam

UPDATES = 100
CLIP = 0.5


@functools.lru_cache(maxsize=None)  # building a config takes fairseq a second or two
def _cfg(name: str, *extra: str):
    args = ["data", "--arch", "transformer", "--optimizer", name, "--lr", "0.01", "--adam-betas", "(0.9, 0.98)"]
    args += ["--weight-decay", "0.01", *extra]
    return convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), args))


def _model(dtype=torch.float32):
    torch.manual_seed(0)
    m = torch.nn.ModuleDict(
        {"emb": torch.nn.Embedding(20, 8, padding_idx=1), "proj": torch.nn.Linear(8, 20), "norm": torch.nn.LayerNorm(8)}
    )
    return m.to(dtype)


def _loss(model, update: int):
    g = torch.Generator().manual_seed(update)
    tokens = torch.randint(0, 20, (4, 6), generator=g)
    x = model["norm"](model["emb"](tokens))
    logits = model["proj"](x).float()
    return torch.nn.functional.cross_entropy(logits.view(-1, 20), tokens.view(-1))


def _build(name: str, mode: str, model, *extra: str):
    params = [p for p in model.parameters() if p.requires_grad]
    if mode == "fp32":
        return optim.build_optimizer(_cfg(name, *extra).optimizer, params)
    if mode.startswith("fp16"):
        flat = [] if mode == "fp16-flat" else ["--fp16-no-flatten-grads"]
        cfg = _cfg(name, "--fp16", "--fp16-init-scale", "16", *flat, *extra)
        return optim.FP16Optimizer.build_optimizer(cfg, params)
    cfg = _cfg(name, "--amp", "--fp16-init-scale", "16", *extra)
    opt = optim.AMPOptimizer.build_optimizer(cfg, params)
    opt._grad_scaler = torch.amp.GradScaler("cpu", init_scale=cfg.common.fp16_init_scale)
    return opt


def _train(opt, model, updates, mode: str, first: int = 0):
    norms = []
    for u in range(first, first + updates):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16, enabled=mode == "amp"):
            loss = _loss(model, u)
        opt.backward(loss)
        norms.append(float(opt.clip_grad_norm(CLIP)))
        opt.step()
        opt.set_lr(0.01 * (u + 2) ** -0.5)
    return norms


@pytest.mark.parametrize(
    "mode, eps",  # eps 1e-3: where fairseq's placement of eps shows
    [("fp32", "1e-8"), ("fp32", "1e-3"), ("fp16", "1e-8"), ("fp16-flat", "1e-8"), ("amp", "1e-8")],
)
def test_same_weights_as_fairseq_adam(mode, eps, monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)  # fp16-flat: the CPU's device index
    dtype = torch.float16 if mode.startswith("fp16") else torch.float32
    half = mode != "fp32"  # weights or the forward in float16: rounding differences grow
    models = {name: _model(dtype) for name in ("adam", "fused_adam")}
    opts = {name: _build(name, mode, models[name], "--adam-eps", eps) for name in models}
    assert isinstance(opts["fused_adam"].fp32_optimizer if mode != "fp32" else opts["fused_adam"], FusedAdam)
    norms = {name: _train(opts[name], models[name], UPDATES, mode) for name in models}
    assert norms["fused_adam"] == pytest.approx(norms["adam"], rel=1e-3 if half else 1e-5)
    assert max(norms["adam"]) > CLIP  # clipping was active
    tol = dict(rtol=1e-3, atol=1e-3) if half else dict(rtol=1e-5, atol=1e-6)
    for (n, a), b in zip(models["adam"].named_parameters(), models["fused_adam"].parameters()):
        torch.testing.assert_close(b, a, **tol, msg=f"{mode}: {n}")
    moved = _model(dtype)
    assert any(not torch.equal(a, b) for a, b in zip(moved.parameters(), models["adam"].parameters()))


@pytest.mark.parametrize(
    "first, then, mode",  # --amp's wrapper saves and loads the torch optimizer's state directly
    [("adam", "fused_adam", "fp32"), ("fused_adam", "adam", "fp32"), ("adam", "fused_adam", "amp")],
)
def test_states_load_into_each_other(first, then, mode):
    """50 updates with one, its state loaded into the other, 50 more: fairseq's ``adam`` all along."""
    ref, mixed = _model(), _model()
    _train(_build("adam", mode, ref), ref, UPDATES, mode)
    opt = _build(first, mode, mixed)
    _train(opt, mixed, UPDATES // 2, mode)
    state = opt.state_dict()
    assert all(type(s["step"]) is int for s in state["state"].values())  # fairseq's adam keeps an int
    # fairseq's Trainer saves the state, builds the next optimizer and loads the state with its overrides
    other = _build(then, mode, mixed)
    other.load_state_dict(state, {"lr": state["param_groups"][0]["lr"]})
    _train(other, mixed, UPDATES // 2, mode, first=UPDATES // 2)
    tol = dict(rtol=1e-3, atol=1e-3) if mode == "amp" else dict(rtol=1e-5, atol=1e-6)
    for (n, a), b in zip(ref.named_parameters(), mixed.parameters()):
        torch.testing.assert_close(b, a, **tol, msg=n)
    if then == "fused_adam":
        group = other.optimizer.param_groups[0]
        assert group["fused"] and group["decoupled_weight_decay"] and other.optimizer.updates == UPDATES


def test_fewer_kernels_per_step_than_fairseq_adam():
    """Clipping and the update in a few kernels whatever the number of tensors (``op_counts``)."""
    launches = {}
    for name in ("adam", "fused_adam"):
        model = _model()
        opt = _build(name, "fp32", model)
        _train(opt, model, 1, "fp32")
        _loss(model, 1).backward()
        with op_counts.StepCounter(model) as counter:
            opt.clip_grad_norm(CLIP)
            opt.step()
        launches[name] = sum(counter.launches.values())
    n = sum(1 for _ in _model().parameters())
    assert launches["adam"] >= 10 * n  # a dozen kernels per tensor
    # norms, their norm, the clipping factor, the scaling, the step counts, the update
    assert launches["fused_adam"] <= 10, launches
