"""The project's one inference weight cache: derived weights reused across decoding steps.

A weight-normalised layer recomputes ``g * v / ||v||`` on every call and fairseq's
``LinearizedConvolution`` re-lays its kernel out as ``(out, k * in)`` on every step, while
a decoding step feeds the layer a handful of tokens (for DenseNMT's ``V x d`` softmax
matrix the normalisation costs as much as the product). DenseNMT's layers use it (beam 5
in batches of 16 1.18-1.23x as fast, docs/benchmarks.md). A derived value is kept

- only in inference (``not self.training`` and autograd off);
- keyed on the storage and version counter of every source tensor (so ``load_state_dict``
  or ``p.copy_`` under ``no_grad`` is seen; never on the derived value, which may be an
  inference-mode tensor);
- until the next ``train()`` / ``eval()``, because fairseq's optimizers write through
  ``p.data``, which bumps no version counter.

State dicts are unchanged: plain subclasses with the same parameters and names.
"""

from typing import Callable, Dict, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.modules import LinearizedConvolution
from torch import Tensor
from torch.nn.utils import parametrize


class InferenceWeightCache:
    """Mixin for ``nn.Module`` subclasses: :meth:`cached_weight` memoises a derived weight in inference."""

    def _inference_weights(self) -> Dict[str, Tuple[tuple, Tensor]]:
        return self.__dict__.setdefault("_derived_weights", {})

    def cached_weight(self, key: str, derive: Callable[[], Tensor]) -> Tensor:
        """``derive()`` stored under ``key``, reused while inference runs on unchanged originals of ``weight``."""
        if self.training or torch.is_grad_enabled():
            return derive()
        # the tensors ``weight`` is computed from: the originals of a parametrization (weight norm)
        parametrized = parametrize.is_parametrized(self, "weight")
        sources = self.parametrizations.weight.parameters() if parametrized else [self.weight]
        version = tuple((t.data_ptr(), t._version, t.dtype, t.device) for t in sources)
        store = self._inference_weights()
        hit = store.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        value = derive()
        store[key] = (version, value)
        return value

    def train(self, mode: bool = True):
        self._inference_weights().clear()
        return super().train(mode)


class CachedLinear(InferenceWeightCache, nn.Linear):
    """``nn.Linear`` whose (weight-normalised) weight is computed once per decoding run."""

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.cached_weight("weight", lambda: self.weight), self.bias)


class CachedLinearizedConvolution(InferenceWeightCache, LinearizedConvolution):
    """fairseq's ``LinearizedConvolution`` with its ``(out, k * in)`` step matrix kept across steps."""

    def _get_linearized_weight(self) -> Tensor:
        def derive() -> Tensor:
            kw = self.kernel_size[0]
            weight = self.weight.transpose(2, 1).transpose(1, 0).contiguous()
            return weight.view(self.out_channels, kw * self.in_channels)

        return self.cached_weight("linearized", derive)
