"""The quick-start's steps as fairseq commands: train (with a progress line), translate, score.

Every step is an ordinary fairseq command (``fairseq-train``, ``fairseq-generate``) run
with ``--user-dir`` pointing at this package and logged before it runs, so the quick-start
doubles as a worked example of the CLI. :mod:`fairseq_dense.cli.quickstart` drives them.
"""

import json
import logging
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import fairseq_dense
from fairseq_dense.threads import THREADS_ENV

logger = logging.getLogger("fairseq_dense.quickstart")
PACKAGE_DIR = os.path.dirname(os.path.abspath(fairseq_dense.__file__))

#: seconds between progress lines (the first comes with the first update, whatever the speed)
PROGRESS_S = 30.0
#: the recipe saves a checkpoint every this many updates: what a resumed run can lose
SAVE_EVERY = 200
#: CPU threads of the printed ``fairseq-dense-interactive`` command: a sentence at a time is
#: too little work to share, and extra threads only wait on a busy machine
INTERACTIVE_THREADS = 1
#: the text of fairseq-train's parameter-count line (not part of its JSON records)
_PARAMS = "num. shared model params: "


@dataclass
class Budget:
    """How long each model trains: a fixed number of updates (the default), or minutes.

    A fixed number of updates gives the same model on any machine (with the same seed,
    every model sees the same batches in the same order); minutes buy fewer updates on
    a slower or busier machine.
    """

    updates: Optional[int] = None
    minutes: Optional[float] = None

    def describe(self) -> str:
        """``"1600 updates"`` or ``"6 minutes"`` (of training)."""
        return f"{self.updates} updates" if self.updates else f"{self.minutes:g} minutes"

    def fairseq_args(self) -> List[str]:
        """The ``fairseq-train`` stopping rule."""
        if self.updates:
            return ["--max-update", str(self.updates)]
        return ["--stop-time-hours", f"{self.minutes / 60:.4f}"]

    def as_dict(self) -> Dict[str, float]:
        return {"updates": self.updates} if self.updates else {"minutes": self.minutes}


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
    train_s: float = 0.0  # training time of the run (fairseq's cumulative training time)
    error: str = ""  # why it has no figures (--all-families goes on without them)
    reused: bool = False  # figures read back from a finished run, nothing trained


def json_record(line: str) -> Tuple[str, Dict[str, float]]:
    """``("train_inner", {"loss": 6.1, "num_updates": 150.0, ...})`` from one line of
    ``fairseq-train --log-format json`` (``("", {})`` for any other line).

    fairseq logs each record as ``<time> | INFO | <tag> | {json}``, the tag ``train_inner``
    (every ``--log-interval`` updates), ``train`` (end of an epoch) or ``valid``; the last two
    prefix their keys with the tag (``valid_loss``), which is dropped here.
    """
    parts = line.rstrip("\n").split(" | ", 3)
    if len(parts) != 4 or not parts[3].startswith("{"):
        return "", {}
    tag = parts[2]
    try:
        record = json.loads(parts[3])
    except ValueError:
        return "", {}
    stats = {}
    for key, value in record.items():
        try:
            stats[key.removeprefix(tag + "_")] = float(value)
        except (TypeError, ValueError):
            continue
    return tag, stats


def stop_reason(budget: Budget, updates: int, seconds: float) -> str:
    """Why ``fairseq-train`` stopped, from the checkpoint's own counters: the budget, or else the
    recipe's other rule, ``--max-epoch``."""
    if budget.updates and updates >= budget.updates:
        return f"reached {updates} updates (--max-update)"
    if budget.minutes and seconds >= 60 * budget.minutes:
        return "reached the time budget (--stop-time-hours)"
    return "reached --max-epoch"


class TrainLog:
    """Reads ``fairseq-train``'s JSON records as they stream: prints progress lines, keeps the figures.

    A progress line comes with the first update and then every ``interval_s`` seconds,
    whatever the speed. It shows the mean training loss of the updates since the previous
    line (not the epoch's running average) and the time left: with an update budget,
    estimated from the speed since the first line; with a time budget, the budget minus the
    time trained. :meth:`finish` takes the updates and training time from the checkpoint and says
    why training stopped.

    Args:
        label: what the progress lines start with (the arch).
        budget: the training budget.
        start_updates, previous_s: updates and training seconds of the checkpoint it resumes
            from (0 when it starts afresh).
        echo: print progress lines (else only collect).
        interval_s: seconds between progress lines.
        clock: the time source (seconds), for tests.
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
        self.start_updates, self.previous_s = start_updates, previous_s
        self.interval_s, self.clock = interval_s, clock
        self.params = 0
        self.updates = start_updates
        self.best_loss: Optional[float] = None
        self.stop_reason = ""
        self.epoch_loss: Optional[float] = None
        self.train_s = previous_s
        self._started = clock()
        self._shown_at: Optional[float] = None  # when the last progress line was printed
        self._first = (0.0, 0)  # (time, updates) of the first progress line
        self._losses: List[float] = []  # train_inner losses since then
        self._epoch_end = start_updates  # updates at the last end-of-epoch record
        self._wps_sum = 0.0
        self._wps_updates = 0

    def feed(self, line: str) -> None:
        """Take one line of ``fairseq-train``'s output."""
        if _PARAMS in line:
            self.params = int(line.split(_PARAMS, 1)[1].split()[0].replace(",", ""))
            return
        tag, s = json_record(line)
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
        if first:  # the speed is measured from here: fairseq's start-up is not training
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
        mean = sum(self._losses) / len(self._losses)
        n = len(self._losses)
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
        """Target tokens per second of training: fairseq's per-epoch ``wps``, averaged over
        the epochs weighted by their updates."""
        return self._wps_sum / self._wps_updates if self._wps_updates else float("nan")


