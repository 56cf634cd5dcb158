"""One command for every paper: our architectures vs their fairseq counterparts, same data, same budget.

    python -m benchmarks.run --suite all --corpus ../shared/data/tatoeba-deu-eng --src de --tgt en \
        --budget-minutes 2 [--models gru_attention densenmt ...] [--device cpu|cuda] [--bf16]

Steps: (1) prepare the corpus once with :func:`fairseq_dense.data.prepare.prepare`
(optionally on the first N lines of each split); (2) for each family registered
by ``fairseq_dense`` (or each ``--models`` entry) build our model and search the
width of its fairseq counterpart so that the parameter counts are within 10%;
(3) train both with ``fairseq-train`` for the same budget, the baseline right
before ours; (4) decode the test split with beam 5 with and without the
incremental cache and score it with sacreBLEU; (5) write ``results.json`` (raw
measurements, machine, commands), ``results.md`` (ratios ours / baseline) and the
plots into ``--out``.

Suites: ``speed`` (throughput, peak memory, MFU), ``convergence`` (plus
validation curves, time to the baseline's best validation loss and BLEU),
``decode`` (plus beam-5 speed, cache speed-up, BLEU, attention maps), ``all``.
"""
import argparse
import json
import logging
import os
import shlex
import shutil
import sys
import time
from typing import Dict, List

from benchmarks import decode as dec
from benchmarks import families, machine, paired_train, report, train
from fairseq_dense.logging_setup import configure_logging

logger = logging.getLogger("benchmarks.run")
SUITES = ("speed", "convergence", "decode", "all")


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", choices=SUITES, default="all")
    p.add_argument("--corpus", required=True, help="raw corpus folder with {train,valid,test}.{SRC,TGT}")
    p.add_argument("--src", default="de")
    p.add_argument("--tgt", default="en")
    p.add_argument("--budget-minutes", type=float, required=True, help="training time per model")
    p.add_argument("--models", nargs="*", help="families, arch names, or ARCH:--flag=v,--flag2=v "
                   "(default: every family registered by fairseq_dense)")
    p.add_argument("--size", choices=("small", "tiny"), default="small",
                   help="which named size of a family to use when --models names only the family")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--bf16", action="store_true",
                   help="decode in bfloat16 (training stays float32 unless --amp: fairseq-train's own --bf16 "
                        "turns on --tpu and needs torch_xla)")
    p.add_argument("--amp", action="store_true",
                   help="train with fairseq's --amp (CUDA float16 autocast, float32 master weights, loss scaling)")
    p.add_argument("--out", default="benchmarks/out/latest", help="folder for results.json/.md and plots")
    p.add_argument("--work-dir", default="", help="prepared data and checkpoints (default: OUT/work)")
    p.add_argument("--bpe-merges", type=int, default=8000)
    p.add_argument("--train-lines", type=int, default=0, help="use the first N training pairs (0: all)")
    p.add_argument("--valid-lines", type=int, default=500, help="use the first N validation pairs (0: all)")
    p.add_argument("--test-lines", type=int, default=0, help="use the first N test pairs (0: all)")
    train.add_training_options(p)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="CPU threads per run")
    p.add_argument("--decode-batch-size", type=int, default=32)
    p.add_argument("--decode-sentences", type=int, default=0,
                   help="decode (and score) only the first N test sentences (0: all)")
    p.add_argument("--uncached-sentences", type=int, default=40,
                   help="test sentences decoded both with and without the incremental cache")
    p.add_argument("--decode-length", type=int, default=20,
                   help="output length forced in the decoding-speed comparison")
    p.add_argument("--paired-sentences", type=int, default=200,
                   help="test sentences of the side-by-side decoding comparison (ours vs baseline)")
    p.add_argument("--paired-rounds", type=int, default=3, help="rounds of the side-by-side comparisons")
    p.add_argument("--paired-train-batches", type=int, default=8,
                   help="training batches per round of the side-by-side training comparison")
    p.add_argument("--param-tolerance", type=float, default=0.10)
    p.add_argument("--baseline-param-ratio", type=float, default=1.0,
                   help="baseline size / ours (2.0: ours has half the baseline's parameters)")
    return p


