"""The Multi30k results table and learning curves, from the committed logs alone.

    python examples/multi30k/run.py report

Reads ``examples/multi30k/logs/<pair>/<run>/`` (the sweep logs, the converging
training's log and ``eval.json``; a run is a side's seed 1, ``<side>``, or another seed,
``<side>.seedN``), rewrites the tables between the markers of ``RESULTS.md`` (every run;
each side's mean and standard deviation over its seeds; the verdicts computed from them)
and of the README's results section, and draws one plot per pair (validation loss against
updates and against seconds, every run in each panel).

The verdict rule (``compare``), over the seeds each side trained to early stopping and scored:
the gap of the means is "within noise" when no larger than ``t(0.975, n_a + n_b - 2) * s_p *
sqrt(1/n_a + 1/n_b)`` (s_p the pooled standard deviation; 2.27 s_p with three seeds a side);
beyond it "confirmed" where the side is better (higher BLEU or chrF, lower loss, fewer epochs),
else "not confirmed". One seed on each side has no spread to pool, and the row says so.
"""

import glob
import json
import math
import os
import re

from pairs import PAIRS, SIDES
from run import (
    LOGS,
    PATIENCE,
    SWEEP_EPOCHS,
    TIME_STOP,
    continues_sweep,
    last_command,
    options,
    records,
    split_run,
    trained_lr,
)

from fairseq_dense.logs import parse_line
from fairseq_dense.seeds import mean_sd, verdict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BEGIN, END = "<!-- multi30k-table:begin -->", "<!-- multi30k-table:end -->"
SEEDS = ("<!-- multi30k-seeds:begin -->", "<!-- multi30k-seeds:end -->")
VERDICTS = ("<!-- multi30k-verdicts:begin -->", "<!-- multi30k-verdicts:end -->")
# what the seeds table and the verdicts compare: (key, column, format, +1 higher is better / -1 lower)
METRICS = (
    ("sacrebleu", "test sacreBLEU", ".2f", 1),
    ("chrf", "chrF", ".2f", 1),
    ("best_loss", "best valid loss", ".3f", -1),
    ("best_epoch", "epochs to best", ".1f", -1),
)


def arch(pair: str, side: str) -> str:
    opts = options(pair, side)
    return opts[opts.index("--arch") + 1]


def params(log: str):
    with open(log) as f:
        for line in f:
            m = re.search(r"model params: ([\d,]+)", line)
            if m:
                return int(m.group(1).replace(",", ""))
    return None


def walls(logs) -> dict:
    """``{epoch: wall seconds of training up to the end of that epoch}`` over ``logs`` in order.

    fairseq's ``train_wall`` starts at 0 in every process (each begins with its ``# command``
    line): each continues where the one before ended; an epoch cut by an interruption is not
    counted (it is trained again).
    """
    out, offset, last = {}, 0.0, 0.0
    for log in logs:
        with open(log) as f:
            for line in f:
                if line.startswith("# "):
                    offset, last = offset + last, 0.0
                elif (record := parse_line(line))[0] == "train":
                    last = record[1]["wall"]
                    out[int(record[1]["epoch"])] = offset + last
    return out


def trained_on(logs):
    """Where a run trained when not on one kind of device (e.g. "GPU, then CPU from epoch 50",
    by ``--cpu`` in each process's ``# command`` line), else None."""
    parts = []  # [device, first epoch it logged]
    for log in logs:
        with open(log) as f:
            for line in f:
                if line.startswith("# "):
                    device = "CPU" if " --cpu" in line else "GPU"
                    if not parts or parts[-1][0] != device:
                        parts.append([device, None])
                elif parts and parts[-1][1] is None and (r := parse_line(line))[0] in ("train", "valid"):
                    parts[-1][1] = int(r[1]["epoch"])
    if len(parts) < 2:
        return None
    return parts[0][0] + "".join(f", then {device} from epoch {epoch}" for device, epoch in parts[1:])


def patience_out(valid, patience: int = PATIENCE):
    """The epoch at which an uninterrupted run's early stopping fires (``valid``: ``(epoch, loss)``
    in order), or None; a resumed run restarts fairseq's count, so it may stop later, never earlier."""
    best, since = None, 0
    for epoch, loss in valid:
        if best is None or loss < best:
            best, since = loss, 0
        else:
            since += 1
            if since == patience:
                return epoch
    return None


