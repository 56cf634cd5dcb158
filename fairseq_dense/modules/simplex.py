"""Euclidean projection onto the probability simplex, applied after every optimizer step.

The Weighted Transformer (Ahmed et al., 2017, https://arxiv.org/abs/1711.02132, Sec. 3)
keeps kappa and alpha on ``{w : w_i >= 0, sum_i w_i = 1}`` by projecting them after every
step. A parameter to keep there carries ``param.on_simplex = True``. The task
``translation_exact_resume_simplex`` projects them where the optimizer keeps them
(:func:`project_parameters_after_step`: the fp32 master copy under ``--fp16``/``--bf16``);
under any other task a torch optimizer-step post-hook does (:func:`install_step_hook`).
Parameters whose learning rate is 0 (e.g. ``--group-freeze-last``) are left bit-identical.
"""

from collections import defaultdict
from typing import Dict, List, Tuple

import torch
from torch import Tensor
from torch.optim.optimizer import register_optimizer_step_post_hook

#: attribute that marks a parameter to be kept on the probability simplex
ON_SIMPLEX_ATTR = "on_simplex"
#: attribute set on ``on_simplex`` parameters whose task projects them after each step
PROJECTED_BY_TASK_ATTR = "projected_by_task"
#: attribute the ``translation_exact_resume_simplex`` task sets on every model it builds (it
#: projects after every step; see ``WeightedTransformerModel.set_num_updates``)
PROJECTION_HOOK_ATTR = "simplex_projection_hooked"


def project_onto_simplex(v: Tensor) -> Tensor:
    """Euclidean projection of each row of ``(..., M)`` ``v`` onto the simplex (same dtype, computed in >= fp32).

    The sort-based algorithm (Held et al., 1974; Duchi et al., 2008; Wang & Carreira-Perpinan,
    2013, https://arxiv.org/abs/1309.1541): sort ``v`` descending into ``u``, find the largest
    ``rho`` with ``u_rho - (sum_{j<=rho} u_j - 1) / rho > 0``, return ``max(v - theta, 0)``
    with ``theta = (sum_{j<=rho} u_j - 1) / rho``.
    """
    dtype = v.dtype
    x = v.float() if dtype in (torch.float16, torch.bfloat16) else v
    u, _ = torch.sort(x, dim=-1, descending=True)
    css = u.cumsum(dim=-1) - 1.0
    k = torch.arange(1, x.size(-1) + 1, device=x.device, dtype=x.dtype)
    cond = (u - css / k) > 0
    # rho = index of the last position where cond holds (cond is a prefix of Trues;
    # position 0 always qualifies)
    rho = cond.to(torch.int64).cumsum(dim=-1).argmax(dim=-1, keepdim=True)
    theta = css.gather(-1, rho) / (rho + 1).to(x.dtype)
    return (x - theta).clamp_min(0.0).to(dtype)


def is_on_simplex(v: Tensor, atol: float = 1e-6) -> bool:
    """Whether every row of ``v`` is non-negative and sums to 1 within ``atol``."""
    v = v.detach().float()
    return bool((v >= 0).all()) and bool(((v.sum(-1) - 1).abs() <= atol).all())


def simplex_parameters(model: torch.nn.Module) -> List[Tensor]:
    """The parameters of ``model`` marked ``on_simplex`` that require gradients."""
    return [p for p in model.parameters() if p.requires_grad and getattr(p, ON_SIMPLEX_ATTR, False)]


