"""Parameter counts of the named DenseNMT architectures for a given vocabulary size.

Usage: python examples/densenmt/param_counts.py [--vocab 25000] [--max-positions 1024]
Prints a Markdown table (total, embeddings+softmax, rest).
"""

import argparse
import logging

import torch
from fairseq.data import Dictionary
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY

import fairseq_dense  # noqa: F401
from fairseq_dense.logging_setup import configure_logging
from fairseq_dense.models.densenmt import DenseNMTConfig, DenseNMTModel

ARCHS = [arch for arch, model in ARCH_MODEL_NAME_REGISTRY.items() if model == "densenmt"]  # every preset


class _Task:
    def __init__(self, d):
        self.source_dictionary = self.target_dictionary = d


def count(arch: str, vocab: int, max_positions: int, factorized=None):
    ns = argparse.Namespace(max_source_positions=max_positions, max_target_positions=max_positions)
    if factorized:
        ns.factorized_embed_dim = factorized
    ARCH_CONFIG_REGISTRY[arch](ns)
    cfg = DenseNMTConfig(**{k: v for k, v in vars(ns).items() if k in DenseNMTConfig.__dataclass_fields__})
    d = Dictionary()
    for i in range(vocab - d.nspecial):
        d.add_symbol(f"w{i}")
    with torch.device("meta"):
        model = DenseNMTModel.build_model(cfg, _Task(d))
    total = sum(p.numel() for p in model.parameters())
    vocab_params = sum(m.weight.numel() for m in (model.encoder.embed_tokens, model.decoder.embed_tokens))
    vocab_params += sum(p.numel() for p in model.decoder.fc3.parameters())
    return total, vocab_params


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=25000)
    p.add_argument("--max-positions", type=int, default=1024)
    p.add_argument("--factorized", type=int, default=None)
    args = p.parse_args()
    configure_logging("%(message)s")
    rows = ["| arch | total (M) | embeddings + softmax (M) | rest (M) |", "|---|---|---|---|"]
    for arch in ARCHS:
        total, emb = count(arch, args.vocab, args.max_positions, args.factorized)
        rows.append(f"| `{arch}` | {total / 1e6:.2f} | {emb / 1e6:.2f} | {(total - emb) / 1e6:.2f} |")
    logging.getLogger(__name__).info("\n".join(rows))


if __name__ == "__main__":
    main()
