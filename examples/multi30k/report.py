"""The Multi30k logs read back (``python examples/multi30k/run.py report``, and ``run.py progress``).

A run folder ``logs/<pair>/<run>/`` (``<side>`` for seed 1, ``<side>.seedN`` for another seed) holds the
sweep logs, the converging training's ``train.log`` and ``eval.json``. The report rewrites the tables
between the markers of ``RESULTS.md`` (every run; each side's mean and spread over its seeds; the verdicts
by :func:`fairseq_dense.seeds.verdict`) and of the README, and draws each pair's learning curves.
"""

import glob
import json
import math
import os
import re

from pairs import PAIRS, SIDES, arch, split_run
from recipes import ROOT, markdown, write_between

from fairseq_dense.logs import ending, param_count, processes, records, walls_and_devices
from fairseq_dense.seeds import mean_sd_text, verdict

HERE = os.path.dirname(os.path.abspath(__file__))
LOGS = os.path.join(HERE, "logs")
PATIENCE = 5
SWEEP_EPOCHS = 4  # 528 updates: well past the warm-up, so the sweep does not just reward fast warm-up
FINISHED = ("early stopped", "epoch cap")  # the endings after which a run is not continued
# what the seeds table and the verdicts compare: (key, column, format, +1 higher is better / -1 lower)
METRICS = (
    ("sacrebleu", "test sacreBLEU", ".2f", 1),
    ("chrf", "chrF", ".2f", 1),
    ("best_loss", "best valid loss", ".3f", -1),
    ("best_epoch", "epochs to best", ".1f", -1),
)
# seeds.verdict's words as the verdicts table says them (:func:`said`)
WORDS = {"ahead": "confirmed", "behind": "not confirmed"}


def epochs(log: str) -> int:
    return len({r["epoch"] for r in records(log, "valid")})


def sweep_loss(log: str):
    """A sweep run's lowest validation loss in its SWEEP_EPOCHS (None: none logged)."""
    return min((r["loss"] for r in records(log, "valid") if r["epoch"] <= SWEEP_EPOCHS), default=None)


def trained_lr(procs):
    """The peak rate of the first command of a log's processes that names one (None without)."""
    found = [float(m.group(1)) for p in procs if (m := re.search(r" --lr (\S+)", p.command))]
    return found[0] if found else None


def read_json(path: str):
    if os.path.isfile(path):
        with open(path) as f:
            return json.load(f)


def patience_out(valid, patience: int = PATIENCE):
    """The epoch at which an uninterrupted run's early stopping fires (``valid``: ``(epoch, loss)`` in
    order), or None; a resumed run restarts fairseq's count, so it may stop later, never earlier."""
    best, since = None, 0
    for epoch, loss in valid:
        best, since = (loss, 0) if best is None or loss < best else (best, since + 1)
        if since == patience:
            return epoch


def summarize(pair: str, run: str) -> dict:
    """One run's figures from its logs and ``eval.json``."""
    folder = os.path.join(LOGS, pair, run)
    logs = glob.glob(os.path.join(folder, "sweep-lr*.log"))
    sweep = {float(os.path.basename(p)[len("sweep-lr") : -len(".log")]): sweep_loss(p) for p in logs}
    sweep = {lr: loss for lr, loss in sorted(sweep.items()) if loss is not None}
    row = dict.fromkeys("params lr ending best_loss best_epoch best_updates best_wall_h trained_on wps".split())
    row.update(pair=pair, side=run, arch=arch(pair, run), sweep=sweep, seed=split_run(run)[1])
    row.update(curve=[], epochs=0, eval=read_json(os.path.join(folder, "eval.json")))
    train = processes(os.path.join(folder, "train.log"))
    if not (sweep or row["seed"] > 1) or not train:
        return row
    # the converging run continues the sweep run at its rate (the one its command names) unless it started
    # at update 0 (its first epoch is 1: the sweep's checkpoint was lost; another seed has no sweep)
    procs = train
    if sweep and [int(r["epoch"]) for r in records(train, "train")][:1] != [1]:
        procs = processes(os.path.join(folder, f"sweep-lr{trained_lr(train) or min(sweep, key=sweep.get):g}.log"))
        procs += train
    # by epoch, the last record wins (an interrupted epoch is logged again on resume)
    valid = {int(r["epoch"]): r for r in records(procs, "valid")}.values()
    wps = [r["wps"] for r in {int(r["epoch"]): r for r in records(procs, "train")}.values() if "wps" in r]
    wall, where = walls_and_devices(procs)
    # (updates, wall seconds at the end of that epoch, validation loss, epoch)
    curve = [(int(r["num_updates"]), wall.get(int(r["epoch"]), math.nan), r["loss"], int(r["epoch"])) for r in valid]
    best = min(curve, key=lambda c: c[2]) if curve else (None,) * 4
    row.update(params=param_count("".join(p.notes for p in train + procs)), lr=trained_lr(train), curve=curve)
    row.update(ending=ending(train), best_updates=best[0], best_loss=best[2], best_epoch=best[3], trained_on=where)
    row.update(best_wall_h=None if best[1] is None else best[1] / 3600, epochs=curve[-1][3] if curve else 0)
    row.update(patience_out=patience_out([(c[3], c[2]) for c in curve]), wps=sum(wps) / len(wps) if wps else None)
    return row


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def stopped(row) -> str:
    """How the row's converging run ended: early stopping ("yes", and how late where a resume restarted
    fairseq's count), the epoch cap ("no"), a time limit, or not in its log ("interrupted")."""
    late = row["epochs"] - row["patience_out"] if row["patience_out"] else 0
    endings = {
        "early stopped": f"yes ({late} epochs late: resumed)" if late > 0 else "yes",
        "epoch cap": "no",
        "stopped by time": "no (time limit)",
    }
    return endings.get(row["ending"], "no (interrupted)")


