"""How much gradient reaches the bottom encoder layer, with and without fast-forward connections?

Zhou et al. (2016), https://arxiv.org/abs/1606.04199, motivate the FF connections
by the gradient that deep stacked LSTMs lose on the way down (Sec. 3.1, Table 2:
without FF the 9/7 model could not be trained). This script builds the same
Deep-Att model twice (FF on, ``--no-fast-forward``), trains both for a few Adam
steps on a synthetic copy batch stream (same seed, same data), and reports the
gradient norm of every encoder layer's feed-forward matrix ``W_f`` in column 1,
bottom to top, at initialisation and after the last step.

Usage::

    OMP_NUM_THREADS=1 python -m benchmarks.fast_forward_lstm_gradnorm \
        [--encoder-layers 9 --decoder-layers 7 --hidden 512 --embed 256] [--steps 20]
"""
import argparse
import logging
from typing import Dict, List

import torch

import fairseq_dense  # noqa: F401
from fairseq_dense.logging_setup import configure_logging
from fairseq_dense.models.fast_forward_lstm import FastForwardLSTMConfig, FastForwardLSTMModel

logger = logging.getLogger("benchmarks.fast_forward_lstm_gradnorm")


class _Task:
    def __init__(self, d):
        self.source_dictionary = self.target_dictionary = d


def copy_batch(d, batch: int, length: int, g: torch.Generator):
    """Source = random words + EOS; target = the same sequence (teacher forcing)."""
    src = torch.randint(d.nspecial, len(d), (batch, length), generator=g)
    src[:, -1] = d.eos()
    prev = torch.cat([torch.full((batch, 1), d.eos()), src[:, :-1]], dim=1)
    return src, torch.full((batch,), length), prev, src


def layer_grad_norms(model, d, args, g) -> Dict[str, List[float]]:
    src, lengths, prev, tgt = copy_batch(d, args.batch, args.length, g)
    model.zero_grad()
    out, _ = model(src, lengths, prev)
    torch.nn.functional.cross_entropy(out.reshape(-1, out.size(-1)), tgt.reshape(-1)).backward()
    return [layer.ff.weight.grad.norm().item() for layer in model.encoder.columns[0].layers]


def run(fast_forward: bool, d, args) -> Dict[str, List[float]]:
    torch.manual_seed(args.seed)
    cfg = FastForwardLSTMConfig(
        encoder_layers=args.encoder_layers, decoder_layers=args.decoder_layers, encoder_embed_dim=args.embed,
        decoder_embed_dim=args.embed, encoder_hidden_size=args.hidden, decoder_hidden_size=args.hidden,
        encoder_fc_dim=args.hidden, attention_dim=args.hidden, no_fast_forward=not fast_forward,
        init_std=args.init_std, dropout=0.0,
    )
    model = FastForwardLSTMModel.build_model(cfg, _Task(d))
    g = torch.Generator().manual_seed(args.seed)
    result = {"init": layer_grad_norms(model, d, args, g)}
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    for _ in range(args.steps):
        opt.step()
        layer_grad_norms(model, d, args, g)
    result[f"step {args.steps}"] = layer_grad_norms(model, d, args, g)
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--encoder-layers", type=int, default=9)
    p.add_argument("--decoder-layers", type=int, default=7)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--embed", type=int, default=256)
    p.add_argument("--init-std", type=float, default=0.07)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--length", type=int, default=20)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    configure_logging("%(message)s")
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(args.vocab):
        d.add_symbol(f"w{i}")
    results = {ff: run(ff, d, args) for ff in (True, False)}
    logger.info(f"||W_f grad|| per encoder layer of column 1 (bottom -> top), "
                f"{args.encoder_layers}/{args.decoder_layers} layers, H={args.hidden}")
    logger.info("| when | FF | " + " | ".join(f"L{k + 1}" for k in range(args.encoder_layers)) + " | bottom / top |")
    logger.info("|---|---|" + "---|" * (args.encoder_layers + 1))
    for when in results[True]:
        for ff in (True, False):
            norms = results[ff][when]
            logger.info(f"| {when} | {'on' if ff else 'off'} | " + " | ".join(f"{n:.2e}" for n in norms)
                        + f" | {norms[0] / max(norms[-1], 1e-30):.3g} |")


if __name__ == "__main__":
    main()
