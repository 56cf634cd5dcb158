"""Markdown tables of ratios (ours / baseline) and the plots written next to them."""
import logging
import os
from typing import Dict, List, Optional

from fairseq_dense.cli.plot import parse_log, plot_loss_curves, plot_model_stats

logger = logging.getLogger("benchmarks.report")


def file_stem(key: str) -> str:
    """A results key (``family``, ``family:arch:--flag=v,...``) as a portable file-name part.

    Keys of several entries of one family hold ``:`` ``,`` ``=``, which some file
    systems (and so a clone of a repository holding the plots) do not accept.
    """
    return key.replace(":", "_").replace("/", "_").replace(",", "_").replace("=", "-")


def _ratio(a, b) -> Optional[float]:
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def _fmt(x, spec=".2f", suffix="") -> str:
    return "n/a" if x is None else f"{x:{spec}}{suffix}"


def _verdict(value, threshold) -> str:
    """``met (1.07)`` / ``missed (0.71)``; three decimals where two would print the threshold
    itself for a miss (``missed (0.999)``, not ``missed (1.00)``)."""
    if value is None:
        return "n/a"
    met = value >= threshold
    for digits in range(2, 7):
        shown = f"{value:.{digits}f}"
        if met or float(shown) < threshold:
            break
    return f"{'met' if met else 'missed'} ({shown})"


def _get(d: Dict, *path):
    for k in path:
        if not isinstance(d, dict) or d.get(k) is None:
            return None
        d = d[k]
    return d


def ratios(entry: Dict) -> Dict:
    """The ours/baseline ratios of one family's entry of ``results.json``."""
    o, b = entry["ours"], entry["baseline"]
    mem_key = "cuda_max_allocated_mib" if o.get("device") == "cuda" else "peak_rss_mib"
    return {
        "params": _ratio(o["params"], b["params"]),
        "train_tokens_per_s": _ratio(_get(o, "train", "train_tokens_per_s"), _get(b, "train", "train_tokens_per_s")),
        "peak_memory": _ratio(_get(o, "train", mem_key), _get(b, "train", mem_key)),
        "mfu": _ratio(o.get("mfu"), b.get("mfu")),
        "beam_sentences_per_s": _ratio(_get(o, "decode", "full", "sentences_per_s"),
                                       _get(b, "decode", "full", "sentences_per_s")),
        "beam_tokens_per_s": _ratio(_get(o, "decode", "full", "tokens_per_s"),
                                    _get(b, "decode", "full", "tokens_per_s")),
        "beam_fixed_length_sentences_per_s": _ratio(
            _get(o, "decode", "cache_subset", "incremental", "sentences_per_s"),
            _get(b, "decode", "cache_subset", "incremental", "sentences_per_s")),
        "train_paired": _get(entry, "train_paired", "ratio"),
        "train_paired_flops": _get(entry, "train_paired", "flop_ratio"),
        "train_paired_per_flop": _get(entry, "train_paired", "flop_normalised_ratio"),
        "beam_paired": _get(entry, "decode_paired", "ratio"),
        "beam_paired_flops": _get(entry, "decode_paired", "flop_ratio"),
        "beam_paired_per_flop": _get(entry, "decode_paired", "flop_normalised_ratio"),
        "bleu": _ratio(_get(o, "decode", "bleu"), _get(b, "decode", "bleu")),
        "time_to_baseline_best": _ratio(_get(o, "convergence", "seconds"), _get(b, "convergence", "seconds")),
    }