def table(rows) -> str:
    lines = []
    for r in rows:
        sweep = ", ".join(f"{lr:g} -> {loss:.3f}" for lr, loss in r["sweep"].items())
        sweep = f"seed {r['seed']}, at seed 1's rate" if r["seed"] > 1 else sweep
        ev, on = r["eval"] or {}, r["trained_on"]
        test = ev.get("test", {})
        lines.append(
            f"| {r['pair']} | {r['side']} (`{r['arch']}`) | {fmt(r['params'], ',')} | {fmt(ev.get('lr'), 'g')} "
            f"({sweep}) | {r['epochs']} / {fmt(r['best_epoch'], 'd')} | {fmt(r['best_updates'], ',')} | "
            f"{fmt(r['best_wall_h'], '.2f')} | {fmt(r['best_loss'], '.3f')} | {fmt(test.get('sacrebleu'), '.2f')} | "
            f"{fmt(test.get('bleu_tok_lc'), '.2f')} | {fmt(test.get('chrf'), '.2f')} | {fmt(r['wps'], ',.0f')} | "
            f"{stopped(r)} | {ev.get('machine', '-')}{f' (trained: {on})' if on else ''} |"
        )
    head = (
        "pair | side (arch) | params | peak lr (sweep: lr -> valid loss) | epochs run / to best | updates to best "
        "| hours to best | best valid loss | test sacreBLEU | BLEU tok+lc | chrF | train tok/s | early stop | machine"
    )
    return markdown(head, lines)


def plot(pair: str, rows) -> None:
    from fairseq_dense.cli.plot import figure, save

    fig, (by_updates, by_time) = figure(1, 2, figsize=(10, 3.8))  # matplotlib's file-only backend
    rows = [r for r in rows if r["curve"]]
    # the hours panel compares machines (or a run's mixes two): name each curve's
    name_machines = len({(r["eval"] or {}).get("machine") for r in rows}) > 1 or any(r["trained_on"] for r in rows)
    for r in rows:
        machine = (r["eval"] or {}).get("machine")
        label = f"{r['side']} ({r['arch']}, lr {(r['eval'] or {}).get('lr', r['lr'])})"
        if name_machines:
            label += f" [{r['trained_on'] or (machine.rsplit(', ', 1)[-1] if machine else 'under way')}]"
        style = {"marker": ".", "linestyle": "--" if "." in r["side"] else "-", "label": label}
        by_updates.plot([c[0] for c in r["curve"]], [c[2] for c in r["curve"]], **style)
        by_time.plot([c[1] / 3600 for c in r["curve"]], [c[2] for c in r["curve"]], **style)
    by_updates.set_xlabel("updates")
    by_time.set_xlabel("hours (wall; machine in the table)")
    for ax in (by_updates, by_time):
        ax.set_ylabel("validation loss")
        ax.grid(alpha=0.3)
    fig.suptitle(f"Multi30k en-de: {pair}")
    # below the panels: the labels (machines included) are wider than a panel
    legend = by_updates.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, -0.2))
    save(fig, os.path.join(HERE, "plots", f"{pair}.png"), dpi=80, legend=legend)


def groups(rows) -> dict:
    """``{(pair, side): {"runs": [its seeds' counted runs], "left": [the others]}}`` in the order of ``rows``.
    A run counts once trained to early stopping (or the epoch cap), not stopped by a time limit or cut, and
    scored at its best loss (scores that record none: older)."""
    out = {}
    for r in rows:
        scored = r["eval"] and r["eval"].get("best_valid_loss", r["best_loss"]) == r["best_loss"]
        group = out.setdefault((r["pair"], split_run(r["side"])[0]), {"runs": [], "left": []})
        group["runs" if r["ending"] in FINISHED and scored else "left"].append(r)
    return out


