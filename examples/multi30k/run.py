"""Multi30k English -> German: each plugin family beside the baseline its paper beats.

    python examples/multi30k/run.py prepare            # tokenise + 8k joint BPE + binarise
    python examples/multi30k/run.py pair gru           # both sides at once, a core each:
                                                       #   sweep -> converge -> evaluate
    python examples/multi30k/run.py side gru model     # one side only (same stages)
    python examples/multi30k/run.py side gru model --seed 2  # another seed of a side, at the rate
                                                       #   seed 1's sweep chose (folder model.seed2)
    python examples/multi30k/run.py progress [PAIR ...] # each run's state in the work folder; its
                                                       #   logs copied to logs/ (partial runs too)
    python examples/multi30k/run.py report             # RESULTS.md table + plots from logs/
    python examples/multi30k/run.py params [PAIR ...]  # parameter counts of both sides
    python examples/multi30k/run.py score gru model --src test_2017_flickr.en \
        --ref test_2017_flickr.de --set test_2017_flickr  # a saved model on another test set
    DEVICE=cuda python examples/multi30k/run.py pair gru --parallel-sweep --train-hours 0.3
                                                       # on a GPU: the sweep's rates at once,
                                                       #   training stopped after 0.3 h
    examples/multi30k/gpu_seeds.sh launch              # seeds of every pair at once on one GPU

Every stage is resumable (sweep points and evaluations kept as JSON, the converging run continued
from ``checkpoint_last.pt``); data and checkpoints go to ``multi30k-work/``, the logs the report
reads to ``examples/multi30k/logs/``. The recipe: examples/multi30k/RESULTS.md.
"""

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from pairs import PAIRS, SIDES  # noqa: E402

from fairseq_dense.data.prepare import write_json  # noqa: E402
from fairseq_dense.logs import parse_line  # noqa: E402

RAW = os.environ.get("MULTI30K_RAW", os.path.join(ROOT, "..", "shared", "data", "multi30k"))
WORK = os.environ.get("MULTI30K_WORK", os.path.join(ROOT, "multi30k-work"))
LOGS = os.path.join(HERE, "logs")
USER_DIR = os.path.join(ROOT, "user_dir")
DEVICE = os.environ.get("DEVICE", "cpu")  # "cuda": train and decode on the GPU
SRC, TGT = "en", "de"
MERGES = 8000
PATIENCE = 5
# a cap only (80 would have cut the slowest side, the DenseRNN baseline, before early stopping);
# MULTI30K_MAX_EPOCH lowers it for a dry run of the machinery (gpu_seeds.sh's)
MAX_EPOCH = int(os.environ.get("MULTI30K_MAX_EPOCH", 200))
SWEEP_EPOCHS = 4  # 528 updates: well past the warm-up, so the sweep does not just reward fast warm-up
SEED_SUFFIX = re.compile(r"^(?P<side>.+)\.seed(?P<seed>[0-9]+)$")
LENPENS = (0.6, 1.0, 1.4)
COMMON = [
    *("--task", "translation", "-s", SRC, "-t", TGT, "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)"),
    *"--clip-norm 1.0 --lr-scheduler inverse_sqrt --warmup-init-lr 1e-07 --criterion".split(),
    *"label_smoothed_cross_entropy --label-smoothing 0.1 --max-tokens 4096 --log-format json --log-interval 50".split(),
]


def data_bin() -> str:
    return os.path.join(WORK, "data", "bin")


def prepare() -> None:
    """Tokenise, learn 8k joint BPE merges on both training sides, binarise."""
    raw = os.path.join(WORK, "raw")
    os.makedirs(raw, exist_ok=True)
    for split, name in (("train", "train"), ("valid", "valid"), ("test", "test_2016_flickr")):
        for lang in (SRC, TGT):
            path = os.path.join(RAW, f"{name}.{lang}")
            if not os.path.isfile(path):
                sys.exit(f"{path}: not found (Multi30k is read from ../shared/data/multi30k)")
            link = os.path.join(raw, f"{split}.{lang}")
            if not os.path.islink(link):
                os.symlink(os.path.abspath(path), link)
    from fairseq_dense.data.prepare import DataError
    from fairseq_dense.data.prepare import prepare as prepare_corpus
    from fairseq_dense.logging_setup import configure_logging

    configure_logging("%(asctime)s | %(message)s", datefmt="%H:%M:%S")
    try:
        prepare_corpus(raw, os.path.join(WORK, "data"), SRC, TGT, MERGES)
    except DataError as e:
        sys.exit(f"error: {e}")