def subset_corpus(raw: str, dest: str, src: str, tgt: str, limits: Dict[str, int]) -> str:
    """Copy the first N lines of each split (N=0: all) so that preparation sees only those."""
    os.makedirs(dest, exist_ok=True)
    for split, n in limits.items():
        for lang in (src, tgt):
            path = os.path.join(raw, f"{split}.{lang}")
            if not os.path.isfile(path):
                raise SystemExit(f"error: {path}: file not found (--corpus needs {{train,valid,test}}.{src}/.{tgt})")
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
            lines = lines[:n] if n else lines
            out = os.path.join(dest, f"{split}.{lang}")
            if os.path.isfile(out) and open(out, encoding="utf-8").readlines() == lines:
                continue  # unchanged: keep the mtime so preparation is reused
            with open(out, "w", encoding="utf-8") as f:
                f.writelines(lines)
    return dest


def token_ratio(bpe_dir: str, src: str, tgt: str) -> Dict:
    """Training tokens (with EOS) on each side, and source tokens per target token."""
    counts = {}
    for lang in (src, tgt):
        with open(os.path.join(bpe_dir, f"train.{lang}"), encoding="utf-8") as f:
            counts[lang] = sum(len(line.split()) + 1 for line in f)
    return {"src_tokens": counts[src], "tgt_tokens": counts[tgt], "src_per_tgt": counts[src] / counts[tgt]}


def run_side(name: str, arch_args: List[str], params: int, flops_params: float, a, paths: Dict,
             branch_weights: bool = False) -> Dict:
    """Train (and decode) one model; returns its raw measurements.

    ``branch_weights``: the model has kappa/alpha parameters; keep a checkpoint every
    validation interval and draw their trajectories with ``dump_branch_weights``.
    """
    run_dir = os.path.join(paths["work"], "runs", name)
    shutil.rmtree(run_dir, ignore_errors=True)
    res = {"arch": arch_args[arch_args.index("--arch") + 1], "arch_args": arch_args, "params": params,
           "matmul_params_per_tgt_token": flops_params, "device": a.device}
    dtype = "float16" if a.amp else "float32"  # training's matmul dtype: the MFU denominator
    res["matmul_flops"] = machine.matmul_flops(a.device, dtype, threads=a.threads)
    res["matmul_dtype"] = dtype
    args = train.common_args(paths["bin"], run_dir, a.src, a.tgt, a.budget_minutes, device=a.device, amp=a.amp,
                             **train.training_kwargs(a)) + arch_args
    if branch_weights:
        args += ["--save-interval-updates", str(a.validate_interval_updates), "--keep-interval-updates", "-1"]
    logger.info("training %s for %.1f min: %s", name, a.budget_minutes, " ".join(map(shlex.quote, arch_args)))
    t = train.run_training(args, run_dir, a.threads, a.budget_minutes * 60 + 900)
    t.update(train.summarise_log(t["log"]))
    res["train"] = t
    if t["train_tokens_per_s"]:
        res["train_flops_per_s"] = 6 * flops_params * t["train_tokens_per_s"]
        res["mfu"] = res["train_flops_per_s"] / res["matmul_flops"]
    if branch_weights:
        res["branch_weights_png"] = _branch_weights(run_dir, os.path.join(paths["out"], f"branch_weights_{name}"))
    ckpt = os.path.join(run_dir, "checkpoint_best.pt")
    if a.suite != "speed" and os.path.isfile(ckpt):
        logger.info("decoding %s", name)
        res["decode"] = dec.decode_report(
            ckpt, paths["bin"], os.path.join(paths["raw"], f"test.{a.tgt}"), a.tgt, device=a.device,
            bf16=a.bf16, batch_size=a.decode_batch_size, max_sentences=a.decode_sentences,
            uncached_sentences=a.uncached_sentences, fixed_length=a.decode_length,
            threads=a.threads)
        if a.suite in ("decode", "all"):
            res["attention"] = dec.attention_maps(ckpt, paths["bin"], device=a.device)
        logger.info("%s: BLEU %s, beam-5 %.1f sent/s, cache speed-up %.1fx", name, res["decode"]["bleu"],
                    res["decode"]["full"]["sentences_per_s"] or 0, res["decode"]["cache_subset"]["speedup"] or 0)
    return res


