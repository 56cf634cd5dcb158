"""Multi30k English -> German: each plugin family beside the baseline its paper beats.

    python examples/multi30k/run.py prepare            # tokenise + 8k joint BPE + binarise
    python examples/multi30k/run.py pair gru           # both sides at once, a core each: sweep -> converge -> evaluate
    python examples/multi30k/run.py side gru model     # one side only (same stages)
    python examples/multi30k/run.py side gru model --seed 2  # another seed at seed 1's rate (folder model.seed2)
    python examples/multi30k/run.py progress [PAIR ...]  # each run's state in the work folder; logs copied to logs/
    python examples/multi30k/run.py report             # RESULTS.md tables + plots from logs/
    DEVICE=cuda python examples/multi30k/run.py pair gru --parallel-sweep --train-hours 0.3
                                                       # on a GPU: the sweep's rates at once, stopped after 0.3 h
    examples/multi30k/gpu_seeds.sh launch              # seeds of every pair at once on one GPU

Every stage is resumable (the converging run continues ``checkpoint_last.pt``, evaluations are kept as
JSON); data and checkpoints go to ``multi30k-work/``, the logs the report reads to ``examples/multi30k/logs/``.
The recipe: examples/multi30k/RESULTS.md.
"""

import argparse
import glob
import logging
import os
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE), os.path.dirname(os.path.dirname(HERE))]  # + the root: benchmarks
import recipes  # noqa: E402
import report  # noqa: E402
from pairs import PAIRS, SIDES, options, rates, split_run  # noqa: E402
from recipes import DEVICE, ROOT, USER_DIR  # noqa: E402
from report import LOGS, SWEEP_EPOCHS, epochs, processes, records  # noqa: E402

from fairseq_dense.cli.quickstart_steps import checkpoint_state, run_command  # noqa: E402
from fairseq_dense.logs import ending  # noqa: E402

RAW = os.environ.get("MULTI30K_RAW", os.path.join(ROOT, "..", "shared", "data", "multi30k"))
WORK = os.environ.get("MULTI30K_WORK", os.path.join(ROOT, "multi30k-work"))
SRC, TGT = "en", "de"
# a cap only (80 would have cut the slowest side, the DenseRNN baseline, before early stopping);
# MULTI30K_MAX_EPOCH lowers it for a dry run of the machinery (gpu_seeds.sh's)
MAX_EPOCH = int(os.environ.get("MULTI30K_MAX_EPOCH", 200))
LENPENS = (0.6, 1.0, 1.4)
COMMON = [
    *("--task", "translation", "-s", SRC, "-t", TGT, "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)"),
    *"--clip-norm 1.0 --lr-scheduler inverse_sqrt --warmup-init-lr 1e-07 --criterion".split(),
    *"label_smoothed_cross_entropy --label-smoothing 0.1 --max-tokens 4096 --log-format json --log-interval 50".split(),
]


def side_dir(pair: str, side: str) -> str:
    return os.path.join(WORK, pair, side)


def prepare() -> None:
    """Tokenise, learn 8k joint BPE merges on both training sides, binarise (``fairseq-dense-prepare``)."""
    from fairseq_dense.data import prepare as prep

    raw = os.path.join(WORK, "raw")
    os.makedirs(raw, exist_ok=True)
    for split, name in (("train", "train"), ("valid", "valid"), ("test", "test_2016_flickr")):
        for lang in (SRC, TGT):
            path, link = os.path.join(RAW, f"{name}.{lang}"), os.path.join(raw, f"{split}.{lang}")
            if not os.path.isfile(path):
                sys.exit(f"{path}: not found (Multi30k is read from ../shared/data/multi30k)")
            if not os.path.islink(link):
                os.symlink(os.path.abspath(path), link)
    prep.main(["--raw", raw, "--dest", os.path.join(WORK, "data"), "--src", SRC, "--tgt", TGT, "--bpe-merges", "8000"])


def copy_log(src: str, name: str) -> None:
    recipes.copy_log(src, os.path.join(LOGS, name), WORK, "multi30k-work")


