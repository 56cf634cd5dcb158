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
from fairseq_dense.data import prepare as prep

logger = logging.getLogger("fairseq_dense.quickstart")
PACKAGE_DIR = os.path.dirname(os.path.abspath(fairseq_dense.__file__))

# "| key value |" (simple log format, epoch summaries) or "key=value," (train_inner lines)
_STAT = re.compile(r"(?:^|[|,]\s*|\s)([a-z_]+)[ =](-?\d+(?:\.\d+)?)(?=\s*(?:[|,]|$))")
_PARAMS = re.compile(r"num\. shared model params: ([\d,]+)")
_RESUMED = re.compile(r"Loaded checkpoint .* \(epoch \d+ @ (\d+) updates\)")


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
    error: str = ""  # why it has no figures (--all-families goes on without them)


def line_stats(line: str) -> Dict[str, float]:
    """``{"loss": 6.1, "num_updates": 150.0, ...}`` from one fairseq log line (simple format)."""
    body = line.split(" | INFO | ", 1)[-1]
    return {k: float(v) for k, v in _STAT.findall(body)}


class TrainLog:
    """Reads ``fairseq-train``'s output as it streams: prints a progress line, keeps the figures.

    Args:
        label: what the progress lines start with (the arch).
        minutes: the training budget, for the time left.
        previous_s: training time of the checkpoint it resumes from (fairseq's ``wall``
            restarts at 0 on resume, its time budget does not).
        echo: print progress lines (else only collect).
    """

    def __init__(self, label: str, minutes: float, previous_s: float = 0.0, echo: bool = True):
        self.label, self.budget_s, self.previous_s, self.echo = label, 60 * minutes, previous_s, echo
        self.params = 0
        self.updates = 0
        self.valid_losses: List[float] = []
        self.best_loss: Optional[float] = None
        self._last_updates = 0
        self._wps_sum = 0.0
        self._wps_updates = 0

    def feed(self, line: str) -> None:
        m = _PARAMS.search(line)
        if m:
            self.params = int(m.group(1).replace(",", ""))
        m = _RESUMED.search(line)
        if m:
            self._last_updates = int(m.group(1))
        if " | train_inner | " in line:
            self._progress(line_stats(line), "")
        elif " | train | " in line:  # end of an epoch (or of the budget): its average speed
            s = line_stats(line)
            n = s.get("num_updates", 0) - self._last_updates
            if n > 0 and "wps" in s:
                self._wps_sum += s["wps"] * n
                self._wps_updates += n
            self._last_updates = s.get("num_updates", self._last_updates)
            self._progress(s, " (end of epoch)")
        elif " | valid | " in line:
            s = line_stats(line)
            if "loss" in s:
                self.valid_losses.append(s["loss"])
            self.best_loss = s.get("best_loss", min(self.valid_losses, default=None))
            self.updates = max(self.updates, int(s.get("num_updates", 0)))
            if self.echo and "loss" in s:
                print(f"    {self.label}: validation after {self.updates} updates: loss {s['loss']:.3f}", flush=True)

    def _progress(self, s: Dict[str, float], what: str) -> None:
        self.updates = max(self.updates, int(s.get("num_updates", 0)))
        if not self.echo or "loss" not in s:
            return
        wall = self.previous_s + s.get("wall", 0.0)
        left = max(0.0, self.budget_s - wall)
        print(
            f"    {self.label}: {self.updates} updates, loss {s['loss']:.3f}, "
            f"{wall / 60:.1f} min trained, {left / 60:.1f} min left{what}",
            flush=True,
        )

    @property
    def wps(self) -> float:
        """Target tokens per second of training: fairseq's per-epoch ``wps``, averaged over
        the epochs weighted by their updates (one 6-minute run on Tatoeba is one epoch)."""
        return self._wps_sum / self._wps_updates if self._wps_updates else float("nan")


def previous_training_seconds(save_dir: str) -> float:
    """Training time stored in ``save_dir``'s ``checkpoint_last.pt`` (0 when it starts afresh)."""
    path = os.path.join(save_dir, "checkpoint_last.pt")
    if not os.path.isfile(path):
        return 0.0
    from fairseq import checkpoint_utils

    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
    except Exception:  # unreadable: fairseq-train reports it when it tries to resume
        return 0.0
    return float((state.get("extra_state") or {}).get("previous_training_time", 0.0))


