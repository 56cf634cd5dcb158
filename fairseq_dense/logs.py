"""The one reader of fairseq's training logs: the statistics lines of ``fairseq-train``.

Reads the lines fairseq writes with ``--log-format json`` (``... | train_inner | {...}``,
``... | valid | {...}``, ``... | train | {...}``) or ``--log-format simple``, and files of bare
JSON objects, one a line. ``fairseq-dense-plot``, the quick-start, the benchmark harness and
the recipes in ``examples/`` read their logs here.
"""

import json
import os
import re
from datetime import datetime
from typing import Dict, List, Optional, Sequence, Tuple

TAGS = ("train_inner", "train", "valid")
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


def parse_log(path: str) -> Dict[str, List[Dict]]:
    """``{"train_inner": [...], "train": [...], "valid": [...]}`` of a fairseq log (``--log-format json`` or
    ``simple``): the :func:`parse_line` statistics with ``t``, seconds since the log's first timestamped line
    (``None`` for untimed lines). A missing file is a ``FileNotFoundError``."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: log file not found")
    out: Dict[str, List[Dict]] = {tag: [] for tag in TAGS}
    start: Optional[datetime] = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            tag, stats, ts = parse_line(line)
            start = start or ts
            if tag in out:
                out[tag].append({**stats, "t": None if ts is None else (ts - start).total_seconds()})
    return out


def series(records: Sequence[Dict], key: str, x: str = "num_updates"):
    """``(xs, ys)`` of the records that have both keys (``x="t"`` for wall-clock seconds)."""
    pts = [(r[x], r[key]) for r in records if isinstance(r.get(x), float) and isinstance(r.get(key), float)]
    return [p[0] for p in pts], [p[1] for p in pts]
