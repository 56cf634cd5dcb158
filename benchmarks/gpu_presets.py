"""Every family's paper preset trained a few updates in each low precision, then one beam-5 decode
(stage 3 of ``benchmarks/gpu_figures.sh``; docs/benchmarks.md).

    python -m benchmarks.gpu_presets --device cuda --updates 50 --out OUT
    python -m benchmarks.gpu_presets --device cpu --tiny --presets wt_a_fixed --updates 2 --max-tokens 64 ...

Per preset and precision (``--amp``, bfloat16): the loss and loss scale of every update, the skipped
updates, finite weights, one beam-5 decode in the precision's dtype; ``presets.{json,md}``.
"""

import argparse
import logging
import math
import sys
import tempfile
import time
from typing import Dict

import torch

from benchmarks import gpu_figures, measure, op_counts, report, synthetic

logger = logging.getLogger("benchmarks.gpu_presets")
DTYPES = {"amp": torch.float16, "bf16": torch.bfloat16}


def train_preset(dict_dir: str, arch_args, precision: str, a) -> Dict:
    """``a.updates`` updates of one preset in ``precision``, then one beam-5 decode."""
    trainer = gpu_figures.build_trainer(dict_dir, arch_args, gpu_figures.FUSED_OPTIMIZER, precision, a.device)
    batches = [
        synthetic.make_batch(synthetic.batch_lengths(a.max_tokens, a.max_len, quantile=q), a.vocab, device=a.device)
        for q in (0.2, 0.4, 0.6, 0.8)
    ]
    losses, scales, diverged = [], [], None
    for u in range(a.updates):
        before = trainer.get_num_updates()
        try:
            out = gpu_figures.train_update(trainer, [batches[u % len(batches)]])
        except FloatingPointError as ex:  # fairseq's stop when gradients are not finite (not under --amp)
            diverged = f"update {u + 1}: {ex}"
            break
        losses.append(out["loss"] if trainer.get_num_updates() > before else None)  # base 2, as fairseq logs it
        scales.append(trainer.optimizer.scaler.get_scale() if precision == "amp" else None)
    model, task = trainer.model, trainer.task
    result = {
        "losses": losses,
        "loss_scales": scales,
        "skipped": sum(x is None for x in losses),
        "diverged": diverged,
        "weights_finite": all(bool(torch.isfinite(p).all()) for p in model.parameters()),
    }
    decode = synthetic.make_batch(synthetic.sample_lengths(a.decode_sentences, a.max_len, seed=2), a.vocab,
                                  seed=2, device=a.device)  # fmt: skip
    try:
        model.eval().to(DTYPES[precision])
        with torch.no_grad():
            hyps = measure.generator(model, task, 5, a.decode_length).generate([model], decode)
        result["beam5"] = {"sentences": len(hyps), "tokens": sum(len(h[0]["tokens"]) for h in hyps)}
    except Exception as ex:  # the training figures stand without it
        logger.exception("beam search failed")
        result["beam5"] = report.error(ex)
    return result


def markdown(r: Dict) -> str:
    lines = [
        f"`{r['command']}`  ",
        f"{r['date']}, commit `{r['commit']}`, {r['device']}, torch {r['torch']}; optimizer `{r['optimizer']}`; "
        f"{r['updates']} updates of {r['max_tokens']}-token batches.",
        "",
        "| preset | precision | loss first -> last | skipped | loss scale first, min, last | finite | beam-5 |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, e in r["presets"].items():
        for precision, m in e.items():
            if "losses" not in m:
                lines.append(f"| {name} | {precision} | {m.get('error') or m.get('skipped')} |||||")
                continue
            done = [x for x in m["losses"] if x is not None]
            loss = f"{done[0]:.3f} -> {done[-1]:.3f}" if done else "-"
            loss += f" (diverged, {m['diverged']})" if m["diverged"] else ""
            scales = [s for s in m["loss_scales"] if s is not None]
            scale = f"{scales[0]:g}, {min(scales):g}, {scales[-1]:g}" if scales else "-"
            beam = m["beam5"].get("error") or f"{m['beam5']['sentences']} sentences, {m['beam5']['tokens']} tokens"
            lines.append(
                f"| {name} | {precision} | {loss} | {m['skipped']} of {len(m['losses'])} | {scale} "
                f"| {m['weights_finite']} | {beam} |"
            )
    return "\n".join(lines) + "\n"


def get_parser() -> argparse.ArgumentParser:
    p = gpu_figures.stage_parser("gpu_presets", __doc__, "presets", 90)
    add = p.add_argument
    add("--precisions", nargs="+", choices=tuple(DTYPES), default=list(DTYPES))
    add("--updates", type=int, default=50)
    add("--max-tokens", type=int, default=4096)
    add("--decode-sentences", type=int, default=32)
    add("--decode-length", type=int, default=32)
    return p


def main(argv=None) -> int:
    started = time.time()
    a, pairs, header = gpu_figures.start(get_parser(), argv)
    r = {
        **header,
        "device": torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu",
        "optimizer": gpu_figures.FUSED_OPTIMIZER,
        **{k: getattr(a, k) for k in ("updates", "max_tokens")},
        "presets": {},
    }
    failed = False
    # on a CPU, LSTMs on a kernel that runs bfloat16 there (op_counts.cpu_lstm_kernel; CUDA's are cuDNN's)
    with tempfile.TemporaryDirectory() as tmp, op_counts.cpu_lstm_kernel(torch.bfloat16):
        dict_dir = synthetic.write_dicts(tmp, a.vocab)
        for name, pair in pairs.items():
            for precision in a.precisions:
                e = r["presets"].setdefault(name, {})
                if time.time() - started > a.budget_s:
                    e[precision] = {"skipped": f"over --budget-s {a.budget_s:.0f}"}
                    continue
                logger.info("%s %s", name, precision)
                try:
                    args = pair["tiny_ours" if a.tiny else "ours"]
                    m = e[precision] = train_preset(dict_dir, args, precision, a)
                    failed |= bool(m["diverged"]) or not m["weights_finite"] or "error" in m["beam5"]
                    failed |= any(x is not None and not math.isfinite(x) for x in m["losses"])
                except Exception as ex:
                    logger.exception("%s %s failed", name, precision)
                    e[precision], failed = report.error(ex), True
                finally:
                    gpu_figures.release(a.device)
                    report.write_results(r, a.out, "presets", markdown)
    print(markdown(r))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
