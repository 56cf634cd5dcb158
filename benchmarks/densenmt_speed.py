"""Training and beam-search speed of DenseNMT archs against fairseq's ``fconv`` as BASE-4L.

Synthetic batches (random tokens, fixed lengths) so that only the models differ:
training throughput (target tokens/s of forward + backward + SGD step) and beam-5
decoding (sentences/s, with incremental state). fconv is configured as BASE-4L
(embed 256, 4+4 layers of (256, 3), out embed 256). Usage::

    python -m benchmarks.densenmt_speed --vocab 10000 --batch 64 --len 20 --steps 5
"""
import argparse
import json
import logging
import time
from types import SimpleNamespace

import torch
from fairseq.data import Dictionary
from fairseq.models import ARCH_CONFIG_REGISTRY
from fairseq.models.fconv import FConvModel
from fairseq.sequence_generator import SequenceGenerator

import fairseq_dense  # noqa: F401
from fairseq_dense.logging_setup import configure_logging
from fairseq_dense.models.densenmt import DenseNMTConfig, DenseNMTModel

logger = logging.getLogger("benchmarks.densenmt_speed")


def dictionary(vocab: int) -> Dictionary:
    d = Dictionary()
    for i in range(vocab - d.nspecial):
        d.add_symbol(f"w{i}")
    return d


def build(name: str, d: Dictionary):
    task = SimpleNamespace(source_dictionary=d, target_dictionary=d)
    if name == "fconv_base_4l":
        args = argparse.Namespace(
            arch="fconv", encoder_embed_dim=256, decoder_embed_dim=256, decoder_out_embed_dim=256,
            encoder_layers="[(256, 3)] * 4", decoder_layers="[(256, 3)] * 4", decoder_attention="True",
            dropout=0.2, max_source_positions=1024, max_target_positions=1024,
            share_input_output_embed=False, encoder_embed_path=None, decoder_embed_path=None)
        ARCH_CONFIG_REGISTRY["fconv"](args)
        return FConvModel.build_model(args, task)
    ns = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[name](ns)
    cfg = DenseNMTConfig(**{k: v for k, v in vars(ns).items() if k in DenseNMTConfig.__dataclass_fields__})
    return DenseNMTModel.build_model(cfg, task)


def batch(d: Dictionary, bsz: int, length: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(d.nspecial, len(d), (bsz, length), generator=g)
    src[:, -1] = d.eos()
    tgt = torch.randint(d.nspecial, len(d), (bsz, length), generator=g)
    tgt[:, -1] = d.eos()
    prev = torch.cat([tgt.new_full((bsz, 1), d.eos()), tgt[:, :-1]], dim=1)
    return src, torch.full((bsz,), length), prev, tgt


def train_speed(model, d, bsz, length, steps):
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    src, lengths, prev, tgt = batch(d, bsz, length)

    def step():
        opt.zero_grad()
        out, _ = model(src, lengths, prev)
        loss = torch.nn.functional.cross_entropy(out.view(-1, out.size(-1)), tgt.view(-1))
        loss.backward()
        opt.step()

    step()  # warm-up
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * bsz * length / (time.perf_counter() - start)


@torch.no_grad()
def decode_speed(model, d, bsz, length, beam):
    model.eval()
    src, lengths, _, _ = batch(d, bsz, length, seed=1)
    gen = SequenceGenerator([model], d, beam_size=beam, max_len_b=length, min_len=length)
    sample = {"net_input": {"src_tokens": src, "src_lengths": lengths}}
    gen.generate([model], sample)  # warm-up
    start = time.perf_counter()
    gen.generate([model], sample)
    return bsz / (time.perf_counter() - start)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=["fconv_base_4l", "densenmt_base_4l", "densenmt_4l_2"])
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--len", type=int, default=20)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--beam", type=int, default=5)
    args = p.parse_args(argv)
    configure_logging("%(message)s")
    torch.manual_seed(0)
    d = dictionary(args.vocab)
    results = {}
    for name in args.models:
        model = build(name, d)
        results[name] = {
            "params_M": sum(p.numel() for p in model.parameters()) / 1e6,
            "train_tgt_tokens_per_s": train_speed(model, d, args.batch, args.len, args.steps),
            "beam_sentences_per_s": decode_speed(model, d, args.batch, args.len, args.beam),
        }
        logger.info(f"{name}: {json.dumps(results[name])}")
    logger.info(json.dumps({"config": vars(args), "results": results}, indent=2))
    return results


if __name__ == "__main__":
    main()