def summarize(pair: str, side: str):
    folder = os.path.join(LOGS, pair, side)
    sweep = {}
    for path in sorted(glob.glob(os.path.join(folder, "sweep-lr*.log"))):
        lr = float(os.path.basename(path)[len("sweep-lr") : -len(".log")])
        losses = [r["loss"] for r in records(path, "valid") if r["epoch"] <= SWEEP_EPOCHS]
        if losses:
            sweep[lr] = min(losses)
    row = {"pair": pair, "side": side, "arch": arch(pair, side), "sweep": sweep, "seed": split_run(side)[1]}
    train_log = os.path.join(folder, "train.log")
    if not (sweep or row["seed"] > 1) or not os.path.isfile(train_log):
        return row
    # the converging run continues the sweep run at its rate (the one its command names),
    # unless it started again at update 0 (the sweep's checkpoint was lost); another seed's
    # run has no sweep of its own (it trains from update 0 at seed 1's rate)
    logs = (train_log,)
    if sweep and continues_sweep(train_log):
        logs = (os.path.join(folder, f"sweep-lr{trained_lr(train_log) or min(sweep, key=sweep.get):g}.log"), train_log)
    # by epoch, the last record wins (an interrupted epoch is logged again on resume)
    valid = list({int(r["epoch"]): r for log in logs for r in records(log, "valid")}.values())
    train = {int(r["epoch"]): r for log in logs for r in records(log, "train")}
    wall = walls(logs)
    # (updates, wall seconds at the end of that epoch, validation loss, epoch)
    curve = [
        (
            int(r["num_updates"]),
            wall.get(int(r["epoch"]), float("nan")),
            r["loss"],
            int(r["epoch"]),
        )
        for r in valid
    ]
    text = last_command(train_log)  # how the last process ended (a time-stopped run may be continued)
    best = min(curve, key=lambda c: c[2]) if curve else None
    wps = [r["wps"] for r in train.values() if "wps" in r]
    row.update(
        {
            "params": params(train_log) or params(logs[0]),
            "lr": trained_lr(train_log),
            "curve": curve,
            "early_stopped": "early stop" in text,
            "stopped_by_time": TIME_STOP in text,
            "finished": "done training" in text,
            "best_loss": best[2] if best else None,
            "best_epoch": best[3] if best else None,
            "best_updates": best[0] if best else None,
            "best_wall_h": best[1] / 3600 if best else None,
            "epochs": curve[-1][3] if curve else 0,
            "patience_out": patience_out([(c[3], c[2]) for c in curve]),
            "trained_on": trained_on(logs),
            "wps": sum(wps) / len(wps) if wps else None,
        }
    )
    eval_path = os.path.join(folder, "eval.json")
    if os.path.isfile(eval_path):
        with open(eval_path) as f:
            row["eval"] = json.load(f)
    return row


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def stopped(row) -> str:
    """How the row's converging run ended: early stopping ("yes", and how late where a resume
    restarted fairseq's count), the epoch cap ("no"), a time limit, or not in its log ("interrupted")."""
    if row.get("early_stopped"):
        out = row.get("patience_out")
        return f"yes ({row['epochs'] - out} epochs late: resumed)" if out and row["epochs"] > out else "yes"
    if row.get("stopped_by_time"):
        return "no (time limit)"
    return "no" if row.get("finished") else "no (interrupted)"


def table(rows) -> str:
    lines = [
        "| pair | side (arch) | params | peak lr (sweep: lr -> valid loss) | epochs run / to best "
        "| updates to best | hours to best | best valid loss | test sacreBLEU | BLEU tok+lc | chrF | train tok/s "
        "| early stop | machine |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        sweep = ", ".join(f"{lr:g} -> {loss:.3f}" for lr, loss in sorted(r["sweep"].items()))
        if r["seed"] > 1:
            sweep = f"seed {r['seed']}, at seed 1's rate"
        ev = r.get("eval", {})
        test = ev.get("test", {})
        lines.append(
            f"| {r['pair']} | {r['side']} (`{r['arch']}`) | {fmt(r.get('params'), ',')} | "
            f"{fmt(ev.get('lr'), 'g')} ({sweep}) | {r.get('epochs', 0)} / {fmt(r.get('best_epoch'), 'd')} | "
            f"{fmt(r.get('best_updates'), ',')} | {fmt(r.get('best_wall_h'), '.2f')} | "
            f"{fmt(r.get('best_loss'), '.3f')} | {fmt(test.get('sacrebleu'), '.2f')} | "
            f"{fmt(test.get('bleu_tok_lc'), '.2f')} | {fmt(test.get('chrf'), '.2f')} | {fmt(r.get('wps'), ',.0f')} | "
            f"{stopped(r)} | {ev.get('machine', '-')}{f' (trained: {on})' if (on := r.get('trained_on')) else ''} |"
        )
    return "\n".join(lines)


def plot(pair: str, rows) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_updates, by_time) = plt.subplots(1, 2, figsize=(10, 3.8))
    machines = {r.get("eval", {}).get("machine") for r in rows if r.get("curve")}
    # the hours panel compares machines (or a run's mixes two): name each curve's
    name_machines = len(machines) > 1 or any(r.get("trained_on") for r in rows)
    for r in rows:
        if not r.get("curve"):
            continue
        label = f"{r['side']} ({r['arch']}, lr {r.get('eval', {}).get('lr', r.get('lr'))})"
        if name_machines:
            machine = r.get("eval", {}).get("machine")
            label += f" [{r.get('trained_on') or (machine.rsplit(', ', 1)[-1] if machine else 'under way')}]"
        style = {"marker": ".", "linestyle": "--" if "." in r["side"] else "-"}
        by_updates.plot([c[0] for c in r["curve"]], [c[2] for c in r["curve"]], label=label, **style)
        by_time.plot([c[1] / 3600 for c in r["curve"]], [c[2] for c in r["curve"]], label=label, **style)
    by_updates.set_xlabel("updates")
    by_time.set_xlabel("hours (wall; machine in the table)")
    for ax in (by_updates, by_time):
        ax.set_ylabel("validation loss")
        ax.grid(alpha=0.3)
    # below the panels: the labels (machines included) are wider than a panel
    legend = by_updates.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, -0.2))
    legend.set_in_layout(False)  # the panels keep their width; the saved figure grows to hold it
    fig.suptitle(f"Multi30k en-de: {pair}")
    fig.tight_layout()
    legend.set_in_layout(True)  # for bbox_inches="tight"
    os.makedirs(os.path.join(HERE, "plots"), exist_ok=True)
    fig.savefig(os.path.join(HERE, "plots", f"{pair}.png"), dpi=80, bbox_inches="tight")
    plt.close(fig)


