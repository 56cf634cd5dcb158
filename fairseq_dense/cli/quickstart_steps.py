"""The quick-start's steps as fairseq commands: train (with a progress line), translate, score.

Every step is an ordinary fairseq command (``fairseq-train``, ``fairseq-generate``) run
with ``--user-dir`` pointing at this package and logged before it runs, so the quick-start
doubles as a worked example of the CLI. :mod:`fairseq_dense.cli.quickstart` drives them.
"""

import logging
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import fairseq_dense

logger = logging.getLogger("fairseq_dense.quickstart")
PACKAGE_DIR = os.path.dirname(os.path.abspath(fairseq_dense.__file__))

# "| key value |" (simple log format, epoch summaries) or "key=value," (train_inner lines)
_STAT = re.compile(r"(?:^|[|,]\s*|\s)([a-z_]+)[ =](-?\d+(?:\.\d+)?)(?=\s*(?:[|,]|$))")
_PARAMS = re.compile(r"num\. shared model params: ([\d,]+)")
_RESUMED = re.compile(r"Loaded checkpoint .* \(epoch \d+ @ (\d+) updates\)")


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


def line_stats(line: str) -> Dict[str, float]:
    """``{"loss": 6.1, "num_updates": 150.0, ...}`` from one fairseq log line (simple format)."""
    body = line.split(" | INFO | ", 1)[-1]
    return {k: float(v) for k, v in _STAT.findall(body)}


#: fairseq-train's log line for each way training ends -> what the quick-start says
STOP_REASONS = (
    ("Stopping training due to num_updates", "reached {updates} updates (--max-update)"),
    ("Stopping training due to cumulative_training_time", "reached the time budget (--stop-time-hours)"),
    ("early stop since valid performance", "early stop: validation loss stopped improving (--patience)"),
    ("stopping training because current learning rate", "learning rate fell below --stop-min-lr"),
)