def run(cmd, log=None, threads=None) -> None:
    """Run ``cmd`` to its end (see ``start``); raise when it fails."""
    code = start(cmd, log, threads).wait()
    if code:
        raise subprocess.CalledProcessError(code, cmd)


def start(cmd, log=None, threads=None) -> subprocess.Popen:
    """Start ``cmd``, its output appended to ``log`` when given (after a ``# command`` line)."""
    print("+", shlex.join(cmd), flush=True)
    env = dict(os.environ, FAIRSEQ_DENSE_CLI="1", **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    with open(log, "a") if log else contextlib.nullcontext() as f:
        if f:
            f.write("# " + shlex.join(cmd) + "\n")
            f.flush()
        return subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT if f else None)


def records(log: str, kind: str):
    """The statistics fairseq logged for ``kind`` ('valid' or 'train' epoch summaries) in ``log``
    (:func:`fairseq_dense.logs.parse_line`: ``loss``, ``num_updates``, ...; none without a log)."""
    if not os.path.isfile(log):
        return []
    with open(log) as f:
        return [stats for tag, stats, _ in map(parse_line, f) if tag == kind]


def trained_lr(log: str):
    """The peak rate of the first ``# fairseq-train`` command in ``log`` (None without one)."""
    with open(log) if os.path.isfile(log) else contextlib.nullcontext(None) as f:
        m = f and re.search(r"^# .* --lr (\S+)", f.read(), re.M)
    return float(m.group(1)) if m else None


def portable(text: str) -> str:
    """``text`` with this machine's work folder and repository root as paths relative to the root
    (``multi30k-work/...``, ``user_dir``): what the committed logs and scores record."""
    return text.replace(os.path.abspath(WORK), "multi30k-work").replace(ROOT + os.sep, "")


def copy_log(src: str, name: str) -> None:
    """Keep the lines the report needs (commands, epoch summaries, validations), paths :func:`portable`."""
    os.makedirs(os.path.dirname(os.path.join(LOGS, name)), exist_ok=True)
    keep = re.compile(r"^# |\| INFO \| (valid|train) \| \{|done training|model params|early stop|Stopping training")
    tmp = os.path.join(LOGS, name) + f".tmp{os.getpid()}"  # a run and `progress` may copy the same log at once
    with open(src) as f, open(tmp, "w") as out:
        out.writelines(portable(line) for line in f if keep.search(line))
    os.replace(tmp, os.path.join(LOGS, name))


def run_name(side: str, seed: int = 1) -> str:
    """The folder of one run of a side: ``side`` for seed 1 (the committed runs), ``side.seedN`` else."""
    if seed < 1:
        raise ValueError(f"seed {seed}: seeds count from 1")
    return side if seed == 1 else f"{side}.seed{seed}"


def split_run(name: str):
    """``(side, seed)`` of a run folder's name: ``model.fixed.seed3`` -> ``("model.fixed", 3)``."""
    m = SEED_SUFFIX.match(name)
    return (m.group("side"), int(m.group("seed"))) if m else (name, 1)


def options(pair: str, side: str):
    """The ``fairseq-train`` options of a side, or of one of the pair's variants (any seed's run)."""
    spec = PAIRS[pair]
    side = split_run(side)[0]
    if side in spec.get("variants", {}):
        return spec["variants"][side]["options"]
    return spec[side.split(".")[0]]  # "baseline.gpu-0.3h": an earlier run of the baseline


def rates(pair: str, side: str):
    """The peak rates a side's sweep tries."""
    variant = PAIRS[pair].get("variants", {}).get(split_run(side)[0])
    return sorted(variant["rates"] if variant else PAIRS[pair]["rates"])


def side_dir(pair: str, side: str) -> str:
    return os.path.join(WORK, pair, side)


def train_args(pair: str, side: str, lr: float):
    """The whole ``fairseq-train`` command of one run of a side (``side`` or ``side.seedN``) at
    peak rate ``lr`` (without stopping options)."""
    return [
        *("fairseq-train", data_bin(), "--user-dir", USER_DIR, *COMMON, "--seed", str(split_run(side)[1])),
        *(["--cpu"] if DEVICE == "cpu" else []),
        *options(pair, side),  # after COMMON: a pair's own options (e.g. its --task) win
        *("--warmup-updates", str(PAIRS[pair]["warmup"]), "--lr", f"{lr:g}"),
        *("--save-dir", os.path.join(side_dir(pair, side), f"lr{lr:g}"), "--no-epoch-checkpoints"),
    ]


