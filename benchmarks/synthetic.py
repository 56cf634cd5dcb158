"""Synthetic batches and models built as ``fairseq-train`` builds them, with no corpus (proxies, GPU figures):
sentence lengths log-normal, close to a subword-segmented news corpus (median 24 target tokens), a batch what
fairseq's ``batch_by_size`` makes of length-sorted sentences, models built on the two dictionary files alone."""

import math
import os
from typing import Dict, List

import torch

#: median target length (tokens, end of sentence included) and log-normal sigma
MEDIAN_LEN, SIGMA = 24.0, 0.55
#: source length = target length x a factor with this log-normal sigma (median 1.0)
SRC_RATIO_SIGMA = 0.15


def write_dicts(folder: str, vocab: int, src: str = "de", tgt: str = "en") -> str:
    """``folder`` with ``dict.{src,tgt}.txt`` of ``vocab`` entries, fairseq's 4 specials included (at least 8)."""
    if vocab < 8:
        raise ValueError(f"vocab: {vocab} is too small (at least 8 entries, 4 of them fairseq's specials)")
    os.makedirs(folder, exist_ok=True)
    lines = "".join(f"w{i} {vocab - i}\n" for i in range(vocab - 4))
    for lang in (src, tgt):
        with open(os.path.join(folder, f"dict.{lang}.txt"), "w") as f:
            f.write(lines)
    return folder


def batch_lengths(max_tokens: int, max_len: int = 128, *, quantile: float = 0.5, seed: int = 1) -> List[tuple]:
    """The (source, target) lengths, end of sentence included, of one batch: sentences from the ``quantile`` of
    20,000 sorted by target then source length on, as many as fit ``max_tokens`` (batch size x longest)."""
    g = torch.Generator().manual_seed(seed)
    tgt = torch.exp(math.log(MEDIAN_LEN) + SIGMA * torch.randn(20000, generator=g))
    src = tgt * torch.exp(SRC_RATIO_SIGMA * torch.randn(20000, generator=g))
    pairs = [(int(s.clamp(2, max_len).round()), int(t.clamp(2, max_len).round())) for s, t in zip(src, tgt)]
    pool = sorted(pairs, key=lambda p: (p[1], p[0]))
    out: List[tuple] = []
    longest = 0
    for s, t in pool[min(int(quantile * len(pool)), len(pool) - 1) :]:
        longest = max(longest, s, t)
        if out and (len(out) + 1) * longest > max_tokens:
            break
        out.append((s, t))
    return out


def make_batch(lengths: List[tuple], vocab: int, *, seed: int = 1, device: str = "cpu") -> Dict:
    """A fairseq translation sample: left-padded source, right-padded target, ``prev_output_tokens``
    the target shifted right behind end-of-sentence (pad 1, eos 2, tokens from 4), sentences in
    decreasing source length as fairseq's collater orders them (``lstm`` packs on that)."""
    from fairseq.data.data_utils import collate_tokens
    from fairseq.utils import apply_to_sample

    g, pad, eos = torch.Generator().manual_seed(seed), 1, 2
    lengths = sorted(lengths, key=lambda p: -p[0])

    def sentence(n: int) -> torch.Tensor:
        return torch.cat([torch.randint(4, vocab, (n - 1,), generator=g), torch.tensor([eos])])

    src, tgt = zip(*[(sentence(s), sentence(t)) for s, t in lengths])
    sample = {
        "id": torch.arange(len(lengths)),
        "nsentences": len(lengths),
        "ntokens": sum(t for _, t in lengths),
        "net_input": {
            "src_tokens": collate_tokens(src, pad, eos, left_pad=True),
            "src_lengths": torch.tensor([s for s, _ in lengths]),
            "prev_output_tokens": collate_tokens(tgt, pad, eos, left_pad=False, move_eos_to_beginning=True),
        },
        "target": collate_tokens(tgt, pad, eos, left_pad=False),
    }
    return apply_to_sample(lambda t: t.to(device), sample)


def train_args(
    dict_dir: str, arch_args: List[str], *, max_tokens: int = 4096, amp: bool = False, device: str = "cpu"
) -> List[str]:
    """``fairseq-train`` arguments of the harness (task, criterion, Adam, clipping) on ``dict_dir``
    (``--cpu`` on ``device`` cpu, where ``amp``'s float16 autocast and loss scaling turn themselves off)."""
    from benchmarks import measure, run

    options = ["--max-tokens", str(max_tokens), "--budget-minutes", "600", "--log-interval", "10"]
    options += ["--validate-interval-updates", "0", "--device", device] + (["--amp"] if amp else [])
    a = run.get_parser().parse_args(options)  # the harness's recipe (rate, warm-up, seed, languages)
    return measure.common_args(dict_dir, os.path.join(dict_dir, "unused-save-dir"), a) + list(arch_args)


def build(dict_dir: str, arch_args: List[str], *, max_tokens: int = 4096):
    """``(task, model, criterion, optimizer, cfg)`` as ``fairseq-train --cpu`` builds them (seed 1)."""
    from benchmarks import measure

    torch.manual_seed(1)
    return measure.build_trainable(train_args(dict_dir, arch_args, max_tokens=max_tokens))
