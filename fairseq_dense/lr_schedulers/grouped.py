"""Per-parameter-group learning-rate schedule: ``--lr-scheduler grouped``.

A model declares groups by tagging parameters with a string attribute::

    param.param_group = "branch"        # untagged parameters belong to "default"

(the same attribute fairseq's ``composite`` optimizer reads, and the one
``FP16Optimizer`` copies to its fp32 master parameters when it does not flatten
them). At construction, i.e. right after the trainer builds the optimizer and
before any optimizer state is loaded, the scheduler splits the torch optimizer's
parameter group(s) into one group per tag, ``default`` first, so optimizer state
saved by a run resumes in a run with the same model.

Before update ``u = num_updates + 1`` every group ``g`` gets the learning rate::

    lr_g(u) = scale_g * min(u ** -0.5, u * W_g ** -1.5)   if W_g > 0
    lr_g(u) = scale_g                                      if W_g = 0
    lr_g(u) = 0          if F_g > 0 and u > max_update - F_g   (freeze window)

The first is the Transformer's inverse-square-root warm-up (Vaswani et al., 2017,
Eq. 3; the Weighted Transformer, Ahmed et al., 2017, https://arxiv.org/abs/1711.02132,
uses it with a different scale and warm-up for its branch weights); it peaks at
``u = W_g`` with ``scale_g * W_g ** -0.5``. The freeze window sets the rate to 0
for the last ``F_g`` updates before ``--max-update`` (from update number
``max_update - F_g`` on) without touching ``requires_grad``, so it survives
checkpoint/resume. With Adam (and any optimizer whose step is ``p -= lr * x``) a
zero rate leaves the group's parameters bit-identical; code that modifies
parameters after the step (e.g. a simplex projection) must skip groups whose
``lr`` is 0.

Options (each a comma-separated list of ``group=value``; unlisted groups use the
defaults below):

* ``--group-lr-scale default=0.0442,branch=0.125``: ``scale_g``; a group not listed
  uses ``--lr``.
* ``--group-warmup-updates default=4000,branch=400``: ``W_g``; default 0 (a
  constant rate ``scale_g``).
* ``--group-freeze-last branch=10000``: ``F_g``; default 0 (never frozen); needs
  ``--max-update``.

Examples:

Weighted Transformer (d_model 512, N 6), paper Sec. 4::

    --lr-scheduler grouped --lr 0.0442 \\
    --group-lr-scale default=0.04419,branch=0.10825 \\
    --group-warmup-updates default=4000,branch=400 \\
    --group-freeze-last branch=10000 --max-update 300000

Constant rates with a separate rate for recurrent matrices (Deep-Att tags them
``param.param_group = "recurrent"``)::

    --lr-scheduler grouped --lr 0.0005 --group-lr-scale recurrent=0.0001

``step_update`` returns ``{group: lr}``; fairseq logs it as ``lr_<group>``.
Not supported: ``--fp16``/``--bf16`` with flattened master weights (pass
``--fp16-no-flatten-grads``; a clear error says so) and the ``composite``
optimizer (which has its own per-group schedulers).
"""

import logging
import math
from collections import OrderedDict
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
        default="",
        metadata={
            "help": "comma-separated group=scale list, e.g. 'default=0.0442,branch=0.125'; groups not listed use --lr"
        },
    )
    group_warmup_updates: str = field(
        default="",
        metadata={
            "help": "comma-separated group=W list of inverse-sqrt warm-up lengths; "
            "W=0 (the default) gives a constant rate"
        },
    )
    group_freeze_last: str = field(
        default="",
        metadata={
            "help": "comma-separated group=K list: learning rate 0 for the last K updates "
            "before --max-update (default 0: never frozen)"
        },
    )
    lr: List[float] = II("optimization.lr")
    max_update: int = II("optimization.max_update")


def parse_group_values(spec: str, flag: str, cast) -> Dict[str, float]:
    """Parse ``"a=1,b=2"`` into ``{"a": cast("1"), "b": cast("2")}``.

    Raises:
        ValueError: naming ``flag`` on a malformed item, a duplicate name or a
            negative value.
    """
    out: Dict[str, float] = OrderedDict()
    if spec is None:
        return out
    for item in str(spec).split(","):
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
    """Split a torch optimizer's parameter groups by the ``param_group`` tag.

    Each existing group is split into one group per tag (options copied, ``default``
    first, then tags in order of first appearance). Must run before any optimizer
    state is loaded; it does not touch ``torch_optimizer.state``.

    Returns:
        The name of each resulting group, in order.
    """
    new_groups = []
    for group in torch_optimizer.param_groups:
        names = group.get("param_names")
        buckets: "OrderedDict[str, list]" = OrderedDict([(DEFAULT_GROUP, [])])
        for i, p in enumerate(group["params"]):
            tag = getattr(p, "param_group", DEFAULT_GROUP)
            buckets.setdefault(tag, []).append(i)
        for tag, idx in buckets.items():
            if not idx:
                continue
            new = {k: v for k, v in group.items() if k not in ("params", "param_names")}
            new["params"] = [group["params"][i] for i in idx]
            if names is not None:
                new["param_names"] = [names[i] for i in idx]
            new[GROUP_NAME_KEY] = tag
            new_groups.append(new)
    torch_optimizer.param_groups = new_groups
    return [g[GROUP_NAME_KEY] for g in new_groups]


