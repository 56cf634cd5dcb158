"""Hardware-independent proxies of GPU training speed, each family against its fairseq counterpart.

Each pair of ``counterparts.PAPER_PAIRS``, built as ``fairseq-train`` builds it, takes one counted training step
(``op_counts``) on the same synthetic batch in float32 and under CPU bfloat16 autocast: kernel launches, the
low-precision share of the matmul FLOPs, saved bytes per target token, against :data:`TARGETS` (docs/benchmarks.md).
"""

import argparse
import logging
import sys
import tempfile
import time
from typing import Dict, List

import torch

from benchmarks import counterparts, measure, op_counts, report, synthetic

logger = logging.getLogger("benchmarks.proxies")

#: ours / counterpart at most (launches, saved bytes), ours at least (low-precision share)
TARGETS = {"launches": 1.5, "saved_bytes": 1.5, "low_precision": 0.99}


def measure_side(dict_dir: str, arch_args: List[str], sample: Dict) -> Dict:
    """The proxies of one model: a warm-up step, then a counted step in float32 and one under autocast."""
    side = synthetic.build(dict_dir, arch_args)
    model = side[1]
    out = {"arch_args": arch_args, "params": sum(p.numel() for p in model.parameters())}
    measure.train_step(side, sample)
    for mode, dtype in (("fp32", None), ("bf16", torch.bfloat16)):
        saved = op_counts.SavedBytes(model)
        t0 = time.perf_counter()
        with op_counts.StepCounter(model, saved) as counter:
            loss = float(measure.train_step(side, sample, 2, dtype=dtype, counter=counter, saved=saved))
        out[mode] = {
            "launches": dict(counter.launches),
            "launches_total": sum(counter.launches.values()),
            "low_precision_share": counter.low_precision_share(),
            "matmul_flops": dict(counter.flops),
            "unrecognised_matmul_ops": dict(counter.unrecognised),
            "fused_units": dict(counter.units),
            "saved_bytes": saved.bytes,
            "saved_tensors": saved.tensors,
            "saved_bytes_per_token": saved.bytes / sample["ntokens"],
            "saved_bytes_by_op": dict(saved.by_op.most_common(10)),
            "saved_bytes_in_rnn_units": saved.in_rnn_units,
            "top_ops": dict(counter.ops.most_common(12)),
            "loss": loss,
            "seconds": time.perf_counter() - t0,
        }
    return out


def ratios(ours: Dict, base: Dict) -> Dict:
    """ours / counterpart of each proxy, the low-precision shares, and which targets are met."""
    kinds = (("launches", "launches_total"), ("saved_bytes", "saved_bytes"))
    r = {f"{name}_{m}": ours[m][key] / base[m][key] for name, key in kinds for m in ("fp32", "bf16")}
    r["low_precision_ours"] = ours["bf16"]["low_precision_share"] or 0.0
    r["low_precision_counterpart"] = base["bf16"]["low_precision_share"] or 0.0
    r["meets"] = {name: max(r[f"{name}_fp32"], r[f"{name}_bf16"]) <= TARGETS[name] for name, _ in kinds}
    r["meets"]["low_precision"] = r["low_precision_ours"] >= TARGETS["low_precision"]
    return r


def measure_pair(dict_dir: str, pair: Dict, sample: Dict, tiny: bool = False) -> Dict:
    """Both sides of one ``PAPER_PAIRS`` entry (``tiny``: with its tiny widths) and their ratios."""
    sides = {}
    for side in ("ours", "counterpart"):
        args = pair[f"tiny_{side}"] if tiny else pair[side]
        logger.info("%s: %s", side, " ".join(args))
        sides[side] = measure_side(dict_dir, args, sample)
    return {"family": pair["family"], **sides, "ratios": ratios(sides["ours"], sides["counterpart"])}


