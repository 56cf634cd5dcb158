"""One quick-start model from start to finish, as ordinary fairseq commands: train, translate, score, export.

Each step is a ``fairseq-train`` or ``fairseq-generate`` command with ``--user-dir`` pointing at this package, logged
before it runs. A finished model leaves ``quickstart-result.json`` (its settings and figures) in its checkpoint folder:
the same settings again read it back and train nothing; a larger budget continues the training from
``checkpoint_last.pt``.
"""

import hashlib
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from fairseq_dense.checkpoints import BEST, LAST, read_info
from fairseq_dense.cli.fairseq_tools import PACKAGE_DIR
from fairseq_dense.data import prepare as prep
from fairseq_dense.logs import param_count, parse_line
from fairseq_dense.threads import THREADS_ENV

logger = logging.getLogger("fairseq_dense.quickstart")

#: seconds between progress lines (the first comes with the first update, whatever the speed)
PROGRESS_S = 30.0
#: the recipe saves a checkpoint every this many updates: what a resumed run can lose
SAVE_EVERY = 200
RESULT_NAME = "quickstart-result.json"
#: the figures a finished run stores (the rest of :class:`Result` comes from the command line)
FIGURES = ("params", "updates", "valid_loss", "wps", "bleu", "signature", "hyps", "stop_reason", "train_s")


@dataclass
class Budget:
    """How long each model trains: a fixed number of updates (the same batches in the same
    order, so the same model on any machine), or minutes (fewer updates on a slower machine)."""

    updates: Optional[int] = None
    minutes: Optional[float] = None

    def describe(self) -> str:
        return f"{self.updates} updates" if self.updates else f"{self.minutes:g} minutes"

    def fairseq_args(self) -> List[str]:
        if self.updates:
            return ["--max-update", str(self.updates)]
        return ["--stop-time-hours", f"{self.minutes / 60:.4f}"]


@dataclass
class Result:
    """One trained model's figures, as the quick-start reports them."""

    label: str  # "plugin" or "baseline"
    family: str
    arch: str  # as shown: the arch name, or the counterpart and its width
    model_args: List[str]
    save_dir: str
    seed: int = 1
    params: int = 0
    updates: int = 0
    valid_loss: float = float("nan")
    wps: float = float("nan")  # target tokens per second of training
    bleu: float = float("nan")
    signature: str = ""
    hyps: List[str] = field(default_factory=list)
    stop_reason: str = ""
    train_s: float = 0.0  # fairseq's cumulative training time
    error: str = ""  # why it has no figures (--all-families goes on without them)
    reused: bool = False  # figures read back from a finished run, nothing trained


def stop_reason(budget: Budget, updates: int, seconds: float) -> str:
    """Why ``fairseq-train`` stopped, from the checkpoint's counters: the budget, or the recipe's ``--max-epoch``."""
    if budget.updates and updates >= budget.updates:
        return f"reached {updates} updates (--max-update)"
    if budget.minutes and seconds >= 60 * budget.minutes:
        return "reached the time budget (--stop-time-hours)"
    return "reached --max-epoch"