def run_name(side: str, seed: int = 1) -> str:
    """The folder of one run of a side: ``side`` for seed 1 (the committed runs), ``side.seedN`` else."""
    return side if seed == 1 else f"{side}.seed{seed}"


def train_args(pair: str, side: str, lr: float):
    """The ``fairseq-train`` command of a run (``side`` or ``side.seedN``) at peak rate ``lr``, without stopping."""
    return [
        *("fairseq-train", os.path.join(WORK, "data", "bin"), "--user-dir", USER_DIR, *COMMON, "--seed"),
        *(str(split_run(side)[1]), *recipes.device_args()),
        *options(pair, side),  # after COMMON: a pair's own options (e.g. its --task) win
        *("--warmup-updates", str(PAIRS[pair]["warmup"]), "--lr", f"{lr:g}"),
        *("--save-dir", os.path.join(side_dir(pair, side), f"lr{lr:g}"), "--no-epoch-checkpoints"),
    ]


def sweep_log(pair: str, side: str, lr: float) -> str:
    """The log of a sweep point: the work folder's, or the committed one where only that is complete (a point
    finished in an earlier session whose work folder is gone is not trained again)."""
    log, committed = (os.path.join(d, pair, side, f"sweep-lr{lr:g}.log") for d in (WORK, LOGS))
    return committed if epochs(log) < SWEEP_EPOCHS <= epochs(committed) else log


def sweep(pair: str, side: str, threads: int, parallel: bool = False, train: bool = True) -> float:
    """The peak rate of a side: each rate of its grid trained SWEEP_EPOCHS epochs (one after the other, or
    with ``parallel`` all at once), the lowest validation loss wins. Each sweep run keeps its last checkpoint,
    which the converging run continues (neither schedule nor batches depend on the stopping options). With
    ``train`` false (another seed asks for the rate) a missing point ends the command with what to run first."""
    todo = [lr for lr in rates(pair, side) if epochs(sweep_log(pair, side, lr)) < SWEEP_EPOCHS]
    if todo and not train:
        sys.exit(f"{pair}/{side}: seed 1's sweep is not complete (rates {', '.join(f'{lr:g}' for lr in todo)}): "
                 f"run `python {os.path.relpath(__file__)} side {pair} {side}` first")  # fmt: skip
    os.makedirs(side_dir(pair, side), exist_ok=True)

    def point(lr):
        log = sweep_log(pair, side, lr)
        run_command(train_args(pair, side, lr) + ["--max-epoch", str(SWEEP_EPOCHS)], log, append=True, threads=threads)
        copy_log(log, f"{pair}/{side}/sweep-lr{lr:g}.log")

    with ThreadPoolExecutor(len(todo) if parallel and todo else 1) as pool:  # every point ends, even after a failure
        list(pool.map(point, todo))
    losses = {lr: report.sweep_loss(sweep_log(pair, side, lr)) for lr in rates(pair, side)}
    print(f"{pair}/{side}: chosen lr {min(losses, key=losses.get):g}", flush=True)
    return min(losses, key=losses.get)


def converge(pair: str, side: str, lr: float, threads: int, deadline=None) -> None:
    """Train at the chosen rate until PATIENCE epochs bring no better validation loss; with a ``deadline``
    (``time.time()``) also stop cleanly there (fairseq's ``--stop-time-hours`` counts the training time the
    continued checkpoint carries, which the logs cannot give)."""
    log = os.path.join(side_dir(pair, side), "train.log")
    procs = processes(log)
    if report.trained_lr(procs) not in (None, lr):  # a wider sweep chose another rate: that log is set aside
        os.replace(log, os.path.join(side_dir(pair, side), f"train-lr{report.trained_lr(procs):g}.log"))
    elif ending(procs) in report.FINISHED:
        return
    os.makedirs(side_dir(pair, side), exist_ok=True)  # another seed's run has no sweep to make it
    with open(os.path.join(side_dir(pair, side), "chosen_lr"), "w") as f:
        f.write(f"{lr:g}\n")
    stop = ["--patience", str(report.PATIENCE), "--max-epoch", str(MAX_EPOCH)]
    if deadline is not None:
        done = checkpoint_state(os.path.join(side_dir(pair, side), f"lr{lr:g}"))[1]
        stop += ["--stop-time-hours", f"{(done + max(deadline - time.time(), 60.0)) / 3600:.4f}"]
    run_command(train_args(pair, side, lr) + stop, log, append=True, threads=threads)
    copy_log(log, f"{pair}/{side}/train.log")


