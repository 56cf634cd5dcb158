"""Every GPU figure of the paper-size pairs in one run (``benchmarks/gpu_figures.sh`` runs it).

    python -m benchmarks.gpu_figures --device cuda --out OUT [--pairs wt_a deep_att ...] [--budget-s 270]
    python -m benchmarks.gpu_figures --device cpu --tiny --steps 1 ...     # the plumbing, on a CPU

First a float16 and bfloat16 GEMM peak of this device. Then, for every pair of ``PAPER_PAIRS``
(in the order of ``--pairs``), both sides built as ``fairseq-train`` builds them, per precision
(``amp``: fairseq's ``--amp``, float16 autocast with its loss-scaling ``AMPOptimizer``; ``bf16``:
bfloat16 autocast around the forward pass, as fairseq's ``--bf16`` would need torch_xla), on
synthetic batches (``synthetic.py``): target tokens/s, MFU (``op_counts`` matmul FLOPs, and six
times the matmul weights, x tokens/s over the measured and the datasheet peak), peak memory (a
model and optimizer of its own per precision), beam-5 sentences/s (hypotheses forced to
``--decode-length``, the model cast to the precision's dtype as ``fairseq-generate --fp16``
does); after every timing (the CUDA profiler stays active once started), kernels per step
(``torch.profiler``) beside the proxies' convention count. ``gpu_figures.{json,md}`` are
rewritten after every measurement; ``--budget-s`` skips what no longer fits.
"""

import argparse
import collections
import logging
import platform
import sys
import tempfile
import time
from typing import Dict

import torch

from benchmarks import counterparts, measure, op_counts, report, synthetic
from benchmarks.measure import sync, timed

