"""Hardware-independent proxies of a training step: counts, not times.

* :class:`FlopsByDtype`: matmul-class FLOPs (matmul, linear, convolution, attention) per
  ATen operator, split by the dtype of the operator's matrix inputs, plus the number of
  operator calls; a ``TorchDispatchMode``, so it sees what autocast hands to the kernels.
* :func:`saved_bytes`: bytes of the distinct storages autograd saves for backward
  (``saved_tensors_hooks``), parameters excluded.

Run as a script it measures named architectures at their presets' sizes (see ``--help``);
the tests in ``tests/test_autocast_forms.py`` use the same counters on tiny models.
"""

import argparse
import json
import math
from contextlib import nullcontext
from typing import Callable, Dict, Optional

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

LOW = (torch.bfloat16, torch.float16)


def _numel(shape) -> int:
    return math.prod(int(s) for s in shape)


def _mm(a, b) -> int:
    return 2 * _numel(a.shape[:-1]) * int(a.shape[-1]) * int(b.shape[-1])


def _sdpa(q, k, v) -> int:
    # q @ k^T and probs @ v; (B, H, T, d)
    return 2 * _numel(q.shape[:-1]) * int(k.shape[-2]) * (int(q.shape[-1]) + int(v.shape[-1]))


def _conv_tbc(x, w, out_time: int) -> int:
    k, ci, co = w.shape
    return 2 * out_time * int(x.shape[1]) * ci * co * k


def _conv(x, w) -> int:
    # (B, C_in, *spatial) x (C_out, C_in/groups, *kernel); output spatial ~ input spatial
    return 2 * int(x.shape[0]) * _numel(x.shape[2:]) * _numel(w.shape)


# op name -> (FLOPs, the tensors whose dtype decides the precision)
MATMUL_OPS: Dict[str, Callable] = {
    "mm": lambda a, r: (_mm(a[0], a[1]), (a[0], a[1])),
    "addmm": lambda a, r: (_mm(a[1], a[2]), (a[1], a[2])),
    "addmm_": lambda a, r: (_mm(a[1], a[2]), (a[1], a[2])),
    "_addmm_activation": lambda a, r: (_mm(a[1], a[2]), (a[1], a[2])),
    "bmm": lambda a, r: (_mm(a[0], a[1]), (a[0], a[1])),
    "baddbmm": lambda a, r: (_mm(a[1], a[2]), (a[1], a[2])),
    "baddbmm_": lambda a, r: (_mm(a[1], a[2]), (a[1], a[2])),
    "conv_tbc": lambda a, r: (_conv_tbc(a[0], a[1], int(r.shape[0])), (a[0], a[1])),
    "conv_tbc_backward": lambda a, r: (2 * _conv_tbc(a[1], a[2], int(a[0].shape[0])), (a[1], a[2])),
    "convolution": lambda a, r: (_conv(a[0], a[1]), (a[0], a[1])),
    "convolution_backward": lambda a, r: (2 * _conv(a[1], a[2]), (a[1], a[2])),
    "_scaled_dot_product_flash_attention_for_cpu": lambda a, r: (_sdpa(a[0], a[1], a[2]), a[:3]),
    "_scaled_dot_product_flash_attention_for_cpu_backward": lambda a, r: (2 * _sdpa(a[1], a[2], a[3]), a[1:4]),
    "_scaled_dot_product_flash_attention": lambda a, r: (_sdpa(a[0], a[1], a[2]), a[:3]),
    "_scaled_dot_product_flash_attention_backward": lambda a, r: (2 * _sdpa(a[1], a[2], a[3]), a[1:4]),
    "_scaled_dot_product_efficient_attention": lambda a, r: (_sdpa(a[0], a[1], a[2]), a[:3]),
    "_scaled_dot_product_efficient_attention_backward": lambda a, r: (2 * _sdpa(a[1], a[2], a[3]), a[1:4]),
}
# names that look matmul-class; one missing from MATMUL_OPS is an error, not a silent zero
_SUSPECT = ("mm", "conv", "attention", "linear", "matmul", "lstm", "gru", "rnn", "dot", "mv")
_NOT_MATMUL = {"_conv_depthwise2d"}


