"""Every family against its fairseq counterpart on the CPU, side by side, at the quick-start's size.

    python -m benchmarks.cpu_speed --out benchmarks/out/cpu-speed [--families weighted_transformer ...]

Each family's ``<family>_small`` against the counterpart the quick-start's ``--baseline`` pairs it with,
on the quick-start's data and recipe, one thread, the sides taking turns (``measure.timed_rounds``):
ratios of training tokens/s and beam-5 sentences/s by thread CPU time and wall clock. The method and
the figures: docs/benchmarks.md ("CPU speed at the quick-start's size").
"""

import argparse
import logging
import os
import time
from typing import Dict, List

import torch

from benchmarks import measure, report, synthetic

logger = logging.getLogger("benchmarks.cpu_speed")

#: the quick-start's training batch size and BPE merges
MAX_TOKENS, MERGES = 2048, 4000
SIDES = ("ours", "baseline")


def quickstart_data(work_dir: str) -> str:
    """The quick-start's prepared bundled corpus (``<work_dir>/tatoeba-deu-eng/data/bin``), made if absent."""
    from fairseq_dense.data import prepare as prep
    from fairseq_dense.data import tatoeba

    work = os.path.join(work_dir, tatoeba.NAME)
    raw = tatoeba.extract(os.path.join(work, "raw"))
    return os.path.join(prep.prepare(raw, os.path.join(work, "data"), tatoeba.SRC, tatoeba.TGT, MERGES), "bin")


def decode_models(data_bin: str, arch_args: List[str]):
    """``(model, task)`` built as ``fairseq-train`` builds it, in eval mode, the test split loaded."""
    task, model = synthetic.build(data_bin, arch_args)[:2]
    task.load_dataset("test")
    return model.eval(), task


def measure_family(family: str, data_bin: str, a) -> Dict:
    """Training and beam-5 ratios of ``<family>_small`` against its quick-start counterpart."""
    from fairseq_dense import baselines

    ours = ["--arch", f"{family}_small"]
    pairing, _, _ = baselines.match_baseline(data_bin, family, ours)
    base = pairing["baseline_args"]
    entry: Dict = {"family": family, "ours": ours, "baseline": base, "load_before": os.getloadavg()}
    entry.update((k, pairing[k]) for k in ("ours_params", "baseline_params", "baseline_width"))
    if a.train_batches:
        sides = {n: synthetic.build(data_bin, args, max_tokens=MAX_TOKENS) for n, args in zip(SIDES, (ours, base))}
        entry["train"] = measure.train_speed(sides, batches=a.train_batches, rounds=a.rounds)
    if a.decode_sentences:
        models = {n: decode_models(data_bin, args) for n, args in zip(SIDES, (ours, base))}
        entry["decode"] = measure.paired_decode(
            models,
            sentences=a.decode_sentences,
            rounds=a.rounds,
            batch_size=a.decode_batch_size,
            length=a.decode_length,
        )
    entry["load_after"] = os.getloadavg()
    return entry


def _spread(res: Dict, key: str = "cpu_s") -> str:
    """``median (lowest-highest)`` of the per-round ratios of one clock (``s``: wall, ``cpu_s``: thread CPU)."""
    ratios = measure.round_ratios(res["rounds"], "baseline", "ours", key)
    return f"{ratios[len(ratios) // 2]:.3f} ({ratios[0]:.2f}-{ratios[-1]:.2f})"


def table(entries: List[Dict]) -> str:
    """One markdown row per family: the ratios of thread CPU time (median, and the range over the
    rounds), then those of the wall clock."""
    lines = [
        "| family | ours | counterpart | params ours / counterpart | training tok/s ratio | beam-5 sent/s ratio "
        "| wall-clock: training / beam-5 | load avg |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        base = f"{e['baseline'][1]} (width {e.get('baseline_width', '?')})"
        train = _spread(e["train"]) if "train" in e else "-"
        decode = _spread(e["decode"]) if "decode" in e else "-"
        wall = " / ".join(_spread(e[k], "s") if k in e else "-" for k in ("train", "decode"))
        load = f"{e['load_before'][0]:.1f} / {e['load_after'][0]:.1f}"
        lines.append(
            f"| {e['family']} | `{e['ours'][1]}` | `{base}` | {e['ours_params'] / 1e6:.2f}M / "
            f"{e['baseline_params'] / 1e6:.2f}M | {train} | {decode} | {wall} | {load} |"
        )
    return "\n".join(lines)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = p.add_argument
    add("--families", nargs="*", help="registered families (default: all)")
    add("--work-dir", default="quickstart-work", help="the quick-start's work folder (its prepared data)")
    add("--out", default="benchmarks/out/cpu-speed", help="folder for results.json and results.md")
    add("--rounds", type=int, default=7, help="rounds of each comparison; ratios are their median")
    add("--train-batches", type=int, default=4, help="training batches per round (0: no training figure)")
    add("--decode-sentences", type=int, default=128, help="test sentences per round (0: no decoding figure)")
    add("--decode-batch-size", type=int, default=64, help="sentences per batch (the quick-start's)")
    add("--decode-length", type=int, default=12, help="output length forced in every hypothesis")
    add("--threads", type=int, default=1, help="torch threads")
    return p


def main(argv=None) -> int:
    a = get_parser().parse_args(argv)
    logging.basicConfig(format="%(asctime)s | %(message)s", datefmt="%H:%M:%S", level=logging.INFO)
    torch.set_num_threads(a.threads)
    from fairseq_dense.baselines import our_families

    families = a.families or list(our_families())
    data_bin = quickstart_data(a.work_dir)
    entries = []
    for family in families:
        t0 = time.time()
        entries.append(measure_family(family, data_bin, a))
        logger.info("%s (%.0f s)\n%s", family, time.time() - t0, table(entries[-1:]))
        results = {"options": vars(a), "torch": torch.__version__, "entries": entries}
        report.write_results(results, a.out, "results", lambda r: table(r["entries"]) + "\n")
    print(table(entries))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
