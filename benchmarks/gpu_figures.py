"""The GPU figures: each family's paper-size pair trained side by side (``benchmarks/gpu_figures.sh`` runs it;
``--device cpu --tiny``: its dry run).

Both models of a pair train in one process by fairseq's ``Trainer`` on the same synthetic batches, taking turns
update by update (``measure.timed_rounds``), each result written to ``--out`` as it comes, what would start past
``--budget-s`` marked skipped. The method and the order: docs/benchmarks.md ("How the figures measure training").
"""

import argparse
import collections
import gc
import logging
import os
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

import torch

from benchmarks import counterparts, measure, op_counts, report, synthetic

logger = logging.getLogger("benchmarks.gpu_figures")
#: dense (no sparsity) bfloat16 tensor-core peaks of the datasheets, TFLOP/s, by a part of the device's name
#: (the more specific names first)
DATASHEET_TFLOPS = {"H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.4, "H200": 989.4, "A100": 312.0}
#: the A/A ratio must be within this of 1 before any other ratio is read
AA_TOLERANCE = 0.05
FUSED_OPTIMIZER = "fused_adam"
SIDES = ("ours", "counterpart")


def datasheet_peak(device_name: str) -> Optional[float]:
    """The datasheet's dense bfloat16 peak of ``device_name`` in FLOP/s, or None when unknown."""
    return next((tflops * 1e12 for key, tflops in DATASHEET_TFLOPS.items() if key in device_name), None)


def gemm_peak(device: str, n: int, iters: int) -> float:
    """FLOP/s of an ``n x n x n`` bfloat16 matrix product, best of ``iters`` timed rounds."""
    a, b = (torch.randn(n, n, device=device).to(torch.bfloat16) for _ in range(2))
    res = measure.timed_rounds({"gemm": None}, [None], iters + 1, lambda *_: a @ b, device)
    return 2 * n**3 / min(r["gemm_s"] for r in res["rounds"][1:])


def build_trainer(dict_dir: str, arch_args: List[str], optimizer: str, precision: str, device):
    """fairseq's ``Trainer`` of ``arch_args`` as ``fairseq-train`` builds it (the harness's recipe,
    ``synthetic.train_args``) on ``optimizer`` for ``precision`` (``amp``: ``--amp``; ``bf16``: ``--bf16-autocast``)."""
    from fairseq import tasks
    from fairseq.trainer import Trainer

    from fairseq_dense.baselines import train_config

    torch.manual_seed(1)
    args = synthetic.train_args(dict_dir, arch_args, amp=precision == "amp", device=device)
    args[args.index("--optimizer") + 1] = optimizer
    cfg = train_config(args + (["--amp-batch-retries", "0"] if precision == "amp" else ["--bf16-autocast"]))
    os.makedirs(cfg.checkpoint.save_dir, exist_ok=True)  # where a failing step saves crash.pt
    task = tasks.setup_task(cfg.task)
    return Trainer(cfg, task, task.build_model(cfg.model), task.build_criterion(cfg.criterion))


def train_update(trainer, batches: List[Dict], i: int = 0) -> Optional[Dict]:
    """``trainer.train_step(batches)`` (as many batches as its ``--update-freq``: the update's logged values,
    None when skipped), its statistics logged under a metrics root of its own (``i``: the update's index in a
    :func:`measure.timed_rounds` round, unused)."""
    from fairseq.logging import metrics

    with metrics.aggregate(new_root=True):
        return trainer.train_step(batches)


def make_shapes(a) -> Dict[str, List[List[Dict]]]:
    """Per ``--shapes`` entry ``TOKENSxFREQ``: ``--updates`` updates of FREQ batches of TOKENS padded
    tokens each, the batches drawn from length quantiles spread over the corpus, each update a mix."""
    shapes = {}
    for spec in a.shapes:
        tokens, freq = (int(x) for x in spec.split("x"))
        n = a.updates * freq
        lengths = [synthetic.batch_lengths(tokens, a.max_len, quantile=(i + 0.5) / n) for i in range(n)]
        batches = [synthetic.make_batch(x, a.vocab, seed=i, device=a.device) for i, x in enumerate(lengths)]
        shapes[spec] = [batches[u :: a.updates] for u in range(a.updates)]
    return shapes


def time_shape(trainers: Dict, updates: List[List[Dict]], rounds: int, device: str) -> Dict:
    """Warm-up on every batch of ``updates``, then ``rounds`` interleaved rounds (:func:`measure.timed_rounds`)."""
    for batches in updates:
        for trainer in trainers.values():
            train_update(trainer, batches)
    before = {name: t.get_num_updates() for name, t in trainers.items()}
    res = measure.timed_rounds(trainers, updates, rounds, train_update, device)
    tokens = sum(int(b["ntokens"]) for batches in updates for b in batches)
    out = {"target_tokens_per_round": tokens, "updates_per_round": len(updates), "rounds": res["rounds"]}
    for name, t in trainers.items():
        out[name] = {
            "tokens_per_s": measure.spread([tokens / r[f"{name}_s"] for r in res["rounds"]]),
            # an --amp update whose gradients overflowed leaves the update count as it was
            "skipped_updates": rounds * len(updates) - (t.get_num_updates() - before[name]),
            "timed_updates": rounds * len(updates),
        }
    out["ratio"] = measure.ratios(res["rounds"], "counterpart", "ours", "s")
    return out


def count_side(trainer, sample: Dict, src_per_tgt: float) -> Dict:
    """Parameters, 6N and the counted matmul FLOPs per target token of one bfloat16 step (``op_counts``)."""
    model = trainer.model
    side = (trainer.task, model, trainer.criterion, trainer.optimizer, trainer.cfg)
    with op_counts.StepCounter(model) as counter:
        measure.train_step(side, sample, 1, dtype=torch.bfloat16, counter=counter)
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "six_n_flops_per_token": 6 * counterparts.matmul_params(model, src_per_tgt),
        "counted_flops_per_token": sum(counter.flops.values()) / sample["ntokens"],
    }