def paired_training(entry: Dict, a):
    """Side-by-side training speed of the entry's two models, built from their recorded commands."""
    commands = []
    for side in ("ours", "baseline"):
        with open(os.path.join(os.path.dirname(entry[side]["train"]["log"]), "command.json")) as f:
            commands.append(json.load(f)[1:])
    logger.info("training ours and baseline side by side (%d batches, %d rounds)", a.paired_train_batches,
                a.paired_rounds)
    return paired_train.paired_train_speed(*commands, batches=a.paired_train_batches, rounds=a.paired_rounds,
                                           threads=a.threads, device=a.device)


def paired_decode(entry: Dict, a, data_bin: str):
    """Side-by-side beam-5 speed of the entry's two checkpoints (see :func:`benchmarks.decode.paired_speed`)."""
    ckpts = [os.path.join(os.path.dirname(entry[side]["train"]["log"]), "checkpoint_best.pt")
             for side in ("ours", "baseline")]
    if not all(os.path.isfile(c) for c in ckpts):
        return None
    logger.info("decoding ours and baseline side by side (%d sentences, %d rounds)", a.paired_sentences,
                a.paired_rounds)
    return dec.paired_speed(*ckpts, data_bin, sentences=a.paired_sentences, rounds=a.paired_rounds,
                            batch_size=a.decode_batch_size, fixed_length=a.decode_length, device=a.device,
                            bf16=a.bf16, threads=a.threads)


def _branch_weights(run_dir: str, out_prefix: str):
    """kappa/alpha of every kept checkpoint -> ``OUT.json`` + ``OUT.png`` (Weighted Transformer Figure 3)."""
    import glob

    from fairseq_dense.cli import dump_branch_weights

    paths = glob.glob(os.path.join(run_dir, "checkpoint_*_*.pt"))
    paths += glob.glob(os.path.join(run_dir, "checkpoint_last.pt"))
    try:
        series = dump_branch_weights.dump(paths)
        with open(out_prefix + ".json", "w") as f:
            json.dump(series, f)
        dump_branch_weights.plot(series, out_prefix + ".png")
    except Exception as e:  # a plot must not cost the run its figures
        logger.warning("branch weights of %s: %s", run_dir, e)
        return None
    return os.path.basename(out_prefix) + ".png"


