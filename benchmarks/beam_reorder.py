"""Beam search with and without skipping reorders between identical rows.

:mod:`fairseq_dense.modules.beam_rows` lets beam search keep a sentence's encoder
output and per-sentence decoder caches in place when a step's reorder only moves
rows among that sentence's beams. This decodes the same test batches with each of
our checkpoints of an earlier benchmark run twice, batch by batch in one process
(order alternating per round): once as shipped, once with every reorder done
(``keeps_rows`` patched to say no). It reports the speed ratio (median over rounds)
and checks that both give the same hypotheses. Usage::

    python -m benchmarks.beam_reorder benchmarks/results/tatoeba-cpu/results.json \
        [--threads 1] [--sentences 200] [--rounds 3] [--out FILE.json]
"""
import argparse
import contextlib
import json
import logging
import time
from unittest import mock

import torch

from benchmarks import decode as dec
from benchmarks import machine
from benchmarks.remeasure import run_dirs
from fairseq_dense.logging_setup import configure_logging
from fairseq_dense.modules import beam_rows

logger = logging.getLogger("benchmarks.beam_reorder")


def _never(groups, new_order):
    return False, None if groups is None else groups.index_select(0, new_order)


def compare(ckpt: str, data_bin: str, *, sentences: int = 200, rounds: int = 3, beam: int = 5,
            batch_size: int = 32, fixed_length: int = 20) -> dict:
    """Seconds of beam decoding with the skip and with every reorder, batch by batch."""
    from fairseq.sequence_generator import SequenceGenerator

    model, task = dec.load_checkpoint(ckpt, data_bin)
    task.load_dataset("test")
    dataset = task.dataset("test")
    batches = dec.spread_batches(dataset, sentences, batch_size, "cpu")
    gen = SequenceGenerator([model], task.target_dictionary, beam_size=beam, max_len_a=0,
                            max_len_b=fixed_length, min_len=fixed_length)
    variants = {"skip": None, "every_reorder": _never}

    def run(variant, sample):
        patch = variants[variant]
        with mock.patch.object(beam_rows, "keeps_rows", patch) if patch else contextlib.nullcontext():
            t0 = time.perf_counter()
            out = gen.generate([model], sample)
            return time.perf_counter() - t0, [h[0]["tokens"].tolist() for h in out]

    per_round, same = [], True
    with torch.inference_mode():
        for variant in variants:  # warm-up
            run(variant, batches[0])
        for r in range(rounds):
            seconds = {v: 0.0 for v in variants}
            order = list(variants) if r % 2 == 0 else list(reversed(variants))
            for sample in batches:
                hyps = {}
                for v in order:
                    s, hyps[v] = run(v, sample)
                    seconds[v] += s
                same &= hyps["skip"] == hyps["every_reorder"]
            per_round.append(seconds)
    ratios = sorted(p["every_reorder"] / p["skip"] for p in per_round)
    return {"speed_ratio_skip_vs_every_reorder": ratios[len(ratios) // 2], "ratios": ratios,
            "rounds": per_round, "same_hypotheses": same, "sentences": sum(len(b["id"]) for b in batches),
            "beam": beam, "batch_size": batch_size, "fixed_length": fixed_length}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="results.json of a benchmark run whose work folder still exists")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1: the least noisy)")
    p.add_argument("--sentences", type=int, default=200, help="test sentences decoded per round")
    p.add_argument("--rounds", type=int, default=3, help="rounds, the order of the two variants alternating")
    p.add_argument("--families", nargs="*", help="only these result keys (default: all)")
    p.add_argument("--out", help="write the figures here as JSON")
    a = p.parse_args(argv)
    configure_logging("%(asctime)s | %(name)s | %(message)s")
    torch.set_num_threads(a.threads)
    with open(a.results) as f:
        results = json.load(f)
    report = {"machine": machine.describe("cpu", a.threads), "threads": a.threads, "families": {}}
    for key, entry in results["families"].items():
        if a.families and key not in a.families:
            continue
        dirs = run_dirs(entry)
        if dirs is None:
            logger.warning("%s: checkpoints or data of the run are gone; skipped", key)
            continue
        got = compare(dirs[0], dirs[2], sentences=a.sentences, rounds=a.rounds)
        report["families"][key] = got
        logger.info("%s: skipping reorders x%.3f (rounds %s), same hypotheses: %s", key,
                    got["speed_ratio_skip_vs_every_reorder"], ", ".join("%.3f" % r for r in got["ratios"]),
                    got["same_hypotheses"])
    text = json.dumps(report, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