def decode(pair: str, side: str, lr: float, subset: str, lenpen: float, threads: int):
    """(the command, the detokenised hypotheses, their scores) of the run's best checkpoint on ``subset``."""
    import sacrebleu

    from fairseq_dense.cli.quickstart_steps import hypotheses, score
    from fairseq_dense.data.prepare import read_lines

    checkpoint = os.path.join(side_dir(pair, side), f"lr{lr:g}", "checkpoint_best.pt")
    opts = ["-s", SRC, "-t", TGT, "--gen-subset", subset, "--lenpen", f"{lenpen:g}"]
    cmd, out = recipes.generate(os.path.join(WORK, "data", "bin"), checkpoint, opts, threads)
    raw = read_lines(os.path.join(RAW, f"{'test_2016_flickr' if subset == 'test' else subset}.{TGT}"))
    tok_refs = read_lines(os.path.join(WORK, "data", "tok", f"{subset}.{TGT}"))
    tok = hypotheses(out, len(raw))
    bleu, signature, detok = score(tok, raw, TGT, lowercase=False)
    lc = sacrebleu.metrics.BLEU(tokenize="none", lowercase=True).corpus_score(tok, [tok_refs]).score
    chrf = sacrebleu.metrics.CHRF().corpus_score(detok, [raw]).score
    scores = {"sacrebleu": bleu, "sacrebleu_signature": signature, "bleu_tok_lc": lc, "chrf": chrf}
    return cmd, detok, {k: round(v, 2) if isinstance(v, float) else v for k, v in scores.items()}


def evaluate(pair: str, side: str, lr: float, threads: int) -> dict:
    """Score the side's best checkpoint (``eval.json``), unless its committed scores record the best
    validation loss of the training in the work folder (or there is none to compare with)."""
    from fairseq_dense.data.prepare import write_json

    folder = os.path.join(LOGS, pair, side)
    best = min((r["loss"] for r in records(os.path.join(side_dir(pair, side), "train.log"), "valid")), default=None)
    result = report.read_json(os.path.join(folder, "eval.json"))
    if result is not None and (best is None or result.get("best_valid_loss") == best):  # best None: work folder gone
        return result
    # on a GPU the length penalties' decodes run at once (each mostly waits on its start and the GPU)
    with ThreadPoolExecutor(1 if DEVICE == "cpu" else len(LENPENS)) as pool:
        valid = dict(zip(LENPENS, pool.map(lambda p: decode(pair, side, lr, "valid", p, threads)[2], LENPENS)))
    lenpen = max(valid, key=lambda p: valid[p]["sacrebleu"])
    cmd, detok, test = decode(pair, side, lr, "test", lenpen, threads)
    result = {
        **{"pair": pair, "side": side, "lr": lr, "lenpen": lenpen, "best_valid_loss": best},
        **{"valid_by_lenpen": {f"{p:g}": v for p, v in valid.items()}, "test": test},
        **{"generate_command": recipes.relative(shlex.join(cmd), WORK, "multi30k-work"), "machine": machine()},
    }
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "test.hyp.de"), "w", encoding="utf-8") as f:
        f.writelines(h + "\n" for h in detok)
    write_json(os.path.join(folder, "eval.json"), result)
    return result


def machine() -> str:
    import torch

    from benchmarks.report import cpu_name

    return f"{torch.cuda.get_device_name()}, GPU" if DEVICE != "cpu" else f"{cpu_name()}, {os.cpu_count()} cores, CPU"