class TrainLog:
    """Reads ``fairseq-train``'s JSON records as they stream: prints progress lines, keeps the figures.

    A progress line comes with the first update and then every ``interval_s`` seconds, with the mean training
    loss since the previous line and the time left: with an update budget from the speed since the first line
    (fairseq's start-up is not training), with a time budget the budget minus the time trained.
    ``start_updates`` and ``previous_s``: the counters of the checkpoint it resumes from.
    """

    def __init__(
        self,
        label: str,
        budget: Budget,
        start_updates: int = 0,
        previous_s: float = 0.0,
        echo: bool = True,
        interval_s: float = PROGRESS_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.label, self.budget, self.echo = label, budget, echo
        self.previous_s, self.interval_s, self.clock = previous_s, interval_s, clock
        self.params, self.updates, self.train_s = 0, start_updates, previous_s
        self.best_loss: Optional[float] = None
        self.epoch_loss: Optional[float] = None
        self.stop_reason = ""
        self._started = clock()
        self._shown_at: Optional[float] = None  # when the last progress line was printed
        self._first = (0.0, 0)  # (time, updates) of the first progress line
        self._losses: List[float] = []  # train_inner losses since then
        self._epoch_end = start_updates  # updates at the last end-of-epoch record
        self._wps_sum, self._wps_updates = 0.0, 0

    def feed(self, line: str) -> None:
        """Take one line of ``fairseq-train``'s output."""
        if (params := param_count(line)) is not None:
            self.params = params
            return
        tag, s, _ = parse_line(line)
        if tag == "train_inner":
            self._progress(s)
        elif tag == "train":  # end of an epoch, or of training: the epoch's average
            updates = int(s.get("num_updates", self.updates))
            if updates > self._epoch_end and "wps" in s:
                self._wps_sum += s["wps"] * (updates - self._epoch_end)
                self._wps_updates += updates - self._epoch_end
            self._epoch_end = self.updates = max(self.updates, updates)
            self.epoch_loss = s.get("loss")
        elif tag == "valid" and "loss" in s:
            self.best_loss = s.get("best_loss", s["loss"])
            self.updates = max(self.updates, int(s.get("num_updates", 0)))
            if self.echo:
                print(f"    {self.label}: validation after {self.updates} updates: loss {s['loss']:.3f}", flush=True)

    def _progress(self, s: Dict[str, float]) -> None:
        self.updates = max(self.updates, int(s.get("num_updates", 0)))
        if "loss" in s:
            self._losses.append(s["loss"])
        now = self.clock()
        if not self.echo or not self._losses or (self._shown_at is not None and now - self._shown_at < self.interval_s):
            return
        first = self._shown_at is None
        if first:
            self._first = (now, self.updates)
        self._shown_at = now
        trained = self.previous_s + now - self._started  # fairseq's start-up included
        if self.budget.updates:
            seconds, done = now - self._first[0], self.updates - self._first[1]
            rate = done / seconds if seconds > 0 and done > 0 else 0.0
            left = (self.budget.updates - self.updates) / rate / 60 if rate else 0.0
            eta = f"about {left:.1f} min left at {rate:.2f} updates/s" if rate else "time left: at the next line"
            where = f"{self.updates}/{self.budget.updates} updates"
        else:
            where = f"{self.updates} updates"
            eta = f"{max(0.0, 60 * self.budget.minutes - trained) / 60:.1f} min left"
        n, mean = len(self._losses), sum(self._losses) / len(self._losses)
        print(
            f"    {self.label}: {where}, loss {mean:.3f} (mean of the last {n} update{'s' * (n > 1)}), "
            f"{trained / 60:.1f} min trained, {eta}" + (f" (a line every {self.interval_s:.0f} s)" if first else ""),
            flush=True,
        )
        self._losses = []

    def finish(self, updates: int, seconds: float) -> None:
        """Training ended: take the checkpoint's update count and training time, say why it stopped."""
        self.updates, self.train_s = updates, seconds
        self.stop_reason = stop_reason(self.budget, updates, seconds)
        if self.echo:
            average = f" (epoch average loss {self.epoch_loss:.3f})" if self.epoch_loss is not None else ""
            print(f"    {self.label}: stopped after {updates} updates: {self.stop_reason}{average}", flush=True)

    @property
    def wps(self) -> float:
        """Target tokens per second: fairseq's per-epoch ``wps``, weighted by each epoch's updates."""
        return self._wps_sum / self._wps_updates if self._wps_updates else float("nan")


def checkpoint_state(save_dir: str) -> Tuple[int, float]:
    """``(updates, training seconds)`` of ``save_dir``'s ``checkpoint_last.pt`` (``(0, 0.0)`` if none loads)."""
    info = read_info(os.path.join(save_dir, LAST))
    return (0, 0.0) if info is None else (info.num_updates, info.training_seconds)


def thread_env(threads: int) -> Dict[str, str]:
    """The environment that gives a torch process ``threads`` CPU threads."""
    return {THREADS_ENV: str(threads), "MKL_NUM_THREADS": str(threads)}


def command_env(threads: Optional[int] = None, **extra: str) -> Dict[str, str]:
    """The environment of every fairseq command the project runs: ``threads`` CPU threads (None: as this
    process), ``extra`` variables, and FAIRSEQ_DENSE_CLI: fairseq's tools end in one line on an error and exit
    cleanly (:mod:`fairseq_dense.cli.fairseq_tools`)."""
    return dict(os.environ, FAIRSEQ_DENSE_CLI="1", **(thread_env(threads) if threads else {}), **extra)


def run_command(
    cmd: List[str],
    log_path: str,
    on_line: Optional[Callable[[str], None]] = None,
    append: bool = False,
    threads: Optional[int] = None,
) -> str:
    """Run ``cmd`` with ``threads`` CPU threads; its output goes line by line to ``log_path`` after a ``# command``
    line (appended with ``append``: a resumed run's log holds one process after another) and is returned. A failure
    exits with the last lines."""
    logger.info("# %s", shlex.join(cmd))
    out_lines = []
    env = command_env(threads, PYTHONUNBUFFERED="1")  # unbuffered: fairseq's progress shows while it runs
    with (
        open(log_path, "a" if append else "w", buffering=1) as log,
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env) as proc,
    ):
        log.write(f"# {shlex.join(cmd)}\n")
        for line in proc.stdout:
            log.write(line)
            out_lines.append(line)
            if on_line is not None:
                on_line(line)
    if proc.returncode != 0:
        tail = "".join(out_lines[-30:])
        raise SystemExit(f"error: command failed with exit code {proc.returncode} (log: {log_path}):\n{tail}")
    return "".join(out_lines)