def value(row, key: str) -> float:
    """A run's figure of ``METRICS``: its test scores from ``eval.json``, the rest from its log."""
    return float(row["eval"]["test"][key] if key in ("sacrebleu", "chrf") else row[key])


def spread(runs, key: str, spec: str) -> str:
    return mean_sd_text([value(r, key) for r in runs], spec)


def seeds_table(rows) -> str:
    """Each side's mean and standard deviation over its counted seeds."""
    lines = []
    for (pair, side), group in groups(rows).items():
        runs = group["runs"]
        seeds = f"{len(runs)} (seed{'s' if len(runs) > 1 else ''} {', '.join(str(r['seed']) for r in runs)})"
        left = []
        for r in group["left"]:
            why = "not scored at its best loss yet" if r["ending"] in FINISHED else stopped(r)
            left.append(f"{r['side']}: {why if r['curve'] else 'no training logged'}")
        seeds += f"; not counted: {', '.join(left)}" if left else ""
        figures = " | ".join(spread(runs, key, spec) for key, _, spec, _ in METRICS)
        lines.append(f"| {pair} | {side} (`{arch(pair, side)}`) | {seeds} | {figures} |")
    return markdown("pair | side (arch) | seeds | " + " | ".join(column for _, column, _, _ in METRICS), lines)


def said(band: float, word: str) -> str:
    """A :func:`fairseq_dense.seeds.verdict` (its band and word) as the verdicts table says it."""
    return "one seed each: no spread to judge by" if math.isnan(band) else WORDS.get(word, word)


def verdict_table(rows) -> str:
    """One verdict per comparison and metric where both sides have a counted run (one row for all metrics
    where each side has one run: no spread to judge by). A pair compares the model with the baseline, and
    each variant with each side it names under ``against`` (``pairs.py``)."""
    by, lines = groups(rows), []
    for pair, entry in PAIRS.items():
        against = [(name, b) for name, v in entry.get("variants", {}).items() for b in v.get("against", ())]
        for a, b in [("model", "baseline"), *against]:
            runs_a, runs_b = by.get((pair, a), {}).get("runs"), by.get((pair, b), {}).get("runs")
            for key, column, spec, better in METRICS if runs_a and runs_b else ():
                diff, band, word = verdict([value(r, key) for r in runs_a], [value(r, key) for r in runs_b], better > 0)
                lines.append(
                    f"| {pair} | {a} vs {b} | {column} | {spread(runs_a, key, spec)} ({len(runs_a)}) | "
                    f"{spread(runs_b, key, spec)} ({len(runs_b)}) | {diff:+{spec}} | "
                    f"{'-' if math.isnan(band) else f'± {band:{spec}}'} | {said(band, word)} |"
                )
                if math.isnan(band):
                    break
    head = "pair | side vs side | metric | side (seeds) | other side (seeds) | difference | 95% noise band | verdict"
    return markdown(head, lines)


def front_table(rows) -> str:
    """One row per family for the README: its test sacreBLEU beside its baseline's (the mean and standard
    deviation over the seeds where a side has more than one)."""
    by = groups(rows)

    def bleu(pair, side):
        runs = by.get((pair, side), {}).get("runs", [])
        return spread(runs, "sacrebleu", ".2f") + (f" ({len(runs)} seeds)" if len(runs) > 1 else "")

    lines = [
        f"| {pair} | `{arch(pair, 'model')}` | {bleu(pair, 'model')} | `{arch(pair, 'baseline')}` | "
        f"{bleu(pair, 'baseline')} | {spec['claim']} |"
        for pair, spec in PAIRS.items()
    ]
    return markdown("family | plugin arch | test sacreBLEU | baseline | baseline sacreBLEU | claim", lines)


def sides(pair: str):
    """The pair's run folders: the model, the baseline, then the runs kept beside them (variants of
    ``pairs.py`` or earlier runs such as ``baseline.gpu-0.3h``, by name), each side's seeds after it."""
    folder = os.path.join(LOGS, pair)
    runs = [r for r in (os.listdir(folder) if os.path.isdir(folder) else []) if r.split(".")[0] in SIDES]
    order = {side: i for i, side in enumerate(SIDES)}
    return sorted(runs, key=lambda r: (order.get(split_run(r)[0], len(SIDES)), split_run(r)))


def main() -> None:
    rows = []
    for pair in PAIRS:
        rows += (pair_rows := [summarize(pair, run) for run in sides(pair)])
        if any(r["curve"] for r in pair_rows):
            plot(pair, pair_rows)
    tables = {"table": table(rows), "seeds": seeds_table(rows), "verdicts": verdict_table(rows)}
    for name, text in tables.items():
        write_between(os.path.join(HERE, "RESULTS.md"), f"multi30k-{name}", text)
    write_between(os.path.join(ROOT, "README.md"), "multi30k-table", front_table(rows))
    print(*tables.values(), sep="\n\n")