def replace_between(path: str, text: str, markers=(BEGIN, END)) -> None:
    begin, end = markers
    with open(path) as f:
        content = f.read()
    if begin not in content:
        return
    head, rest = content.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(path + ".tmp", "w") as f:
        f.write(head + begin + "\n" + text + "\n" + end + tail)
    os.replace(path + ".tmp", path)


def counted(row) -> bool:
    """Whether a run counts among its side's seeds: trained to early stopping (or the epoch cap), not
    stopped by a time limit or cut, and scored at its best loss (scores that record none: older)."""
    if not row.get("finished") or row.get("stopped_by_time") or "eval" not in row:
        return False
    return row["eval"].get("best_valid_loss", row["best_loss"]) == row["best_loss"]


def value(row, key: str) -> float:
    """A run's figure of ``METRICS``: its test scores from ``eval.json``, the rest from its log."""
    return float(row["eval"]["test"][key] if key in ("sacrebleu", "chrf") else row[key])


def groups(rows) -> dict:
    """``{(pair, side): {"runs": [the counted runs, by seed], "left": [the others]}}``, sides in
    the order of ``rows``; a side's runs are its seeds (``<side>`` and ``<side>.seedN``)."""
    out = {}
    for r in rows:
        group = out.setdefault((r["pair"], split_run(r["side"])[0]), {"runs": [], "left": []})
        group["runs" if counted(r) else "left"].append(r)
    for group in out.values():
        group["runs"].sort(key=lambda r: r["seed"])
    return out


def compare(a, b, better: int = 1) -> dict:
    """The verdict on side ``a``'s values against side ``b``'s (one per seed): the difference of the
    means (a - b), its noise band (:func:`fairseq_dense.seeds.verdict`: the half-width of its 95%
    interval), and "confirmed" (``a`` better beyond it; ``better``
    1: higher is better, -1: lower), "not confirmed" or "within noise"."""
    diff, band, word = verdict(a, b, better > 0)
    if math.isnan(band):
        return {"diff": diff, "band": None, "verdict": "one seed each: no spread to judge by"}
    return {"diff": diff, "band": band, "verdict": {"ahead": "confirmed", "behind": "not confirmed"}.get(word, word)}


def spread(runs, key: str, spec: str) -> str:
    """``mean +- sd`` of the runs' ``key`` (the value alone for one run; "-" for none)."""
    if not runs:
        return "-"
    mean, sd = mean_sd([value(r, key) for r in runs])
    return format(mean, spec) + ("" if math.isnan(sd) else f" ± {sd:{spec}}")


def seeds(group) -> str:
    """How many seeds a side's figures are over, and which runs are not counted (and why)."""
    runs = group["runs"]
    text = f"{len(runs)} (seed{'s' if len(runs) > 1 else ''} {', '.join(str(r['seed']) for r in runs)})"
    left = [f"{r['side']}: {why_left(r)}" for r in group["left"]]
    return text + (f"; not counted: {', '.join(left)}" if left else "")


def why_left(row) -> str:
    if not row.get("curve"):
        return "no training logged"
    if row.get("finished") and not row.get("stopped_by_time"):
        return "not scored at its best loss yet"
    return stopped(row)


