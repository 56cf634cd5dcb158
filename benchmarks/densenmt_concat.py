"""Dense concatenation: preallocated feature buffer vs. a naive ``torch.cat`` per layer.

Runs a dense convolution stack (DenseNMT Eq. 6: layer ``l`` reads all earlier
outputs) both ways with the same weights, forward + backward, and reports the
time per iteration and the bytes of distinct storage autograd keeps for the
backward pass (the activation memory that the naive version makes quadratic in
depth). Usage::

    python -m benchmarks.densenmt_concat --layers 8 --growth 96 --embed 256 \
        --batch 64 --time 30 --iters 5
"""
import argparse
import json
import logging
import time

import torch

from fairseq_dense.logging_setup import configure_logging
from fairseq_dense.modules.dense_conv import FeatureBuffer, conv_rows, glu_rows

logger = logging.getLogger("benchmarks.densenmt_concat")


def naive(x0, weights, biases, t):
    """Dense stack with ``torch.cat`` of every earlier feature for each layer (T x B x C)."""
    feats = [x0]
    for w, b in zip(weights, biases):
        inp = torch.cat(feats, dim=-1)  # T x B x (d0 + l*g): a fresh copy per layer
        y = torch.conv_tbc(inp, w, b, (w.size(0) - 1) // 2)
        feats.append(torch.nn.functional.glu(y, dim=-1))
    return torch.cat(feats, dim=-1)


def buffered(x0, weights, biases, t):
    """The same stack on a preallocated channel-major buffer (no copies of earlier features)."""
    k = weights[0].size(0)
    cap = x0.size(-1) + sum(w.size(-1) // 2 for w in weights)
    buf = FeatureBuffer(cap, t, x0.size(1), (k - 1) // 2, k // 2, x0)
    buf.append(x0.permute(2, 0, 1))  # T x B x C -> C x T x B
    for w, b in zip(weights, biases):
        buf.append(glu_rows(conv_rows(buf.rows(), w, b, t, 0)))
    return buf.center(buf.rows()).permute(1, 2, 0)


def saved_bytes(fn, *args):
    """Run ``fn`` and return (output, bytes of distinct storages saved for backward)."""
    storages = {}

    def pack(x):
        if isinstance(x, torch.Tensor):
            s = x.untyped_storage()
            storages[s.data_ptr()] = s.nbytes()
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        out = fn(*args)
    return out, sum(storages.values())


def bench(fn, x0, weights, biases, t, iters):
    params = [x0] + weights + biases
    for _ in range(2):  # warm-up
        out = fn(x0, weights, biases, t)
        torch.autograd.grad(out.sum(), params)
    if x0.is_cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(iters):
        out = fn(x0, weights, biases, t)
        torch.autograd.grad(out.sum(), params)
    if x0.is_cuda:
        torch.cuda.synchronize()
    elapsed = (time.perf_counter() - start) / iters
    peak = torch.cuda.max_memory_allocated() if x0.is_cuda else None
    _, saved = saved_bytes(fn, x0, weights, biases, t)
    return {"seconds_per_iter": elapsed, "saved_for_backward_MB": saved / 2**20,
            "cuda_peak_MB": None if peak is None else peak / 2**20}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--growth", type=int, default=96)
    p.add_argument("--embed", type=int, default=256)
    p.add_argument("--kernel", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--time", type=int, default=30)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args(argv)
    configure_logging("%(message)s")
    torch.manual_seed(0)
    dev = torch.device(args.device)
    x0 = torch.randn(args.time, args.batch, args.embed, device=dev, requires_grad=True)
    weights, biases = [], []
    for i in range(args.layers):
        c = args.embed + i * args.growth
        weights.append((torch.randn(args.kernel, c, 2 * args.growth, device=dev) * (4 / (3 * c)) ** 0.5)
                       .requires_grad_())
        biases.append(torch.zeros(2 * args.growth, device=dev, requires_grad=True))
    a = naive(x0, weights, biases, args.time)
    b = buffered(x0, weights, biases, args.time)
    max_diff = (a - b).abs().max().item()
    results = {"config": vars(args), "max_abs_diff": max_diff,
               "naive_cat": bench(naive, x0, weights, biases, args.time, args.iters),
               "buffer": bench(buffered, x0, weights, biases, args.time, args.iters)}
    n, f = results["naive_cat"], results["buffer"]
    results["speedup"] = n["seconds_per_iter"] / f["seconds_per_iter"]
    results["saved_memory_ratio"] = f["saved_for_backward_MB"] / n["saved_for_backward_MB"]
    logger.info(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