def markdown(results: Dict) -> str:
    """The results as markdown: machine, ratio table, raw figures per model."""
    m = results["machine"]
    lines = [
        f"# Benchmark results ({results['suite']} suite)",
        "",
        f"Command: `{results['command']}`",
        "",
        f"Machine: {m['cpu']}, {m['logical_cpus']} logical CPUs, {m.get('memory_gib', '?')} GiB; "
        f"{m['threads_per_run']} threads per run; load average at start {m.get('load_average_at_start')}; "
        f"torch {m['torch']}, fairseq {m['fairseq']}, Python {m['python']}"
        + (f"; GPU {m['gpu']}" if m.get("gpu") else "") + ".",
        f"Every figure below was measured on **{m['device']}**"
        + "; training in " + ("float16 autocast (fairseq --amp)" if results.get("amp") else "float32")
        + ", decoding in " + ("bfloat16" if results.get("bf16") else "float32")
        + f"; budget {results['budget_minutes']} "
        f"min of training per model; data: `{results['corpus']}` ({results['data']['summary']}).",
        "",
        "Ratios are ours / baseline, both trained in this run on the same data with the same optimiser, "
        "schedule, batch size and budget. Throughput, memory and decoding > 1 means ours is faster / "
        "larger; time-to-baseline-best < 1 means ours reached the baseline's best validation loss sooner. "
        "The baseline's w= is the width searched to match the parameter count (docs/benchmarks.md: "
        "channels of fconv, d_model of transformer, hidden size of lstm); results.json records each "
        "baseline's exact options (arch_args).",
        "",
        "| family | ours (params) | baseline (params) | train tok/s | train side by side: speed (FLOPs, per FLOP) "
        "| peak mem | MFU ours / base |"
        " beam-5 sent/s | beam-5 side by side: speed (FLOPs, per FLOP) | cache speed-up ours / base "
        "| BLEU ours / base | reached baseline best |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for fam, e in results["families"].items():
        if "error" in e:
            lines.append(f"| {fam} | failed: {e['error'][:80]} | | | | | | | | | | |")
            continue
        o, b, r = e["ours"], e["baseline"], ratios(e)
        conv = o.get("convergence") or {}
        reached = (f"after {conv['updates']} updates / {conv['seconds']:.0f} s "
                   f"(x{_fmt(r['time_to_baseline_best'])} of baseline's time)"
                   if conv.get("updates") is not None else ("not reached" if o.get("train") else "n/a"))
        lines.append(
            f"| {fam} | `{o['arch']}` ({o['params'] / 1e6:.2f}M) | `{b['arch']}` w={e['baseline_width']} "
            f"({b['params'] / 1e6:.2f}M, {100 * (b['params'] - o['params']) / o['params']:+.1f}%) "
            f"| x{_fmt(r['train_tokens_per_s'])} "
            f"| x{_fmt(r['train_paired'])} (x{_fmt(r['train_paired_flops'])}, x{_fmt(r['train_paired_per_flop'])}) "
            f"| x{_fmt(r['peak_memory'])} "
            f"| {_fmt(o.get('mfu'), '.1%')} / {_fmt(b.get('mfu'), '.1%')} "
            f"| x{_fmt(r['beam_fixed_length_sentences_per_s'])} (free length x{_fmt(r['beam_sentences_per_s'])}) "
            f"| x{_fmt(r['beam_paired'])} (x{_fmt(r['beam_paired_flops'])}, x{_fmt(r['beam_paired_per_flop'])}) "
            f"| {_fmt(_get(o, 'decode', 'cache_subset', 'speedup'), '.1f', 'x')} / "
            f"{_fmt(_get(b, 'decode', 'cache_subset', 'speedup'), '.1f', 'x')} "
            f"| {_fmt(_get(o, 'decode', 'bleu'))} / {_fmt(_get(b, 'decode', 'bleu'))} | {reached} |"
        )
    lines += ["", "Targets of issue #8 (met / missed / n/a):", "",
              "| family | beam-5 decoding >= 1.0x baseline (side by side; else fixed length) "
              "| incremental >= 3x uncached "
              "| MFU >= 30% (transformer family) |",
              "|---|---|---|---|"]
    for fam, e in results["families"].items():
        if "error" in e:
            continue
        r = ratios(e)
        speedup = _get(e, "ours", "decode", "cache_subset", "speedup")
        mfu = e["ours"].get("mfu") if e["baseline"]["arch"] == "transformer" else None
        beam = r["beam_paired"] if r["beam_paired"] is not None else r["beam_fixed_length_sentences_per_s"]
        lines.append(f"| {fam} | {_verdict(beam, 1.0)} | {_verdict(speedup, 3.0)} "
                     f"| {_verdict(mfu, 0.30)} |")
    lines += ["", "## Raw measurements", "",
              "| model | arch | params | updates | train tok/s (steady) | peak RSS MiB | matmul GFLOP/s | "
              "MFU | best valid loss | beam-5 sent/s (free) | beam-5 tok/s (free) "
              "| fixed-length sent/s: cached / uncached | BLEU | greedy BLEU |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for fam, e in results["families"].items():
        for side in ("ours", "baseline"):
            s = e.get(side)
            if not s:
                continue
            t, d = s.get("train") or {}, s.get("decode") or {}
            lines.append(
                f"| {fam}/{side} | `{s['arch']}` | {s['params']:,} | {t.get('updates', 'n/a')} "
                f"| {_fmt(t.get('train_tokens_per_s'), '.0f')} | {_fmt(t.get('peak_rss_mib'), '.0f')} "
                f"| {_fmt(s.get('matmul_flops') and s['matmul_flops'] / 1e9, '.0f')} | {_fmt(s.get('mfu'), '.1%')} "
                f"| {_fmt(t.get('best_valid_loss'), '.3f')} | {_fmt(_get(d, 'full', 'sentences_per_s'), '.1f')} "
                f"| {_fmt(_get(d, 'full', 'tokens_per_s'), '.0f')} "
                f"| {_fmt(_get(d, 'cache_subset', 'incremental', 'sentences_per_s'), '.1f')} / "
                f"{_fmt(_get(d, 'cache_subset', 'uncached', 'sentences_per_s'), '.1f')} "
                f"| {_fmt(d.get('bleu'))} | {_fmt(_get(d, 'greedy', 'bleu'))} |"
            )
    again = {(what, _get(e, k, "remeasured", "command"), _get(e, k, "remeasured", "date"),
              _get(e, k, "remeasured", "commit"), _get(e, k, "threads"))
             for e in results["families"].values()
             for k, what in (("train_paired", "training"), ("decode_paired", "decoding"))
             if _get(e, k, "remeasured")}
    for what, cmd, date, commit, threads in sorted(again, key=str):
        lines += ["", f"The side-by-side {what} figures were re-measured on {date} by `{cmd}` "
                  f"(code at commit {commit}, {threads} thread(s)) on this run's data and checkpoints."]
    mem_records = [_get(s, "train", "peak_rss_remeasured") for e in results["families"].values()
                   for s in (e.get("ours"), e.get("baseline"))]
    mem_again = {tuple(r.get(k) for k in ("command", "date", "commit", "updates")) for r in mem_records if r}
    for cmd, date, commit, updates in sorted(mem_again, key=str):
        lines += ["", f"The peak memory figures were re-measured on {date} by `{cmd}` (code at commit "
                  f"{commit}; each model's recorded `fairseq-train` command for {updates} updates in a fresh "
                  "process, peak resident set `VmHWM`)."]
    sigs = sorted({_get(s, "decode", "signature") for e in results["families"].values()
                   for s in (e.get("ours"), e.get("baseline")) if _get(s, "decode", "signature")})
    if sigs:
        lines += ["", "sacreBLEU signature: " + "; ".join(f"`{s}`" for s in sigs)]
    lines += ["", "Decoding speed: \"beam-5 sent/s\" and the cache speed-up are measured with every "
              "hypothesis forced to the same length (`min_len = max_len`, see results.json "
              "`cache_subset.fixed_length`), on the same sentences for every model, so that undertrained "
              "models' short or runaway outputs do not decide the speed; \"free length\" is the ratio of "
              "the ordinary beam search that produced the BLEU scores. \"Side by side\" loads both "
              "checkpoints into one process and decodes every batch of the same test sentences with one "
              "model and then the other (order alternating per round; median ratio of the rounds; "
              "results.json `decode_paired`), so that load changes on the machine hit both alike; it also "
              "counts the FLOPs each model spends per decoded sentence (torch's FLOP counter): \"FLOPs\" "
              "is ours / baseline work, \"per FLOP\" the speed ratio times that (> 1: ours turns more "
              "FLOP/s into hypotheses).", "",
              "Training side by side: both models built in one process from their recorded "
              "`fairseq-train` commands (task, criterion, optimiser), the same real training batches, "
              "forward + backward + optimiser step of one model and then the other, batch by batch "
              "(results.json `train_paired`); FLOPs counted by torch's FLOP counter over one step.", "",
              "FLOPs: 6 x (matmul parameters) per target token, encoder parameters weighted by the "
              "source/target token ratio of the training data; MFU = that x steady tok/s / the dense "
              "matmul FLOP/s measured just before the model's training in the same run.",
              "Plots: " + ", ".join(f"`{p}`" for p in results.get("plots", []))]
    return "\n".join(lines) + "\n"


def plots(results: Dict, out_dir: str) -> List[str]:
    """Loss curves, model statistics, attention maps, BLEU vs parameters; returns the PNG names."""
    written = []
    for fam, e in results["families"].items():
        if "error" in e:
            continue
        runs = {}
        for side in ("ours", "baseline"):
            log = _get(e, side, "train", "log")
            if log and os.path.isfile(log):
                runs[f"{e[side]['arch']} ({side})"] = parse_log(log)
        if runs:
            name = f"loss_{file_stem(fam)}.png"
            plot_loss_curves(runs, os.path.join(out_dir, name), f"{fam}: ours vs fairseq counterpart")
            written.append(name)
            ours_log = runs.get(f"{e['ours']['arch']} (ours)", next(iter(runs.values())))
            name = f"model_stats_{file_stem(fam)}.png"
            if plot_model_stats(ours_log, os.path.join(out_dir, name), f"{fam}: logged model statistics"):
                written.append(name)
        if _get(e, "ours", "branch_weights_png"):
            written.append(e["ours"]["branch_weights_png"])
        for side in ("ours", "baseline"):
            maps = _get(e, side, "attention")
            if maps:
                name = f"attention_{file_stem(fam)}_{side}.png"
                attention_plot(maps, os.path.join(out_dir, name), e[side]["arch"])
                written.append(name)
    pts = [(f"{e[s]['arch']}", e[s]["params"], _get(e, s, "decode", "bleu"))
           for e in results["families"].values() if "error" not in e for s in ("ours", "baseline")]
    pts = [p for p in pts if p[2] is not None]
    if pts:
        bleu_vs_params(pts, os.path.join(out_dir, "bleu_vs_params.png"))
        written.append("bleu_vs_params.png")
    return written


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def attention_plot(maps: List[Dict], out_png: str, title: str) -> None:
    """Heat maps of teacher-forced attention (rows: target tokens, columns: source tokens)."""
    import numpy as np

    plt = _plt()
    fig, axes = plt.subplots(1, len(maps), figsize=(4.2 * len(maps), 4.2), squeeze=False)
    for ax, m in zip(axes[0], maps):
        a = np.array(m["attn"])
        if a.shape != (len(m["tgt"]), len(m["src"])) and a.T.shape == (len(m["tgt"]), len(m["src"])):
            a = a.T
        ax.imshow(a, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")  # absolute scale: uniform is pale
        ax.set_xticks(range(len(m["src"])))
        ax.set_xticklabels(m["src"][: a.shape[1]], rotation=90, fontsize=7)
        ax.set_yticks(range(len(m["tgt"])))
        ax.set_yticklabels(m["tgt"][: a.shape[0]], fontsize=7)
    fig.suptitle(f"{title}: attention (teacher forcing)")
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)


def bleu_vs_params(points, out_png: str) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, params, score in points:
        ax.scatter(params / 1e6, score)
        ax.annotate(label, (params / 1e6, score), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("parameters (M)")
    ax.set_ylabel("test sacreBLEU")
    ax.set_title("BLEU vs parameters (same budget, same data)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
