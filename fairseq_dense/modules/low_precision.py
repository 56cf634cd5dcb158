"""Helpers for modules that keep their activations in autocast's low precision, or out of it."""

import contextlib

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def compute_dtype(like: Tensor) -> torch.dtype:
    """The dtype matrix products on ``like`` run in: autocast's when it is on for its device."""
    device = like.device.type
    if like.is_floating_point() and torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return like.dtype


def layer_norm_keeping_dtype(ln: nn.Module, u: Tensor) -> Tensor:
    """Layer norm ``ln`` whose output, and the input it keeps for backward, stay in ``u``'s dtype.

    Autocast runs ``layer_norm`` in float32: it would keep a float32 copy of ``u`` for backward
    and return float32 for the next products to cast back. The kernel keeps its statistics
    in float32 anyway.
    """
    if u.dtype == ln.weight.dtype:
        return ln(u)
    with torch.autocast(u.device.type, enabled=False):
        return F.layer_norm(u, (u.size(-1),), ln.weight.to(u.dtype), ln.bias.to(u.dtype), ln.eps)


def outside_low_precision(x: Tensor, like: Tensor, enabled: bool = True):
    """``(context, x)``: with ``enabled``, autocast off on ``x``'s device inside the context and ``x`` in
    ``like``'s dtype (a part that keeps its parameters, and so its compute, in float32 under autocast and
    ``--fp16``); without, autocast as it is and ``x`` unchanged."""
    if not enabled:
        return contextlib.nullcontext(), x
    return torch.autocast(x.device.type, enabled=False), x.to(like.dtype)
