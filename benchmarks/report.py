"""Writing results: ``<stem>.json`` + ``<stem>.md`` of every harness, the machine and commit they
ran on, and ``benchmarks.run``'s ``results.md`` (ratios ours / counterpart) and loss plots."""

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional

from fairseq_dense.cli.plot import plot_loss_curves
from fairseq_dense.logs import parse_log

EXPLANATION = (
    "Ratios are ours / counterpart (> 1: ours is faster / uses more memory); how each figure is taken and how to "
    'read it: docs/benchmarks.md ("The figures").'
)


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    if os.path.isfile("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def header(prog: str, argv: Optional[List[str]], device: str = "cpu") -> Dict:
    """What every results file starts with: the command (``argv`` None: this process's), the time (UTC), the commit,
    torch's version and the machine (its load average at the start; ``threads``: torch's at the call)."""
    import fairseq
    import torch

    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout
    return {
        "command": f"{prog} {shlex.join(sys.argv[1:] if argv is None else argv)}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit.strip() or None,
        "torch": torch.__version__,
        "machine": {
            "cpu": cpu_name(),
            "logical_cpus": os.cpu_count(),
            "threads": torch.get_num_threads(),
            "load_average": os.getloadavg(),
            "python": platform.python_version(),
            "fairseq": fairseq.__version__,
            "device": device,
            "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
        },
    }


def write_results(results: Dict, out: str, stem: str, to_markdown: Callable[[Dict], str]) -> None:
    """``<stem>.json`` (``results``) and ``<stem>.md`` (``to_markdown(results)``) into ``out``."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{stem}.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    with open(os.path.join(out, f"{stem}.md"), "w") as f:
        f.write(to_markdown(results))


def error(ex: Exception) -> Dict:
    """The results entry of a measurement that failed (the others' figures stand)."""
    return {"error": f"{type(ex).__name__}: {ex}"}


def file_stem(key: str) -> str:
    """A results key (``family`` or ``family:arch:--flag=v,...``) as a portable file-name part."""
    return key.replace(":", "_").replace("/", "_").replace(",", "_").replace("=", "-")


def _get(d, *path):
    for k in path:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def _x(x) -> str:
    return "n/a" if x is None else f"x{x:.2f}"


def table(header: str, rows: List[List[str]]) -> List[str]:
    """The lines of a markdown table: ``header`` (its cells joined by `` | ``), then one line per row of cells."""
    return [f"| {header} |", "|" + "---|" * (header.count(" | ") + 1)] + [f"| {' | '.join(r)} |" for r in rows]


def spread(m: Dict, fmt: str = ".3f") -> str:
    """``median (min-max)`` of a ``measure.spread``."""
    return f"{m['median']:{fmt}} ({m['min']:{fmt}}-{m['max']:{fmt}})"


def row(key: str, e: Dict) -> List[str]:
    """The cells of a results entry's table row."""
    if "error" in e:
        return [key, f"failed: {e['error'][:100]}"] + [""] * 8
    o, b = e["ours"], e["baseline"]

    def ratio(*path):  # ours / counterpart of one figure
        x, y = _get(o, *path), _get(b, *path)
        return _x(x / y if isinstance(x, (int, float)) and isinstance(y, (int, float)) and y else None)

    mem = "cuda_max_allocated_mib" if _get(o, "train", "cuda_max_allocated_mib") else "peak_rss_mib"
    eq, reached = e.get("equal_updates"), _get(e, "convergence", "ours") or {}
    width = f" w={e['baseline_width']}" if e.get("baseline_width") else ""
    return [
        key,
        f"`{o['arch']}` ({o['params'] / 1e6:.2f}M)",
        f"`{b['arch']}`{width} ({b['params'] / 1e6:.2f}M)",
        f"{ratio('train', 'train_tokens_per_s')} / {_x(_get(e, 'train_paired', 'ratio'))}",
        _x(e.get("work_ratio")),
        ratio("train", mem),
        f"{ratio('decode', 'sentences_per_s')} / {_x(_get(e, 'decode_paired', 'ratio'))}",
        f"{eq['ours']:.3f} / {eq['baseline']:.3f} ({eq['updates']})" if eq else "n/a",
        f"{reached['updates']} / {reached['seconds']:.0f} s" if reached.get("updates") else "not reached",
        " / ".join("n/a" if x is None else f"{x:.2f}" for x in (_get(s, "decode", "bleu") for s in (o, b))),
    ]


def markdown(results: Dict) -> str:
    """The results as markdown: command, machine, ratio table, how to read them (each side's figures: the JSON)."""
    m, opts = results["machine"], results["options"]
    gpu = f"; GPU {m['gpu']}" if m.get("gpu") else ""
    precision = f"training {'float16 autocast' if opts['amp'] else 'float32'}, decoding "
    precision += "bfloat16" if opts["bf16"] else "float32"
    lines = [
        "# Plugin models vs their fairseq counterparts",
        "",
        f"Command: `{results['command']}`",
        "",
        f"Machine: {m['cpu']}{gpu}, {m['logical_cpus']} logical CPUs, {m['threads']} threads per model, "
        f"load average at start {[round(x, 2) for x in m['load_average']]}; torch {results['torch']}, "
        f"fairseq {m['fairseq']}, Python {m['python']}. Device **{m['device']}**, {precision}; "
        f"{opts['budget_minutes']} min of training per model{', both at once' if opts['concurrent'] else ''}; "
        f"data `{opts['corpus']}` ({results['data']['summary']}).",
        "",
    ]
    header = (
        "model | ours (params) | counterpart (params) | train tok/s: CLI / side by side | work | peak mem "
        "| beam-5 sent/s: free length / side by side | valid loss at equal updates | reached counterpart best "
        "| BLEU ours / counterpart"
    )
    lines += table(header, [row(key, e) for key, e in results["families"].items()])
    sigs = sorted(
        {_get(e, s, "decode", "signature") for e in results["families"].values() for s in ("ours", "baseline")} - {None}
    )
    lines += ["", "sacreBLEU signature: " + ", ".join(f"`{s}`" for s in sigs)] if sigs else []
    lines += ["", EXPLANATION, "", "Plots: " + ", ".join(f"`{p}`" for p in results.get("plots", []))]
    return "\n".join(lines) + "\n"


def plots(results: Dict, out_dir: str) -> List[str]:
    """Training and validation loss of both sides of every entry (``loss_<key>.png``)."""
    written = []
    for key, e in results["families"].items():
        logs = {
            f"{e[s]['arch']} ({s})": parse_log(e[s]["train"]["log"])
            for s in ("ours", "baseline")
            if os.path.isfile(_get(e, s, "train", "log") or "")
        }
        if logs:
            name = f"loss_{file_stem(key)}.png"
            plot_loss_curves(logs, os.path.join(out_dir, name), f"{key}: ours vs counterpart")
            written.append(name)
    return written