def sweep(pair: str, side: str, threads: int, parallel: bool = False, train: bool = True) -> float:
    """Train SWEEP_EPOCHS epochs at each candidate rate; return the rate with the best valid loss.

    A line search from the smallest rate up (``_choice``); with ``parallel`` every rate trains at
    once and the same rule picks. Each sweep run keeps its last checkpoint, which the converging
    run continues (neither schedule nor batches depend on the stopping options). A point whose
    committed log is complete is not trained again (if it wins, the converging run starts at
    update 0). With ``train`` false (another seed asks for the rate) nothing is trained: a missing
    point ends the command with what to run first.
    """
    logs = {}
    for lr in rates(pair, side):
        log = _sweep_log(pair, side, lr)
        os.makedirs(os.path.dirname(log), exist_ok=True)
        committed = os.path.join(LOGS, pair, side, f"sweep-lr{lr:g}.log")
        if _epochs(log) < SWEEP_EPOCHS and _epochs(committed) >= SWEEP_EPOCHS:
            log = committed  # finished in an earlier session whose work folder is gone
        logs[lr] = log
    if parallel and train:
        procs = {
            lr: start(train_args(pair, side, lr) + ["--max-epoch", str(SWEEP_EPOCHS)], log, threads)
            for lr, log in logs.items()
            if _epochs(log) < SWEEP_EPOCHS
        }
        codes = {lr: proc.wait() for lr, proc in procs.items()}  # all of them, even after a failure
        for lr, code in codes.items():
            if code:
                raise subprocess.CalledProcessError(code, procs[lr].args)
            copy_log(logs[lr], f"{pair}/{side}/sweep-lr{lr:g}.log")

    def train_point(lr: float) -> None:
        run(train_args(pair, side, lr) + ["--max-epoch", str(SWEEP_EPOCHS)], log=logs[lr], threads=threads)
        copy_log(logs[lr], f"{pair}/{side}/sweep-lr{lr:g}.log")

    best = _choice(pair, side, logs, train_point if train else None)
    if best is None:
        todo = ", ".join(f"{lr:g}" for lr, log in logs.items() if _epochs(log) < SWEEP_EPOCHS)
        sys.exit(
            f"{pair}/{side}: seed 1's sweep is not complete (rates {todo}): "
            f"run `python {os.path.relpath(__file__)} side {pair} {side}` first"
        )
    print(f"{pair}/{side}: chosen lr {best:g}", flush=True)
    return best


def _choice(pair: str, side: str, logs: dict, train_point=None):
    """The line search over ``logs`` (``{rate: sweep log}``): the rate with the best
    SWEEP_EPOCHS-epoch validation loss, stopping at the first rate that does worse than the one
    before it. ``train_point(lr)`` completes a point the search needs; without it such a point
    gives None."""
    results = {}
    for lr in rates(pair, side):
        if len(results) >= 2 and list(results.values())[-1] > list(results.values())[-2]:
            print(f"{pair}/{side}: lr {lr:g} skipped (the loss grew from the last rate to the one before)")
            break
        if _epochs(logs[lr]) < SWEEP_EPOCHS:
            if train_point is None:
                return None
            train_point(lr)
        losses = [r["loss"] for r in records(logs[lr], "valid") if r["epoch"] <= SWEEP_EPOCHS]
        results[lr] = min(losses)
        print(f"{pair}/{side}: lr {lr:g} -> valid loss {results[lr]:.3f}", flush=True)
    return min(results, key=results.get)


def _epochs(log: str) -> int:
    """How many epochs ``log`` has validation records for."""
    return len({r["epoch"] for r in records(log, "valid")})


TIME_STOP = "Stopping training due to cumulative_training_time"


def last_command(log: str) -> str:
    """The part of ``log`` from its last ``# command`` line on: how the last process ended."""
    with open(log) as f:
        return f.read().split("\n# ")[-1]


def _finished(log: str) -> bool:
    """Whether the converging run of ``log`` has ended for good (early stopping or the epoch cap, not
    ``--train-hours``), by the log's last command."""
    last = last_command(log)
    return "done training" in last and TIME_STOP not in last


