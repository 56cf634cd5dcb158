"""Quick-start: train a small model on real sentences for a fixed number of updates, report sacreBLEU.

``make quickstart`` runs it (``python -m fairseq_dense.cli.quickstart --help``: its options; docs/quickstart.md
describes it all). The data goes through :mod:`fairseq_dense.data.prepare`, each model through ``fairseq-train`` and
``fairseq-generate`` (:mod:`.quickstart_steps`), the figures into one table; with several seeds a line per pair gives
the verdict of :func:`fairseq_dense.seeds.verdict`.
"""

import argparse
import dataclasses
import logging
import math
import os
import shlex
import statistics
import sys
import time
from typing import Dict, List, Tuple

from fairseq_dense.baselines import BASELINES, match_baseline, our_families
from fairseq_dense.checkpoints import BEST
from fairseq_dense.cli.quickstart_steps import SAVE_EVERY, Budget, Result, export_model, thread_env, train_and_score
from fairseq_dense.data import prepare as prep
from fairseq_dense.data import synthetic, tatoeba
from fairseq_dense.logging_setup import add_verbose_flag, configure_logging
from fairseq_dense.seeds import mean_sd_text, verdict
from fairseq_dense.threads import THREADS_ENV, choose_threads

logger = logging.getLogger("fairseq_dense.quickstart")

#: the architecture ``make quickstart`` trains
DEFAULT_ARCH = "weighted_transformer_small"
#: updates per model by default: what six minutes bought DEFAULT_ARCH on an idle 2-core
#: CPU machine (1,626 in docs/quickstart-six-minutes.md, rounded down)
DEFAULT_UPDATES = 1600
#: where the plugin model of a single-model quick-start is exported (in ``--work-dir``)
EXPORT_NAME = "model"
#: ``<family>_<CPU_SIZE>`` is each family's architecture in ``--all-families``
CPU_SIZE = "small"
BUNDLED, SYNTHETIC = "tatoeba", "synthetic"
#: fairseq-train's --required-batch-size-multiple, the recipe's: a split that all fits in one batch is cut to a multiple
BATCH_MULTIPLE = 8


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add = parser.add_argument
    budget = parser.add_mutually_exclusive_group()
    # fmt: off
    add("--corpus", default=BUNDLED, help=f"'{BUNDLED}' (default: the bundled Tatoeba de-en split), "
        f"'{SYNTHETIC}' (a made-up language pair), or a folder of {{train,valid,test}}.{{SRC,TGT}} raw text")
    add("--src", help="source suffix (default: de for tatoeba, en for synthetic)")
    add("--tgt", help="target suffix (default: en for tatoeba, xx for synthetic)")
    add("--max-lines", type=prep.positive(int), help="use only the first N pairs of each bundled split (a quick try)")
    add("--work-dir", default="quickstart-work", help="where data, checkpoints and logs go")
    add("--arch", nargs="+",
        help=f"any registered architecture(s), trained in turn (default: {DEFAULT_ARCH})")
    add("--baseline", action="store_true", help="also train fairseq's built-in of the same size with the same "
        "budget (transformer / lstm / fconv) and print both side by side")
    add("--all-families", action="store_true", help=f"train every family's <family>_{CPU_SIZE} arch in turn "
        "(with --baseline, each one's counterpart too) and print one markdown table")
    budget.add_argument("--updates", type=prep.positive(int), default=DEFAULT_UPDATES,
        help=f"training updates per model (default {DEFAULT_UPDATES}): the same model on any machine")
    budget.add_argument("--minutes", type=prep.positive(float), help="a training time budget per model instead "
        "of --updates (the result then depends on the machine's speed)")
    add("--fresh", action="store_true", help="delete the models' checkpoints and results and train again "
        "(else a finished model is reported again)")
    add("--bpe-merges", type=prep.positive(int), help="joint BPE merges (default 4000; 500 for synthetic)")
    add("--lowercase", action="store_true", help="lower-case the data")
    add("--beam", type=prep.positive(int), default=5)
    add("--seed", type=int, default=1, help="the (first) training seed")
    add("--seeds", type=prep.positive(int), default=1, help="train each model with N seeds (--seed, --seed + 1, ...), "
        "each a run of its own; the table then gives mean ± standard deviation over the seeds")
    add("--threads", type=prep.positive(int), help="CPU threads per fairseq command (default: OMP_NUM_THREADS, "
        "else the CPUs the load average leaves idle, at least 1)")
    # fmt: on
    add_verbose_flag(parser)
    return parser


