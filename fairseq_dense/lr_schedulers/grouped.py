"""Per-parameter-group learning-rate schedule: ``--lr-scheduler grouped`` (docs/weighted_transformer.md).

Parameters tagged ``param.param_group = "branch"`` (untagged: ``default``; fairseq's ``composite`` optimizer
reads the same attribute, ``FP16Optimizer`` copies it to unflattened fp32 masters) get a torch parameter
group each, split when the scheduler is built, before any state is loaded. Before update ``u`` group ``g``
gets the Transformer's inverse-square-root warm-up (Vaswani et al., 2017, Eq. 3), with the Weighted
Transformer's own scale and warm-up for its branch weights (Ahmed et al., 2017)::

    lr_g(u) = scale_g * min(u ** -0.5, u * W_g ** -1.5)   if W_g > 0, else scale_g
    lr_g(u) = 0          if F_g > 0 and u > max_update - F_g   (freeze window)

A zero rate leaves ``requires_grad`` alone (it survives a resume) and, with Adam, the group bit-identical:
code that changes parameters after the step must skip it.
"""

import logging
import math
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Dict, List

from fairseq.dataclass import FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II

logger = logging.getLogger(__name__)

DEFAULT_GROUP = "default"
#: key under which each torch parameter group records its name
GROUP_NAME_KEY = "group_name"


@dataclass
class GroupedScheduleConfig(FairseqDataclass):
    group_lr_scale: str = field(
        default="", metadata={"help": "group=scale list, e.g. 'default=0.0442,branch=0.125'; others use --lr"}
    )
    group_warmup_updates: str = field(
        default="", metadata={"help": "group=W list of inverse-sqrt warm-up lengths; W=0 (default): constant rate"}
    )
    group_freeze_last: str = field(
        default="", metadata={"help": "group=K list: rate 0 for the last K updates before --max-update (default 0)"}
    )
    lr: List[float] = II("optimization.lr")
    max_update: int = II("optimization.max_update")


def parse_group_values(spec: str, flag: str, cast) -> Dict[str, float]:
    """Parse ``"a=1,b=2"`` into ``{"a": cast("1"), "b": cast("2")}``; ValueError naming ``flag`` on a
    malformed item, a duplicate name or a negative value."""
    out: Dict[str, float] = {}
    for item in str(spec or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"{flag}: expected items like 'group=value', got {item!r}")
        if name in out:
            raise ValueError(f"{flag}: group {name!r} given twice")
        try:
            val = cast(value.strip())
        except ValueError:
            raise ValueError(f"{flag}: bad value {value!r} for group {name!r}") from None
        if not math.isfinite(val) or val < 0:
            raise ValueError(f"{flag}: value for group {name!r} must be >= 0, got {value!r}")
        out[name] = val
    return out


def inverse_sqrt_factor(update: int, warmup: int) -> float:
    """``min(u^-0.5, u * W^-1.5)`` for ``W > 0``, else 1 (``update`` counts from 1)."""
    if warmup <= 0:
        return 1.0
    u = max(int(update), 1)
    return min(u**-0.5, u * warmup**-1.5)


def split_param_groups(torch_optimizer) -> List[str]:
    """Split each of a torch optimizer's parameter groups into one per ``param_group`` tag (options copied,
    ``default`` first, then by first appearance; before any state is loaded); returns the groups' names."""
    new_groups = []
    for group in torch_optimizer.param_groups:
        buckets: Dict[str, list] = {DEFAULT_GROUP: []}
        for p in group["params"]:
            buckets.setdefault(getattr(p, "param_group", DEFAULT_GROUP), []).append(p)
        options = {k: v for k, v in group.items() if k != "params"}
        new_groups += [{**options, "params": ps, GROUP_NAME_KEY: tag} for tag, ps in buckets.items() if ps]
    torch_optimizer.param_groups = new_groups
    return [g[GROUP_NAME_KEY] for g in new_groups]


