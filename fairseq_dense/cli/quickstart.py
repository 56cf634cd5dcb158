"""Quick-start: prepare data, train a small model (default: a Weighted Transformer), report sacreBLEU.

    python -m fairseq_dense.cli.quickstart                      # synthetic language pair
    python -m fairseq_dense.cli.quickstart --corpus ../shared/data/tatoeba-deu-eng --src de --tgt en

Every step is an ordinary fairseq command (``fairseq-preprocess`` through
:mod:`fairseq_dense.data.prepare`, ``fairseq-train``, ``fairseq-generate``), run
with ``--user-dir`` pointing at this package, and printed before it runs, so the
quick-start doubles as a worked example of the CLI.
"""
import argparse
import logging
import os
import re
import shlex
import subprocess
import sys
import time
from typing import Dict, List

import fairseq_dense
from fairseq_dense.data import prepare as prep
from fairseq_dense.data import synthetic
from fairseq_dense.logging_setup import configure_logging

logger = logging.getLogger("fairseq_dense.quickstart")
PACKAGE_DIR = os.path.dirname(os.path.abspath(fairseq_dense.__file__))


_MODEL_STAT = re.compile(r"(, |\s\|\s)model/[^,|]*?(?=, |\s\|\s|$)")


def brief(line: str) -> str:
    """A progress line without the per-layer model statistics (``model/enc0.kappa_ent=...``,
    kept in the log) that the Weighted Transformer adds to every line."""
    return _MODEL_STAT.sub("", line)


def _run(cmd: List[str], log_path: str, echo: bool = True) -> str:
    """Run a command, streaming its output (progress) and keeping a log; returns stdout."""
    logger.info("$ %s", " ".join(shlex.quote(c) for c in cmd))
    out_lines = []
    # fairseq logs to stdout, which Python block-buffers into a pipe: unbuffered,
    # so that progress shows while training runs, not when it ends
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log_path, "w") as log, subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env
    ) as proc:
        for line in proc.stdout:
            log.write(line)
            out_lines.append(line)
            if echo and ("| INFO | train" in line or "| INFO | valid" in line or "done training" in line
                         or "Traceback" in line or "Error" in line):
                sys.stdout.write("    " + brief(line.split(" | INFO | ")[-1].rstrip("\n")) + "\n")
                sys.stdout.flush()
    if proc.returncode != 0:
        tail = "".join(out_lines[-30:])
        raise SystemExit(f"error: command failed with exit code {proc.returncode} (log: {log_path}):\n{tail}")
    return "".join(out_lines)


def train_command(bin_dir: str, save_dir: str, arch: str, minutes: float, seed: int) -> List[str]:
    return [
        sys.executable, "-m", "fairseq_cli.train", bin_dir,
        "--user-dir", PACKAGE_DIR, "--arch", arch, "--cpu", "--seed", str(seed),
        # translation + the post-step simplex projection of the Weighted Transformer's
        # branch weights; the same as fairseq's translation for every other model
        "--task", "translation_weighted",
        "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "0.003", "--clip-norm", "1.0",
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "100", "--warmup-init-lr", "1e-4",
        "--criterion", "label_smoothed_cross_entropy_with_stats", "--label-smoothing", "0.1",
        "--max-tokens", "2048", "--max-epoch", "100", "--stop-time-hours", f"{minutes / 60:.4f}",
        "--save-dir", save_dir, "--no-epoch-checkpoints", "--save-interval-updates", "200",
        "--keep-interval-updates", "1", "--log-format", "simple", "--log-interval", "50",
        "--num-workers", "0",
    ]


def generate_command(bin_dir: str, checkpoint: str, beam: int) -> List[str]:
    return [
        sys.executable, "-m", "fairseq_cli.generate", bin_dir,
        "--user-dir", PACKAGE_DIR, "--path", checkpoint, "--gen-subset", "test", "--cpu",
        "--beam", str(beam), "--batch-size", "64", "--required-batch-size-multiple", "1",
        "--remove-bpe", "--num-workers", "0",
    ]


def interactive_command(bin_dir: str, checkpoint: str, codes: str, src: str, tgt: str, beam: int) -> List[str]:
    """``fairseq-interactive`` on the trained model, reading raw sentences: the same Moses
    tokenisation (no escaping, no aggressive dash splits) and BPE codes as the prepared data."""
    return [
        sys.executable, "-m", "fairseq_cli.interactive", bin_dir,
        "--user-dir", PACKAGE_DIR, "--path", checkpoint, "--source-lang", src, "--target-lang", tgt,
        "--tokenizer", "moses", "--moses-no-escape", "--moses-no-dash-splits",
        "--bpe", "subword_nmt", "--bpe-codes", codes, "--beam", str(beam), "--cpu",
    ]


def parse_generate(stdout: str, key: str) -> Dict[int, str]:
    out = {}
    for line in stdout.splitlines():
        if line.startswith(key + "-"):
            parts = line.split("\t")
            out[int(parts[0][len(key) + 1:])] = parts[-1]
    return out