def choose_corpus(args, parser) -> tuple:
    """``(raw folder, src, tgt, name, BPE merges)`` for ``--corpus`` (the bundled or synthetic one written first)."""
    if args.max_lines and args.max_lines < BATCH_MULTIPLE:  # fewer: fairseq-train would find no batch
        parser.error(f"--max-lines takes at least {BATCH_MULTIPLE} pairs (fairseq-train's batches of sentences)")
    if args.corpus == BUNDLED:
        src, tgt = args.src or tatoeba.SRC, args.tgt or tatoeba.TGT
        if {src, tgt} != {tatoeba.SRC, tatoeba.TGT}:
            parser.error(f"the bundled corpus is {tatoeba.SRC}-{tatoeba.TGT}: --src/--tgt must be de and en")
        name = tatoeba.NAME + (f"-first{args.max_lines}" if args.max_lines else "")
        raw = tatoeba.extract(os.path.join(args.work_dir, name, "raw"), args.max_lines)
        return raw, src, tgt, name, args.bpe_merges or 4000
    if args.max_lines:
        parser.error("--max-lines applies to the bundled corpus only")
    if args.corpus == SYNTHETIC:
        src, tgt = args.src or "en", args.tgt or "xx"
        raw = os.path.join(args.work_dir, SYNTHETIC, "raw")
        if not all(os.path.isfile(os.path.join(raw, f"test.{lang}")) for lang in (src, tgt)):
            with prep.building(raw) as tmp:  # a run cut short leaves no half-written corpus
                synthetic.write_corpus(tmp, src, tgt)
        return raw, src, tgt, SYNTHETIC, args.bpe_merges or 500
    if not os.path.isdir(args.corpus):
        raise prep.DataError(f"{args.corpus}: corpus folder not found (or use --corpus {BUNDLED} / {SYNTHETIC})")
    if not (args.src and args.tgt):
        parser.error("--corpus DIR needs --src and --tgt (the file suffixes)")
    return args.corpus, args.src, args.tgt, os.path.basename(os.path.normpath(args.corpus)), args.bpe_merges or 4000


def family_archs() -> List[str]:
    """Each registered family's CPU-sized architecture, ``<family>_<CPU_SIZE>``."""
    archs = []
    for family, names in our_families().items():
        archs.append(f"{family}_{CPU_SIZE}")
        if archs[-1] not in names:
            raise SystemExit(f"error: family {family} has no {archs[-1]} architecture")
    return archs


