"""Our models against their fairseq counterparts: same data, same budget, matched parameters.

Per model: the counterpart's width matched in parameters, both trained by ``fairseq-train``, timed side by side,
decoded with beam 5 and scored (usage: benchmarks/README.md; the figures: docs/benchmarks.md).
"""

import argparse
import json
import logging
import os
import shlex
import time
from typing import Dict, List

import torch

from benchmarks import counterparts, measure, report
from fairseq_dense import baselines

logger = logging.getLogger("benchmarks.run")


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    add = p.add_argument
    add("--corpus", help="raw corpus folder with {train,valid,test}.{SRC,TGT}")
    add("--src", default="de", help="source language code")
    add("--tgt", default="en", help="target language code")
    add("--budget-minutes", type=float, help="training time of each model")
    add("--models", nargs="*", help="families, archs or ARCH:--flag=v,--flag2=v (default: every family)")
    add("--size", choices=("small", "tiny"), default="small", help="arch of a family named without one")
    add("--baseline", help="ARCH[:--flag=v,...] to compare with instead of the matched fairseq counterpart")
    add("--baseline-param-ratio", type=float, default=1.0, help="counterpart size / ours (2: ours is half)")
    add("--concurrent", action="store_true", help="train both models at the same time, --threads each")
    add("--device", choices=("cpu", "cuda"), default="cpu")
    add("--amp", action="store_true", help="train with fairseq's --amp (CUDA float16 autocast)")
    add("--bf16", action="store_true", help="decode in bfloat16 (fairseq-train's --bf16 would need torch_xla)")
    add("--out", default="benchmarks/out/latest", help="folder for results.json, results.md and plots")
    add("--work-dir", default="", help="prepared data and checkpoints (default: OUT/work)")
    add("--bpe-merges", type=int, default=8000)
    add("--train-lines", type=int, default=0, help="use the first N training pairs (0: all)")
    add("--valid-lines", type=int, default=500, help="use the first N validation pairs (0: all)")
    add("--test-lines", type=int, default=0, help="use the first N test pairs (0: all)")
    add("--max-tokens", type=int, default=4096, help="fairseq-train --max-tokens")
    add("--lr", type=float, default=1e-3, help="peak learning rate (Adam, inverse-sqrt schedule)")
    add("--warmup-updates", type=int, default=50)
    add("--log-interval", type=int, default=5, help="updates between training log lines")
    add("--validate-interval-updates", type=int, default=25)
    add("--max-update", type=int, default=0, help="also stop after N updates (0: budget only)")
    add("--seed", type=int, default=1)
    add("--threads", type=int, default=os.cpu_count() or 1, help="CPU threads of each model")
    add("--decode-batch-size", type=int, default=32)
    add("--decode-sentences", type=int, default=0, help="decode and score the first N test sentences (0: all)")
    add("--decode-length", type=int, default=20, help="output length forced in the side-by-side decoding")
    add("--paired-sentences", type=int, default=200, help="test sentences of the side-by-side decoding")
    add("--paired-train-batches", type=int, default=8, help="training batches per side-by-side round")
    add("--paired-rounds", type=int, default=3, help="rounds of the side-by-side comparisons")
    return p