logger = logging.getLogger("benchmarks.gpu_figures")
DTYPES = {"amp": torch.float16, "bf16": torch.bfloat16}
# dense (no sparsity) float16 / bfloat16 tensor-core peaks of the datasheets, TFLOP/s, by a name's part
DATASHEET_TFLOPS = {"H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.4, "H200": 989.4, "A100": 312.0}


def datasheet_peak(device_name: str):
    """The datasheet's dense float16/bfloat16 peak of ``device_name`` in FLOP/s, or None when unknown."""
    for key, tflops in DATASHEET_TFLOPS.items():  # the more specific names first
        if key in device_name:
            return tflops * 1e12
    return None


def gemm_peak(device: str, dtype, n: int, iters: int) -> float:
    """FLOP/s of an ``n x n x n`` matrix product in ``dtype``, best of ``iters`` timed calls."""
    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    return 2 * n**3 / min(timed(lambda: a @ b, device) for _ in range(iters))


def step(side, sample, precision: str, update: int) -> None:
    """One training step in ``precision`` (``amp``: fairseq's own ``--amp`` path; ``bf16``)."""
    measure.train_step(side, sample, update, dtype=DTYPES[precision])


def count_kernels(side, sample, precision: str, device: str) -> Dict:
    """GPU activities of one step by ``torch.profiler`` (on a CPU: ATen calls): their number, the most
    frequent names, the device's busy time and the kernels that take most of it."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    for update in (1, 2):  # the optimizer's state and the autotuners' choices, as in the timed steps
        step(side, sample, precision, update)
    sync(device)
    with profile(activities=activities) as prof:
        step(side, sample, precision, 3)
        sync(device)
    # the raw kineto events: building the profiler's FunctionEvents for tens of thousands of calls takes seconds
    # (a record_function range also appears on the GPU's timeline, as a user annotation spanning its kernels)
    events = [
        (e.name(), e.device_type(), e.duration_ns())
        for e in prof.profiler.kineto_results.events()
        if not e.is_user_annotation()
    ]
    if device == "cuda":
        kernels = [(name, ns) for name, kind, ns in events if kind == torch.autograd.DeviceType.CUDA]
    else:
        kernels = [(name, ns) for name, kind, ns in events if name.startswith("aten::")]
    count, busy = collections.Counter(), collections.Counter()
    for name, ns in kernels:
        count[name[:80]] += 1
        busy[name[:80]] += ns / 1e6
    return {
        "kernels": len(kernels),
        "what": "CUDA activities" if device == "cuda" else "aten calls",
        "top": dict(count.most_common(10)),
        # where the GPU's time goes: the device's busy milliseconds of the step and the longest kernels;
        # the step's wall time less the busy time is launch gaps and host work
        "busy_ms": sum(busy.values()) if device == "cuda" else None,
        "top_ms": {k: round(v, 3) for k, v in busy.most_common(8)},
    }


def count_step(side, sample) -> Dict:
    """Parameters, matmul-class FLOPs per target token and the proxies' convention launches of one
    bfloat16 step on ``sample`` (``op_counts``)."""
    with op_counts.counting(side[1]) as counter:
        measure.train_step(side, sample, 4, dtype=torch.bfloat16, counter=counter)
    # encoder weights once per source token: per target token, times the batch's source/target ratio
    src_per_tgt = sample["net_input"]["src_lengths"].sum().item() / sample["ntokens"]
    weights = counterparts.matmul_params(side[1], src_per_tgt)
    return {
        "params": sum(p.numel() for p in side[1].parameters()),
        "matmul_flops_per_token": sum(counter.flops.values()) / sample["ntokens"],
        "matmul_weights": weights,
        "six_n_flops_per_token": 6 * weights,
        "low_precision_share": counter.low_precision_share(),
        "convention_launches": sum(counter.launches.values()),
    }


def beam_speed(side, decode_sample, precision: str, length: int, device: str) -> Dict:
    """Beam-5 sentences/s of the model cast to the precision's dtype (one warm-up call, one timed);
    the model is cast back to float32 afterwards (its weights then rounded: no matter for speed)."""
    task, model = side[0], side[1]
    model.eval().to(DTYPES[precision])
    gen = measure.generator(model, task, 5, length)
    try:
        with torch.no_grad():  # as fairseq-generate (inference_mode breaks the WT's weight cache, see docs)
            gen.generate([model], decode_sample)
            seconds = timed(lambda: gen.generate([model], decode_sample), device)
    finally:
        model.float()
    return {"sentences": decode_sample["nsentences"], "sentences_per_s": decode_sample["nsentences"] / seconds}


def measure_precision(side, batches, decode_sample, precision: str, a, peaks: Dict, counts: Dict) -> Dict:
    """The timed training and decoding figures of one side in one precision: MFU is the counted FLOPs
    per token (and, ``mfu_6n``, six times the matmul weights) x tokens/s over each peak of ``peaks``
    (FLOP/s; None where unknown). No profiler runs here."""
    for i in range(a.warmup):
        step(side, batches[i % len(batches)], precision, 1 + i)
    if a.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    timed_batches = [batches[i % len(batches)] for i in range(a.steps)]
    seconds = timed(lambda: [step(side, s, precision, 2 + i) for i, s in enumerate(timed_batches)], a.device)
    tokens = sum(s["ntokens"] for s in timed_batches)
    out = {
        "target_tokens_per_s": tokens / seconds,
        "step_s": seconds / a.steps,
        "peak_memory_mib": torch.cuda.max_memory_allocated() / 2**20 if a.device == "cuda" else None,
    }
    for flops, key in (("matmul_flops_per_token", "mfu"), ("six_n_flops_per_token", "mfu_6n")):
        for peak_name, peak in peaks.items():
            suffix = "" if peak_name == "measured" else "_" + peak_name
            out[key + suffix] = counts[flops] * tokens / seconds / peak if peak else None
    # whether the timed steps trained: an AMP loss scale that kept falling means every step overflowed
    scaler = getattr(side[3], "scaler", None)
    out["amp_loss_scale"] = scaler.get_scale() if precision == "amp" and scaler is not None else None
    out["weights_finite"] = all(bool(torch.isfinite(p).all()) for p in side[1].parameters())
    try:
        out["beam5"] = beam_speed(side, decode_sample, precision, a.decode_length, a.device)
    except Exception as ex:  # the training figures stand without it
        logger.exception("beam search failed")
        out["beam5"] = {"error": f"{type(ex).__name__}: {ex}"}
    return out


def release(device: str) -> None:
    """Free what the last side held, so that the next one's peak memory is its own."""
    import gc

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_figures", description=__doc__.split("\n\n")[0])
    add = p.add_argument
    add("--device", choices=("cuda", "cpu"), default="cuda")
    add("--pairs", nargs="*", help=f"pairs (default: all of {', '.join(counterparts.PAPER_PAIRS)})")
    add("--precisions", nargs="*", choices=tuple(DTYPES), default=list(DTYPES))
    add("--tiny", action="store_true", help="each pair at its tiny widths (the CPU smoke run)")
    add("--vocab", type=int, default=32000, help="joint vocabulary size (a paper-size joint BPE)")
    add("--max-tokens", type=int, default=8192, help="tokens per batch (batch size x longest sentence)")
    add("--max-len", type=int, default=128, help="longest sentence of the length distribution")
    add("--warmup", type=int, default=3, help="untimed steps first (cuDNN autotuning, allocator growth)")
    add("--steps", type=int, default=8, help="timed training steps per side and precision")
    add("--decode-sentences", type=int, default=128)
    add("--decode-length", type=int, default=32, help="output length every hypothesis is forced to")
    add("--gemm-size", type=int, default=8192, help="n of the n x n x n GEMM of the peak")
    add("--budget-s", type=float, default=270, help="skip what starts later than this many seconds in")
    add("--kernels-s", type=float, default=40, help="seconds of the budget kept for the kernel counts at the end")
    add("--out", default="benchmarks/out/gpu-figures")
    return p


def _pct(x) -> str:
    return f"{x:.1%}" if x is not None else "-"


def markdown(r: Dict) -> str:
    """The per-pair table of ``gpu_figures.json``: figures of ours as ratios against the counterpart
    measured in the same run, MFU as a share of the measured GEMM peak and of the datasheet's."""
    peak = r["gemm_peak_tflops"]
    sheet = r.get("datasheet_peak_tflops")
    lines = [
        f"`{r['command']}`  ",
        f"{r['date']}, {r['device_name']}, torch {r['torch']}; GEMM peak measured: bf16 {peak['bf16']:.1f} TFLOP/s, "
        f"fp16 {peak['amp']:.1f} TFLOP/s; datasheet dense peak {f'{sheet:.1f} TFLOP/s' if sheet else 'unknown'}; "
        f"batches of {r['max_tokens']} tokens, vocabulary {r['vocab']}.",
        "",
        "MFU: counted matmul FLOPs per target token (6N: six times the matmul weights) x tokens/s, over the "
        "precision's measured GEMM peak / the datasheet peak. Ratios: ours / counterpart, same run.",
        "",
        "| pair | side | precision | tok/s | ratio | MFU measured (6N) | MFU datasheet (6N) | MFU ratio "
        "| peak MiB | ratio | kernels/step (convention), GPU busy | beam-5 sent/s | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, e in r["pairs"].items():
        for precision in r["precisions"]:
            cells = {s: e.get(s, {}).get(precision) for s in ("ours", "counterpart")}
            for side, c in cells.items():
                if not isinstance(c, dict) or "target_tokens_per_s" not in c:
                    why = c or e.get(side, {}).get("error") or e.get(side, {}).get("skipped") or "not measured"
                    lines.append(f"| {name} | {side} | {precision} | {why} ||||||||||")
                    continue
                base = cells["counterpart"] if isinstance(cells["counterpart"], dict) else {}

                def ratio(key, sub=None):
                    mine, theirs = (x.get(key) if sub is None else x.get(sub, {}).get(key) for x in (c, base))
                    return f"{mine / theirs:.2f}" if mine and theirs and side == "ours" else ""

                k = c.get("kernels_per_step", {})
                convention = e[side]["counts"]["convention_launches"]
                kernels = f"{k['kernels']:,} ({convention:,})" if "kernels" in k else f"- ({convention:,})"
                if k.get("busy_ms"):  # the device's busy share of the timed step's wall time
                    kernels += f", {k['busy_ms'] / 1e3 / c['step_s']:.0%}"
                mem = f"{c['peak_memory_mib']:.0f}" if c.get("peak_memory_mib") else "-"
                beam = c["beam5"].get("error") or f"{c['beam5']['sentences_per_s']:.1f}"
                if not c.get("weights_finite", True):
                    beam += " (weights not finite after the timed steps)"
                lines.append(
                    f"| {name} | {side} | {precision} | {c['target_tokens_per_s']:,.0f} "
                    f"| {ratio('target_tokens_per_s')} "
                    f"| {_pct(c.get('mfu'))} ({_pct(c.get('mfu_6n'))}) "
                    f"| {_pct(c.get('mfu_datasheet'))} ({_pct(c.get('mfu_6n_datasheet'))}) | {ratio('mfu')} "
                    f"| {mem} | {ratio('peak_memory_mib')} | {kernels} "
                    f"| {beam} | {ratio('sentences_per_s', 'beam5')} |"
                )
    lines += [
        "",
        "| pair | side | params | matmul weights | counted FLOPs/token | 6N FLOPs/token | counted / 6N |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, e in r["pairs"].items():
        for side in ("ours", "counterpart"):
            counts = e.get(side, {}).get("counts")
            if counts:
                lines.append(
                    f"| {name} | {side} | {e[side]['params']:,} | {counts['matmul_weights']:,.0f} "
                    f"| {counts['matmul_flops_per_token'] / 1e6:,.1f} M "
                    f"| {counts['six_n_flops_per_token'] / 1e6:,.1f} M "
                    f"| {counts['matmul_flops_per_token'] / counts['six_n_flops_per_token']:.2f} |"
                )
    return "\n".join(lines) + "\n"


def write(r: Dict, out: str) -> None:
    report.write_results(r, out, "gpu_figures", markdown)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = get_parser().parse_args(argv)
    logging.basicConfig(format="%(asctime)s | %(name)s | %(message)s", datefmt="%H:%M:%S", level=logging.INFO)
    started = time.time()
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda but torch sees no CUDA device")
    try:
        pairs = counterparts.paper_pairs(a.pairs)
    except ValueError as e:
        raise SystemExit(f"error: {e}")
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    n = a.gemm_size if a.device == "cuda" else min(a.gemm_size, 512)
    peak = {p: gemm_peak(a.device, DTYPES[p], n, 10 if a.device == "cuda" else 2) for p in DTYPES}
    device_name = torch.cuda.get_device_name(0) if a.device == "cuda" else platform.processor() or "cpu"
    datasheet = datasheet_peak(device_name) if a.device == "cuda" else None
    peaks = {p: {"measured": peak[p], "datasheet": datasheet} for p in DTYPES}
    r = {
        "command": "python -m benchmarks.gpu_figures " + " ".join(argv),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device_name": device_name,
        "torch": torch.__version__,
        "gemm_peak_tflops": {p: v / 1e12 for p, v in peak.items()},
        "datasheet_peak_tflops": datasheet / 1e12 if datasheet else None,
        "precisions": a.precisions,
        "max_tokens": a.max_tokens,
        "vocab": a.vocab,
        "pairs": {},
    }
    batches = [
        synthetic.make_batch(synthetic.batch_lengths(a.max_tokens, a.max_len, quantile=q), a.vocab, device=a.device)
        for q in (0.2, 0.4, 0.6, 0.8)
    ]
    pool = synthetic.sample_lengths(a.decode_sentences * 50, a.max_len, seed=2)[::50][: a.decode_sentences]
    decode_sample = synthetic.make_batch(pool, a.vocab, seed=2, device=a.device)
    failed = False

    def over_budget(kernels: bool = False) -> bool:
        """Past the budget (the timed figures leave ``--kernels-s`` of it to the kernel counts)."""
        return time.time() - started > a.budget_s - (0 if kernels else a.kernels_s)

    def guarded(what: str, args, precision: str, fn, *fn_args):
        """``fn(side, *fn_args)`` on a side built for ``precision`` (one model on the device at a time),
        or the error it raised: one failing model must not lose the others' figures."""
        nonlocal failed
        try:
            return fn(synthetic.build(dict_dir, args, amp=precision == "amp", device=a.device), *fn_args)
        except Exception as ex:
            logger.exception("%s failed", what)
            failed = True
            return {"error": f"{type(ex).__name__}: {ex}"}
        finally:
            release(a.device)
            write(r, a.out)

    skipped = f"over --budget-s {a.budget_s:.0f}"
    with tempfile.TemporaryDirectory() as tmp:
        dict_dir = synthetic.write_dicts(tmp, a.vocab)
        # the timed figures of every pair first: no profiler has run in this process yet
        for name, pair in pairs.items():
            entry = r["pairs"].setdefault(name, {"family": pair["family"]})
            for side_name in ("ours", "counterpart"):
                args = pair[f"tiny_{side_name}"] if a.tiny else pair[side_name]
                e = entry[side_name] = {"arch_args": args}
                if over_budget():
                    e["skipped"] = skipped
                    continue
                # the counts first, on a model of their own
                counted = guarded(f"{name} {side_name}", args, "bf16", count_step, batches[0])
                if "error" in counted:
                    e["error"] = counted["error"]
                    continue
                e["params"], e["counts"] = counted.pop("params"), counted
                for precision in a.precisions:
                    if over_budget():
                        e[precision] = f"skipped: {skipped}"
                        continue
                    logger.info("%s %s %s", name, side_name, precision)
                    e[precision] = guarded(
                        f"{name} {side_name} {precision}", args, precision, measure_precision,
                        batches, decode_sample, precision, a, peaks[precision], e["counts"],
                    )  # fmt: skip
                    if "error" in e[precision]:
                        e["error"] = e.pop(precision)["error"]
                        break
        # then the kernels of one step of each, under the profiler (CUPTI stays active afterwards)
        for name, entry in r["pairs"].items():
            for side_name in ("ours", "counterpart"):
                e = entry[side_name]
                for precision in [p for p in a.precisions if isinstance(e.get(p), dict)]:
                    e[precision]["kernels_per_step"] = (
                        {"skipped": skipped} if over_budget(kernels=True) else guarded(
                            f"{name} {side_name} kernels", e["arch_args"], precision, count_kernels,
                            batches[0], precision, a.device,
                        )
                    )  # fmt: skip
    r["seconds"] = time.time() - started
    write(r, a.out)
    print(markdown(r))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