class TrainLog:
    """Reads ``fairseq-train``'s output as it streams: prints a progress line, keeps the figures.

    Progress lines show fairseq's ``train_inner`` loss, the mean over the last
    ``--log-interval`` updates (not the running average of the epoch), and the time
    left: with an update budget, estimated from the speed measured so far; with a time
    budget, the budget minus the time trained. The last line says why training stopped.

    Args:
        label: what the progress lines start with (the arch).
        budget: the training budget.
        previous_s: training time of the checkpoint it resumes from (fairseq's ``wall``
            restarts at 0 on resume, its time budget does not).
        echo: print progress lines (else only collect).
    """

    def __init__(self, label: str, budget: Budget, previous_s: float = 0.0, echo: bool = True):
        self.label, self.budget, self.previous_s, self.echo = label, budget, previous_s, echo
        self.params = 0
        self.updates = 0
        self.valid_losses: List[float] = []
        self.best_loss: Optional[float] = None
        self.stop_reason = ""
        self.epoch_loss: Optional[float] = None
        self.train_s = previous_s
        self._start_updates = 0  # updates of the checkpoint this process resumed from
        self._logged = 0  # updates at the last progress line
        self._last_updates = 0  # updates at the last end-of-epoch line
        self._wps_sum = 0.0
        self._wps_updates = 0
        self._inner_s = 0.0  # the progress lines' train_wall, summed: this process's training time

    def feed(self, line: str) -> None:
        """Take one line of ``fairseq-train``'s output."""
        m = _PARAMS.search(line)
        if m:
            self.params = int(m.group(1).replace(",", ""))
        m = _RESUMED.search(line)
        if m:
            self._start_updates = self._logged = self._last_updates = int(m.group(1))
        for marker, reason in STOP_REASONS:
            if marker in line:
                self.stop_reason = reason
        if " | train_inner | " in line:
            self._progress(line_stats(line))
        elif " | train | " in line:  # end of an epoch, or of training: the epoch's average
            s = line_stats(line)
            n = s.get("num_updates", 0) - self._last_updates
            if n > 0 and "wps" in s:
                self._wps_sum += s["wps"] * n
                self._wps_updates += n
            self._last_updates = s.get("num_updates", self._last_updates)
            self.updates = max(self.updates, int(s.get("num_updates", 0)))
            self.epoch_loss = s.get("loss")
            self.train_s = self.previous_s + (s.get("wall", 0.0) or self._inner_s)  # wall: 0 after a resume
        elif " | valid | " in line:
            s = line_stats(line)
            if "loss" in s:
                self.valid_losses.append(s["loss"])
            self.best_loss = s.get("best_loss", min(self.valid_losses, default=None))
            self.updates = max(self.updates, int(s.get("num_updates", 0)))
            if self.echo and "loss" in s:
                print(f"    {self.label}: validation after {self.updates} updates: loss {s['loss']:.3f}", flush=True)
        elif "done training in" in line:
            self.stop_reason = (self.stop_reason or "reached --max-epoch").format(updates=self.updates)
            if self.echo:
                average = f" (epoch average loss {self.epoch_loss:.3f})" if self.epoch_loss is not None else ""
                print(
                    f"    {self.label}: stopped after {self.updates} updates: {self.stop_reason}{average}", flush=True
                )

    def _progress(self, s: Dict[str, float]) -> None:
        self.updates = max(self.updates, int(s.get("num_updates", 0)))
        interval, self._logged = self.updates - self._logged, self.updates
        if not self.echo or "loss" not in s:
            return
        self._inner_s += s.get("train_wall", 0.0)
        # seconds since this fairseq-train started; fairseq's wall meter reads 0 after a resume
        # from a checkpoint it saved mid-epoch, where the intervals' training time still counts
        wall = s.get("wall", 0.0) or self._inner_s
        trained = self.previous_s + wall
        if self.budget.updates:
            done = self.updates - self._start_updates
            rate = done / wall if wall > 0 and done > 0 else 0.0
            left = f"about {(self.budget.updates - self.updates) / rate / 60:.1f} min left" if rate else "? min left"
            where = f"{self.updates}/{self.budget.updates} updates"
            eta = f"{left} at {rate:.2f} updates/s"
        else:
            where = f"{self.updates} updates"
            eta = f"{max(0.0, 60 * self.budget.minutes - trained) / 60:.1f} min left"
        print(
            f"    {self.label}: {where}, loss {s['loss']:.3f} (mean of the last {interval} updates), "
            f"{trained / 60:.1f} min trained, {eta}",
            flush=True,
        )

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


def run_command(
    cmd: List[str], log_path: str, on_line: Optional[Callable[[str], None]] = None, append: bool = False
) -> str:
    """Run a command, keeping its whole output in ``log_path`` (added at its end with ``append``,
    so that a continued training keeps the earlier run's log); returns the output.

    Raises:
        SystemExit: the command failed; the message ends with the log's last lines.
    """
    logger.info("$ %s", " ".join(shlex.quote(c) for c in cmd))
    out_lines = []
    # fairseq logs to stdout, which Python block-buffers into a pipe: unbuffered,
    # so that progress shows while training runs, not when it ends
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with (
        open(log_path, "a" if append else "w") as log,
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
    # translation_weighted: translation + the post-step simplex projection of the Weighted
    # Transformer's branch weights; the same as fairseq's translation for every other model
    recipe = """--cpu --task translation_weighted
        --optimizer adam --adam-betas (0.9,0.98) --lr 0.003 --clip-norm 1.0
        --lr-scheduler inverse_sqrt --warmup-updates 100 --warmup-init-lr 1e-4
        --criterion label_smoothed_cross_entropy_with_stats --label-smoothing 0.1
        --max-tokens 2048 --max-epoch 100 --no-epoch-checkpoints --save-interval-updates 200
        --keep-interval-updates 1 --log-format simple --log-interval 50 --num-workers 0"""
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
    escaping, no aggressive dash splits) and BPE codes as the prepared data."""
    script = os.path.join(os.path.dirname(sys.executable), "fairseq-dense-interactive")
    program = [script] if os.path.isfile(script) else [sys.executable, "-m", "fairseq_dense.cli.interactive"]
    return [
        *program, os.path.abspath(bin_dir), "--path", os.path.abspath(checkpoint),
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
