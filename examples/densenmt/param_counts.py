"""Parameter counts of the named DenseNMT architectures for a given vocabulary size.

Usage: python examples/densenmt/param_counts.py [--vocab 25000] [--max-positions 1024] [--factorized 64]
Prints a Markdown table (total, embeddings+softmax, rest).
"""

import argparse
import logging
import os
import tempfile

import torch

from fairseq_dense.baselines import build_in_process, count_params, our_families
from fairseq_dense.logging_setup import configure_logging


def count(data: str, arch: str, max_positions: int, factorized=None):
    """``(total, embeddings + softmax)`` of ``arch`` built (on the meta device) on the dictionaries in ``data``."""
    args = ["--arch", arch, "-s", "src", "-t", "tgt", "--max-source-positions", str(max_positions)]
    args += ["--max-target-positions", str(max_positions)]
    args += ["--factorized-embed-dim", str(factorized)] if factorized else []
    with torch.device("meta"):
        model, _ = build_in_process(data, args)
    vocab_params = sum(m.weight.numel() for m in (model.encoder.embed_tokens, model.decoder.embed_tokens))
    return count_params(model), vocab_params + count_params(model.decoder.fc3)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=25000)
    p.add_argument("--max-positions", type=int, default=1024)
    p.add_argument("--factorized", type=int, default=None)
    args = p.parse_args()
    configure_logging("%(message)s")
    rows = ["| arch | total (M) | embeddings + softmax (M) | rest (M) |", "|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as data:
        for lang in ("src", "tgt"):  # the vocabulary: fairseq's 4 special symbols and vocab - 4 words
            with open(os.path.join(data, f"dict.{lang}.txt"), "w") as f:
                f.writelines(f"w{i} 1\n" for i in range(args.vocab - 4))
        for arch in our_families()["densenmt"]:
            total, emb = count(data, arch, args.max_positions, args.factorized)
            rows.append(f"| `{arch}` | {total / 1e6:.2f} | {emb / 1e6:.2f} | {(total - emb) / 1e6:.2f} |")
    logging.getLogger(__name__).info("\n".join(rows))


if __name__ == "__main__":
    main()
