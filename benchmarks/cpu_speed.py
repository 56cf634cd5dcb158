"""CPU speed at the quick-start's size: every family against its fairseq counterpart, or a speed path on and off.

Each family's ``<family>_small`` on the quick-start's data and recipe, one thread, the sides taking turns
(``measure.timed_rounds``): against the quick-start's ``--baseline`` counterpart, training tokens/s and beam-5
sentences/s by thread CPU time and wall clock; with ``--path`` (:data:`PATHS`), off seconds / on seconds, the
gain that decides whether a speed path stays. Method and figures: docs/benchmarks.md.
"""

import argparse
import logging
import os
import time
from typing import Dict, List

import torch

from benchmarks import measure, op_counts, report, synthetic

logger = logging.getLogger("benchmarks.cpu_speed")

#: the quick-start's training batch size
MAX_TOKENS = 2048
SIDES = ("ours", "baseline")


def quickstart_data(work_dir: str) -> str:
    """The quick-start's prepared bundled corpus (``<work_dir>/tatoeba-deu-eng/data/bin``), made if absent."""
    from fairseq_dense.cli import quickstart
    from fairseq_dense.data import prepare as prep

    parser = quickstart.get_parser()  # its defaults: the bundled corpus, its languages and BPE merges
    raw, src, tgt, name, merges = quickstart.choose_corpus(parser.parse_args(["--work-dir", work_dir]), parser)
    return os.path.join(prep.prepare(raw, os.path.join(work_dir, name, "data"), src, tgt, merges), "bin")


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
            models, sentences=a.decode_sentences, rounds=a.rounds, batch_size=a.decode_batch_size,
            length=a.decode_length,
        )  # fmt: skip
    entry["load_after"] = os.getloadavg()
    return entry


def table(entries: List[Dict]) -> str:
    """One markdown row per family: the ratios of thread CPU time (median, and the range over the
    rounds), then those of the wall clock."""

    def ratio(e, key, clock="cpu_s"):
        return report.spread(measure.ratios(e[key]["rounds"], "baseline", "ours", clock)) if key in e else "-"

    rows = []
    for e in entries:
        base = f"`{e['baseline'][1]} (width {e.get('baseline_width', '?')})`"
        params = f"{e['ours_params'] / 1e6:.2f}M / {e['baseline_params'] / 1e6:.2f}M"
        wall = f"{ratio(e, 'train', 's')} / {ratio(e, 'decode', 's')}"
        load = f"{e['load_before'][0]:.1f} / {e['load_after'][0]:.1f}"
        rows.append([e["family"], f"`{e['ours'][1]}`", base, params, ratio(e, "train"), ratio(e, "decode"), wall, load])
    header = "family | ours | counterpart | params ours / counterpart | training tok/s ratio | beam-5 sent/s ratio "
    return "\n".join(report.table(header + "| wall-clock: training / beam-5 | load avg", rows))


def on_off(items: list, rounds: int, step) -> dict:
    """``step(on, item, i)`` with the path on and off, a warm-up call of each, then ``rounds`` alternating
    rounds: the gain (median of off seconds / on seconds, thread CPU time) and the rounds."""
    step(True, items[0], 0), step(False, items[0], 0)
    res = measure.timed_rounds({"on": True, "off": False}, items, rounds, step, "cpu")
    return {"gain": measure.ratios(res["rounds"], "off", "on")["median"], "rounds": res["rounds"]}


def beam_gain(family: str, data_bin: str, rounds: int, toggle, batch_size: int = 64) -> dict:
    """Beam 5 on 128 test sentences in batches of ``batch_size`` forced to 12 tokens (untrained
    ``<family>_small``), ``toggle(model, on)`` setting the path on or off before each batch."""
    torch.manual_seed(1)
    model, task = decode_models(data_bin, ["--arch", f"{family}_small"])
    batches = measure.decode_batches(task.dataset("test"), 128, batch_size, "cpu")
    gen = measure.generator(model, task, 5, 12)

    def run(on, sample, i):
        toggle(model, on)
        return gen.generate([model], sample)

    with torch.inference_mode():
        return on_off(batches, rounds, run)


def weight_cache(family: str, data_bin: str, rounds: int) -> dict:
    from fairseq_dense.modules.inference_weights import InferenceWeightCache

    cached = InferenceWeightCache.cached_weight

    def toggle(model, on):
        InferenceWeightCache.cached_weight = cached if on else (lambda self, key, derive: derive())

    try:
        return beam_gain(family, data_bin, rounds, toggle, batch_size=16)
    finally:
        InferenceWeightCache.cached_weight = cached