def converge(pair: str, side: str, lr: float, threads: int, deadline=None) -> None:
    """Train at the chosen rate until PATIENCE epochs bring no better validation loss; with a
    ``deadline`` (``time.time()``) also stop cleanly there (fairseq's ``--stop-time-hours`` counts
    the training time the continued checkpoint carries, which the logs cannot give)."""
    log = os.path.join(side_dir(pair, side), "train.log")
    logged_lr = trained_lr(log)
    if logged_lr is not None and logged_lr != lr:  # a wider sweep chose another rate: that run's log is set aside
        os.replace(log, os.path.join(side_dir(pair, side), f"train-lr{logged_lr:g}.log"))
    if os.path.isfile(log) and _finished(log):
        return
    os.makedirs(side_dir(pair, side), exist_ok=True)  # another seed's run has no sweep to make it
    with open(os.path.join(side_dir(pair, side), "chosen_lr"), "w") as f:
        f.write(f"{lr:g}\n")
    stop = ["--patience", str(PATIENCE), "--max-epoch", str(MAX_EPOCH)]
    if deadline is not None:
        from fairseq_dense.cli.quickstart_steps import checkpoint_state

        done = checkpoint_state(os.path.join(side_dir(pair, side), f"lr{lr:g}"))[1]
        hours = (done + max(deadline - time.time(), 60.0)) / 3600
        stop += ["--stop-time-hours", f"{hours:.4f}"]
    run(train_args(pair, side, lr) + stop, log=log, threads=threads)
    copy_log(log, f"{pair}/{side}/train.log")


def _sweep_log(pair: str, side: str, lr: float) -> str:
    return os.path.join(side_dir(pair, side), f"sweep-lr{lr:g}.log")


def continues_sweep(train_log: str) -> bool:
    """Whether the converging run of ``train_log`` continued its sweep run's checkpoint (else it
    started at update 0 and its first epoch is 1)."""
    epochs = [int(r["epoch"]) for r in records(train_log, "train")]
    return not epochs or epochs[0] > 1


def generate(pair: str, side: str, lr: float, subset: str, lenpen: float, threads: int, data=None):
    """Beam-5 translations of ``subset`` (of ``data``, by default the prepared corpus):
    (the command, tokenised hypotheses, detokenised hypotheses)."""
    ckpt = os.path.join(side_dir(pair, side), f"lr{lr:g}", "checkpoint_best.pt")
    cmd = [
        *("fairseq-generate", data or data_bin(), "--user-dir", USER_DIR, "--path", ckpt, "-s", SRC, "-t", TGT),
        *(["--cpu"] if DEVICE == "cpu" else []),
        *("--gen-subset", subset, "--beam", "5", "--lenpen", f"{lenpen:g}", "--batch-size", "64"),
        *("--required-batch-size-multiple", "1", "--remove-bpe"),
    ]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, check=True, env=env, capture_output=True, text=True).stdout
    hyps = {}
    for line in out.splitlines():
        if line.startswith("H-"):
            idx, _, text = line.split("\t", 2)
            hyps[int(idx[2:])] = text
    from sacremoses import MosesDetokenizer

    detok = MosesDetokenizer(lang=TGT)
    tok = [hyps[i] for i in range(len(hyps))]
    return cmd, tok, [detok.detokenize(h.split()) for h in tok]


def scores(subset: str, tok_hyps, detok_hyps, refs_path=None, tok_refs_path=None) -> dict:
    """sacreBLEU, tokenised lower-cased BLEU and chrF of ``subset``'s hypotheses (the prepared
    corpus's references, or the raw and tokenised ones given)."""
    import sacrebleu

    raw_name = "test_2016_flickr" if subset == "test" else subset
    with open(refs_path or os.path.join(RAW, f"{raw_name}.{TGT}"), encoding="utf-8") as f:
        refs = [line.rstrip("\n") for line in f]
    with open(tok_refs_path or os.path.join(WORK, "data", "tok", f"{subset}.{TGT}"), encoding="utf-8") as f:
        tok_refs = [line.rstrip("\n") for line in f]
    if len(refs) != len(detok_hyps):
        raise RuntimeError(f"{subset}: {len(detok_hyps)} hypotheses for {len(refs)} references")
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    lc = sacrebleu.metrics.BLEU(tokenize="none", lowercase=True)
    return {
        "sacrebleu": round(bleu.corpus_score(detok_hyps, [refs]).score, 2),
        "sacrebleu_signature": str(bleu.get_signature()),
        "bleu_tok_lc": round(lc.corpus_score(tok_hyps, [tok_refs]).score, 2),
        "chrf": round(chrf.corpus_score(detok_hyps, [refs]).score, 2),
    }