def _master_copies(optimizer, params: List[Tensor]) -> Dict[int, Tuple[Tensor, Tensor]]:
    """Map ``id(model param)`` to ``(master, owner)``: the tensor the optimizer updates for it
    and the parameter the optimizer holds (a flat buffer when ``master`` is a view into it).

    The parameter itself, except under ``FP16Optimizer`` (``--fp16``/``--bf16``): the fp32
    master copy, its own tensor or a view into the flat master buffer of its device.
    """
    fp16_params = getattr(optimizer, "fp16_params", None)
    fp32_params = getattr(optimizer, "fp32_params", None)
    if fp16_params is None or fp32_params is None:
        return {id(p): (p, p) for p in params}
    wanted = {id(p) for p in params}
    if isinstance(fp32_params, (list, tuple)):
        return {id(p16): (p32, p32) for p16, p32 in zip(fp16_params, fp32_params) if id(p16) in wanted}
    # flat: {device: buffer} holding the fp16 parameters in order (fairseq's build_fp32_params)
    out: Dict[int, Tuple[Tensor, Tensor]] = {}
    offsets: Dict = defaultdict(int)
    for p16 in fp16_params:
        key = next(iter(fp32_params)) if len(fp32_params) == 1 else p16.device.index
        start = offsets[key]
        offsets[key] += p16.numel()
        if id(p16) in wanted:
            out[id(p16)] = (fp32_params[key].data[start : start + p16.numel()].view_as(p16), fp32_params[key])
    return out


@torch.no_grad()
def project_parameters_after_step(model: torch.nn.Module, optimizer) -> int:
    """Project every ``on_simplex`` parameter of the (possibly DDP-wrapped) ``model`` where the trainer's
    ``optimizer`` keeps it, right after ``optimizer.step()``, lr-0 groups skipped; returns how many it projected."""
    params = simplex_parameters(model)
    if not params:
        return 0
    masters = _master_copies(optimizer, params)
    frozen = {id(q) for group in optimizer.param_groups if float(group["lr"]) == 0.0 for q in group["params"]}
    pairs = []
    for p in params:
        if id(p) not in masters:
            raise RuntimeError("an on_simplex parameter is not held by the optimizer")
        master, owner = masters[id(p)]
        if id(owner) not in frozen:
            pairs.append((p, master))
    return _project(pairs)


def _project(pairs: List[Tuple[Tensor, Tensor]]) -> int:
    """Project each ``master`` of ``(parameter, master)`` in place and copy it into its parameter;
    vectors of one length and device in one batched call (docs/weighted_transformer.md: a few launches
    per update on a GPU, not a few per vector). Returns ``len(pairs)``."""
    by_len: Dict[Tuple[int, torch.device], List[Tuple[Tensor, Tensor]]] = defaultdict(list)
    for p, master in pairs:
        by_len[(p.numel(), master.device)].append((p, master))
    for group in by_len.values():
        projected = project_onto_simplex(torch.stack([m.detach().reshape(-1).float() for _, m in group]))
        for (p, master), row in zip(group, projected):
            master.data.copy_(row.view_as(master))
            if master.data_ptr() != p.data_ptr():
                p.data.copy_(master.data)
    return len(pairs)


_step_hook = None


@torch.no_grad()
def _project_after_step(optimizer, args, kwargs) -> None:
    """Optimizer-step post-hook: project the ``on_simplex`` parameters ``optimizer`` holds that no task
    projects (``projected_by_task``), skipping lr-0 groups."""
    held = [
        (p, p)
        for group in optimizer.param_groups
        if float(group["lr"]) != 0.0
        for p in group["params"]
        if getattr(p, ON_SIMPLEX_ATTR, False) and p.requires_grad and not getattr(p, PROJECTED_BY_TASK_ATTR, False)
    ]
    _project(held)


def install_step_hook() -> None:
    """Install :func:`_project_after_step` for every torch optimizer (idempotent). Under ``--fp16``/``--bf16``
    the optimizer holds fp32 master copies, which only a task can find; the model refuses that combination."""
    global _step_hook
    if _step_hook is None:
        _step_hook = register_optimizer_step_post_hook(_project_after_step)


def uniform_simplex(m: int, generator: torch.Generator = None) -> Tensor:
    """A point drawn uniformly from the ``m``-simplex (a flat Dirichlet sample)."""
    e = -torch.log(torch.rand(m, generator=generator).clamp_min(1e-12))
    return e / e.sum()