def seeds_table(rows) -> str:
    """Each side's mean and standard deviation over its seeds (those trained to early stopping and scored)."""
    lines = [
        "| pair | side (arch) | seeds | " + " | ".join(column for _, column, _, _ in METRICS) + " |",
        "|---|---|---|" + "---|" * len(METRICS),
    ]
    for (pair, side), group in groups(rows).items():
        figures = " | ".join(spread(group["runs"], key, spec) for key, _, spec, _ in METRICS)
        lines.append(f"| {pair} | {side} (`{arch(pair, side)}`) | {seeds(group)} | {figures} |")
    return "\n".join(lines)


def comparisons(pair: str):
    """The pair's verdicts: the model against the baseline, and each variant against each side it
    names under ``against`` (``pairs.py``)."""
    yield "model", "baseline"
    for name, variant in PAIRS[pair].get("variants", {}).items():
        for side in variant.get("against", ()):
            yield name, side


def verdicts(rows) -> list:
    """One verdict per comparison and metric where both sides have a counted run (one for all
    metrics where each side has one run: no spread to judge by)."""
    by = groups(rows)
    out = []
    for pair in PAIRS:
        for a, b in comparisons(pair):
            runs_a, runs_b = by.get((pair, a), {}).get("runs"), by.get((pair, b), {}).get("runs")
            if not runs_a or not runs_b:
                continue
            for key, column, spec, better in METRICS:
                result = compare([value(r, key) for r in runs_a], [value(r, key) for r in runs_b], better)
                out.append({"pair": pair, "a": a, "b": b, "metric": column, "spec": spec, **result,
                            "a_runs": runs_a, "b_runs": runs_b, "key": key})  # fmt: skip
                if result["band"] is None:
                    break
    return out


def verdict_table(rows) -> str:
    lines = [
        "| pair | side vs side | metric | side (seeds) | other side (seeds) | difference | 95% noise band | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v in verdicts(rows):
        spec = v["spec"]
        band = "-" if v["band"] is None else f"± {v['band']:{spec}}"
        lines.append(
            f"| {v['pair']} | {v['a']} vs {v['b']} | {v['metric']} | {spread(v['a_runs'], v['key'], spec)} "
            f"({len(v['a_runs'])}) | {spread(v['b_runs'], v['key'], spec)} ({len(v['b_runs'])}) | "
            f"{v['diff']:+{spec}} | {band} | {v['verdict']} |"
        )
    return "\n".join(lines)


def front_table(rows) -> str:
    """One row per family for the README: its BLEU beside its baseline's (the mean and standard
    deviation over the seeds where a side has more than one)."""
    lines = [
        "| family | plugin arch | test sacreBLEU | baseline | baseline sacreBLEU | claim |",
        "|---|---|---|---|---|---|",
    ]
    by = {(r["pair"], r["side"]): r for r in rows}
    by_side = groups(rows)

    def bleu(pair, side):
        runs = by_side.get((pair, side), {}).get("runs", [])
        if len(runs) > 1:
            return f"{spread(runs, 'sacrebleu', '.2f')} ({len(runs)} seeds)"
        r = by.get((pair, side), {})
        value = fmt(r.get("eval", {}).get("test", {}).get("sacrebleu"), ".2f")
        return value + (" (stopped by the time limit, not converged)" if r.get("stopped_by_time") else "")

    for pair, spec in PAIRS.items():
        lines.append(
            f"| {pair} | `{arch(pair, 'model')}` | {bleu(pair, 'model')} | `{arch(pair, 'baseline')}` | "
            f"{bleu(pair, 'baseline')} | {spec['claim']} |"
        )
    return "\n".join(lines)


def sides(pair: str):
    """The pair's run folders: the model, the baseline, then the runs kept beside them (variants of
    ``pairs.py`` or earlier runs such as ``baseline.gpu-0.3h``), each side's seeds after it."""
    folder = os.path.join(LOGS, pair)
    runs = [s for s in (sorted(os.listdir(folder)) if os.path.isdir(folder) else []) if s.split(".")[0] in SIDES]
    named = {split_run(s)[0] for s in runs}
    order = [s for s in SIDES if s in named] + sorted(named - set(SIDES))
    return [run for side in order for run in sorted((r for r in runs if split_run(r)[0] == side), key=split_run)]


def main() -> None:
    rows = []
    for pair in PAIRS:
        pair_rows = [summarize(pair, side) for side in sides(pair)]
        if any(r.get("curve") for r in pair_rows):
            plot(pair, pair_rows)
        rows.extend(pair_rows)
    results = os.path.join(HERE, "RESULTS.md")
    replace_between(results, table(rows))
    replace_between(results, seeds_table(rows), SEEDS)
    replace_between(results, verdict_table(rows), VERDICTS)
    replace_between(os.path.join(ROOT, "README.md"), front_table(rows))
    print(table(rows), seeds_table(rows), verdict_table(rows), sep="\n\n")


if __name__ == "__main__":
    main()