def checkpoint_state(save_dir: str) -> Tuple[int, float]:
    """``(updates, training seconds)`` stored in ``save_dir``'s ``checkpoint_last.pt``
    (``(0, 0.0)`` when there is none, or it cannot be read)."""
    from fairseq_dense.checkpoints import LAST, read_info

    info = read_info(os.path.join(save_dir, LAST))  # unreadable: fairseq-train reports it when it tries to resume
    return (0, 0.0) if info is None else (info.num_updates, info.training_seconds)


def previous_training_seconds(save_dir: str) -> float:
    """Training time stored in ``save_dir``'s ``checkpoint_last.pt`` (0 when it starts afresh)."""
    return checkpoint_state(save_dir)[1]


def thread_env(threads: int) -> Dict[str, str]:
    """The environment that gives a torch process ``threads`` CPU threads."""
    return {THREADS_ENV: str(threads), "MKL_NUM_THREADS": str(threads)}


def run_command(
    cmd: List[str],
    log_path: str,
    on_line: Optional[Callable[[str], None]] = None,
    append: bool = False,
    threads: Optional[int] = None,
) -> str:
    """Run a command, keeping its whole output in ``log_path`` (added at its end with ``append``,
    so that a continued training keeps the earlier run's log; written line by line, so that
    the file shows a run's progress); returns the output.

    Args:
        threads: the command's CPU threads (default: the environment's setting).

    Raises:
        SystemExit: the command failed; the message ends with the log's last lines.
    """
    logger.info("$ %s", " ".join(shlex.quote(c) for c in cmd))
    out_lines = []
    # fairseq logs to stdout, which Python block-buffers into a pipe: unbuffered,
    # so that progress shows while training runs, not when it ends
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(thread_env(threads) if threads else {}))
    with (
        open(log_path, "a" if append else "w", buffering=1) as log,
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env) as proc,
    ):
        log.write(f"$ {' '.join(shlex.quote(c) for c in cmd)}\n")
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
    # translation_exact_resume_simplex: translation with exact resume + the post-step simplex
    # projection of the Weighted Transformer's branch weights (nothing to project in other models)
    # --log-format json --log-interval 1: a record per update, read by TrainLog
    recipe = f"""--cpu --task translation_exact_resume_simplex
        --optimizer adam --adam-betas (0.9,0.98) --lr 0.003 --clip-norm 1.0
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


def interactive_command(bin_dir: str, checkpoint: str, codes: str, src: str, tgt: str, beam: int) -> List[str]:
    """``fairseq-dense-interactive`` (``fairseq-interactive`` with the plugin loaded and its
    input checked) on a trained model, reading raw sentences: the same Moses tokenisation (no
    escaping, no aggressive dash splits) and BPE codes as the prepared data; run through
    ``env`` with :data:`INTERACTIVE_THREADS` CPU threads."""
    script = os.path.join(os.path.dirname(sys.executable), "fairseq-dense-interactive")
    program = [script] if os.path.isfile(script) else [sys.executable, "-m", "fairseq_dense.cli.interactive"]
    threads = [f"{k}={v}" for k, v in thread_env(INTERACTIVE_THREADS).items()]
    return [
        "env", *threads, *program, os.path.abspath(bin_dir), "--path", os.path.abspath(checkpoint),
        "--source-lang", src, "--target-lang", tgt, "--tokenizer", "moses", "--moses-no-escape",
        "--moses-no-dash-splits", "--bpe", "subword_nmt", "--bpe-codes", os.path.abspath(codes),
        "--beam", str(beam), "--cpu",
    ]  # fmt: skip


def parse_generate(stdout: str, key: str) -> Dict[int, str]:
    out = {}
    for line in stdout.splitlines():
        if line.startswith(key + "-"):
            parts = line.split("\t")
            out[int(parts[0][len(key) + 1 :])] = parts[-1]
    return out


def score(stdout: str, refs: List[str], tgt_moses: str, lowercase: bool) -> Tuple[float, str, List[str]]:
    """Detokenise ``fairseq-generate``'s hypotheses and score them against the raw references.

    Returns:
        ``(sacreBLEU score, its signature, detokenised hypotheses in test order)``.
    """
    import sacrebleu
    from sacremoses import MosesDetokenizer

    hyps = parse_generate(stdout, "H")
    if len(hyps) != len(refs):
        raise SystemExit(f"error: fairseq-generate translated {len(hyps)} of {len(refs)} test sentences")
    detok = MosesDetokenizer(lang=tgt_moses)
    hyp_list = [detok.detokenize(hyps[i].split()) for i in range(len(refs))]
    if lowercase:
        refs = [r.lower() for r in refs]
    bleu = sacrebleu.metrics.BLEU()
    return bleu.corpus_score(hyp_list, [refs]).score, str(bleu.get_signature()), hyp_list
