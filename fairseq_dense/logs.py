"""The one reader of fairseq's training logs: the statistics lines of ``fairseq-train``, and how a run ended.

Reads the lines fairseq writes with ``--log-format json`` (``... | valid | {...}``) or ``simple``, and files
of bare JSON objects, one a line. A resumed run appends to its log: a log holds one process after another,
each from its ``# command`` line on (:func:`fairseq_dense.cli.quickstart_steps.run_command` writes it).
``fairseq-dense-plot``, the quick-start, the benchmark harness and the recipes in ``examples/`` read logs here.
"""

import json
import os
import re
from collections import namedtuple
from datetime import datetime
from typing import Dict, List, Optional, Sequence, Tuple, Union

TAGS = ("train_inner", "train", "valid")
#: what fairseq prints when --stop-time-hours ends a run
TIME_STOP = "Stopping training due to cumulative_training_time"
#: the lines besides the statistics that the readers use: the parameter count and how training stopped
NOTES = re.compile(r"model params|done training|early stop|Stopping training")
_PARAMS = re.compile(r"num\. (?:shared )?model params: ([\d,]+)")  # not the "expert" line after it
Process = namedtuple("Process", "command records notes")
_TIME = r"^(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)"
_LINE = re.compile(_TIME + r"\s*\|\s*\w+\s*\|\s*(?P<tag>[\w.\-/]+)\s*\|\s*(?P<json>\{.*\})\s*$")
# --log-format simple: "... | train_inner | epoch 001:     50 / 436 loss=10.2, nll_loss=9.7, ..."
# and "... | valid | epoch 001 | valid on 'valid' subset | loss 8.45 | nll_loss 7.69 | ... | num_updates 135"
_SIMPLE = re.compile(_TIME + r"\s*\|\s*\w+\s*\|\s*(?P<tag>train_inner|train|valid)\s*\|\s*epoch \d+(?P<rest>.*)$")


def _simple_stats(tag: str, rest: str) -> Dict[str, str]:
    """The statistics of one ``--log-format simple`` line (after ``epoch NNN``)."""
    if tag == "train_inner":  # ":     50 / 436 key=value, key=value"
        body = re.sub(r"^:\s*\d+\s*/\s*\d+\s*", "", rest)
        pairs = [item.split("=", 1) for item in body.split(", ") if "=" in item]
        return {k.strip(): v.strip() for k, v in pairs}
    stats = {}
    for part in rest.split(" | "):
        key, _, value = part.strip().rpartition(" ")
        if key and " " not in key:  # "valid on 'valid' subset" and the like have spaces
            stats[key] = value
    return stats


def _number(value):
    """fairseq formats every statistic as a string; numbers become floats again."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def parse_line(line: str) -> Tuple[Optional[str], Dict, Optional[datetime]]:
    """``(tag, statistics, timestamp)`` of one line of a fairseq log.

    The tag is ``train_inner`` (every ``--log-interval`` updates), ``train`` (end of an epoch),
    ``valid`` or another progress bar's name, and ``None`` for a line without statistics; the
    statistics are numbers as floats, keys without the tag's prefix (``valid_loss`` -> ``loss``).
    A bare JSON object (a file of them, one a line) has no timestamp and a tag inferred from its keys.
    """
    line = line.strip()
    m, simple = _LINE.match(line), _SIMPLE.match(line)
    ts = m or simple or re.match(_TIME, line)
    ts = datetime.strptime(ts.group("ts"), "%Y-%m-%d %H:%M:%S") if ts else None
    try:
        if m:
            tag, stats = m.group("tag"), json.loads(m.group("json"))
        elif simple:
            tag, stats = simple.group("tag"), _simple_stats(simple.group("tag"), simple.group("rest"))
        elif line.startswith("{") and line.endswith("}"):
            stats = json.loads(line)
            tag = "valid" if "valid_loss" in stats else "train" if "train_loss" in stats else "train_inner"
        else:
            return None, {}, ts
    except json.JSONDecodeError:
        return None, {}, ts
    if not stats:
        return None, {}, ts
    return tag, {k.removeprefix(tag + "_"): _number(v) for k, v in stats.items()}, ts


def param_count(text: str) -> Optional[int]:
    """The count of fairseq-train's first ``num. (shared) model params: N`` line in ``text``; None without."""
    m = _PARAMS.search(text)
    return int(m.group(1).replace(",", "")) if m else None