def count_kernels(trainer, updates: List[List[Dict]], device: str) -> Dict:
    """GPU activities of one update under ``torch.profiler`` (on a CPU: ATen calls) after one untimed
    update on each of ``updates``: their number, the device's busy milliseconds, the longest kernels."""
    from torch.profiler import ProfilerActivity, profile

    for batches in updates:
        train_update(trainer, batches)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    measure.sync(device)
    with profile(activities=activities) as prof:
        train_update(trainer, updates[0])
        measure.sync(device)
    # the raw kineto events (building FunctionEvents for tens of thousands of calls takes seconds);
    # user annotations (record_function ranges) also appear on the GPU's timeline: left out
    events = [(e.name(), e.device_type(), e.duration_ns()) for e in prof.profiler.kineto_results.events()
              if not e.is_user_annotation()]  # fmt: skip
    cuda = torch.autograd.DeviceType.CUDA
    kernels = [(n, ns) for n, kind, ns in events if (kind == cuda if device == "cuda" else n.startswith("aten::"))]
    busy = collections.Counter()
    for name, ns in kernels:
        busy[name[:80]] += ns / 1e6
    return {
        "kernels": len(kernels),
        "what": "CUDA activities" if device == "cuda" else "aten calls",
        "busy_ms": sum(busy.values()) if device == "cuda" else None,
        "top_ms": {k: round(v, 3) for k, v in busy.most_common(8)},
    }


def aa_gate(r: Dict) -> Tuple[bool, str]:
    """Whether every A/A ratio of ``r`` is within :data:`AA_TOLERANCE` of 1, and the sentence that says so."""
    measured = {s: m["ratio"] for s, m in r["pairs"].get("aa", {}).get("bf16", {}).items() if "ratio" in m}
    if not measured or len(measured) < len(r["shapes"]):
        return False, "**A/A not measured at every shape: no ratio below is read.**"
    said = ", ".join(f"{report.spread(m)} at {s}" for s, m in measured.items())
    if all(abs(m["median"] - 1) <= AA_TOLERANCE for m in measured.values()):
        return True, f"A/A (the transformer against itself, bf16): {said}: within {AA_TOLERANCE} of 1, ratios read."
    return False, (
        f"**A/A (the transformer against itself, bf16): {said}: not within {AA_TOLERANCE} of 1. The run's noise "
        "is larger than the differences the ratios would show: no ratio below is read (run again).**"
    )


