"""Every GPU figure of the paper-size pairs in one run (``benchmarks/gpu_figures.sh`` runs it).

    python -m benchmarks.gpu_figures --device cuda --out OUT [--pairs wt_a deep_att ...] [--budget-s 270]
    python -m benchmarks.gpu_figures --device cpu --tiny --steps 1 ...     # the plumbing, on a CPU

First a bfloat16 (and float16) GEMM peak of this device, timed here. Then for every pair of
``PAPER_PAIRS`` (``counterparts.py``), both sides built as ``fairseq-train`` builds them, and
per precision: ``amp`` is fairseq's ``--amp`` (float16 autocast inside the task's train step,
fairseq's loss-scaling ``AMPOptimizer``), ``bf16`` bfloat16 autocast around the forward pass
(fairseq's ``--bf16`` would mean torch_xla), both with float32 weights and the harness's
criterion, Adam and clipping. On synthetic batches (``synthetic.py``; ``--max-tokens`` each,
lengths from 4 quantiles of the distribution, cycled) it measures: target tokens/s over
``--steps`` timed steps after ``--warmup`` steps, model FLOPs utilisation (matmul-class FLOPs
of one step, counted once per side by ``op_counts.StepCounter``, per second, over the
measured bfloat16 GEMM peak), peak memory, kernels per step (``torch.profiler``: every CUDA
activity of one step; on a CPU the ATen calls instead) next to the proxies' convention count,
and beam-5 sentences/s (fairseq's ``SequenceGenerator``, every hypothesis forced to
``--decode-length`` tokens as the harness does, the model cast to the precision's dtype as
``fairseq-generate --fp16`` does). ``gpu_figures.json`` and ``gpu_figures.md`` in ``--out`` are
rewritten after every measurement, so that a time-out still leaves what was measured;
``--budget-s`` skips what no longer fits.
"""

import argparse
import logging
import platform
import sys
import tempfile
import time
from typing import Dict, List

import torch

from benchmarks import counterparts, measure, op_counts, proxies, synthetic

logger = logging.getLogger("benchmarks.gpu_figures")
DTYPES = {"amp": torch.float16, "bf16": torch.bfloat16}


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def gemm_peak(device: str, dtype, n: int, iters: int) -> float:
    """FLOP/s of an ``n x n x n`` matrix product in ``dtype``, best of ``iters`` timed calls."""
    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(iters):
        sync(device)
        t0 = time.perf_counter()
        a @ b
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def step(side, sample, precision: str, update: int) -> None:
    """One training step in ``precision`` (``amp``: fairseq's own ``--amp`` path; ``bf16``)."""
    if precision == "amp":
        measure._train_step(side, sample, update)
    else:
        proxies.train_step(side, sample, autocast=True, dtype=DTYPES[precision], update=update)