def run_command(cmd: List[str], log_path: str, on_line: Optional[Callable[[str], None]] = None) -> str:
    """Run a command, keeping its whole output in ``log_path``; returns it.

    Raises:
        SystemExit: the command failed; the message ends with the log's last lines.
    """
    logger.info("$ %s", " ".join(shlex.quote(c) for c in cmd))
    out_lines = []
    # fairseq logs to stdout, which Python block-buffers into a pipe: unbuffered,
    # so that progress shows while training runs, not when it ends
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with (
        open(log_path, "w") as log,
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env) as proc,
    ):
        for line in proc.stdout:
            log.write(line)
            out_lines.append(line)
            if on_line is not None:
                on_line(line)
    if proc.returncode != 0:
        tail = "".join(out_lines[-30:])
        raise SystemExit(f"error: command failed with exit code {proc.returncode} (log: {log_path}):\n{tail}")
    return "".join(out_lines)


def train_command(bin_dir: str, save_dir: str, model_args: List[str], minutes: float, seed: int) -> List[str]:
    """The 6-minute recipe, the same for every model (``model_args``: ``--arch A`` and its options)."""
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
        *recipe.split(), "--seed", str(seed), "--stop-time-hours", f"{minutes / 60:.4f}", "--save-dir", save_dir,
    ]  # fmt: skip


def generate_command(bin_dir: str, checkpoint: str, beam: int) -> List[str]:
    """Translate the whole test split (``--required-batch-size-multiple 1``: every sentence)."""
    return [
        sys.executable, "-m", "fairseq_cli.generate", bin_dir, "--user-dir", PACKAGE_DIR, "--path", checkpoint,
        "--gen-subset", "test", "--cpu", "--beam", str(beam), "--batch-size", "64",
        "--required-batch-size-multiple", "1", "--remove-bpe", "--num-workers", "0",
    ]  # fmt: skip


def interactive_command(bin_dir: str, checkpoint: str, codes: str, src: str, tgt: str, beam: int) -> List[str]:
    """``fairseq-interactive`` on a trained model, reading raw sentences: the same Moses
    tokenisation (no escaping, no aggressive dash splits) and BPE codes as the prepared data."""
    script = os.path.join(os.path.dirname(sys.executable), "fairseq-interactive")
    program = [script] if os.path.isfile(script) else [sys.executable, "-m", "fairseq_cli.interactive"]
    return [
        *program, os.path.abspath(bin_dir), "--user-dir", PACKAGE_DIR, "--path", os.path.abspath(checkpoint),
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


def train_and_score(result: Result, data: str, work: str, refs: List[str], tgt: str, args, echo: bool) -> Result:
    """Train ``result``'s model for ``args.minutes``, translate the test split, fill in the figures.

    Args:
        result: the model to train (``model_args``, ``save_dir``); filled in and returned.
        data: the prepared data folder (``bin/``, ``bpecodes``).
        work: where the logs go.
        refs: the raw test references.
        tgt: target language suffix.
        args: the quick-start's options (``minutes``, ``seed``, ``beam``, ``lowercase``).
        echo: print progress lines while training.
    """
    name = os.path.basename(result.save_dir).replace("checkpoints-", "")
    log = TrainLog(name, args.minutes, previous_training_seconds(result.save_dir), echo)
    bin_dir = os.path.join(data, "bin")
    cmd = train_command(bin_dir, result.save_dir, result.model_args, args.minutes, args.seed)
    log_path = os.path.join(work, f"train-{name}.log")
    logger.info("training %s for up to %.1f minutes (full log: %s)", result.arch, args.minutes, log_path)
    run_command(cmd, log_path, log.feed)
    result.params, result.updates, result.wps = log.params, log.updates, log.wps
    result.valid_loss = log.best_loss if log.best_loss is not None else float("nan")
    logger.info("translating the test split with %s, beam %d", result.arch, args.beam)
    checkpoint = os.path.join(result.save_dir, "checkpoint_best.pt")
    stdout = run_command(generate_command(bin_dir, checkpoint, args.beam), os.path.join(work, f"generate-{name}.log"))
    result.bleu, result.signature, result.hyps = score(stdout, refs, prep.moses_lang(tgt), args.lowercase)
    return result