def markdown(results: Dict) -> str:
    """The ratio table of ``proxies.json`` (a cell is marked ``MISS`` where its target is not met; the
    arch arguments of each side are in the JSON and in ``counterparts.PAPER_PAIRS``)."""
    t, m = results["targets"], results["machine"]
    lines = [
        f"Command: `{results['command']}`  ",
        f"Date {results['date']}, commit `{results['commit']}`, {m['cpu']}, {m['logical_cpus']} logical CPUs, "
        f"{m['threads']} thread(s), torch {results['torch']}, "
        f"bfloat16 LSTMs on {results.get('bf16_lstm_kernel', 'oneDNN')}.  ",
        f"Batch: {results['batch']['sentences']} sentences, {results['batch']['target_tokens']} target tokens "
        f"(source {results['batch']['max_source_len']} / target {results['batch']['max_target_len']} longest), "
        f"vocabulary {results['vocab']}.",
    ]
    rows = []
    for name, e in results["pairs"].items():
        if "error" in e:
            rows.append([name, f"error: {e['error']}"] + [""] * 9)
            continue
        o, c, r = e["ours"], e["counterpart"], e["ratios"]

        def ratio(kind, mode):
            return f"{r[f'{kind}_{mode}']:.2f}" + ("" if r[f"{kind}_{mode}"] <= t[kind] else " MISS")

        def kb(mode):
            return f"{o[mode]['saved_bytes_per_token'] / 1e3:.1f} / {c[mode]['saved_bytes_per_token'] / 1e3:.1f}"

        def units(x):  # the share saved inside fused RNN units (the CPU kernel's workspace: cuDNN's differs)
            return f"{x['bf16']['saved_bytes_in_rnn_units'] / (x['bf16']['saved_bytes'] or 1):.0%}"

        low = f"{r['low_precision_ours']:.1%} / {r['low_precision_counterpart']:.1%}"
        rows.append([
            name,
            f"{o['params'] / 1e6:.1f} / {c['params'] / 1e6:.1f}",
            f"{o['fp32']['launches_total']:,} / {c['fp32']['launches_total']:,}",
            *(ratio("launches", m) for m in ("fp32", "bf16")),
            low + ("" if r["meets"]["low_precision"] else " MISS"),
            *(f(m) for m in ("fp32", "bf16") for f in (kb, lambda m: ratio("saved_bytes", m))),
            f"{units(o)} / {units(c)}",
        ])  # fmt: skip
    header = (
        f"pair | params ours / cp (M) | launches/step fp32 ours / cp | ratio fp32 | ratio bf16 (<= {t['launches']}) "
        f"| low-precision share ours / cp (>= {t['low_precision']:.0%}) | saved KB/token fp32 ours / cp | ratio "
        f"| saved KB/token bf16 ours / cp | ratio (<= {t['saved_bytes']}) | bf16 saved inside RNN units ours / cp"
    )
    lines += ["", *report.table(header, rows)]
    return "\n".join(lines) + "\n"


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.proxies", description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", nargs="*", choices=list(counterparts.PAPER_PAIRS), help="pairs to measure (default: all)")
    p.add_argument("--vocab", type=int, default=8000, help="joint vocabulary size (fairseq's specials included)")
    p.add_argument("--max-tokens", type=int, default=2048, help="batch size x longest sentence of the one batch")
    p.add_argument("--tiny", action="store_true", help="each pair at its tiny widths (depth kept): the tests' sizes")
    p.add_argument("--out", default="benchmarks/out/proxies", help="folder for proxies.json and proxies.md")
    return p


def main(argv=None) -> int:
    a = get_parser().parse_args(argv)
    logging.basicConfig(format="%(asctime)s | %(name)s | %(message)s", datefmt="%H:%M:%S", level=logging.INFO)
    pairs = counterparts.paper_pairs(a.pairs)
    torch.set_num_threads(1)  # (the counts do not depend on it)
    lengths = synthetic.batch_lengths(a.max_tokens)
    sample = synthetic.make_batch(lengths, a.vocab)
    results = {
        **report.header("python -m benchmarks.proxies", argv),
        "bf16_lstm_kernel": "oneDNN" if op_counts.onednn_lstm_runs(torch.bfloat16) else "PyTorch's per-step GEMMs",
        "vocab": a.vocab,
        "batch": {
            "sentences": len(lengths),
            "target_tokens": sample["ntokens"],
            "max_source_len": max(s for s, _ in lengths),
            "max_target_len": max(t for _, t in lengths),
        },
        "targets": TARGETS,
        "conventions": {"unit_launches": op_counts.UNIT_LAUNCHES},
        "pairs": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        dict_dir = synthetic.write_dicts(tmp, a.vocab)
        for name, pair in pairs.items():
            logger.info("pair %s", name)
            try:
                results["pairs"][name] = measure_pair(dict_dir, pair, sample, tiny=a.tiny)
            except Exception as e:  # one failing model must not lose the others' figures
                logger.exception("pair %s failed", name)
                results["pairs"][name] = {"family": pair["family"], **report.error(e)}
            if a.out:
                report.write_results(results, a.out, "proxies", markdown)
    print(markdown(results))
    return 1 if any("error" in e for e in results["pairs"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