def float32_fast_forward(family: str, data_bin: str, rounds: int) -> dict:
    """Training steps (``measure.train_step``) of ``<family>_small`` on 4 synthetic 2,048-token batches, in
    float32 and under bfloat16 autocast, with Deep-Att's float32 region of the fast-forward stack (on: the
    default, issue 60) and without it (off: all in autocast's dtype); a gain below 1: the region costs time."""
    from fairseq_dense.models.fast_forward_lstm import decoder, encoder
    from fairseq_dense.modules import low_precision

    side = synthetic.build(data_bin, ["--arch", f"{family}_small"])
    vocab = len(side[0].target_dictionary)
    lengths = [synthetic.batch_lengths(MAX_TOKENS, 128, quantile=q) for q in (0.2, 0.4, 0.6, 0.8)]
    samples = [synthetic.make_batch(n, vocab, seed=i) for i, n in enumerate(lengths)]
    plain = low_precision.outside_low_precision
    out = {}
    for name, dtype in (("float32", None), ("bfloat16", torch.bfloat16)):

        def run(on, sample, i):
            for module in (encoder, decoder):
                module.outside_low_precision = plain if on else (lambda x, like, enabled=True: plain(x, like, False))
            try:
                measure.train_step(side, sample, i + 1, dtype=dtype)
            finally:
                encoder.outside_low_precision = decoder.outside_low_precision = plain

        res = on_off(samples, rounds, run)
        out[f"{name} gain"], out[f"{name} rounds"] = res["gain"], res["rounds"]
    return out


def fused_adam(family: str, data_bin: str, rounds: int) -> dict:
    ours = ["--arch", f"{family}_small"]
    sides = {"on": ours + ["--optimizer", "fused_adam"], "off": ours}
    sides = {name: synthetic.build(data_bin, args, max_tokens=MAX_TOKENS) for name, args in sides.items()}
    res = measure.train_speed(sides, batches=4, rounds=rounds)
    sample = synthetic.make_batch(synthetic.batch_lengths(MAX_TOKENS), len(sides["on"][0].target_dictionary))
    launches = {}
    for name, side in sides.items():
        with op_counts.StepCounter(side[1]) as counter:
            measure.train_step(side, sample, 9, counter=counter)
        launches[name] = dict(counter.launches)
    return {
        "gain": measure.ratios(res["rounds"], "off", "on")["median"],
        **{f"optimizer launches {n}": launches[n]["optimizer"] for n in sides},
        **{f"step launches {n}": sum(launches[n].values()) for n in sides},
        "rounds": res["rounds"],
    }


PATHS = {
    "weight-cache": weight_cache,
    "fused-adam": fused_adam,
    "reorder-skip": lambda *args: beam_gain(*args, lambda model, on: model.set_beam_size(5 if on else 1)),
    "float32-fast-forward": float32_fast_forward,
}


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = p.add_argument
    add("--families", nargs="*", help="registered families (default: all)")
    add("--work-dir", default="quickstart-work", help="the quick-start's work folder (its prepared data)")
    add("--out", default="benchmarks/out/cpu-speed", help="folder for results.json and results.md (not --path)")
    add("--rounds", type=int, default=7, help="rounds of each comparison; ratios are their median")
    add("--train-batches", type=int, default=4, help="training batches per round (0: no training figure)")
    add("--decode-sentences", type=int, default=128, help="test sentences per round (0: no decoding figure)")
    add("--decode-batch-size", type=int, default=64, help="sentences per batch (the quick-start's)")
    add("--decode-length", type=int, default=12, help="output length forced in every hypothesis")
    add("--path", choices=sorted(PATHS), help="time this speed path on and off instead (per family)")
    return p


def main(argv=None) -> int:
    a = get_parser().parse_args(argv)
    logging.basicConfig(format="%(asctime)s | %(message)s", datefmt="%H:%M:%S", level=logging.INFO)
    torch.set_num_threads(1)
    from fairseq_dense.baselines import our_families

    families = a.families or list(our_families())
    data_bin = quickstart_data(a.work_dir)
    if a.path:
        for family in families:
            res = PATHS[a.path](family, data_bin, a.rounds)
            figures = ", ".join(f"{k} {v:.3f}" for k, v in res.items() if not k.endswith("rounds"))
            print(f"{a.path} {family}: {figures} (thread CPU time, median of {a.rounds} rounds)")
            for k in (k for k in res if k.endswith("rounds")):
                print(f"  {k}:", [{side: round(v, 3) for side, v in r.items()} for r in res[k]])
        return 0
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