def evaluate(stdout: str, raw_test_src: str, raw_test_ref: str, tgt_moses: str, lowercase: bool, n_examples: int):
    """Detokenise hypotheses and score them against the raw references with sacreBLEU."""
    import sacrebleu
    from sacremoses import MosesDetokenizer

    hyps = parse_generate(stdout, "H")
    refs = prep.read_lines(raw_test_ref)
    srcs = prep.read_lines(raw_test_src)
    if len(hyps) != len(refs):
        raise SystemExit(f"error: fairseq-generate translated {len(hyps)} of {len(refs)} test sentences")
    detok = MosesDetokenizer(lang=tgt_moses)
    hyp_list = [detok.detokenize(hyps[i].split()) for i in range(len(refs))]
    if lowercase:
        refs = [r.lower() for r in refs]
    bleu = sacrebleu.metrics.BLEU()
    score = bleu.corpus_score(hyp_list, [refs])
    examples = [(srcs[i], refs[i], hyp_list[i]) for i in range(0, len(refs), max(1, len(refs) // n_examples))]
    return score, bleu.get_signature(), examples[:n_examples]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", help="folder with {train,valid,test}.{SRC,TGT} raw text (default: synthetic)")
    parser.add_argument("--src", default=None, help="source suffix (default: en for synthetic)")
    parser.add_argument("--tgt", default=None, help="target suffix (default: xx for synthetic)")
    parser.add_argument("--work-dir", default="quickstart-work", help="where data and checkpoints go")
    parser.add_argument("--arch", default="weighted_transformer_small",
                        help="any registered architecture (default: the CPU-sized Weighted Transformer, "
                             "the family that learns fastest in a few CPU minutes)")
    parser.add_argument("--minutes", type=float, default=6.0, help="training time budget")
    parser.add_argument("--bpe-merges", type=int, default=None, help="joint BPE merges (default 500 synthetic, 4000 real)")
    parser.add_argument("--lowercase", action="store_true", help="lower-case the data")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    configure_logging("%(asctime)s | %(message)s", datefmt="%H:%M:%S")
    start = time.time()

    if args.corpus:
        if not (args.src and args.tgt):
            parser.error("--corpus needs --src and --tgt (the file suffixes)")
        raw, src, tgt, name = args.corpus, args.src, args.tgt, os.path.basename(os.path.normpath(args.corpus))
        merges = args.bpe_merges or 4000
    else:
        src, tgt, name = args.src or "en", args.tgt or "xx", "synthetic"
        raw = os.path.join(args.work_dir, name, "raw")
        if not os.path.isfile(os.path.join(raw, f"test.{tgt}")):
            synthetic.write_corpus(raw, src, tgt)
        merges = args.bpe_merges or 500
    work = os.path.join(args.work_dir, name)
    os.makedirs(work, exist_ok=True)

    logger.info("[1/3] preparing %s (%s -> %s, %d BPE merges)", raw, src, tgt, merges)
    try:
        data = prep.prepare(raw, os.path.join(work, "data"), src, tgt, merges, args.lowercase)
    except prep.DataError as e:
        raise SystemExit(f"error: {e}")
    t_prep = time.time() - start

    logger.info("[2/3] training %s for up to %.1f minutes", args.arch, args.minutes)
    save_dir = os.path.join(work, f"checkpoints-{args.arch}")
    _run(train_command(os.path.join(data, "bin"), save_dir, args.arch, args.minutes, args.seed),
         os.path.join(work, "train.log"))
    t_train = time.time() - start - t_prep

    logger.info("[3/3] translating the test split with beam %d", args.beam)
    stdout = _run(generate_command(os.path.join(data, "bin"), os.path.join(save_dir, "checkpoint_best.pt"), args.beam),
                  os.path.join(work, "generate.log"), echo=False)
    score, signature, examples = evaluate(
        stdout, os.path.join(raw, f"test.{src}"), os.path.join(raw, f"test.{tgt}"),
        prep.moses_lang(tgt), args.lowercase, n_examples=5,
    )
    total = time.time() - start
    print()
    print(f"Test BLEU ({name}, {src}->{tgt}, {args.arch}, beam {args.beam}): {score.score:.2f}")
    print(f"  {score}")
    print(f"  sacreBLEU signature: {signature}")
    print(f"  wall time: {total / 60:.1f} min (prepare {t_prep:.0f}s, train {t_train:.0f}s, "
          f"generate+score {total - t_prep - t_train:.0f}s)")
    print("\nExample translations:")
    for s, r, h in examples:
        print(f"  SRC: {s}\n  REF: {r}\n  HYP: {h}\n")
    cmd = interactive_command(os.path.join(data, "bin"), os.path.join(save_dir, "checkpoint_best.pt"),
                              os.path.join(data, "bpecodes"), src, tgt, args.beam)
    print("Translate your own sentences (one per line; D- lines are the detokenised translations):")
    print("  " + " ".join(shlex.quote(c) for c in cmd) + (" # lower-case the input too" if args.lowercase else ""))


if __name__ == "__main__":
    main()
