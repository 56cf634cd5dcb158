"""Which torch form runs the Deep-Att recurrence fastest (forward + backward)?

Zhou et al. (2016), https://arxiv.org/abs/1606.04199, split every LSTM layer into
a feed-forward block ``f`` (the 4-gate pre-activations, one matmul over the whole
sequence) and a recurrence ``h_t, c_t = LSTM(f_t, h_{t-1}, c_{t-1})`` that has no
input matrix. torch has no public "LSTM with given input gates" op, so we time the
candidate forms on the same precomputed gates ``f`` of shape ``(T, B, 4H)``:

* ``loop``: a Python loop, ``addmm`` + chunk + activations per step;
* ``script``: the same loop compiled with ``torch.jit.script``;
* ``cell_bias`` (CPU only): ``torch.lstm_cell`` with an empty input and the
  step's gates passed as a ``(B, 4H)`` input bias (one ``h @ W_hh^T`` per step,
  aten's cell; on CUDA it dispatches to the fused cell, which wants 1-D biases);
* ``vf_identity``: the fused sequence op ``torch._VF.lstm`` with an identity
  input matrix (``(4H, 4H)``, so an extra ``T*B*16H^2`` matmul);
* ``fused_cell`` (CUDA only): ``torch._thnn_fused_lstm_cell`` on ``f_t`` and
  ``h @ W_hh^T`` (one fused elementwise kernel and its fused backward).

``--stack`` also times one whole encoder column (feed-forward blocks and
recurrences, forward + backward) against ``nn.LSTM`` of the same depth and width
(cuDNN on CUDA), the kernel fairseq's ``lstm`` model runs.

Usage::

    OMP_NUM_THREADS=1 python -m benchmarks.fast_forward_lstm_recurrence [--device cuda] \
        [--sizes 30x64x256 30x64x512] [--repeats 5] [--stack 4]
"""
import argparse
import logging
import time
from typing import Callable, Dict, List

import torch

from fairseq_dense.logging_setup import configure_logging
from fairseq_dense.modules import fast_forward_lstm_recurrence as rec
from fairseq_dense.modules.fast_forward_lstm import FastForwardLSTM

logger = logging.getLogger("benchmarks.fast_forward_lstm_recurrence")


def _scripted_loop(f: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor, w_hh: torch.Tensor):
    h, c = h0, c0
    outs: List[torch.Tensor] = []
    w_t = w_hh.t()
    for t in range(f.size(0)):
        i, fg, g, o = torch.addmm(f[t], h, w_t).chunk(4, dim=-1)
        c = torch.sigmoid(fg) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outs.append(h)
    return torch.stack(outs), h


FORMS: Dict[str, Callable] = {
    "loop": rec.lstm_recurrence_loop,
    "script": None,  # torch.jit.script(_scripted_loop), compiled in main()
    "cell_bias": rec.lstm_recurrence_cell,
    "vf_identity": rec.lstm_recurrence_identity,
}


def time_form(fn, t, b, h, device, repeats):
    torch.manual_seed(0)
    f = torch.randn(t, b, 4 * h, device=device, requires_grad=True)
    w = (0.1 * torch.randn(4 * h, h, device=device)).requires_grad_()
    h0 = torch.zeros(b, h, device=device)
    c0 = torch.zeros(b, h, device=device)
    best = float("inf")
    for i in range(repeats + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = fn(f, h0, c0, w)[0]
        out.sum().backward()
        if device == "cuda":
            torch.cuda.synchronize()
        if i > 0:  # the first run warms up (scripting, allocator)
            best = min(best, time.perf_counter() - start)
        f.grad = None
        w.grad = None
    return best, out.detach()


def time_stack(t, b, h, layers, device, repeats, fast_forward):
    """Forward + backward of a column vs ``nn.LSTM(num_layers=layers)`` on ``(t, b, h)`` inputs."""
    torch.manual_seed(0)
    x = torch.randn(t, b, h, device=device)
    lengths = torch.full((b,), t, device=device)
    ours = FastForwardLSTM(h, h, layers, fast_forward=fast_forward).to(device)
    ref = torch.nn.LSTM(h, h, num_layers=layers).to(device)
    result = {}
    for name, run in (("ours", lambda: ours(x, lengths)[1]), ("nn.LSTM", lambda: ref(x)[0])):
        best = float("inf")
        for i in range(repeats + 1):
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            run().sum().backward()
            if device == "cuda":
                torch.cuda.synchronize()
            if i > 0:
                best = min(best, time.perf_counter() - start)
        result[name] = best
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--sizes", nargs="+", default=["30x64x256", "30x64x512"], help="TxBxH")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--stack", type=int, default=0, help="also time a column of this depth vs nn.LSTM")
    args = p.parse_args()
    configure_logging("%(message)s")
    forms = dict(FORMS)
    forms["script"] = torch.jit.script(_scripted_loop)
    if args.device == "cuda":  # aten's CUDA lstm_cell wants 1-D biases
        forms.pop("cell_bias")
        forms["fused_cell"] = rec.lstm_recurrence_fused_cell
    logger.info("device %s, torch %s, threads %d", args.device, torch.__version__, torch.get_num_threads())
    logger.info("| T x B x H | " + " | ".join(forms) + " |")
    logger.info("|---|" + "---|" * len(forms))
    for size in args.sizes:
        t, b, h = map(int, size.split("x"))
        ref = None
        cells = []
        for name, fn in forms.items():
            sec, out = time_form(fn, t, b, h, args.device, args.repeats)
            if ref is None:
                ref = out
            # cuDNN and cuBLAS use TF32 by default on CUDA: compare loosely there
            tol = 1e-4 if args.device == "cpu" else 5e-2
            assert torch.allclose(out, ref, atol=tol), f"{name} disagrees with loop"
            cells.append(f"{1000 * sec:.1f} ms")
        logger.info(f"| {size} | " + " | ".join(cells) + " |")
    if args.stack:
        logger.info("")
        logger.info(f"| T x B x H, {args.stack} layers | FF on | FF off | nn.LSTM | nn.LSTM / FF on |")
        logger.info("|---|---|---|---|---|")
        for size in args.sizes:
            t, b, h = map(int, size.split("x"))
            on = time_stack(t, b, h, args.stack, args.device, args.repeats, True)
            off = time_stack(t, b, h, args.stack, args.device, args.repeats, False)
            logger.info(f"| {size} | {1000 * on['ours']:.1f} ms | {1000 * off['ours']:.1f} ms | "
                        f"{1000 * on['nn.LSTM']:.1f} ms | {on['nn.LSTM'] / on['ours']:.2f}x |")


if __name__ == "__main__":
    main()
