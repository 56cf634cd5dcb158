"""How the signal's scale changes through a 4-layer Deep-Att stack at initialisation.

    python examples/fast_forward_lstm/init_scale.py [--layers 4] [--size 192] [--stds 0.07 0.2]

One encoder column as the Multi30k pair builds it (``FastForwardLSTM``, input and hidden
192, four layers), initialised as the model initialises it (``W_f`` ~ N(0, std), ``W_hh``
zero, biases zero), fed inputs of the embeddings' scale (N(0, std)): per layer, the std of
the feed-forward block ``f`` that the next layer reads (with fast-forward connections),
the std of ``h``, and the share of gate pre-activations beyond +-3 (saturated sigmoids and
tanh). With FF the linear ``f`` path multiplies the scale by about ``std * sqrt(2H)`` per
layer; without FF each layer's ``h`` is all the next one gets.
"""

import argparse

import torch

from fairseq_dense.modules.fast_forward_lstm import FastForwardLSTM


def scales(std: float, fast_forward: bool, layers: int, size: int, steps: int = 20, batch: int = 32):
    """Per layer: (std of f, std of h, share of |f| > 3)."""
    torch.manual_seed(1)
    stack = FastForwardLSTM(size, size, layers, fast_forward=fast_forward, init_std=std).eval()
    fs, hs = [], []

    def record(layer, inputs, result):
        fs.append(layer.ff(inputs[0]))  # all 4H gate inputs W_f x + b (the fused LSTM call forms them inside)
        hs.append(result[1])  # h of (f, h, final)

    for layer in stack.layers:
        layer.register_forward_hook(record)
    with torch.no_grad():
        stack(torch.randn(steps, batch, size) * std, torch.full((batch,), steps))
    return [(f.std().item(), h.std().item(), (f.abs() > 3).float().mean().item()) for f, h in zip(fs, hs)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4, help="depth of the stack (default 4, the Multi30k pair's)")
    parser.add_argument("--size", type=int, default=192, help="input and hidden size H (default 192)")
    stds_help = "init stds to compare (default: 0.07, the paper's, and 0.2)"
    parser.add_argument("--stds", type=float, nargs="+", default=[0.07, 0.2], help=stds_help)
    args = parser.parse_args()
    print("| init std | FF | f std by layer | h std by layer | share of gate inputs beyond +-3 |")
    print("|---|---|---|---|---|")
    for std in args.stds:
        for ff in (True, False):
            rows = scales(std, ff, args.layers, args.size)
            cols = [", ".join(f"{r[i]:.2g}" for r in rows) for i in range(3)]
            print(f"| {std:g} | {'on' if ff else 'off'} | {cols[0]} | {cols[1]} | {cols[2]} |")


if __name__ == "__main__":
    main()