def processes(*paths: str) -> List[Process]:
    """The processes of the logs ``paths`` (missing ones: none), read as one log: each its ``# command`` line
    ("" for lines before the first), its ``(tag, statistics)`` records (:func:`parse_line`, with ``t``: seconds
    since the first timestamped line, ``None`` for untimed lines) and its :data:`NOTES` lines (only those: a
    long log is not held in memory)."""
    out, start = [], None
    for path in filter(os.path.isfile, paths):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("# ") or not out:
                    out.append(Process(line if line.startswith("# ") else "", [], []))
                tag, stats, ts = parse_line(line)
                start = start or ts
                if tag is not None:
                    out[-1].records.append((tag, {**stats, "t": None if ts is None else (ts - start).total_seconds()}))
                if NOTES.search(line):
                    out[-1].notes.append(line)
    return [p._replace(notes="".join(p.notes)) for p in out]


def records(log: Union[str, List[Process]], tag: str) -> List[Dict]:
    """The ``tag`` statistics of a log (a path) or of its :func:`processes`, in order."""
    procs = processes(log) if isinstance(log, str) else log
    return [stats for p in procs for t, stats in p.records if t == tag]


def parse_log(path: str) -> Dict[str, List[Dict]]:
    """``{"train_inner": [...], "train": [...], "valid": [...]}`` of a log (:func:`records`); a missing file is
    a ``FileNotFoundError``."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: log file not found")
    procs = processes(path)
    return {tag: records(procs, tag) for tag in TAGS}


def ending(procs: List[Process]) -> str:
    """How the last process ended: "early stopped", "epoch cap", "stopped by time" (``--stop-time-hours``)
    or "training" (still going, cut, or no log)."""
    text = procs[-1].notes if procs else ""
    if TIME_STOP in text:
        return "stopped by time"
    return ("early stopped" if "early stop" in text else "epoch cap") if "done training" in text else "training"


def walls_and_devices(procs: List[Process]) -> Tuple[Dict[int, float], Optional[str]]:
    """``({epoch: wall seconds of training to the end of that epoch}, where the run trained)``. fairseq's
    ``train_wall`` starts at 0 in every process, so each continues where the one before ended (an epoch
    cut by an interruption is trained again, its time not counted). Where: None on one kind of device,
    else e.g. "GPU, then CPU from epoch 50" (by ``--cpu`` in each process's command)."""
    walls, offset, parts = {}, 0.0, []  # parts: [device, the first epoch it logged]
    for p in procs:
        device = "CPU" if " --cpu" in p.command else "GPU"
        if p.command and (not parts or parts[-1][0] != device):
            parts.append([device, None])
        if parts and parts[-1][1] is None and p.records:
            parts[-1][1] = int(p.records[0][1]["epoch"])
        last = 0.0
        for r in (r for tag, r in p.records if tag == "train"):
            last = r["wall"]
            walls[int(r["epoch"])] = offset + last
        offset += last
    where = parts[0][0] + "".join(f", then {d} from epoch {e}" for d, e in parts[1:]) if len(parts) > 1 else None
    return walls, where


def series(records: Sequence[Dict], key: str, x: str = "num_updates"):
    """``(xs, ys)`` of the records that have both keys (``x="t"`` for wall-clock seconds)."""
    pts = [(r[x], r[key]) for r in records if isinstance(r.get(x), float) and isinstance(r.get(key), float)]
    return [p[0] for p in pts], [p[1] for p in pts]