def prepare_data(a, work: str) -> Dict:
    """The first N lines of each split, tokenised, BPE'd and binarised once (reused by later runs)."""
    from fairseq_dense.data.prepare import prepare

    sizes = [a.train_lines or "all", a.valid_lines or "all", a.test_lines or "all"]
    subset = "-".join(map(str, sizes))
    raw = os.path.join(work, f"raw-{subset}")
    os.makedirs(raw, exist_ok=True)
    for split, n in (("train", a.train_lines), ("valid", a.valid_lines), ("test", a.test_lines)):
        for lang in (a.src, a.tgt):
            path = os.path.join(a.corpus, f"{split}.{lang}")
            if not os.path.isfile(path):
                raise SystemExit(
                    f"error: {path}: file not found (--corpus needs {{train,valid,test}}.{a.src}/.{a.tgt})"
                )
            with open(path, encoding="utf-8") as f, open(os.path.join(raw, f"{split}.{lang}"), "w") as out:
                out.writelines(f.readlines()[: n or None])  # prepare() reuses its output for the same content
    dest = os.path.join(work, f"data-{subset}-bpe{a.bpe_merges}")
    prep = prepare(raw, dest, a.src, a.tgt, merges=a.bpe_merges, workers=max(1, min(8, a.threads)))
    counts = {}
    for lang in (a.src, a.tgt):
        with open(os.path.join(prep, "bpe", f"train.{lang}"), encoding="utf-8") as f:
            counts[lang] = sum(len(line.split()) + 1 for line in f)
    return {
        "bin": os.path.join(prep, "bin"),
        "raw": raw,
        "src_per_tgt": counts[a.src] / counts[a.tgt],
        "summary": "{} train / {} valid / {} test pairs".format(*sizes)
        + f", joint BPE {a.bpe_merges} merges, {counts[a.tgt]:,} target training tokens",
    }


def pair(a, data: Dict, family: str, ours_args: List[str]) -> Dict:
    """Both sides' arch arguments, parameter counts and matmul weights per target token."""
    if a.baseline:
        name, extra = counterparts.parse_spec(a.baseline)
        base_args = ["--arch", name, *extra]
        ours, _ = baselines.build_in_process(data["bin"], ours_args)
        base, _ = baselines.build_in_process(data["bin"], base_args)
        n_ours, n_base = baselines.count_params(ours), baselines.count_params(base)
        pairing = {"baseline_args": base_args, "baseline_width": None, "param_gap": n_base / n_ours - 1}
        pairing.update(ours_params=n_ours, baseline_params=n_base)
    else:
        pairing, ours, base = baselines.match_baseline(
            data["bin"], family, ours_args, param_ratio=a.baseline_param_ratio
        )
    work = [counterparts.matmul_params(m, data["src_per_tgt"]) for m in (ours, base)]
    return {**pairing, "ours_args": ours_args, "work_ratio": work[0] / work[1]}


def train_sides(a, data: Dict, runs: Dict[str, List[str]], work: str) -> Dict[str, Dict]:
    """``fairseq-train`` of each ``{name: arch args}``, one after the other or (``--concurrent``) at once."""
    started, results = {}, {}
    for name, arch_args in runs.items():
        run_dir = os.path.join(work, "runs", name)
        train_args = measure.common_args(data["bin"], run_dir, a) + arch_args
        logger.info("training %s for %.1f min: %s", name, a.budget_minutes, shlex.join(arch_args))
        started[name] = (measure.start_training(train_args, run_dir, a.threads), run_dir)
        if not a.concurrent:
            results[name] = measure.finish_training(*started.pop(name)[0], run_dir, a.budget_minutes * 60 + 900)
    for name, (child, run_dir) in started.items():
        results[name] = measure.finish_training(*child, run_dir, a.budget_minutes * 60 + 900)
    for name, res in results.items():
        res.update(measure.summarise_log(res["log"]), run_dir=os.path.dirname(res["log"]))
    return results


def side_by_side(a, entry: Dict, data_bin: str) -> None:
    """The side-by-side training and decoding comparisons of one entry, on its runs' commands and checkpoints."""
    dirs = {side: entry[side]["train"]["run_dir"] for side in ("ours", "baseline")}
    sides = {}
    for side, d in dirs.items():
        with open(os.path.join(d, "command.json")) as f:
            sides[side] = measure.build_trainable(json.load(f)[1:])
    logger.info("training both side by side (%d batches, %d rounds)", a.paired_train_batches, a.paired_rounds)
    entry["train_paired"] = measure.train_speed(
        sides, batches=a.paired_train_batches, rounds=a.paired_rounds, device=a.device
    )
    ckpts = {side: os.path.join(d, "checkpoint_best.pt") for side, d in dirs.items()}
    if all(os.path.isfile(c) for c in ckpts.values()):
        logger.info("decoding both side by side (%d sentences, %d rounds)", a.paired_sentences, a.paired_rounds)
        models = {side: measure.load_checkpoint(c, data_bin, a.device, a.bf16) for side, c in ckpts.items()}
        entry["decode_paired"] = measure.paired_decode(
            models, sentences=a.paired_sentences, rounds=a.paired_rounds, batch_size=a.decode_batch_size,
            length=a.decode_length, device=a.device,
        )  # fmt: skip