def plugin_and_baseline(arch: str, data_bin: str, work: str, baseline: bool) -> List[Result]:
    """The model of ``arch`` and (``baseline``) fairseq's built-in matched to its parameter count."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    family = ARCH_MODEL_NAME_REGISTRY.get(arch, "?")
    ours = Result("plugin", family, arch, ["--arch", arch], os.path.join(work, f"checkpoints-{arch}"))
    if not baseline:
        return [ours]
    if family not in our_families():
        raise SystemExit(f"error: --baseline needs a fairseq_dense architecture, not {arch!r}")
    pairing, _, _ = match_baseline(data_bin, family, ours.model_args)
    shown = f"{BASELINES.get(family, 'lstm')} (width {pairing['baseline_width']})"
    logger.info("baseline for %s: fairseq %s (%s)", arch, shown, " ".join(pairing["baseline_args"]))
    return [ours, Result("baseline", family, shown, pairing["baseline_args"], ours.save_dir + "-baseline")]


def with_seed(model: Result, seed: int) -> Result:
    """``model`` trained with ``seed`` in a folder of its own (``checkpoints-<arch>-seed<N>``, seed 1 the plain
    name): every seed is a run that resumes on its own."""
    if seed == 1:
        return dataclasses.replace(model, seed=seed)
    base, baseline = model.save_dir.removesuffix("-baseline"), model.save_dir.endswith("-baseline")
    return dataclasses.replace(model, seed=seed, save_dir=f"{base}-seed{seed}" + "-baseline" * baseline)


def train_all(archs: List[str], data: str, work: str, refs: List[str], tgt: str, budget: Budget, args) -> List[Result]:
    """Each arch (and its ``--baseline``) trained or read back, seed by seed: an interrupted run of several
    seeds leaves whole pairs of the first seeds."""
    models = [m for arch in archs for m in plugin_and_baseline(arch, os.path.join(data, "bin"), work, args.baseline)]
    several = len(models) > 1 or args.seeds > 1
    results = []
    for seed in range(args.seed, args.seed + args.seeds):
        for model in (with_seed(m, seed) for m in models):
            try:
                train_and_score(model, data, work, refs, tgt, budget, args)
            except SystemExit as e:
                if not several:
                    raise
                logger.error("%s", e)  # one failed run must not cost the others: its row says so
                model.error = str(e).splitlines()[0]
            results.append(model)
            if not (model.reused or model.error):
                logger.info(
                    "%s (seed %d): test BLEU %.2f after %d updates", model.arch, seed, model.bleu, model.updates
                )
    return results


def by_model(results: List[Result]) -> Dict[Tuple[str, str, str], List[Result]]:
    """The runs of each model (family, label, arch), its seeds in order, models in order of appearance."""
    groups: Dict[Tuple[str, str, str], List[Result]] = {}
    for r in results:
        groups.setdefault((r.family, r.label, r.arch), []).append(r)
    return groups


def table(results: List[Result]) -> str:
    """The figures as one markdown table, a row per model; with several seeds the valid loss and test BLEU are
    mean ± sd over the runs that did not fail (the ``seeds`` column counts them)."""
    groups = by_model(results)
    several = any(len(runs) > 1 for runs in groups.values())
    counts = {len([r for r in runs if not r.error]) for runs in groups.values()}
    if several:
        n = f"{counts.pop()} seeds" if len(counts) == 1 else "over the seeds"
        head = f"| seeds | valid loss, mean ± sd {n} | test BLEU, mean ± sd {n} |"
    else:
        head = "| valid loss | test BLEU |"
    lines = [f"| family | model | arch | params | updates {head} target tokens/s |", "|---" * (8 + several) + "|"]
    for (family, label, arch), runs in groups.items():
        model = "fairseq baseline" if label == "baseline" else "fairseq-dense"
        done = [r for r in runs if not r.error]
        if not done:
            lines.append(f"| {family} | {model} | `{arch}` | {runs[0].error} |" + " |" * (4 + several))
            continue
        updates = "/".join(str(u) for u in sorted({r.updates for r in done}))
        seeds = f" {len(done)} |" if several else ""
        lines.append(
            f"| {family} | {model} | `{arch}` | {done[0].params / 1e6:.2f}M | {updates} |{seeds} "
            f"{mean_sd_text([r.valid_loss for r in done])} | {mean_sd_text([r.bleu for r in done])} "
            f"| {statistics.fmean(r.wps for r in done):,.0f} |"
        )
    return "\n".join(lines)


def pair_lines(results: List[Result]) -> List[str]:
    """A line per model trained with its baseline: is the plugin model ahead, behind or within noise?"""
    groups = by_model(results)
    lines = []
    for (_, label, arch), runs in groups.items():
        base = next((g for g in groups.values() if g[0].save_dir == runs[0].save_dir + "-baseline"), None)
        if label != "plugin" or base is None:
            continue
        ours, theirs = [r for r in runs if not r.error], [r for r in base if not r.error]
        if not ours or not theirs:
            continue
        said = []
        for name, key, higher, digits in (("test BLEU", "bleu", True, 2), ("valid loss", "valid_loss", False, 3)):
            diff, bound, word = verdict([getattr(r, key) for r in ours], [getattr(r, key) for r in theirs], higher)
            spread = "" if math.isnan(bound) else f" (95% noise band: {bound:.{digits}f})"
            said.append(f"{name} {diff:+.{digits}f}{spread}: {word}")
        seeds = [f"{len(runs)} seed" + "s" * (len(runs) > 1) for runs in (ours, theirs)]
        lines.append(f"{arch}, {seeds[0]}, against {base[0].arch}, {seeds[1]}: " + "; ".join(said))
    return lines


def print_usage_of(result: Result, data: str, src: str, tgt: str, srcs: List[str], exported: str, args) -> None:
    """How to translate with the plugin model: ``fairseq-dense-interactive`` with the prepared data's Moses
    options and BPE codes; and in Python, its export."""
    script = os.path.join(os.path.dirname(sys.executable), "fairseq-dense-interactive")
    program = [script] if os.path.isfile(script) else [sys.executable, "-m", "fairseq_dense.cli.interactive"]
    # one CPU thread: a sentence at a time is too little work to share, and extra threads wait on a busy machine
    threads = [f"{k}={v}" for k, v in thread_env(1).items()]
    bin_dir, codes = (os.path.abspath(os.path.join(data, name)) for name in ("bin", "bpecodes"))
    cmd = [
        "env", *threads, *program, bin_dir, "--path", os.path.abspath(os.path.join(result.save_dir, BEST)),
        "--source-lang", src, "--target-lang", tgt, "--tokenizer", "moses", "--moses-no-escape",
        "--moses-no-dash-splits", "--bpe", "subword_nmt", "--bpe-codes", codes, "--beam", str(args.beam), "--cpu",
    ]  # fmt: skip
    quoted = shlex.join(cmd)
    print(f"Translate your own sentences with {result.arch} (one per line; D- lines are the translations):")
    print("  " + quoted + (" # lower-case the input too" if args.lowercase else ""))
    print("For example:")
    print(f"  echo {shlex.quote(srcs[0])} | {quoted} | grep ^D-")
    if exported:
        print(f"In Python (the model exported with its BPE codes and tokenizer settings to {exported}):")
        print(f"  import fairseq_dense; model = fairseq_dense.from_pretrained({exported!r})")
        print(f"  print(model.translate({srcs[0]!r}, beam={args.beam}))")


def run(args, parser) -> int:
    """The quick-start of parsed ``args``: prepare, train and score every run, print the table."""
    if args.all_families and args.arch:
        parser.error(f"--all-families trains each family's <family>_{CPU_SIZE} arch: leave out --arch")
    budget = Budget(minutes=args.minutes) if args.minutes else Budget(updates=args.updates)
    args.threads, why = (args.threads, "--threads") if args.threads else choose_threads()
    hint = "" if why == "--threads" else f"; --threads N or {THREADS_ENV} to choose"
    logger.info("each fairseq command runs with %d CPU thread(s) (%s%s)", args.threads, why, hint)
    start = time.time()
    try:
        raw, src, tgt, name, merges = choose_corpus(args, parser)
        work = os.path.join(args.work_dir, name)
        os.makedirs(work, exist_ok=True)
        logger.info("preparing %s (%s -> %s, %d BPE merges)", raw, src, tgt, merges)
        data = prep.prepare(raw, os.path.join(work, "data"), src, tgt, merges, args.lowercase)
        srcs = prep.read_lines(os.path.join(raw, f"test.{src}"))
        refs = prep.read_lines(os.path.join(raw, f"test.{tgt}"))
    except prep.DataError as e:
        raise SystemExit(f"error: {e}")
    t_prep = time.time() - start
    archs = family_archs() if args.all_families else args.arch or [DEFAULT_ARCH]
    results = train_all(archs, data, work, refs, tgt, budget, args)
    single = len(archs) == 1 and not results[0].error
    exported = ""
    if single and results[0].label == "plugin" and results[0].family in our_families():
        exported = export_model(results[0], data, os.path.join(args.work_dir, EXPORT_NAME))
    total = time.time() - start

    print()
    same = ", the same batches for every model" if budget.updates else ""
    print(f"Test BLEU ({name}, {src}->{tgt}, beam {args.beam}, {budget.describe()} each{same}):")
    print(table(results))
    print(f"sacreBLEU signature: {next((r.signature for r in results if r.signature), '-')}")
    print("(valid loss: label-smoothed cross-entropy of checkpoint_best, base 2; target tokens/s: training speed)")
    if pairs := pair_lines(results):
        print("Each model against its baseline, the difference of the means: ahead or behind when it exceeds")
        print("its 95% noise band (t(0.975, n1 + n2 - 2) x pooled sd x sqrt(1/n1 + 1/n2)), else within noise:")
        print("\n".join("  " + line for line in pairs))
    for r in results:
        seed = f" (seed {r.seed})" if args.seeds > 1 else ""
        if r.reused:
            print(f"{r.arch}{seed}: a finished run, read back from {r.save_dir} (nothing trained; --fresh starts over)")
        elif r.stop_reason:
            print(f"{r.arch}{seed}: stopped after {r.updates} updates, {r.train_s / 60:.1f} min: {r.stop_reason}")
    print(f"wall time: {total / 60:.1f} min (prepare {t_prep:.0f}s)")
    if not single:
        return 0
    shown = [r for r in results[: 1 + args.baseline] if r.hyps]  # the first seed's model and baseline
    print("\nExample translations" + (f" (seed {args.seed})" if args.seeds > 1 else "") + ":")
    for i in range(0, len(refs), max(1, len(refs) // 5))[:5]:
        print(f"  SRC: {srcs[i]}\n  REF: {refs[i]}")
        for r in shown:
            print(f"  {'BASELINE' if r.label == 'baseline' else 'HYP'}: {r.hyps[i]}")
        print()
    print_usage_of(results[0], data, src, tgt, srcs, exported, args)
    return 0


def main(argv=None) -> int:
    """Command-line entry point; returns 0, or 130 after Ctrl-C (failures exit with a one-line ``error: ...``)."""
    parser = get_parser()
    args = parser.parse_args(argv)
    # fairseq's own INFO lines (dictionary sizes, ...) stay in the logs unless --verbose
    configure_logging("%(asctime)s | %(message)s", datefmt="%H:%M:%S", verbose=args.verbose)
    try:
        return run(args, parser)
    except KeyboardInterrupt:
        again = shlex.join(["python", "-m", "fairseq_dense.cli.quickstart", *(sys.argv[1:] if argv is None else argv)])
        print(
            f"\ninterrupted: finished runs and each run's last checkpoint (every {SAVE_EVERY} updates) are kept; "
            f"to resume, run the same command again: {again}",
            file=sys.stderr,
            flush=True,
        )
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
