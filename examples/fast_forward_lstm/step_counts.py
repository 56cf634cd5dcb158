"""Operator calls and saved-activation bytes of one training step, Deep-Att vs fairseq ``lstm``.

Counts on the CPU what a GPU step would launch, for issue 39's launch and memory targets:

* ``ops``: every ATen operator call of one step (forward, backward, optimizer step),
  counted with a ``TorchDispatchMode``; ``kernels``: the same without the calls that
  launch nothing (views, ``detach``, shape queries). A fused RNN layer
  (``aten::mkldnn_rnn_layer`` on the CPU, ``_cudnn_rnn`` on CUDA) counts as 2 in
  the forward (its input projection and its recurrence) and 2 in the backward;
  its CPU per-step lowering is not counted. ``lstm_cell`` (fairseq's ``nn.LSTMCell``)
  counts as CUDA runs it: two matmuls and one fused pointwise kernel forward, the
  matmuls' gradients and two kernels (fused backward, bias sum) backward.
* ``saved_bytes_per_token``: bytes autograd keeps for backward (``saved_tensors_hooks``,
  each storage once, parameters excluded) per target token, in float32 and under
  ``torch.autocast('cpu', dtype=torch.bfloat16)``, split into activations, autocast's
  copies of the weights and the CPU RNN kernel's workspace (see :func:`saved_bytes`).

Usage (from the repository root)::

    python examples/fast_forward_lstm/step_counts.py deep_att lstm_8x8 fast_forward_lstm_small lstm_2x2_128
"""

import argparse
import json
import logging
import statistics
import sys
import time
from collections import Counter

import torch
from fairseq.data import Dictionary
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY
from fairseq.optim.adam import Adam
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import fairseq_dense  # noqa: F401  (registers the plugin's models)

logger = logging.getLogger(__name__)

NO_KERNEL = {
    "detach", "view", "_unsafe_view", "t", "transpose", "permute", "select", "slice", "expand",
    "unsqueeze", "squeeze", "split", "split_with_sizes", "chunk", "unbind", "alias", "as_strided",
    "unsafe_split", "unsafe_chunk", "_reshape_alias", "reshape", "numpy_T", "view_as", "unfold",
    "is_same_size", "_has_compatible_shallow_copy_type", "lift_fresh", "result_type", "narrow",
}  # fmt: skip
FUSED_RNN = {"mkldnn_rnn_layer": 2, "mkldnn_rnn_layer_backward": 2, "_cudnn_rnn": 2, "_cudnn_rnn_backward": 2}

# name -> (arch, overrides); lstm: fairseq's, bidirectional encoder, same depth and width
MODELS = {
    "deep_att": ("deep_att", {}),
    "fast_forward_lstm_small": ("fast_forward_lstm_small", {}),
    "lstm_8x8": (
        "lstm",
        dict(encoder_layers=8, decoder_layers=8, encoder_bidirectional=True, encoder_embed_dim=256,
             decoder_embed_dim=256, encoder_hidden_size=512, decoder_hidden_size=512, decoder_out_embed_dim=512),
    ),
    "lstm_2x2_128": (
        "lstm",
        dict(encoder_layers=2, decoder_layers=2, encoder_bidirectional=True, encoder_embed_dim=128,
             decoder_embed_dim=128, encoder_hidden_size=128, decoder_hidden_size=128, decoder_out_embed_dim=128),
    ),
}  # fmt: skip


class _Task:
    """What ``build_model`` reads from a translation task."""

    def __init__(self, d: Dictionary):
        self.source_dictionary = self.target_dictionary = d


class OpCounter(TorchDispatchMode):
    """Counts ATen operator calls (fused RNN layers by :data:`FUSED_RNN`); none while ``paused``."""

    def __init__(self):
        super().__init__()
        self.calls = Counter()
        self.paused = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.paused:
            self.calls[func.__name__.split(".")[0]] += 1
        return func(*args, **(kwargs or {}))

    def totals(self):
        """``(ops, kernels)`` of everything counted so far."""
        ops = sum(FUSED_RNN.get(k, 1) * n for k, n in self.calls.items())
        kernels = sum(FUSED_RNN.get(k, 1) * n for k, n in self.calls.items() if k not in NO_KERNEL)
        return ops, kernels


class _FusedCellPointwise(torch.autograd.Function):
    """The pointwise part of an LSTM cell counted as CUDA's ``_thnn_fused_lstm_cell``: one
    kernel forward, two backward (the fused backward and the bias-gradient sum)."""

    @staticmethod
    def forward(ctx, counter, igates, hgates, cx, b_ih, b_hh):
        counter.paused = True
        with torch.enable_grad():
            inputs = [t.detach().requires_grad_() for t in (igates, hgates, cx, b_ih, b_hh)]
            gates = inputs[0] + inputs[1] + inputs[3] + inputs[4]
            i, f, g, o = gates.chunk(4, 1)
            cy = torch.sigmoid(f) * inputs[2] + torch.sigmoid(i) * torch.tanh(g)
            hy = torch.sigmoid(o) * torch.tanh(cy)
        counter.paused = False
        counter.calls["_thnn_fused_lstm_cell"] += 1
        ctx.counter, ctx.graph = counter, (inputs, hy, cy)
        return hy.detach(), cy.detach()

    @staticmethod
    def backward(ctx, grad_h, grad_c):
        inputs, hy, cy = ctx.graph
        ctx.counter.paused = True
        grads = torch.autograd.grad((hy, cy), inputs, (grad_h, grad_c), allow_unused=True)
        ctx.counter.paused = False
        ctx.counter.calls["_thnn_fused_lstm_cell_backward"] += 2
        return (None,) + tuple(grads)