def run_entry(a, data: Dict, family: str, ours_args: List[str], key: str, work: str, baselines: Dict) -> Dict:
    """Pair, train, time side by side, decode and compare one model with its counterpart."""
    entry = pair(a, data, family, ours_args)
    stem = report.file_stem(key)
    base_key = tuple(entry["baseline_args"])  # ablations of one family share one baseline run
    runs = {} if base_key in baselines else {f"{stem}.baseline": list(base_key)}
    runs[f"{stem}.ours"] = ours_args  # the counterpart first, ours right after it
    trained = train_sides(a, data, runs, work)
    baselines.setdefault(base_key, trained.get(f"{stem}.baseline"))
    for side, train in (("ours", trained[f"{stem}.ours"]), ("baseline", baselines[base_key])):
        arch_args = entry[f"{side}_args"]
        entry[side] = {"arch": arch_args[1], "arch_args": arch_args, "params": entry[f"{side}_params"], "train": train}
        ckpt = os.path.join(train["run_dir"], "checkpoint_best.pt")
        if os.path.isfile(ckpt):
            logger.info("decoding %s", entry[side]["arch"])
            entry[side]["decode"] = measure.beam_bleu(ckpt, data["bin"], os.path.join(data["raw"], f"test.{a.tgt}"), a)
    side_by_side(a, entry, data["bin"])
    curves = [entry[side]["train"]["valid_curve"] for side in ("ours", "baseline")]
    target = entry["baseline"]["train"]["best_valid_loss"]
    reached = [measure.time_to_reach(curve, target) for curve in curves]
    entry["convergence"] = {"target": target, "ours": reached[0], "baseline": reached[1]}
    entry["equal_updates"] = measure.loss_at_equal_updates(*curves)
    return entry


def main(argv=None) -> int:
    a = get_parser().parse_args(argv)
    logging.basicConfig(format="%(asctime)s | %(name)s | %(message)s", datefmt="%H:%M:%S", level=logging.INFO)
    if a.amp and a.device != "cuda":
        raise SystemExit("error: --amp needs --device cuda (fairseq's --amp is CUDA float16 autocast)")
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda but torch sees no CUDA device")
    if not a.corpus or not a.budget_minutes or a.budget_minutes <= 0:
        raise SystemExit("error: give --corpus and a positive --budget-minutes")
    try:
        models = counterparts.resolve_models(a.models, a.size)
    except ValueError as e:
        raise SystemExit(f"error: {e}")
    out = os.path.abspath(a.out)
    work = os.path.abspath(a.work_dir or os.path.join(out, "work"))
    os.makedirs(out, exist_ok=True)
    started = time.time()
    data = prepare_data(a, work)
    torch.set_num_threads(a.threads)  # the side-by-side measurements run in this process
    results = {
        **report.header("python -m benchmarks.run", argv, a.device),
        "options": vars(a),
        "data": data,
        "families": {},
    }
    baselines: Dict = {}
    for family, arch, extra in models:
        several = sum(m[0] == family for m in models) > 1
        key = f"{family}:{arch}" + (":" + ",".join(extra) if extra else "") if several else family
        try:
            results["families"][key] = run_entry(a, data, family, ["--arch", arch, *extra], key, work, baselines)
        except Exception as e:  # one broken family must not cost the others their figures
            logger.exception("%s failed", key)
            results["families"][key] = report.error(e)
        results["total_wall_s"] = time.time() - started  # written after every family: a stopped run keeps them
        results["plots"] = report.plots(results, out)
        report.write_results(results, out, "results", report.markdown)
    logger.info("wrote %s/results.json and results.md in %.0f s", out, results["total_wall_s"])
    return 0 if all("error" not in e for e in results["families"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