def best_loss(log: str):
    """The best validation loss ``log`` records (None when it records none)."""
    losses = [r["loss"] for r in records(log, "valid")]
    return min(losses) if losses else None


def evaluate(pair: str, side: str, lr: float, threads: int) -> dict:
    """Score the side's best checkpoint (``eval.json``), unless its committed scores record the
    best validation loss of the training in the work folder (or there is none to compare with)."""
    out_path = os.path.join(LOGS, pair, side, "eval.json")
    best = best_loss(os.path.join(side_dir(pair, side), "train.log"))  # None: the work folder is gone
    if os.path.isfile(out_path):
        with open(out_path) as f:
            result = json.load(f)
        scored = result.get("best_valid_loss")
        if best is None or scored == best:
            return result
        print(f"{pair}/{side}: eval.json scored another run (best valid loss {scored}, now {best}): scoring again")
    # on a GPU the length penalties' decodes run at once (each mostly waits on its start and the GPU)
    with ThreadPoolExecutor(1 if DEVICE == "cpu" else len(LENPENS)) as pool:
        decoded = pool.map(lambda lenpen: generate(pair, side, lr, "valid", lenpen, threads), LENPENS)
        valid = {lenpen: scores("valid", tok, detok) for lenpen, (_, tok, detok) in zip(LENPENS, decoded)}
    lenpen = max(valid, key=lambda p: valid[p]["sacrebleu"])
    cmd, tok, detok = generate(pair, side, lr, "test", lenpen, threads)
    result = {
        "pair": pair,
        "side": side,
        "lr": lr,
        "lenpen": lenpen,
        "best_valid_loss": best,
        "valid_by_lenpen": {f"{p:g}": v for p, v in valid.items()},
        "test": scores("test", tok, detok),
        "generate_command": portable(shlex.join(cmd)),
        "machine": machine(),
    }
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(os.path.join(LOGS, pair, side, "test.hyp.de"), "w", encoding="utf-8") as f:
        f.writelines(h + "\n" for h in detok)
    write_json(out_path, result)
    return result


def score(pair: str, side: str, src: str, ref: str, name: str, threads: int) -> dict:
    """Score a side's best checkpoint on another test set (raw source and reference), prepared with
    the corpus's BPE codes and dictionaries and decoded as ``eval.json`` chose (rate, length
    penalty); written to ``logs/<pair>/<side>/score-<name>.json``."""
    from fairseq_dense.data.prepare import DataError, apply_bpe_file, read_lines, tokenize_file

    evaluated = os.path.join(LOGS, pair, side, "eval.json")
    if not os.path.isfile(evaluated):
        sys.exit(f"{pair}/{side}: not evaluated yet ({evaluated} is missing); run its side command first")
    with open(evaluated) as f:
        chosen = json.load(f)
    if not re.fullmatch(r"[\w.-]+", name):
        sys.exit(f"--set {name!r}: use letters, digits, '.', '-' and '_' only")
    try:
        n_src, n_ref = len(read_lines(src)), len(read_lines(ref))
    except DataError as e:
        sys.exit(str(e))
    if n_src != n_ref or not n_src:
        sys.exit(f"{src} has {n_src} lines and {ref} {n_ref}: a test set needs one reference per source line")
    folder = os.path.join(WORK, "sets", name)
    for sub in ("tok", "bpe"):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    for path, lang in ((src, SRC), (ref, TGT)):
        tok = os.path.join(folder, "tok", f"test.{lang}")
        tokenize_file(path, tok, lang, False, 1)
        apply_bpe_file(os.path.join(WORK, "data", "bpecodes"), tok, os.path.join(folder, "bpe", f"test.{lang}"))
    shutil.rmtree(os.path.join(folder, "bin"), ignore_errors=True)
    cmd = [
        *("fairseq-preprocess", "--source-lang", SRC, "--target-lang", TGT, "--workers", "1"),
        *("--testpref", os.path.join(folder, "bpe", "test"), "--destdir", os.path.join(folder, "bin")),
        *("--srcdict", os.path.join(data_bin(), f"dict.{SRC}.txt")),
        *("--tgtdict", os.path.join(data_bin(), f"dict.{TGT}.txt")),
    ]
    run(cmd)
    cmd, tok, detok = generate(pair, side, chosen["lr"], "test", chosen["lenpen"], threads, os.path.join(folder, "bin"))
    result = {
        "pair": pair,
        "side": side,
        "set": name,
        "source": os.path.abspath(src),
        "reference": os.path.abspath(ref),
        "lr": chosen["lr"],
        "lenpen": chosen["lenpen"],
        "test": scores(name, tok, detok, ref, os.path.join(folder, "tok", f"test.{TGT}")),
        "generate_command": portable(shlex.join(cmd)),
        "machine": machine(),
    }
    write_json(os.path.join(LOGS, pair, side, f"score-{name}.json"), result)
    return result


