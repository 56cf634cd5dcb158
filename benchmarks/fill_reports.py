"""Copy a run's figures into ``examples/<family>/RESULTS.md`` and ``benchmarks/README.md``.

    python -m benchmarks.fill_reports benchmarks/results/tatoeba-cpu/results.json

Each target file keeps its hand-written text (the paper's claim, the verdict);
only the block between ``<!-- figures:start -->`` and ``<!-- figures:end -->`` is
replaced: the family's ratios, raw figures, plots and the command that produced
them. ``benchmarks/README.md`` gets the whole ratio table.
"""
import argparse
import json
import os
import re
from typing import Dict

from benchmarks import report

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START, END = "<!-- figures:start -->", "<!-- figures:end -->"


def _replace_block(path: str, block: str) -> bool:
    if not os.path.isfile(path):
        return False
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if START not in text or END not in text:
        text = text.rstrip("\n") + f"\n\n{START}\n{END}\n"
    new = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: f"{START}\n{block}\n{END}", text, flags=re.S)
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)
    return True


def family_block(results: Dict, key: str, results_dir_rel: str) -> str:
    """Markdown figures of one family (one entry of ``results['families']``)."""
    md = report.markdown(results).splitlines()

    def table(header_prefix: str, row_prefix: str):
        start = [i for i, line in enumerate(md) if line.startswith(header_prefix)]
        if not start:
            return []
        body = []
        for line in md[start[0] + 2:]:
            if not line.startswith("|"):
                break
            if line.startswith(row_prefix):
                body.append(line)
        return md[start[0]:start[0] + 2] + body + [""] if body else []

    e = results["families"][key]
    m = results["machine"]
    lines = [
        f"Measured by `{results['command']}` on {m['device']} ({m['cpu']}, {m['logical_cpus']} logical CPUs, "
        f"{m['threads_per_run']} threads per run, load average at start {m.get('load_average_at_start')}), "
        f"{results['budget_minutes']} min of training per model; {results['data']['summary']}.",
        "",
        *table("| family | ours", f"| {key} |"),
        *table("| model |", f"| {key}/"),
        *table("| family | beam-5", f"| {key} |"),
    ]
    if "error" not in e:
        t = e.get("convergence_target_valid_loss")
        lines.append(f"Convergence target (baseline's best validation loss): {t if t is not None else 'n/a'}.")
        sig = (e["ours"].get("decode") or {}).get("signature")
        if sig:
            lines.append(f"sacreBLEU signature: `{sig}`.")
        family = key.split(":")[0]
        pngs = [p for p in results.get("plots", []) if family in p or p == "bleu_vs_params.png"]
        if pngs:
            lines += ["", "Plots: " + ", ".join(f"[{p}]({results_dir_rel}/{p})" for p in pngs)]
            loss_png = f"loss_{report.file_stem(key)}.png"  # the name report.plots gives it
            if loss_png in pngs:
                lines += ["", f"![loss curves, ours vs baseline]({results_dir_rel}/{loss_png})"]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", help="results.json of a benchmark run (inside the repository)")
    p.add_argument("--repo", default=REPO, help="repository root holding examples/ and benchmarks/")
    a = p.parse_args(argv)
    repo = os.path.abspath(a.repo)
    with open(a.results) as f:
        results = json.load(f)
    rdir = os.path.dirname(os.path.abspath(a.results))
    by_family: Dict[str, list] = {}
    for key in results["families"]:
        by_family.setdefault(key.split(":")[0], []).append(key)
    for family, keys in by_family.items():
        path = os.path.join(repo, "examples", family, "RESULTS.md")
        rel = os.path.relpath(rdir, os.path.dirname(path))
        block = "\n\n".join(family_block(results, k, rel) for k in keys)
        if _replace_block(path, block):
            print(f"updated {os.path.relpath(path, repo)}")
    md = report.markdown(results)
    rel = os.path.relpath(rdir, os.path.join(repo, "benchmarks"))
    md = md.replace("# Benchmark results", "### Latest run:", 1).replace("Plots: `", f"Plots (in `{rel}/`): `")
    if _replace_block(os.path.join(repo, "benchmarks", "README.md"), md.strip()):
        print("updated benchmarks/README.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
