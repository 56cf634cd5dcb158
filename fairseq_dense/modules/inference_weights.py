"""Reuse derived weights across decoding steps (the project's one inference weight cache).

A weight-normalised layer recomputes ``g * v / ||v||`` on every call, and fairseq's
``LinearizedConvolution`` additionally transposes its ``(k, in, out)`` kernel into a
contiguous ``(out, k * in)`` matrix on every incremental step. During beam search
the weights do not change, yet an incremental step runs the layer for a handful of
tokens: for DenseNMT's softmax matrix (``V x d``) the normalisation alone costs as
much as the matrix product it feeds.

The Weighted Transformer's branched block keeps its branch-weight-scaled matrices and its fixed
inference branch weights here as well (:class:`~fairseq_dense.modules.branched_attention.BranchedAttention`).

The classes here keep the derived weight for as long as it is valid:

- only in inference (``not self.training`` and autograd off), so training and
  validation with gradients never see a cached tensor;
- keyed on the storage and version counter of every tensor it was derived from, so
  an in-place update under ``no_grad`` (``load_state_dict``, ``p.copy_``) is seen;
- dropped by every ``train()`` / ``eval()`` switch, because fairseq's optimizers write
  through ``p.data``, which does not bump version counters (fairseq puts the model
  in eval mode before each validation and back in train mode afterwards).

A value derived inside ``torch.inference_mode()`` is an inference tensor; the key reads only
the version counters of the parameters it came from, never of a derived value, so a cache
first filled in inference mode serves later ``no_grad`` calls as well.

State dicts are unchanged: these are plain subclasses of ``nn.Linear`` and
``LinearizedConvolution`` with the same parameters (and the same
``parametrizations.weight.original0/1`` names when weight-normalised).
"""

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.modules import LinearizedConvolution
from torch import Tensor
from torch.nn.utils import parametrize


def _sources(module: nn.Module, name: str = "weight") -> Tuple[Tensor, ...]:
    """The tensors ``module.<name>`` is computed from (the originals of a parametrization)."""
    if parametrize.is_parametrized(module, name):
        return tuple(module.parametrizations[name].parameters())
    return (getattr(module, name),)


class InferenceWeightCache:
    """Mixin for ``nn.Module`` subclasses: :meth:`cached_weight` memoises a derived weight in inference."""

    def _inference_weights(self) -> Dict[str, Tuple[Any, Tensor]]:
        store = self.__dict__.get("_derived_weights")
        if store is None:
            store = self.__dict__["_derived_weights"] = {}
        return store

    def cached_weight(
        self, key: str, derive: Callable[[], Any], sources: Optional[Sequence[Optional[Tensor]]] = None
    ) -> Any:
        """``derive()``, reused across calls while inference runs on unchanged parameters.

        Args:
            key: the name of the derived value (one entry per key).
            derive: computes it (a tensor, or a tuple of tensors).
            sources: the parameters it is derived from (None entries are skipped); default:
                the module's ``weight`` (the originals of its parametrization).
        """
        if self.training or torch.is_grad_enabled():
            return derive()
        tensors = _sources(self) if sources is None else [t for t in sources if t is not None]
        version = tuple((t.data_ptr(), t._version, t.dtype, t.device) for t in tensors)
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


def cached_count(module: nn.Module) -> int:
    """Number of derived weights currently cached in ``module`` and its submodules."""
    n = 0
    for m in module.modules():
        if isinstance(m, InferenceWeightCache):
            n += len(m._inference_weights())
    return n