def train_command(bin_dir: str, save_dir: str, model_args: List[str], budget: Budget, seed: int) -> List[str]:
    """The quick-start recipe, the same for every model (``model_args``: ``--arch A`` and its options)."""
    # translation_exact_resume_simplex: exact resume + the post-step simplex projection of the
    # Weighted Transformer's branch weights (nothing to project in other models);
    # --log-format json --log-interval 1: a record per update, read by TrainLog
    recipe = f"""--cpu --task translation_exact_resume_simplex
        --optimizer fused_adam --adam-betas (0.9,0.98) --lr 0.003 --clip-norm 1.0
        --lr-scheduler inverse_sqrt --warmup-updates 100 --warmup-init-lr 1e-4
        --criterion label_smoothed_cross_entropy_with_stats --label-smoothing 0.1
        --max-tokens 2048 --max-epoch 100 --no-epoch-checkpoints --save-interval-updates {SAVE_EVERY}
        --keep-interval-updates 1 --log-format json --log-interval 1 --num-workers 0"""
    return [
        sys.executable, "-m", "fairseq_cli.train", bin_dir, "--user-dir", PACKAGE_DIR, *model_args,
        *recipe.split(), "--seed", str(seed), *budget.fairseq_args(), "--save-dir", save_dir,
    ]  # fmt: skip


def generate_command(bin_dir: str, checkpoint: str, beam: int) -> List[str]:
    """Translate the whole test split (``--required-batch-size-multiple 1``: every sentence)."""
    return [
        sys.executable, "-m", "fairseq_cli.generate", bin_dir, "--user-dir", PACKAGE_DIR, "--path", checkpoint,
        "--gen-subset", "test", "--cpu", "--beam", str(beam), "--batch-size", "64",
        "--required-batch-size-multiple", "1", "--remove-bpe", "--num-workers", "0",
    ]  # fmt: skip


def hypotheses(stdout: str, n: int) -> List[str]:
    """The tokenised hypotheses of ``fairseq-generate``'s output, in test order (not ``n`` of them: an error)."""
    # "H-<sentence id>\t<score>\t<hypothesis>", in the order the batches end
    hyps = {int(i[2:]): h for i, _, h in (line.split("\t", 2) for line in stdout.splitlines() if line.startswith("H-"))}
    if len(hyps) != n:
        raise SystemExit(f"error: fairseq-generate translated {len(hyps)} of {n} test sentences")
    return [hyps[i] for i in range(n)]


def score(hyps: List[str], refs: List[str], tgt_moses: str, lowercase: bool) -> Tuple[float, str, List[str]]:
    """``(sacreBLEU, its signature, the hypotheses detokenised)`` of tokenised ``hyps`` against raw ``refs``."""
    import sacrebleu
    from sacremoses import MosesDetokenizer

    detok = MosesDetokenizer(lang=tgt_moses)
    hyp_list = [detok.detokenize(h.split()) for h in hyps]
    if lowercase:
        refs = [r.lower() for r in refs]
    bleu = sacrebleu.metrics.BLEU()
    return bleu.corpus_score(hyp_list, [refs]).score, str(bleu.get_signature()), hyp_list


def settings(result: Result, data: str, budget: Budget, args) -> Dict:
    """What decides the trained model and its score: a finished run with other settings is not reused."""
    with open(os.path.join(data, "prepare.json"), "rb") as f:  # its options and the raw files' sha256
        fingerprint = hashlib.sha256(f.read()).hexdigest()
    return {
        "model_args": result.model_args,
        "budget": {k: v for k, v in asdict(budget).items() if v},
        "seed": result.seed,
        "beam": args.beam,
        "lowercase": args.lowercase,
        "data": fingerprint,
    }


def budget_met(save_dir: str, budget: Budget) -> bool:
    """Whether ``checkpoint_last.pt`` already holds the budget's training (more updates: an error)."""
    updates, seconds = checkpoint_state(save_dir)
    if not budget.updates:
        return seconds >= 60 * budget.minutes
    if updates > budget.updates:
        raise SystemExit(
            f"error: {save_dir} holds a model trained for {updates} updates, more than --updates "
            f"{budget.updates}: pass --fresh to start over, or a larger --updates"
        )
    return updates == budget.updates