@register_lr_scheduler("grouped", dataclass=GroupedScheduleConfig)
class GroupedSchedule(FairseqLRScheduler):
    """Inverse-sqrt warm-up (or constant) rate with a freeze window, per parameter group.

    See the module docstring for the formula, options and the tagging convention.

    Args:
        cfg: a :class:`GroupedScheduleConfig`.
        optimizer: the trainer's :class:`~fairseq.optim.FairseqOptimizer`.
    """

    def __init__(self, cfg: GroupedScheduleConfig, optimizer):
        super().__init__(cfg, optimizer)
        base_lr = cfg.lr[0] if isinstance(cfg.lr, Collection) else cfg.lr
        if isinstance(cfg.lr, Collection) and len(cfg.lr) > 1:
            raise ValueError("--lr-scheduler grouped takes a single --lr value")
        self.scales = parse_group_values(cfg.group_lr_scale, "--group-lr-scale", float)
        self.warmups = parse_group_values(cfg.group_warmup_updates, "--group-warmup-updates", int)
        self.freezes = parse_group_values(cfg.group_freeze_last, "--group-freeze-last", int)
        self.base_lr = float(base_lr)
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
                f"--group-lr-scale/--group-warmup-updates/--group-freeze-last name groups "
                f"{sorted(unknown)} but the model's parameters are tagged with "
                f"{self.group_names}"
            )
        for name in self.group_names:
            logger.info(
                "lr group %r: %d tensors, scale %g, warm-up %d, frozen for the last %d updates",
                name,
                sum(len(g["params"]) for g in optimizer.param_groups if g[GROUP_NAME_KEY] == name),
                self.scale(name),
                self.warmup(name),
                self.freeze_last(name),
            )
        self.lrs: Dict[str, float] = {}

    def scale(self, name: str) -> float:
        """``scale_g`` of group ``name`` (``--lr`` unless listed)."""
        return float(self.scales.get(name, self.base_lr))

    def warmup(self, name: str) -> int:
        """Warm-up length ``W_g`` of group ``name``."""
        return int(self.warmups.get(name, 0))

    def freeze_last(self, name: str) -> int:
        """Freeze-window length ``F_g`` of group ``name``."""
        return int(self.freezes.get(name, 0))

    def is_frozen(self, name: str, num_updates: int) -> bool:
        """Whether update ``num_updates + 1`` of group ``name`` falls in its freeze window."""
        k = self.freeze_last(name)
        return k > 0 and num_updates >= self.max_update - k

    def lr_at(self, name: str, num_updates: int) -> float:
        """Learning rate of group ``name`` for update ``num_updates + 1``."""
        if self.is_frozen(name, num_updates):
            return 0.0
        return self.scale(name) * inverse_sqrt_factor(num_updates + 1, self.warmup(name))

    def state_dict(self):
        """Scheduler state: the best validation loss and the group names (checked on load)."""
        return {"best": self.best, "group_names": list(self.group_names)}

    def load_state_dict(self, state_dict):
        """Restore the state; the rates themselves are a function of ``num_updates``.

        Raises:
            ValueError: if the checkpoint's parameter groups differ from this run's.
        """
        self.best = state_dict.get("best")
        saved = state_dict.get("group_names")
        if saved is not None and list(saved) != list(self.group_names):
            raise ValueError(
                f"checkpoint has lr groups {list(saved)} but this model has "
                f"{self.group_names}; use --reset-optimizer --reset-lr-scheduler"
            )

    def step(self, epoch, val_loss=None):
        """Epoch end: rates depend on the update number only."""
        super().step(epoch, val_loss)
        return dict(self.lrs) if self.lrs else self.optimizer.get_lr()

    def step_update(self, num_updates):
        """Set every group's rate for update ``num_updates + 1``.

        Returns:
            ``{group: lr}`` (fairseq logs each as ``lr_<group>``).
        """
        self.lrs = OrderedDict((n, self.lr_at(n, num_updates)) for n in OrderedDict.fromkeys(self.group_names))
        for group in self.optimizer.param_groups:
            group["lr"] = self.lrs[group[GROUP_NAME_KEY]]
        return dict(self.lrs)