def count_kernels(side, sample, precision: str, device: str) -> Dict:
    """GPU activities of one step by ``torch.profiler`` (on a CPU: ATen calls); top kernel names."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        step(side, sample, precision, 3)
        sync(device)
    # the raw kineto events: building the profiler's FunctionEvents for tens of thousands of calls takes seconds
    events = [(e.name(), e.device_type()) for e in prof.profiler.kineto_results.events()]
    if device == "cuda":
        kernels = [name for name, kind in events if kind == torch.autograd.DeviceType.CUDA]
    else:
        kernels = [name for name, kind in events if name.startswith("aten::")]
    names: Dict[str, int] = {}
    for name in kernels:
        names[name[:80]] = names.get(name[:80], 0) + 1
    top = dict(sorted(names.items(), key=lambda kv: -kv[1])[:10])
    return {"kernels": len(kernels), "what": "CUDA activities" if device == "cuda" else "aten calls", "top": top}


def count_step(side, sample) -> Dict:
    """Matmul-class FLOPs per target token and the proxies' convention launches of one bfloat16
    step on ``sample`` (``op_counts``)."""
    counter = op_counts.StepCounter(side[1])
    try:
        with counter:
            proxies.train_step(side, sample, autocast=True, counter=counter, update=4)
    finally:
        counter.close()
    return {
        "matmul_flops_per_token": sum(counter.flops.values()) / sample["ntokens"],
        "low_precision_share": counter.low_precision_share(),
        "convention_launches": sum(counter.launches.values()),
    }


def beam_speed(side, decode_sample, precision: str, length: int, device: str) -> Dict:
    """Beam-5 sentences/s of the model cast to the precision's dtype (one warm-up call, one timed);
    the model is cast back to float32 afterwards (its weights then rounded: no matter for speed)."""
    task, model = side[0], side[1]
    model.eval().to(DTYPES[precision])
    gen = measure._generator(model, task, 5, length)
    try:
        with torch.no_grad():  # as fairseq-generate (inference_mode breaks the WT's weight cache, see docs)
            gen.generate([model], decode_sample)
            sync(device)
            t0 = time.perf_counter()
            gen.generate([model], decode_sample)
            sync(device)
            seconds = time.perf_counter() - t0
    finally:
        model.float()
    return {"sentences": decode_sample["nsentences"], "sentences_per_s": decode_sample["nsentences"] / seconds}


def measure_precision(side, batches, decode_sample, precision: str, a, peak: float, flops_per_token: float) -> Dict:
    """The training and decoding figures of one side in one precision (MFU: ``flops_per_token`` x
    tokens/s over ``peak`` FLOP/s)."""
    for i in range(a.warmup):
        step(side, batches[i % len(batches)], precision, 1 + i)
    if a.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    sync(a.device)
    t0 = time.perf_counter()
    tokens = 0
    for i in range(a.steps):
        sample = batches[i % len(batches)]
        step(side, sample, precision, 2 + i)
        tokens += sample["ntokens"]
    sync(a.device)
    seconds = time.perf_counter() - t0
    out = {
        "target_tokens_per_s": tokens / seconds,
        "step_s": seconds / a.steps,
        "mfu": flops_per_token * tokens / seconds / peak,
        "peak_memory_mib": torch.cuda.max_memory_allocated() / 2**20 if a.device == "cuda" else None,
    }
    out["kernels_per_step"] = count_kernels(side, batches[0], precision, a.device)
    out["beam5"] = beam_speed(side, decode_sample, precision, a.decode_length, a.device)
    return out


def build_side(dict_dir: str, args: List[str], device: str) -> Dict[str, tuple]:
    """One model with an ``amp`` side (fairseq's AMPOptimizer) and a ``bf16`` side (plain Adam), same weights."""
    from fairseq import optim

    task, model, criterion, amp_opt, cfg = synthetic.build(dict_dir, args, amp=True, device=device)
    params = [p for p in model.parameters() if p.requires_grad]
    return {
        "amp": (task, model, criterion, amp_opt, cfg),
        "bf16": (task, model, criterion, optim.build_optimizer(cfg.optimizer, params), cfg),
    }


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
    add("--out", default="benchmarks/out/gpu-figures")
    return p


def markdown(r: Dict) -> str:
    """The per-pair table of ``gpu_figures.json``."""
    peak = r["gemm_peak_tflops"]
    lines = [
        f"`{r['command']}`  ",
        f"{r['date']}, {r['device_name']}, torch {r['torch']}; GEMM peak bf16 {peak['bf16']:.1f} TFLOP/s, "
        f"fp16 {peak['amp']:.1f} TFLOP/s; batches of {r['max_tokens']} tokens, vocabulary {r['vocab']}.",
        "",
        "| pair | side | precision | tok/s | ratio | MFU | MFU ratio | peak MiB | kernels/step (convention) "
        "| beam-5 sent/s | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, e in r["pairs"].items():
        for precision in r["precisions"]:
            cells = {s: e.get(s, {}).get(precision) for s in ("ours", "counterpart")}
            for side, c in cells.items():
                if not isinstance(c, dict) or "target_tokens_per_s" not in c:
                    lines.append(f"| {name} | {side} | {precision} | {c if c else 'not measured'} |||||||")
                    continue
                base = cells["counterpart"] if isinstance(cells["counterpart"], dict) else {}

                def ratio(key, sub=None):
                    mine, theirs = (x.get(key) if sub is None else x.get(sub, {}).get(key) for x in (c, base))
                    return f"{mine / theirs:.2f}" if mine and theirs and side == "ours" else ""

                mfu = f"{c['mfu']:.1%}" if c.get("mfu") is not None else "-"
                mem = f"{c['peak_memory_mib']:.0f}" if c.get("peak_memory_mib") else "-"
                lines.append(
                    f"| {name} | {side} | {precision} | {c['target_tokens_per_s']:,.0f} "
                    f"| {ratio('target_tokens_per_s')} "
                    f"| {mfu} | {ratio('mfu')} | {mem} | {c['kernels_per_step']['kernels']:,} "
                    f"({e[side]['counts']['convention_launches']:,}) | {c['beam5']['sentences_per_s']:.1f} "
                    f"| {ratio('sentences_per_s', 'beam5')} |"
                )
    return "\n".join(lines) + "\n"


def write(r: Dict, out: str) -> None:
    """``gpu_figures.json`` and ``gpu_figures.md`` into ``out``."""
    proxies.write(r, out, "gpu_figures", markdown)


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
    r = {
        "command": "python -m benchmarks.gpu_figures " + " ".join(argv),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device_name": torch.cuda.get_device_name(0) if a.device == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "gemm_peak_tflops": {p: v / 1e12 for p, v in peak.items()},
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
    with tempfile.TemporaryDirectory() as tmp:
        dict_dir = synthetic.write_dicts(tmp, a.vocab)
        for name, pair in pairs.items():
            entry = r["pairs"].setdefault(name, {"family": pair["family"]})
            for side_name in ("ours", "counterpart"):
                args = pair[f"tiny_{side_name}"] if a.tiny else pair[side_name]
                entry[side_name] = {"arch_args": args}
                if time.time() - started > a.budget_s:
                    entry[side_name]["skipped"] = f"over --budget-s {a.budget_s:.0f}"
                    continue
                try:
                    sides = build_side(dict_dir, args, a.device)
                    entry[side_name]["params"] = sum(p.numel() for p in sides["amp"][1].parameters())
                    counts = count_step(sides["bf16"], batches[0])
                    entry[side_name]["counts"] = counts
                    for precision in a.precisions:
                        if time.time() - started > a.budget_s:
                            entry[side_name][precision] = f"skipped: over --budget-s {a.budget_s:.0f}"
                            continue
                        logger.info("%s %s %s", name, side_name, precision)
                        entry[side_name][precision] = measure_precision(
                            sides[precision],
                            batches,
                            decode_sample,
                            precision,
                            a,
                            peak["bf16"],
                            counts["matmul_flops_per_token"],
                        )
                        write(r, a.out)
                    del sides
                except Exception as e:  # one failing model must not lose the others' figures
                    logger.exception("%s %s failed", name, side_name)
                    entry[side_name]["error"] = f"{type(e).__name__}: {e}"
                    failed = True
                if a.device == "cuda":
                    torch.cuda.empty_cache()
                write(r, a.out)
    r["seconds"] = time.time() - started
    write(r, a.out)
    print(markdown(r))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