def machine() -> str:
    import platform

    if DEVICE != "cpu":
        import torch

        return f"{torch.cuda.get_device_name()}, GPU"

    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        cpu = platform.processor()
    return f"{cpu}, {os.cpu_count()} cores, CPU"


def keep_model_only(pair: str, side: str, lr: float) -> None:
    """A finished run's best checkpoint without its optimizer state (a third of its size; what
    fairseq's ``--no-save-optimizer-state`` writes), and its last checkpoint removed."""
    from fairseq_dense.checkpoints import BEST, LAST, atomic_save, read_state

    folder = os.path.join(side_dir(pair, side), f"lr{lr:g}")
    state = read_state(os.path.join(folder, BEST))
    if state.pop("last_optimizer_state", None) is not None:
        atomic_save(state, os.path.join(folder, BEST))
    if os.path.isfile(os.path.join(folder, LAST)):
        os.remove(os.path.join(folder, LAST))


def side(pair: str, which: str, threads: int, parallel_sweep: bool = False, train_hours=None, seed: int = 1) -> None:
    """Seed 1: sweep, converge, evaluate; another seed: converge and evaluate at seed 1's rate."""
    if not os.path.isdir(data_bin()):
        sys.exit(f"{data_bin()}: no prepared data; run `python {sys.argv[0]} prepare` first")
    deadline = None if train_hours is None else time.time() + train_hours * 3600
    lr = sweep(pair, which, threads, parallel_sweep, train=seed == 1)
    name = run_name(which, seed)
    converge(pair, name, lr, threads, deadline)
    result = evaluate(pair, name, lr, threads)
    if _finished(os.path.join(side_dir(pair, name), "train.log")):
        keep_model_only(pair, name, lr)
    print(f"{pair}/{name}: test sacreBLEU {result['test']['sacrebleu']}", flush=True)


def run_state(pair: str, name: str):
    """One line on a run in the work folder (its sweep points, epochs, best loss, how it stands),
    or None when it has no log yet."""
    folder = side_dir(pair, name)
    sweeps = sorted(
        (float(f[len("sweep-lr") : -len(".log")]), os.path.join(folder, f))
        for f in os.listdir(folder)
        if f.startswith("sweep-lr") and f.endswith(".log")
    )
    parts = [f"sweep {lr:g}: {_epochs(log)}/{SWEEP_EPOCHS} epochs" for lr, log in sweeps]
    log = os.path.join(folder, "train.log")
    if os.path.isfile(log):
        valid = records(log, "valid")
        best = min(valid, key=lambda r: r["loss"]) if valid else None
        last = last_command(log)
        if _finished(log):
            how = "early stopped" if "early stop" in last else "epoch cap"
        elif TIME_STOP in last:
            how = "stopped by time"
        else:
            how = "training"
        parts.append(
            f"lr {trained_lr(log):g}, epoch {max((int(r['epoch']) for r in valid), default=0)}"
            + (f", best {best['loss']:.3f} at epoch {int(best['epoch'])}" if best else "")
            + f", {how}"
        )
        evaluated = os.path.join(LOGS, pair, name, "eval.json")
        if os.path.isfile(evaluated):
            with open(evaluated) as f:
                result = json.load(f)
            if best and result.get("best_valid_loss") == best_loss(log):
                parts.append(f"test sacreBLEU {result['test']['sacrebleu']}, chrF {result['test']['chrf']}")
    return f"{pair}/{name}: " + "; ".join(parts) if parts else None