class FusedCells(TorchFunctionMode):
    """``lstm_cell`` (fairseq's ``nn.LSTMCell``) as CUDA runs it: two matmuls and the fused cell."""

    def __init__(self, counter: OpCounter):
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") != "lstm_cell":
            return func(*args, **(kwargs or {}))
        x, (hx, cx), w_ih, w_hh, b_ih, b_hh = args
        igates, hgates = torch.mm(x, w_ih.t()), torch.mm(hx, w_hh.t())
        return _FusedCellPointwise.apply(self.counter, igates, hgates, cx, b_ih, b_hh)

    def totals(self):
        """``(ops, kernels)`` of everything counted so far."""
        ops = sum(FUSED_RNN.get(k, 1) * n for k, n in self.calls.items())
        kernels = sum(FUSED_RNN.get(k, 1) * n for k, n in self.calls.items() if k not in NO_KERNEL)
        return ops, kernels


def build(name: str, vocab: int, dropout: float):
    """The model ``name`` of :data:`MODELS` on a ``vocab``-word dictionary."""
    arch, overrides = MODELS[name]
    d = Dictionary()
    for i in range(vocab - len(d)):
        d.add_symbol(f"w{i}")
    args = argparse.Namespace(arch=arch, dropout=dropout, criterion="cross_entropy", **overrides)
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(0)
    model = ARCH_MODEL_REGISTRY[arch].build_model(args, _Task(d))
    return model, d


def batch(d: Dictionary, bsz: int, length: int):
    """``bsz`` sentences of ``length`` tokens (source and target), random words."""
    g = torch.Generator().manual_seed(1)
    src = torch.randint(d.nspecial, len(d), (bsz, length), generator=g)
    tgt = torch.randint(d.nspecial, len(d), (bsz, length), generator=g)
    prev = torch.cat([torch.full((bsz, 1), d.eos()), tgt[:, :-1]], 1)
    return dict(src_tokens=src, src_lengths=torch.full((bsz,), length), prev_output_tokens=prev), tgt


def loss_of(model, net_input, tgt):
    """Cross-entropy of one batch."""
    logits, _ = model(**net_input)
    return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tgt.flatten())


class _WeightCopies(TorchDispatchMode):
    """Records the storages of casts of parameters (autocast's low-precision weight copies)."""

    def __init__(self, param_storages):
        super().__init__()
        self.params = param_storages
        self.copies = {}  # storage -> the copy, kept alive so that no later tensor reuses its address

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten._to_copy.default and args[0].untyped_storage().data_ptr() in self.params:
            self.copies[out.untyped_storage().data_ptr()] = out
        return out


def saved_bytes(model, net_input, tgt, autocast: bool):
    """Bytes autograd saves for backward in one forward, each storage once, parameters excluded.

    Returns:
        dict: ``activations`` (everything else), ``weight_copies`` (low-precision casts of
        parameters: a per-step cast shows here), ``rnn_workspace`` (the fused CPU RNN
        kernel's workspace, ``uint8``; oneDNN packs a copy of the layer's weights into it).
    """
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = (s.nbytes(), t.dtype)
        return t

    copies = _WeightCopies(params)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), copies:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = loss_of(model, net_input, tgt)
    del loss
    parts = Counter()
    for ptr, (nbytes, dtype) in seen.items():
        kind = "weight_copies" if ptr in copies.copies else "rnn_workspace" if dtype == torch.uint8 else "activations"
        parts[kind] += nbytes
    return {k: parts[k] for k in ("activations", "weight_copies", "rnn_workspace")}


def measure(name: str, vocab: int, bsz: int, length: int, dropout: float, time_steps: int = 0):
    """The counts of one model (a warm-up step first, so that Adam's state exists)."""
    model, d = build(name, vocab, dropout)
    model.train()
    net_input, tgt = batch(d, bsz, length)
    opt = Adam(model.parameters(), lr=1e-4)

    def step():
        opt.zero_grad()
        loss_of(model, net_input, tgt).backward()
        opt.step()

    step()
    seconds = []
    for _ in range(time_steps):
        t0 = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - t0)
    counter = OpCounter()
    with counter, FusedCells(counter):
        step()
    ops, kernels = counter.totals()
    tokens = tgt.numel()
    out = {
        "model": name,
        "params": sum(p.numel() for p in model.parameters()),
        "ops_per_step": ops,
        "kernels_per_step": kernels,
        "fused_rnn_layer_calls": {k: v for k, v in counter.calls.items() if k in FUSED_RNN},
    }
    if seconds:
        out["median_step_seconds"] = round(statistics.median(seconds), 4)
    for name, autocast in (("fp32", False), ("bf16_autocast", True)):
        parts = saved_bytes(model, net_input, tgt, autocast)
        out[f"saved_bytes_per_token_{name}"] = {k: round(v / tokens) for k, v in parts.items()}
    return out


def main(argv=None):
    """Print one JSON line per model."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("models", nargs="+", choices=sorted(MODELS))
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--length", type=int, default=30)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--time-steps", type=int, default=0, help="also time this many steps (median wall seconds)")
    p.add_argument(
        "--flush-denormal",
        action="store_true",
        help="torch.set_flush_denormal(True): at init Deep-Att's small gradients are denormal floats, which the "
        "CPU computes on up to 5x slower (GPUs do not)",
    )
    a = p.parse_args(argv)
    if a.flush_denormal:
        torch.set_flush_denormal(True)
    for name in a.models:
        print(json.dumps(measure(name, a.vocab, a.batch_size, a.length, a.dropout, a.time_steps)), flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    main()
