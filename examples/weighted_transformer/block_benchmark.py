"""Micro-benchmark: one branched block vs. a Transformer attention + FFN layer pair.

Times forward + backward of :class:`~fairseq_dense.modules.branched_attention.BranchedAttention`
against an equivalent post-norm Transformer encoder layer (same parameters up to 2M, same
dropout) built from the torch primitives fairseq uses (fused input projection, SDPA,
``nn.Linear`` FFN). On the GPU machine fairseq comes from the wheels ``benchmarks/gpu_install.sh``
installs::

    python examples/weighted_transformer/block_benchmark.py --device cuda --dtype bf16
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks.measure import timed_rounds  # noqa: E402
from fairseq_dense.modules.branched_attention import BranchedAttention  # noqa: E402


class TransformerLayer(nn.Module):
    """Post-norm Transformer encoder layer (what fairseq's TransformerEncoderLayer computes)."""

    def __init__(self, C, H, F_, p):
        super().__init__()
        self.H, self.p = H, p
        self.in_proj = nn.Linear(C, 3 * C)
        self.out_proj = nn.Linear(C, C)
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.fc1, self.fc2 = nn.Linear(C, F_), nn.Linear(F_, C)

    def forward(self, x):
        T, B, C = x.shape
        q, k, v = self.in_proj(x).view(T, B, 3, self.H, C // self.H).permute(2, 1, 3, 0, 4)
        o = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0)
        o = self.out_proj(o.permute(2, 0, 1, 3).reshape(T, B, C))
        x = self.ln1(x + F.dropout(o, self.p, self.training))
        f = self.fc2(F.relu(self.fc1(x)))
        return self.ln2(x + F.dropout(f, self.p, self.training))


def step(module, x, _):
    out = module(x)
    (out[0] if isinstance(out, tuple) else out).float().square().mean().backward()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--ffn", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--len", type=int, default=64)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[a.dtype]
    torch.manual_seed(0)
    wt = BranchedAttention(a.dim, a.heads, a.heads, a.ffn, dropout=a.dropout).to(a.device, dtype).train()
    tf = TransformerLayer(a.dim, a.heads, a.ffn, a.dropout).to(a.device, dtype).train()
    x = torch.randn(a.len, a.batch, a.dim, device=a.device, dtype=dtype, requires_grad=True)
    n_wt, n_tf = (sum(p.numel() for p in m.parameters()) for m in (wt, tf))
    for module in (wt, tf):  # warm-up
        for _ in range(3):
            step(module, x, 0)
    # the two take turns on the same input, the order reversed every other round
    res = timed_rounds({"ours": wt, "baseline": tf}, [x] * a.iters, a.rounds, step, a.device)
    for name, side in (("transformer", "baseline"), ("weighted", "ours")):
        best = min(r[f"{side}_s"] for r in res["rounds"]) / a.iters
        print(f"{name:12s} {1e3 * best:8.3f} ms/step  {a.batch * a.len / best:12.0f} tokens/s")
    print(f"params: transformer {n_tf}, weighted {n_wt} (+{n_wt - n_tf})")
    print(f"throughput ratio weighted/transformer (median of the rounds): {res['ratio']:.3f}")


if __name__ == "__main__":
    main()