def progress(pairs) -> None:
    """Each run of ``pairs`` in the work folder: its state, and its logs copied to ``logs/``
    (a run still training too: the report then shows it as interrupted)."""
    for pair in pairs:
        root = os.path.join(WORK, pair)
        for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
            folder = side_dir(pair, name)
            if not os.path.isdir(folder):
                continue
            for f in sorted(os.listdir(folder)):
                if f == "train.log" or (f.startswith("sweep-lr") and f.endswith(".log")):
                    copy_log(os.path.join(folder, f), f"{pair}/{name}/{f}")
            line = run_state(pair, name)
            if line:
                print(line, flush=True)


def count_params(pair: str, which: str) -> int:
    """Parameters of one side, built in-process exactly as ``fairseq-train`` builds it."""
    from fairseq_dense import baselines

    return baselines.count_params(baselines.build_in_process(data_bin(), [*COMMON, *options(pair, which)])[0])


def pair(name: str, options=()) -> None:
    """Both sides at once, one thread each (the most two cores take)."""
    procs = [
        subprocess.Popen([sys.executable, __file__, "side", name, which, "--threads", "1", *options]) for which in SIDES
    ]
    codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit(f"pair {name}: a side failed (exit codes {codes})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("prepare")
    p = sub.add_parser("pair")
    p.add_argument("name", choices=sorted(PAIRS))
    s = sub.add_parser("side")
    s.add_argument("name", choices=sorted(PAIRS))
    s.add_argument("which", help="model, baseline, or one of the pair's variants (pairs.py)")
    # keep the threads of the runs at once within the cores (2 + 1 threads on 2 cores ran 12x slower)
    s.add_argument("--threads", type=int, default=2, help="torch threads of this side")
    sc = sub.add_parser("score", help="score a side's best checkpoint on another test set of the corpus")
    sc.add_argument("name", choices=sorted(PAIRS))
    sc.add_argument("which", help="model, baseline, or one of the pair's variants")
    sc.add_argument("--src", required=True, help=f"raw source sentences ({SRC}), one per line")
    sc.add_argument("--ref", required=True, help=f"raw references ({TGT}), one per line")
    sc.add_argument("--set", required=True, dest="set_name", help="a name for the set, e.g. test_2017_flickr")
    sc.add_argument("--threads", type=int, default=2, help="torch threads of the decoding")
    for q in (p, s):
        q.add_argument("--parallel-sweep", action="store_true", help="train the sweep's rates at once")
        q.add_argument("--train-hours", type=float, help="stop the converging run after this much training")
    for q in (p, s, sc):
        q.add_argument("--seed", type=int, default=1, help="fairseq's --seed (N > 1: in <side>.seedN, seed 1's rate)")
    sub.add_parser("report")
    pr = sub.add_parser("progress", help="each run's state in the work folder; its logs copied to logs/")
    pr.add_argument("names", nargs="*", choices=sorted(PAIRS))
    c = sub.add_parser("params")
    c.add_argument("names", nargs="*", choices=sorted(PAIRS))
    args = parser.parse_args()
    if getattr(args, "seed", 1) < 1:
        parser.error(f"--seed {args.seed}: seeds count from 1")
    start = time.time()
    if args.cmd == "prepare":
        prepare()
    elif args.cmd == "pair":
        options = ["--parallel-sweep"] if args.parallel_sweep else []
        options += ["--seed", str(args.seed)]
        if args.train_hours is not None:
            options += ["--train-hours", str(args.train_hours)]
        pair(args.name, options)
    elif args.cmd == "side":
        known = (*SIDES, *PAIRS[args.name].get("variants", {}))
        if args.which not in known:
            parser.error(f"side {args.which!r} of pair {args.name}: choose from {', '.join(known)}")
        side(args.name, args.which, args.threads, args.parallel_sweep, args.train_hours, args.seed)
    elif args.cmd == "score":
        result = score(args.name, run_name(args.which, args.seed), args.src, args.ref, args.set_name, args.threads)
        print(json.dumps(result["test"], indent=2))
    elif args.cmd == "params":
        for name in args.names or PAIRS:
            model, base = count_params(name, "model"), count_params(name, "baseline")
            print(f"{name}: model {model:,}, baseline {base:,} ({base / model:.3f}x)", flush=True)
    elif args.cmd == "progress":
        progress(args.names or PAIRS)
    else:
        from report import main as report

        report()
    print(f"done in {time.time() - start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