def side(pair: str, which: str, threads: int, parallel_sweep: bool = False, train_hours=None, seed: int = 1) -> None:
    """Seed 1: sweep, converge, evaluate; another seed: converge and evaluate at seed 1's rate."""
    recipes.need(os.path.join(WORK, "data", "bin"))
    deadline = None if train_hours is None else time.time() + train_hours * 3600
    lr = sweep(pair, which, threads, parallel_sweep, train=seed == 1)
    converge(pair, run_name(which, seed), lr, threads, deadline)
    result = evaluate(pair, run_name(which, seed), lr, threads)
    print(f"{pair}/{run_name(which, seed)}: test sacreBLEU {result['test']['sacrebleu']}", flush=True)


def progress(pairs) -> None:
    """Each run of ``pairs`` in the work folder: its logs copied to ``logs/`` (a run still training too: the
    report shows it as interrupted), and a line on how it stands."""
    for pair in pairs:
        root = os.path.join(WORK, pair)
        for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
            folder = os.path.join(root, name, "")
            sweeps = sorted(glob.glob(glob.escape(folder) + "sweep-lr*.log"))
            for log in sweeps + glob.glob(glob.escape(folder) + "train.log"):
                copy_log(log, f"{pair}/{name}/{os.path.basename(log)}")
            parts = [f"sweep {log[len(folder) + 8 : -4]}: {epochs(log)}/{SWEEP_EPOCHS} epochs" for log in sweeps]
            if os.path.isfile(folder + "train.log"):
                row = report.summarize(pair, name)
                best = f", best {row['best_loss']:.3f} at epoch {row['best_epoch']}" if row["curve"] else ""
                parts.append(f"lr {report.fmt(row['lr'], 'g')}, epoch {row['epochs']}{best}, {row['ending']}")
                if row["eval"] and row["eval"].get("best_valid_loss") == row["best_loss"]:
                    test = row["eval"]["test"]
                    parts.append(f"test sacreBLEU {test['sacrebleu']}, chrF {test['chrf']}")
            if parts:
                print(f"{pair}/{name}: " + "; ".join(parts), flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    training = argparse.ArgumentParser(add_help=False)  # the options of pair and side
    # keep the threads of the runs at once within the cores (2 + 1 threads on 2 cores ran 12x slower)
    training.add_argument("--threads", type=int, default=2, help="torch threads of a side (pair: 1 each)")
    training.add_argument("--parallel-sweep", action="store_true", help="train the sweep's rates at once")
    training.add_argument("--train-hours", type=float, help="stop the converging runs after this much training")
    training.add_argument("--seed", type=int, default=1, help="fairseq's --seed (N > 1: <side>.seedN, seed 1's rate)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("prepare")
    sub.add_parser("report")
    sub.add_parser("progress").add_argument("names", nargs="*", choices=sorted(PAIRS))
    sub.add_parser("pair", parents=[training]).add_argument("name", choices=sorted(PAIRS))
    s = sub.add_parser("side", parents=[training])
    s.add_argument("name", choices=sorted(PAIRS))
    s.add_argument("which", help="model, baseline, or one of the pair's variants (pairs.py)")
    args = parser.parse_args(argv)
    if getattr(args, "seed", 1) < 1:
        parser.error(f"--seed {args.seed}: seeds count from 1")
    if args.cmd == "side" and args.which not in (known := (*SIDES, *PAIRS[args.name].get("variants", {}))):
        parser.error(f"side {args.which!r} of pair {args.name}: choose from {', '.join(known)}")
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # each command as it starts
    begin = time.time()
    if args.cmd == "prepare":
        prepare()
    elif args.cmd == "pair":  # both sides at once, one thread each (the most two cores take)
        with ThreadPoolExecutor(len(SIDES)) as pool:
            list(pool.map(lambda w: side(args.name, w, 1, args.parallel_sweep, args.train_hours, args.seed), SIDES))
    elif args.cmd == "side":
        side(args.name, args.which, args.threads, args.parallel_sweep, args.train_hours, args.seed)
    elif args.cmd == "progress":
        progress(args.names or PAIRS)
    else:
        report.main()
    print(f"done in {time.time() - begin:.0f}s", flush=True)


if __name__ == "__main__":
    main()
