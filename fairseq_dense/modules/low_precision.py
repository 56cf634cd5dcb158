"""Helpers for modules that keep their activations in autocast's low precision, or out of it, and the
autocast regions themselves (:func:`bf16_autocast`, the one ``--bf16-autocast`` runs in)."""

import contextlib
from typing import Optional

import torch
from torch import Tensor


def compute_dtype(like: Tensor) -> torch.dtype:
    """The dtype matrix products on ``like`` run in: autocast's when it is on for its device."""
    device = like.device.type
    if like.is_floating_point() and torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return like.dtype


def outside_low_precision(x: Tensor, like: Tensor, enabled: bool = True):
    """``(context, x)``: with ``enabled``, autocast off on ``x``'s device inside the context and ``x`` in
    ``like``'s dtype (a part that keeps its parameters, and so its compute, in float32 under autocast and
    ``--fp16``); without, autocast as it is and ``x`` unchanged."""
    if not enabled:
        return contextlib.nullcontext(), x
    return torch.autocast(x.device.type, enabled=False), x.to(like.dtype)


def onednn_lstm_runs(dtype: torch.dtype) -> bool:
    """Whether this CPU's oneDNN LSTM kernel runs in ``dtype``: float32 always, bfloat16 and float16
    only with the CPU's instructions for them. Elsewhere an ``nn.LSTM`` or ``torch.lstm`` call under
    CPU autocast fails in oneDNN ("could not create a primitive descriptor for the LSTM forward
    propagation primitive")."""
    if dtype == torch.bfloat16:
        return torch.ops.mkldnn._is_mkldnn_bf16_supported()
    if dtype == torch.float16:
        return torch.ops.mkldnn._is_mkldnn_fp16_supported()
    return True


@contextlib.contextmanager
def cpu_lstm_kernel(dtype: torch.dtype, onednn: Optional[bool] = None):
    """Inside, CPU LSTMs run on oneDNN's fused kernel (``onednn``; default: where it runs ``dtype``)
    or on PyTorch's own form: a GEMM per step, in ``dtype`` under autocast, on any CPU. Only the
    CPU's kernel changes (oneDNN off inside), not what is counted: an LSTM call is one fused unit
    either way, its GEMMs the same FLOPs; the bytes saved inside the unit differ."""
    previous = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = previous and (onednn_lstm_runs(dtype) if onednn is None else onednn)
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = previous


@contextlib.contextmanager
def bf16_autocast(device_type: str):
    """``torch.autocast(device_type, dtype=torch.bfloat16)``; on a CPU whose oneDNN has no bfloat16 LSTM,
    LSTMs run PyTorch's per-step form inside (:func:`cpu_lstm_kernel`), so every family runs on any CPU."""
    with cpu_lstm_kernel(torch.bfloat16) if device_type == "cpu" else contextlib.nullcontext():
        with torch.autocast(device_type, dtype=torch.bfloat16):
            yield
