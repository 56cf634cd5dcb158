"""``--optimizer fused_adam``: fairseq's ``adam`` on PyTorch's fused AdamW kernel (``foreach`` where no fused
kernel exists), the clipping norm in one ``torch._foreach_norm``. Same options, schedule, weights to float
rounding and state (``exp_avg``, ``exp_avg_sq``, an integer ``step`` per tensor) as fairseq's ``adam``: a
checkpoint of either loads into the other (docs/gpu.md).

fairseq's ``adam`` adds ``eps`` to ``sqrt(exp_avg_sq)`` before the second moment's bias correction, PyTorch
after it: each step therefore runs with ``eps / sqrt(1 - beta2 ** step)``, ``step`` counted on the host (no
device value read). Not supported: ``--memory-efficient-fp16``, ``--fp16-adam-stats``, ``--use-old-adam``.
"""

import ast
import math
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, List

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.optim import FairseqOptimizer, register_optimizer
from omegaconf import II, OmegaConf
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

#: PyTorch's options of a group that choose the kernel, not the update: ours win over a loaded state's
KERNEL_KEYS = ("fused", "foreach", "capturable", "differentiable", "maximize", "decoupled_weight_decay", "amsgrad")


@dataclass
class FusedAdamConfig(FairseqDataclass):
    adam_betas: Any = field(default=(0.9, 0.999), metadata={"help": "betas for Adam optimizer"})
    adam_eps: float = field(default=1e-8, metadata={"help": "epsilon for Adam optimizer"})
    weight_decay: float = field(default=0.0, metadata={"help": "weight decay (decoupled, as fairseq's adam)"})
    lr: List[float] = II("optimization.lr")


def kernel_options(params) -> dict:
    """``fused=True`` where every tensor is floating point on a device with fused kernels, else ``foreach``."""
    fused = _get_fused_kernels_supported_devices()
    if all(p.is_floating_point() and p.device.type in fused for p in params):
        return {"fused": True}
    return {"foreach": True}


class FairseqAdamW(torch.optim.AdamW):
    """PyTorch's AdamW with fairseq ``adam``'s placement of ``eps`` and its state format, in the torch
    optimizer itself: fairseq's ``--amp`` wrapper and its grad scaler call it directly.

    ``updates`` counts the steps taken (fairseq's per-tensor ``step``) on the host.
    """

    def __init__(self, params, **options):
        super().__init__(params, **options)
        self.updates = 0

    def step(self, closure=None):
        """One update with ``eps / sqrt(1 - beta2 ** step)`` (module docstring)."""
        self.updates += 1
        eps = [g["eps"] for g in self.param_groups]
        for g in self.param_groups:
            g["eps"] = g["eps"] / math.sqrt(1.0 - g["betas"][1] ** self.updates)
        try:
            return super().step(closure)
        finally:
            for g, e in zip(self.param_groups, eps):
                g["eps"] = e

    def state_dict(self):
        """PyTorch's state with each ``step`` an int, as fairseq's ``adam`` keeps it (read once, at saving)."""
        sd = super().state_dict()
        state = {k: {**s, "step": int(s["step"])} if "step" in s else s for k, s in sd["state"].items()}
        return {**sd, "state": state}

    def load_state_dict(self, state_dict):
        """A state of this optimizer or of fairseq's ``adam``: hyperparameters from the state, the kernel
        options from this optimizer, each ``step`` as PyTorch keeps it."""
        kernel = [{k: g[k] for k in KERNEL_KEYS if k in g} for g in self.param_groups]
        state = {
            k: {**s, "step": torch.tensor(float(s["step"]))} if "step" in s else s
            for k, s in state_dict["state"].items()
        }
        groups = [{**g, **own} for g, own in zip(state_dict["param_groups"], kernel)]
        super().load_state_dict({**state_dict, "state": state, "param_groups": groups})
        self.updates = max((int(s["step"]) for s in state_dict["state"].values() if "step" in s), default=0)


@register_optimizer("fused_adam", dataclass=FusedAdamConfig)
class FusedAdam(FairseqOptimizer):
    """fairseq's ``adam`` (AdamW-style weight decay) on PyTorch's fused Adam (module docstring)."""

    def __init__(self, cfg: FusedAdamConfig, params):
        super().__init__(cfg)
        params = list(params)
        flat = [p for g in params for p in g["params"]] if params and isinstance(params[0], dict) else params
        self._optimizer = FairseqAdamW(params, **self.optimizer_config, **kernel_options(flat))

    @property
    def optimizer_config(self):
        """The options a checkpoint's own are overridden with (fairseq's ``adam``'s)."""
        betas = self.cfg.adam_betas
        betas = ast.literal_eval(betas) if isinstance(betas, str) else OmegaConf.to_container(betas)
        lr = self.cfg.lr[0] if isinstance(self.cfg.lr, Collection) else self.cfg.lr
        return {"lr": lr, "betas": tuple(betas), "eps": self.cfg.adam_eps, "weight_decay": self.cfg.weight_decay}

    @property
    def supports_flat_params(self):
        return True

    @torch.no_grad()
    def clip_grad_norm(self, max_norm, aggregate_norm_fn=None):
        """fairseq's ``clip_grad_norm_`` (float32 norm of the non-expert gradients, ``aggregate_norm_fn``
        applied, every gradient scaled by ``min(1, max_norm / (norm + 1e-6))`` when ``max_norm > 0``) with
        the per-tensor norms in one foreach call. Returns the total norm (a tensor)."""
        grads, expert = [], []
        for p in self.params:
            if p.grad is not None:
                (expert if hasattr(p, "expert") else grads).append(p.grad.detach())
        if not grads:
            return super().clip_grad_norm(max_norm, aggregate_norm_fn)
        norms = torch._foreach_norm(grads, 2.0, dtype=torch.float32)
        total_norm = norms[0] if len(norms) == 1 else torch.linalg.vector_norm(torch.stack(norms))
        if aggregate_norm_fn is not None:
            total_norm = aggregate_norm_fn(total_norm)
        if max_norm > 0:
            clip_coef = (float(max_norm) / (total_norm + 1e-6)).clamp_(max=1)
            torch._foreach_mul_(grads + expert, clip_coef)
        return total_norm
