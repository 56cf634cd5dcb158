"""ConvS2S / DenseNMT learning-rate annealing.

DenseNMT (Shen et al. 2018, https://arxiv.org/abs/1806.00722, Sec. 4.3) trains
with NAG at a fixed learning rate 0.25, divides it by 10 every time the validation
loss rises (IWSLT) or, for WMT14 En-De as in ConvS2S, every epoch from the first
rise on, and stops once it falls below 1e-4 (fairseq's ``--stop-min-lr``).
"""

import logging
from dataclasses import dataclass, field
from typing import List, Optional

from fairseq.dataclass import FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II

logger = logging.getLogger(__name__)


@dataclass
class ConvS2SAnnealScheduleConfig(FairseqDataclass):
    lr_shrink: float = field(default=0.1, metadata={"help": "learning-rate factor at each annealing step"})
    shrink_every_epoch_after_rise: bool = field(
        default=False,
        metadata={"help": "after the first rise of the validation loss, shrink every epoch (the WMT14 En-De recipe)"},
    )
    lr: List[float] = II("optimization.lr")


@register_lr_scheduler("convs2s_anneal", dataclass=ConvS2SAnnealScheduleConfig)
class ConvS2SAnnealSchedule(FairseqLRScheduler):
    """Fixed learning rate, multiplied by ``--lr-shrink`` when the validation loss rises above the previous
    epoch's (epochs without one leave it alone), or every epoch after the first rise with
    ``--shrink-every-epoch-after-rise``. The state is saved with the checkpoint."""

    def __init__(self, cfg: ConvS2SAnnealScheduleConfig, optimizer):
        super().__init__(cfg, optimizer)
        if len(cfg.lr) > 1:
            raise ValueError("--lr-scheduler convs2s_anneal takes a single --lr value")
        if not 0.0 < cfg.lr_shrink <= 1.0:
            raise ValueError(f"--lr-shrink must be in (0, 1], got {cfg.lr_shrink}")
        self.lr = float(cfg.lr[0])
        self.prev_loss: Optional[float] = None
        self.risen = False
        self.optimizer.set_lr(self.lr)

    def state_dict(self):
        return {"best": self.best, "lr": self.lr, "prev_loss": self.prev_loss, "risen": self.risen}

    def load_state_dict(self, state_dict):
        self.best = state_dict.get("best")
        self.lr = state_dict.get("lr", self.lr)
        self.prev_loss = state_dict.get("prev_loss")
        self.risen = bool(state_dict.get("risen", False))
        self.optimizer.set_lr(self.lr)

    def step(self, epoch: int, val_loss: Optional[float] = None) -> float:
        """Anneal at the end of an epoch given its validation loss."""
        super().step(epoch, val_loss)  # tracks self.best
        if val_loss is not None:
            rose = self.prev_loss is not None and val_loss > self.prev_loss
            if rose or (self.risen and self.cfg.shrink_every_epoch_after_rise):
                self.lr *= self.cfg.lr_shrink
                logger.info(
                    f"epoch {epoch}: validation loss {val_loss:.4f} "
                    f"(previous {self.prev_loss:.4f}); learning rate shrunk to {self.lr:g}"
                )
            self.risen = self.risen or rose
            self.prev_loss = float(val_loss)
        self.optimizer.set_lr(self.lr)
        return self.optimizer.get_lr()

    def step_update(self, num_updates: int) -> float:
        """The rate only changes between epochs."""
        self.optimizer.set_lr(self.lr)
        return self.optimizer.get_lr()