def markdown(r: Dict) -> str:
    """The tables of ``gpu_figures.json``: tokens/s and ratios (median, range), MFU by 6N, counted FLOPs."""
    read, gate = aa_gate(r)
    sheet = r["datasheet_peak_tflops"]
    lines = [
        f"`{r['command']}`  ",
        f"{r['date']}, commit `{r['commit']}`, {r['device_name']}, torch {r['torch']}; datasheet dense bf16 peak "
        f"{f'{sheet:.1f} TFLOP/s' if sheet else 'unknown'} (bf16 GEMM measured {r['gemm_peak_tflops']:.1f} TFLOP/s); "
        f"optimizer `{r['optimizer']}`; vocabulary {r['vocab']}; shapes (tokens a batch x batches an update) "
        f"{', '.join(r['shapes'])}; {r['rounds']} interleaved rounds of {r['updates']} updates a side.",
        "",
        gate,
        "",
        "Tokens/s and ratios: median (range) over the rounds; ratio = ours / counterpart, same rounds. MFU: target "
        "tokens/s x 6N (beside it: the counted FLOPs) per token over the datasheet peak. Skipped: updates whose "
        "gradients overflowed (no optimizer step).",
        "",
    ]
    rows = []
    for name, e in r["pairs"].items():
        for precision in ("bf16", "amp"):
            for shape, m in e.get(precision, {}).items():
                if "ratio" not in m:
                    rows.append([name, precision, shape, m.get("error") or m.get("skipped")] + [""] * 5)
                    continue
                o, c = m["ours"], m["counterpart"]
                mfu = [
                    " / ".join(
                        f"{x['tokens_per_s']['median'] * e[s][flops] / (sheet * 1e12):.1%}"
                        if sheet and flops in e.get(s, {}) else "-"
                        for s, x in zip(SIDES, (o, c))
                    )
                    for flops in ("six_n_flops_per_token", "counted_flops_per_token")
                ]  # fmt: skip
                rows.append([
                    name, precision, shape, *(report.spread(x["tokens_per_s"], ",.0f") for x in (o, c)),
                    report.spread(m["ratio"]) if read or name == "aa" else "not read (A/A)", *mfu,
                    f"{o['skipped_updates']} / {c['skipped_updates']} of {o['timed_updates']}",
                ])  # fmt: skip
    header = "pair | precision | shape | ours tok/s | counterpart tok/s | ratio | MFU 6N ours / cp "
    lines += report.table(header + "| MFU counted FLOPs ours / cp | skipped ours / cp", rows)
    rows = []
    for name, e in r["pairs"].items():
        for side in (s for s in SIDES if "params" in e.get(s, {})):
            s, k = e[side], e[side].get("kernels", {})
            kernels = k.get("error") or k.get("skipped") or f"{k.get('kernels', '-')}, {k.get('busy_ms') or '-'}"
            rows.append([
                name, side, f"`{' '.join(s['arch_args'])}`, {s['optimizer']}", f"{s['params']:,}",
                f"{s['six_n_flops_per_token'] / 1e6:,.1f} M", f"{s['counted_flops_per_token'] / 1e6:,.1f} M",
                f"{s['counted_flops_per_token'] / s['six_n_flops_per_token']:.2f}", kernels,
            ])  # fmt: skip
    header = "pair | side | arch, optimizer | params | 6N FLOPs/token | counted FLOPs/token | counted / 6N "
    lines += ["", *report.table(header + "| kernels/update, GPU busy ms", rows)]
    return "\n".join(lines) + "\n"


def shape(spec: str) -> str:
    """A ``--shapes`` entry: ``TOKENSxFREQ``, both positive integers."""
    parts = spec.split("x")
    if len(parts) != 2 or not all(x.isdigit() and int(x) > 0 for x in parts):
        raise argparse.ArgumentTypeError(f"{spec!r} is not TOKENSxFREQ (e.g. 32768x1)")
    return spec


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_figures", description=__doc__.split("\n\n")[0])
    add = p.add_argument
    add("--device", choices=("cuda", "cpu"), default="cuda")
    add("--pairs", nargs="*", choices=list(counterparts.PAPER_PAIRS), help="pairs (default: all)")
    add("--tiny", action="store_true", help="each pair at its tiny widths (the CPU dry run)")
    add("--vocab", type=int, default=32000, help="joint vocabulary size (a paper-size joint BPE)")
    add("--max-len", type=int, default=128, help="longest sentence of the length distribution")
    add("--budget-s", type=float, default=230, help="start nothing later than this many seconds in")
    add("--out", default="benchmarks/out/gpu-figures")
    add("--shapes", nargs="+", type=shape, default=["32768x1", "8192x4"], help="TOKENSxFREQ: tokens a batch x batches")
    add("--updates", type=int, default=2, help="updates a side in each round (distinct batches)")
    add("--rounds", type=int, default=5, help="interleaved timed rounds")
    add("--kernels-s", type=float, default=35, help="seconds of the budget kept for the kernel counts at the end")
    return p