@register_lr_scheduler("grouped", dataclass=GroupedScheduleConfig)
class GroupedSchedule(FairseqLRScheduler):
    """Inverse-sqrt warm-up (or constant) rate with a freeze window, per parameter group (module docstring)."""

    def __init__(self, cfg: GroupedScheduleConfig, optimizer):
        super().__init__(cfg, optimizer)
        if isinstance(cfg.lr, Collection) and len(cfg.lr) > 1:
            raise ValueError("--lr-scheduler grouped takes a single --lr value")
        self.scales = parse_group_values(cfg.group_lr_scale, "--group-lr-scale", float)
        self.warmups = parse_group_values(cfg.group_warmup_updates, "--group-warmup-updates", int)
        self.freezes = parse_group_values(cfg.group_freeze_last, "--group-freeze-last", int)
        self.base_lr = float(cfg.lr[0] if isinstance(cfg.lr, Collection) else cfg.lr)
        self.max_update = int(cfg.max_update or 0)
        if any(k > 0 for k in self.freezes.values()) and self.max_update <= 0:
            raise ValueError("--group-freeze-last needs a positive --max-update")

        if type(optimizer).__name__ == "FairseqCompositeOptimizer":
            raise ValueError(
                "--lr-scheduler grouped does not work with --optimizer composite (which schedules its groups itself)"
            )
        if getattr(optimizer, "has_flat_params", False):
            raise ValueError(
                "--lr-scheduler grouped cannot split flattened fp16/bf16 master weights: add --fp16-no-flatten-grads"
            )
        self.group_names = split_param_groups(optimizer.optimizer)
        unknown = (set(self.scales) | set(self.warmups) | set(self.freezes)) - set(self.group_names)
        if unknown:
            raise ValueError(
                f"--group-lr-scale/--group-warmup-updates/--group-freeze-last name groups {sorted(unknown)} but the "
                f"model's parameters are tagged with {self.group_names}"
            )
        for name in self.group_names:
            tensors = sum(len(g["params"]) for g in optimizer.param_groups if g[GROUP_NAME_KEY] == name)
            logger.info(
                f"lr group {name!r}: {tensors} tensors, scale {self.scales.get(name, self.base_lr):g}, warm-up "
                f"{self.warmups.get(name, 0)}, frozen for the last {self.freezes.get(name, 0)} updates"
            )
        self.lrs: Dict[str, float] = {}

    def lr_at(self, name: str, num_updates: int) -> float:
        """Learning rate of group ``name`` for update ``num_updates + 1`` (0 in its freeze window)."""
        k = self.freezes.get(name, 0)
        if k > 0 and num_updates >= self.max_update - k:
            return 0.0
        return self.scales.get(name, self.base_lr) * inverse_sqrt_factor(num_updates + 1, self.warmups.get(name, 0))

    def state_dict(self):
        """The best validation loss and the group names (checked on load); the rates follow ``num_updates``."""
        return {"best": self.best, "group_names": list(self.group_names)}

    def load_state_dict(self, state_dict):
        self.best = state_dict.get("best")
        saved = state_dict.get("group_names")
        if saved is not None and list(saved) != list(self.group_names):
            raise ValueError(
                f"checkpoint has lr groups {list(saved)} but this model has {self.group_names}; use "
                "--reset-optimizer --reset-lr-scheduler"
            )

    def step(self, epoch, val_loss=None):
        """Epoch end: rates depend on the update number only."""
        super().step(epoch, val_loss)
        return dict(self.lrs) if self.lrs else self.optimizer.get_lr()

    def step_update(self, num_updates):
        """Set every group's rate for update ``num_updates + 1``; returns ``{group: lr}``."""
        self.lrs = {n: self.lr_at(n, num_updates) for n in self.group_names}
        for group in self.optimizer.param_groups:
            group["lr"] = self.lrs[group[GROUP_NAME_KEY]]
        return dict(self.lrs)