def train_and_score(result: Result, data: str, work: str, refs: List[str], tgt: str, budget: Budget, args) -> Result:
    """Train ``result``'s model for ``budget`` (or find it trained), translate the test split, fill in the figures;
    ``data``: the prepared folder, ``work``: where the logs go, ``args``: the quick-start's options."""
    name = os.path.basename(result.save_dir).replace("checkpoints-", "")
    train_log, generate_log = (os.path.join(work, f"{step}-{name}.log") for step in ("train", "generate"))
    if args.fresh:
        shutil.rmtree(result.save_dir, ignore_errors=True)
        for path in (train_log, generate_log):
            if os.path.isfile(path):
                os.remove(path)
    wanted = settings(result, data, budget, args)
    result_path = os.path.join(result.save_dir, RESULT_NAME)
    try:  # {"settings": ..., "figures": ...} of a finished run, the settings alone of one cut short
        with open(result_path, encoding="utf-8") as f:
            stored = json.load(f)
    except (OSError, ValueError):
        stored = None
    if stored is not None and stored.get("settings") == wanted and "figures" in stored:
        for key, value in stored["figures"].items():
            setattr(result, key, value)
        result.reused = True
        logger.info(
            "%s: already trained (%s), test BLEU %.2f: not training again (--fresh starts over)",
            result.arch, os.path.join(result.save_dir, RESULT_NAME), result.bleu,
        )  # fmt: skip
        return result
    if stored is not None and stored.get("settings", {}).get("data") != wanted["data"]:
        raise SystemExit(f"error: {result.save_dir} was trained on other data: pass --fresh to start over")
    bin_dir = os.path.join(data, "bin")
    if budget_met(result.save_dir, budget):
        logger.info("%s: %s already holds %s: not training again", result.arch, result.save_dir, budget.describe())
        log = TrainLog(name, budget, echo=False)  # the figures from the whole log, every session
        if os.path.isfile(train_log):
            with open(train_log, encoding="utf-8") as f:
                for line in f:
                    log.feed(line)
    else:
        log = TrainLog(name, budget, *checkpoint_state(result.save_dir))
        cmd = train_command(bin_dir, result.save_dir, result.model_args, budget, result.seed)
        logger.info("training %s for %s (full log: %s)", result.arch, budget.describe(), train_log)
        os.makedirs(result.save_dir, exist_ok=True)
        prep.write_json(result_path, {"settings": wanted})  # the data its checkpoints come from, if it is cut
        run_command(cmd, train_log, log.feed, append=True, threads=args.threads)
    log.finish(*checkpoint_state(result.save_dir))
    result.params, result.updates, result.wps = log.params, log.updates, log.wps
    result.stop_reason, result.train_s = log.stop_reason, log.train_s
    result.valid_loss = log.best_loss if log.best_loss is not None else float("nan")
    logger.info("translating the test split with %s, beam %d", result.arch, args.beam)
    generate = generate_command(bin_dir, os.path.join(result.save_dir, BEST), args.beam)
    stdout = run_command(generate, generate_log, threads=args.threads)
    hyps = hypotheses(stdout, len(refs))
    result.bleu, result.signature, result.hyps = score(hyps, refs, prep.moses_lang(tgt), args.lowercase)
    figures = {k: v for k, v in asdict(result).items() if k in FIGURES}
    prep.write_json(result_path, {"settings": wanted, "figures": figures}, indent=1)
    return result


def export_model(result: Result, data: str, out_dir: str) -> str:
    """Export ``result``'s ``checkpoint_best.pt`` with its dictionaries, BPE codes and Moses options to ``out_dir``
    for ``fairseq_dense.from_pretrained``; ``out_dir.from`` names the checkpoint, so that it is exported once."""
    from fairseq_dense.hub import ModelCardInfo, export_checkpoint

    checkpoint = os.path.abspath(os.path.join(result.save_dir, BEST))
    stamp = os.path.normpath(out_dir) + ".from"
    source = f"{checkpoint} {os.path.getmtime(checkpoint)} {result.bleu}\n"
    if os.path.isdir(out_dir) and os.path.isfile(stamp) and open(stamp, encoding="utf-8").read() == source:
        return out_dir
    card = ModelCardInfo(bleu=result.bleu, bleu_signature=result.signature or None, test_set="test")
    export_checkpoint(
        [checkpoint], out_dir, data=os.path.join(data, "bin"), bpe_codes=os.path.join(data, "bpecodes"),
        moses_no_escape=True, moses_no_dash_splits=True,  # fairseq_dense.data.prepare's Moses options
        card=card, force=True,
    )  # fmt: skip
    with open(stamp, "w", encoding="utf-8") as f:
        f.write(source)
    return out_dir