def release(device: str) -> None:
    """Free what the last pair held, so that the next one has the device's memory to itself."""
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def main(argv=None) -> int:
    started = time.time()
    a = get_parser().parse_args(argv)
    logging.basicConfig(format="%(asctime)s | %(name)s | %(message)s", datefmt="%H:%M:%S", level=logging.INFO)
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda but torch sees no CUDA device")
    pairs = counterparts.paper_pairs(a.pairs)
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    else:
        torch.set_num_threads(1)  # a CPU dry run: one thread, as the CPU benchmarks
    head = report.header("python -m benchmarks.gpu_figures", argv, a.device)
    device_name = head["machine"]["gpu"] or head["machine"]["cpu"]  # the CPU's model name on a dry run
    sheet = datasheet_peak(device_name) if a.device == "cuda" else None
    r = {
        **head,
        "device_name": device_name,
        "gemm_peak_tflops": gemm_peak(a.device, 8192 if a.device == "cuda" else 256, 10) / 1e12,
        "datasheet_peak_tflops": sheet / 1e12 if sheet else None,
        **{k: getattr(a, k) for k in ("shapes", "rounds", "updates", "vocab")},
        "optimizer": FUSED_OPTIMIZER,
        "pairs": {},
    }
    transformer = counterparts.PAPER_PAIRS["wt_a"]["tiny_counterpart" if a.tiny else "counterpart"]
    # name -> side -> (arch arguments, optimizer); fused_vs_adam: the fused optimizer against fairseq's adam
    sides = {"aa": {"ours": (transformer, FUSED_OPTIMIZER), "counterpart": (transformer, FUSED_OPTIMIZER)}}
    for n, p in pairs.items():
        sides[n] = {s: (p[f"tiny_{s}" if a.tiny else s], FUSED_OPTIMIZER) for s in SIDES}
    sides["fused_vs_adam"] = {"ours": (transformer, FUSED_OPTIMIZER), "counterpart": (transformer, "adam")}
    first = a.shapes[:1]
    jobs = [("aa", "bf16", a.shapes)] + [(n, "bf16", a.shapes) for n in pairs] + [("fused_vs_adam", "bf16", first)]
    jobs += [(n, "amp", first) for n in pairs]
    shapes = make_shapes(a)
    counted = [b for u in shapes[first[0]] for b in u]  # the batches of one bfloat16 step's counts
    src_tokens = sum(int(b["net_input"]["src_lengths"].sum()) for b in counted)
    src_per_tgt = src_tokens / sum(int(b["ntokens"]) for b in counted)
    failed = False

    def over(budget_s: float) -> Optional[Dict]:
        return {"skipped": f"over --budget-s {a.budget_s:.0f}"} if time.time() - started > budget_s else None

    # on a CPU, LSTMs on a kernel that runs bfloat16 there (op_counts.cpu_lstm_kernel; CUDA's are cuDNN's)
    with tempfile.TemporaryDirectory() as tmp, op_counts.cpu_lstm_kernel(torch.bfloat16):
        dict_dir = synthetic.write_dicts(tmp, a.vocab)

        def build(name, side, precision):
            return build_trainer(dict_dir, *sides[name][side], precision, a.device)

        for name, precision, job_shapes in jobs:
            e = r["pairs"].setdefault(name, {})
            res = e.setdefault(precision, {})
            trainers = {}
            try:
                for shape in job_shapes:
                    res[shape] = over(a.budget_s - a.kernels_s)
                    if res[shape]:
                        continue
                    if not trainers:
                        logger.info("%s %s: building both sides", name, precision)
                        trainers = {s: build(name, s, precision) for s in SIDES}
                        for s, t in trainers.items() if precision == "bf16" else ():
                            e[s] = {"arch_args": sides[name][s][0], "optimizer": sides[name][s][1]}
                            e[s].update(count_side(t, counted[0], src_per_tgt))
                    logger.info("%s %s %s: timing", name, precision, shape)
                    res[shape] = time_shape(trainers, shapes[shape], a.rounds, a.device)
                    logger.info("%s %s %s: ratio %s", name, precision, shape, res[shape]["ratio"])
            except Exception as ex:  # one failing model must not lose the others' figures
                logger.exception("%s %s failed", name, precision)
                failed, res[shape] = True, report.error(ex)
            finally:
                trainers = None
                release(a.device)
                report.write_results(r, a.out, "gpu_figures", markdown)
            if name == "aa" and not aa_gate(r)[0]:
                logger.warning("%s", aa_gate(r)[1])
        # last: one profiled bfloat16 update of each distinct side (the profiler stays active once started)
        profiled = {}
        for name, e in r["pairs"].items():
            for side in [s for s in SIDES if "params" in e.get(s, {})]:
                key = str(sides[name][side])
                if key not in profiled:
                    profiled[key] = over(a.budget_s)
                    try:
                        profiled[key] = profiled[key] or count_kernels(
                            build(name, side, "bf16"), shapes[first[0]], a.device
                        )
                    except Exception as ex:
                        logger.exception("%s %s kernels failed", name, side)
                        profiled[key] = report.error(ex)
                    release(a.device)
                e[side]["kernels"] = profiled[key]
                report.write_results(r, a.out, "gpu_figures", markdown)
    r["seconds"] = time.time() - started
    report.write_results(r, a.out, "gpu_figures", markdown)
    print(markdown(r))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