def main(argv=None) -> int:
    a = get_parser().parse_args(argv)
    configure_logging("%(asctime)s | %(name)s | %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    if a.budget_minutes <= 0:
        raise SystemExit("error: --budget-minutes must be positive")
    if a.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("error: --device cuda but torch sees no CUDA device")
    if a.amp and a.device != "cuda":
        raise SystemExit("error: --amp needs --device cuda (fairseq's --amp is CUDA float16 autocast)")
    import fairseq_dense  # noqa: F401
    from fairseq_dense.data.prepare import prepare

    out = os.path.abspath(a.out)
    work = os.path.abspath(a.work_dir or os.path.join(out, "work"))
    os.makedirs(out, exist_ok=True)
    # one folder per subset, so that a different subset is never served stale prepared data
    subset = f"{a.train_lines or 'all'}-{a.valid_lines or 'all'}-{a.test_lines or 'all'}"
    paths = {"work": work, "raw": os.path.join(work, f"raw-{subset}"), "out": out}
    started = time.time()
    subset_corpus(a.corpus, paths["raw"], a.src, a.tgt,
                  {"train": a.train_lines, "valid": a.valid_lines, "test": a.test_lines})
    prep_dir = prepare(paths["raw"], os.path.join(work, f"data-{subset}-bpe{a.bpe_merges}"), a.src, a.tgt,
                       merges=a.bpe_merges,
                       workers=max(1, min(8, a.threads)))
    paths["bin"] = os.path.join(prep_dir, "bin")
    data = token_ratio(os.path.join(prep_dir, "bpe"), a.src, a.tgt)
    data["summary"] = (f"{a.train_lines or 'all'} train / {a.valid_lines or 'all'} valid / "
                       f"{a.test_lines or 'all'} test pairs, joint BPE {a.bpe_merges} merges, "
                       f"{data['tgt_tokens']:,} target training tokens"
                       + (f"; first {a.decode_sentences} test sentences decoded" if a.decode_sentences else ""))
    try:
        models = families.resolve_models(a.models, a.size)
    except ValueError as e:
        raise SystemExit(f"error: {e}")
    command = "python -m benchmarks.run " + " ".join(map(shlex.quote, argv or sys.argv[1:]))
    results = {"suite": a.suite, "command": command,
               "machine": machine.describe(a.device, a.threads), "bf16": a.bf16, "amp": a.amp, "corpus": a.corpus,
               "budget_minutes": a.budget_minutes, "baseline_param_ratio": a.baseline_param_ratio,
               "data": data, "families": {}}
    baselines: Dict = {}
    for family, arch, extra in models:
        key = family
        if sum(m[0] == family for m in models) > 1:  # several entries of one family: name them apart
            key = f"{family}:{arch}" + (":" + ",".join(extra) if extra else "")
        entry: Dict = {}
        results["families"][key] = entry
        try:
            pairing, ours_model, base_model = families.match_baseline(
                paths["bin"], family, arch, extra, a.param_tolerance, param_ratio=a.baseline_param_ratio)
            entry["baseline_width"] = pairing.baseline_width
            entry["param_gap"] = pairing.param_gap
            fp_ours = families.matmul_params(ours_model, data["src_per_tgt"])
            has_branches = any(n.endswith((".kappa", ".alpha")) for n, _ in ours_model.named_parameters())
            fp_base = families.matmul_params(base_model, data["src_per_tgt"])
            del ours_model, base_model
            safe = report.file_stem(key)
            base_key = tuple(pairing.baseline_args)
            if base_key not in baselines:  # ablations of one family share their (identical) baseline run
                baselines[base_key] = run_side(f"{safe}.baseline", pairing.baseline_args,
                                               pairing.baseline_params, fp_base, a, paths)
            entry["baseline"] = dict(baselines[base_key])
            entry["ours"] = run_side(f"{safe}.ours", ["--arch", arch, *extra], pairing.ours_params, fp_ours, a, paths,
                                     branch_weights=has_branches)
            if a.suite in ("speed", "all"):
                entry["train_paired"] = paired_training(entry, a)
            if a.suite in ("decode", "all"):
                entry["decode_paired"] = paired_decode(entry, a, paths["bin"])
            target = entry["baseline"]["train"]["best_valid_loss"]
            entry["convergence_target_valid_loss"] = target
            for side in ("ours", "baseline"):
                entry[side]["convergence"] = train.time_to_reach(entry[side]["train"]["valid_curve"], target)
        except Exception as e:  # one broken family must not cost the others their figures
            logger.exception("%s failed", key)
            entry["error"] = f"{type(e).__name__}: {e}"
        results["plots"] = report.plots(results, out)  # after every family: a stopped run keeps its figures
        _write(results, out)
    results["plots"] = report.plots(results, out)
    results["total_wall_s"] = time.time() - started
    _write(results, out)
    logger.info("wrote %s/results.json, results.md and %d plots in %.0f s", out, len(results["plots"]),
                results["total_wall_s"])
    return 0 if all("error" not in e for e in results["families"].values()) else 1


def _write(results: Dict, out: str) -> None:
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(report.markdown(results))


if __name__ == "__main__":
    raise SystemExit(main())
