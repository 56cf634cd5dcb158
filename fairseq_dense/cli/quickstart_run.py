"""One quick-start model from start to finish: train (or find it trained), score, export.

A finished model leaves ``quickstart-result.json`` in its checkpoint folder: the
settings it was trained with (architecture, budget, seed, data) and its figures. A
second quick-start with the same settings reads them back and trains nothing, so
neither the checkpoints nor the logs change; ``--fresh`` deletes the model's folder and
starts over. A larger budget continues the same training (fairseq resumes from
``checkpoint_last.pt``); the training log grows at its end.
"""

import hashlib
import json
import logging
import os
import shutil
from dataclasses import asdict
from typing import Dict, List, Optional

from fairseq_dense.cli.quickstart_steps import (
    Budget,
    Result,
    TrainLog,
    checkpoint_state,
    generate_command,
    run_command,
    score,
    train_command,
)
from fairseq_dense.data import prepare as prep

logger = logging.getLogger("fairseq_dense.quickstart")

RESULT_NAME = "quickstart-result.json"
#: the figures a finished run stores (the rest of :class:`Result` comes from the command line)
FIGURES = ("params", "updates", "valid_loss", "wps", "bleu", "signature", "hyps", "stop_reason", "train_s")


def data_fingerprint(data: str) -> str:
    """sha256 of the prepared data's ``prepare.json`` (its options and raw files' sha256)."""
    with open(os.path.join(data, "prepare.json"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def settings(result: Result, data: str, budget: Budget, args) -> Dict:
    """What decides the trained model and its score: a finished run with other settings is not reused."""
    return {
        "model_args": result.model_args,
        "budget": budget.as_dict(),
        "seed": result.seed,
        "beam": args.beam,
        "lowercase": args.lowercase,
        "data": data_fingerprint(data),
    }


def read_result(save_dir: str) -> Optional[Dict]:
    """The stored ``{"settings": ..., "figures": ...}`` of a finished run, or ``None``."""
    path = os.path.join(save_dir, RESULT_NAME)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None  # cut short or edited: the run is scored again


def write_result(result: Result, stored_settings: Dict) -> None:
    figures = {k: v for k, v in asdict(result).items() if k in FIGURES}
    path = os.path.join(result.save_dir, RESULT_NAME)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump({"settings": stored_settings, "figures": figures}, f, indent=1)
    os.replace(path + ".tmp", path)


def budget_met(save_dir: str, budget: Budget) -> bool:
    """Whether ``checkpoint_last.pt`` already holds the budget's training.

    Raises:
        SystemExit: it holds more updates than the budget (a smaller ``--updates`` than a
            finished run's cannot be had without starting over).
    """
    updates, seconds = checkpoint_state(save_dir)
    if budget.updates:
        if updates > budget.updates:
            raise SystemExit(
                f"error: {save_dir} holds a model trained for {updates} updates, more than --updates "
                f"{budget.updates}: pass --fresh to start over, or a larger --updates"
            )
        return updates == budget.updates
    return seconds >= 60 * budget.minutes


def fresh_start(result: Result, work: str, name: str) -> None:
    """Delete one model's checkpoints, stored result and logs (``--fresh``)."""
    shutil.rmtree(result.save_dir, ignore_errors=True)
    for log in (f"train-{name}.log", f"generate-{name}.log"):
        path = os.path.join(work, log)
        if os.path.isfile(path):
            os.remove(path)


def train_and_score(
    result: Result, data: str, work: str, refs: List[str], tgt: str, budget: Budget, args, echo: bool
) -> Result:
    """Train ``result``'s model for ``budget`` (or find it trained), translate the test split,
    fill in the figures.

    Args:
        result: the model to train (``model_args``, ``save_dir``); filled in and returned.
        data: the prepared data folder (``bin/``, ``bpecodes``, ``prepare.json``).
        work: where the logs go.
        refs: the raw test references.
        tgt: target language suffix.
        budget: updates or minutes of training.
        args: the quick-start's options (``beam``, ``lowercase``, ``fresh``, ``threads``).
        echo: print progress lines while training.
    """
    name = os.path.basename(result.save_dir).replace("checkpoints-", "")
    if args.fresh:
        fresh_start(result, work, name)
    wanted = settings(result, data, budget, args)
    stored = read_result(result.save_dir)
    if stored is not None and stored.get("settings") == wanted:
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
    log_path = os.path.join(work, f"train-{name}.log")
    if budget_met(result.save_dir, budget):
        logger.info("%s: %s already holds %s: not training again", result.arch, result.save_dir, budget.describe())
        # the figures of the training come from its log, every session from the first update
        log = TrainLog(name, budget, echo=False)
        if os.path.isfile(log_path):
            with open(log_path, encoding="utf-8") as f:
                for line in f:
                    log.feed(line)
    else:
        log = TrainLog(name, budget, *checkpoint_state(result.save_dir), echo=echo)
        cmd = train_command(bin_dir, result.save_dir, result.model_args, budget, result.seed)
        logger.info("training %s for %s (full log: %s)", result.arch, budget.describe(), log_path)
        run_command(cmd, log_path, log.feed, append=True, threads=args.threads)
    log.finish(*checkpoint_state(result.save_dir))
    result.params, result.updates, result.wps = log.params, log.updates, log.wps
    result.stop_reason, result.train_s = log.stop_reason, log.train_s
    result.valid_loss = log.best_loss if log.best_loss is not None else float("nan")
    logger.info("translating the test split with %s, beam %d", result.arch, args.beam)
    checkpoint = os.path.join(result.save_dir, "checkpoint_best.pt")
    generate = generate_command(bin_dir, checkpoint, args.beam)
    stdout = run_command(generate, os.path.join(work, f"generate-{name}.log"), threads=args.threads)
    result.bleu, result.signature, result.hyps = score(stdout, refs, prep.moses_lang(tgt), args.lowercase)
    write_result(result, wanted)
    return result


def export_model(result: Result, data: str, out_dir: str, test_set: str) -> str:
    """Export ``result``'s ``checkpoint_best.pt`` to ``out_dir`` for ``fairseq_dense.from_pretrained``.

    The directory carries everything the quick-start translated with: dictionaries, BPE
    codes, languages and the Moses options of the prepared data. ``export_checkpoint`` writes
    it beside ``out_dir``, loads it back and only then puts it in place.
    ``out_dir/../<name>.from`` names the checkpoint it came from, so that a second quick-start
    does not export the same model again.

    Returns:
        ``out_dir``.
    """
    from fairseq_dense.hub import ModelCardInfo, export_checkpoint

    checkpoint = os.path.abspath(os.path.join(result.save_dir, "checkpoint_best.pt"))
    stamp = os.path.normpath(out_dir) + ".from"
    source = f"{checkpoint} {os.path.getmtime(checkpoint)} {result.bleu}\n"
    if os.path.isdir(out_dir) and os.path.isfile(stamp) and open(stamp, encoding="utf-8").read() == source:
        return out_dir
    card = ModelCardInfo(bleu=result.bleu, bleu_signature=result.signature or None, test_set=test_set)
    export_checkpoint(
        [checkpoint],
        out_dir,
        data=os.path.join(data, "bin"),
        bpe_codes=os.path.join(data, "bpecodes"),
        moses_no_escape=True,  # the Moses options of fairseq_dense.data.prepare (escape=False,
        moses_no_dash_splits=True,  # no aggressive dash splits), which fairseq has to be told
        card=card,
        force=True,
    )
    with open(stamp, "w", encoding="utf-8") as f:
        f.write(source)
    return out_dir