class FlopsByDtype(TorchDispatchMode):
    """Count ATen operator calls and matmul-class FLOPs by input dtype.

    Attributes:
        calls: operator calls seen.
        flops: ``{"low": ..., "high": ...}`` FLOPs whose matrix inputs are all
            bfloat16/float16 (``low``) or not.
        by_op: ``{(op, "low"|"high"): FLOPs}``.
    """

    def __init__(self):
        super().__init__()
        self.calls = 0
        self.flops = {"low": 0, "high": 0}
        self.by_op: Dict[tuple, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.calls += 1
        name = func.overloadpacket.__name__
        rule = MATMUL_OPS.get(name)
        if rule is None:
            if any(s in name for s in _SUSPECT) and name not in _NOT_MATMUL and not name.startswith("_to_"):
                raise NotImplementedError(f"no FLOP rule for matmul-like operator {name}")
            return out
        r = out[0] if isinstance(out, (tuple, list)) else out
        flops, mats = rule(args, r)
        kind = "low" if all(m.dtype in LOW for m in mats) else "high"
        self.flops[kind] += flops
        self.by_op[(name, kind)] = self.by_op.get((name, kind), 0) + flops
        return out

    @property
    def low_share(self) -> float:
        """Fraction of matmul-class FLOPs that ran in the low precision."""
        total = self.flops["low"] + self.flops["high"]
        return self.flops["low"] / total if total else float("nan")


class SavedBytes(torch.autograd.graph.saved_tensors_hooks):
    """Sum the bytes of the distinct storages saved for backward, parameters excluded."""

    def __init__(self, params=()):
        self.exclude = {p.untyped_storage().data_ptr() for p in params}
        self.storages: Dict[int, int] = {}

        def pack(t):
            s = t.untyped_storage()
            if s.data_ptr() not in self.exclude:
                self.storages[s.data_ptr()] = s.nbytes()
            return t

        super().__init__(pack, lambda t: t)

    def __enter__(self):
        super().__enter__()
        return self

    @property
    def total(self) -> int:
        """Bytes of all distinct saved storages."""
        return sum(self.storages.values())


def build(arch: str, vocab: int = 8000, **overrides):
    """A model of the registered ``arch`` (fairseq's or ours) on a ``vocab``-word dictionary."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    import fairseq_dense  # noqa: F401  (registers our archs)
    from tests import helpers

    ns = argparse.Namespace(**overrides)
    ARCH_CONFIG_REGISTRY[arch](ns)
    ns.arch = arch
    for k in ("max_source_positions", "max_target_positions"):
        setattr(ns, k, getattr(ns, k, 1024))
    d = helpers.dummy_dictionary(vocab - 4)
    return ARCH_MODEL_REGISTRY[arch].build_model(ns, helpers.DummyTask(d)), d


def batch(d, bsz: int = 16, length: int = 30, seed: int = 0):
    """``(src_tokens, src_lengths, prev_output_tokens, target)``: unpadded random sentences."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(d.nspecial, len(d), (bsz, length), generator=g)
    tgt = torch.randint(d.nspecial, len(d), (bsz, length), generator=g)
    src[:, -1] = tgt[:, -1] = d.eos()
    prev = torch.cat([tgt[:, -1:], tgt[:, :-1]], dim=1)
    return src, torch.full((bsz,), length), prev, tgt


def train_step(model, sample, autocast: Optional[torch.dtype], optimizer=None, measure_saved: bool = False):
    """One forward + backward (+ optimizer step): ``(loss, saved bytes or None)``."""
    src, lengths, prev, tgt = sample
    ctx = torch.autocast("cpu", dtype=autocast) if autocast is not None else nullcontext()
    saved = SavedBytes(model.parameters()) if measure_saved else nullcontext()
    with saved, ctx:
        logits = model(src, lengths, prev)[0]
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt.view(-1))
    loss.backward()
    if optimizer is not None:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return loss, (saved.total if measure_saved else None)


def measure(arch: str, autocast: Optional[torch.dtype], bsz: int = 16, length: int = 30, **overrides) -> Dict:
    """Operator calls per training step, matmul-FLOP low-precision share, saved bytes per target token."""
    torch.manual_seed(0)
    model, d = build(arch, **overrides)
    model.train()
    sample = batch(d, bsz, length)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=False)  # per-tensor, as fairseq's adam
    train_step(model, sample, autocast, opt)  # optimizer state allocated outside the count
    _, saved = train_step(model, sample, autocast, measure_saved=True)
    model.zero_grad(set_to_none=True)
    with FlopsByDtype() as fwd_bwd:
        train_step(model, sample, autocast)
    with FlopsByDtype() as step:
        opt.step()
    return {
        "arch": arch,
        "autocast": str(autocast).replace("torch.", "") if autocast else "off",
        "params_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
        "ops_fwd_bwd": fwd_bwd.calls,
        "ops_optimizer": step.calls,
        "matmul_gflops": round((fwd_bwd.flops["low"] + fwd_bwd.flops["high"]) / 1e9, 2),
        "low_share": round(fwd_bwd.low_share, 4),
        "saved_bytes_per_tgt_token": round(saved / (bsz * length)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("archs", nargs="+")
    p.add_argument("--bsz", type=int, default=16)
    p.add_argument("--len", type=int, default=30)
    p.add_argument("--autocast", choices=("off", "bf16", "both"), default="both")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="arch options, e.g. branch_recompute=1")
    a = p.parse_args()
    overrides = {k: json.loads(v) for k, v in (kv.split("=", 1) for kv in a.set)}
    modes = {"off": [None], "bf16": [torch.bfloat16], "both": [None, torch.bfloat16]}[a.autocast]
    for arch in a.archs:
        for mode in modes:
            row = measure(arch, mode, a.bsz, a.len, **overrides)
            print(json.dumps(dict(row, **overrides)), flush=True)


if __name__ == "__main__":
    main()
