"""Tests of the side-by-side harness (``python -m benchmarks.run``) and ``fairseq-dense-plot``."""

import json
import os
import subprocess
import sys
from argparse import Namespace
from unittest import mock

import pytest
import torch

from benchmarks import counterparts, cpu_speed, measure, report
from benchmarks import run as bench_run
from fairseq_dense import baselines, logs
from fairseq_dense.cli import plot
from tests.helpers import write_copy_corpus

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _json_line(clock: str, tag: str, record: dict) -> str:
    return f"2026-01-01 10:00:{clock} | INFO | {tag} | {json.dumps(record)}\n"


def _inner(epoch, update, loss, wps, n, kappa, wall):
    record = {"epoch": epoch, "update": update, "loss": loss, "wps": wps, "wpb": "50", "num_updates": n}
    return {**record, "model/kappa_0": kappa, "wall": wall}


LOG = "".join(
    [
        "2026-01-01 10:00:00 | INFO | fairseq_cli.train | start\n",
        _json_line("02", "train_inner", _inner(1, 0.5, "5.1", "100", "2", "0.5", "2")),
        _json_line("04", "train_inner", _inner(1, 0.9, "4.9", "300", "4", "0.6", "4")),
        _json_line("05", "valid", {"epoch": 1, "valid_loss": "4.8", "valid_nll_loss": "4.7", "valid_num_updates": "4"}),
        _json_line("07", "train_inner", _inner(2, 1.5, "4.5", "310", "6", "0.7", "7")),
        _json_line("09", "train_inner", _inner(2, 1.9, "4.2", "290", "8", "0.7", "9")),
        _json_line("10", "valid", {"epoch": 2, "valid_loss": "4.4", "valid_nll_loss": "4.3", "valid_num_updates": "8"}),
    ]
)


def test_parse_log_and_summary(tmp_path):
    path = tmp_path / "train.log"
    path.write_text(LOG)
    log = logs.parse_log(str(path))
    assert [r["num_updates"] for r in log["train_inner"]] == [2, 4, 6, 8]
    assert [r["loss"] for r in log["valid"]] == [4.8, 4.4]
    assert log["valid"][1]["t"] == 10.0
    assert plot.model_stat_keys(log) == ["model/kappa_0"]
    s = measure.summarise_log(str(path))
    assert s["updates"] == 8 and s["best_valid_loss"] == 4.4
    assert s["train_tokens_per_s"] == 300.0  # median of the intervals after the first two
    assert measure.time_to_reach(s["valid_curve"], 4.5) == {"updates": 8, "seconds": 10.0}
    assert measure.time_to_reach(s["valid_curve"], 1.0) == {"updates": None, "seconds": None}
    shorter = [(4, 5.0, 4.9), (8, 9.0, 4.6), (12, 13.0, 4.5)]
    assert measure.loss_at_equal_updates(s["valid_curve"], shorter) == {"updates": 8, "ours": 4.4, "baseline": 4.6}
    assert measure.loss_at_equal_updates(s["valid_curve"], [(3, 1.0, 5.0)]) is None


def test_plot_cli(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(LOG)
    b.write_text(LOG.replace('"4.2"', '"4.0"'))
    out, stats = tmp_path / "loss.png", tmp_path / "stats.png"
    args = [str(a), str(b), "--labels", "ours", "base", "--out", str(out), "--model-stats", str(stats), "--x", "wall"]
    assert plot.main(args) == 0
    assert out.stat().st_size > 1000 and stats.stat().st_size > 1000
    with pytest.raises(SystemExit, match="labels"):
        plot.main([str(a), "--labels", "x", "y"])
    # logs of the same name in two folders are two runs, each drawn (named by its path), never one
    same = [tmp_path / side / "train.log" for side in ("x", "y")]
    for path in same:
        path.parent.mkdir()
        path.write_text(LOG)
    with mock.patch.object(plot, "plot_loss_curves") as drawn:
        plot.main([*map(str, same), "--out", str(out)])
    assert list(drawn.call_args.args[0]) == [str(path) for path in same]
    with pytest.raises(SystemExit, match="two logs have the label 'same'"):
        plot.main([str(a), str(b), "--labels", "same", "same"])
    with pytest.raises(SystemExit, match="not found"):
        plot.main([str(tmp_path / "missing.log")])
    (tmp_path / "empty.log").write_text("nothing\n")
    with pytest.raises(SystemExit, match="no fairseq JSON"):
        plot.main([str(tmp_path / "empty.log")])


def test_resolve_models_errors_and_defaults():
    fams = baselines.our_families()
    assert "gru_attention" in fams and "gru_attention_tiny" in fams["gru_attention"]
    assert counterparts.resolve_models(["gru_attention"], "tiny")[0][:2] == ("gru_attention", "gru_attention_tiny")
    assert counterparts.resolve_models(["gru_attention_small:--dropout=0.2"], "tiny") == [
        ("gru_attention", "gru_attention_small", ["--dropout", "0.2"])
    ]
    with pytest.raises(ValueError, match="--models"):
        counterparts.resolve_models(["lstm"], "tiny")


def test_harness_says_what_is_wrong(tmp_path):
    for argv, message in [
        (["--budget-minutes", "1"], "--corpus"),
        (["--corpus", str(tmp_path), "--budget-minutes", "0"], "positive --budget-minutes"),
        (["--corpus", str(tmp_path), "--budget-minutes", "1", "--amp"], "--amp needs --device cuda"),
        (["--corpus", str(tmp_path), "--budget-minutes", "1", "--models", "lstm"], "not a fairseq_dense family"),
        (["--corpus", str(tmp_path), "--budget-minutes", "1", "--out", str(tmp_path / "o")], "train.de: file not"),
    ]:
        with pytest.raises(SystemExit, match=message):
            bench_run.main(argv)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="VmHWM is Linux's")
def test_child_peak_memory_excludes_the_parents(tmp_path):
    """A child started by a big parent reports its own peak (VmHWM), not the parent's resident size."""
    big = torch.ones(160 * 2**20 // 4 * 4)  # 640 MiB resident in this (parent) process
    code = (
        "import json, resource, sys; sys.path.insert(0, {root!r}); "
        "from benchmarks.measure import vm_hwm_kib; "
        "print(json.dumps([vm_hwm_kib(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]))"
    )
    out = subprocess.run([sys.executable, "-c", code.format(root=REPO)], capture_output=True, text=True, check=True)
    hwm_kib, maxrss_kib = json.loads(out.stdout.strip().splitlines()[-1])
    assert big.sum() > 0
    assert hwm_kib < 300 * 1024  # an interpreter with torch imported (benchmarks/measure.py)
    assert maxrss_kib > 600 * 1024  # what ru_maxrss would have reported instead


def test_each_benchmark_run_trains_afresh(tmp_path):
    """A rerun (same --out) trains anew: fairseq-train would go on from the earlier run's checkpoint_last.pt."""
    run_dir = tmp_path / "runs" / "x.ours"
    run_dir.mkdir(parents=True)
    (run_dir / "checkpoint_last.pt").write_text("an earlier run's")
    with mock.patch.object(measure.subprocess, "Popen") as popen:
        measure.start_training(["data-bin", "--arch", "lstm"], str(run_dir), 1)[1].close()
    assert popen.call_count == 1 and sorted(os.listdir(run_dir)) == ["command.json", "train.log"]


def _parsed(args):
    from fairseq import options

    return options.parse_args_and_arch(options.get_training_parser(), input_args=["unused-data-dir", *args])


@pytest.mark.parametrize(
    "ours, baseline",
    [
        (["--arch", "weighted_transformer_tiny"], "transformer"),
        (["--arch", "weighted_transformer_tiny", "--attention-dropout", "0.25", "--dropout", "0.2"], "transformer"),
        (["--arch", "densenmt_tiny", "--dropout", "0.35"], "fconv"),
        (["--arch", "gru_attention_tiny", "--dropout", "0.3"], "lstm"),
    ],
)
def test_counterpart_trains_with_ours_dropout(ours, baseline):
    """The fairseq counterpart gets ours' dropout rates, not its own defaults (same config, same kernels)."""
    ours_ns = _parsed(ours)
    make_args, _ = baselines.BASELINE_TEMPLATES[baseline]
    base_ns = _parsed(make_args(64, ours_ns))
    assert base_ns.arch == baseline
    keys = ("dropout", "attention_dropout", "activation_dropout") if baseline == "transformer" else ("dropout",)
    for key in keys:
        assert getattr(base_ns, key) == pytest.approx(getattr(ours_ns, key)), key
    if baseline == "transformer":  # the paper's attention dropout, where fairseq's default is 0.0
        assert base_ns.attention_dropout == ours_ns.attention_dropout > 0
    if baseline == "lstm":  # fairseq's lstm derives its in/out dropouts from --dropout
        assert base_ns.decoder_dropout_out == pytest.approx(ours_ns.dropout)


@pytest.mark.parametrize(
    "ours, embed, out_dim, tied",
    [
        (["--arch", "dense_lstm_small"], 128, 128, True),  # tied softmax, embeddings narrower than the layers
        (["--arch", "fast_forward_lstm_tiny"], 32, None, False),  # no output size of its own: the width
        (["--arch", "gru_attention_tiny", "--decoder-embed-dim", "24", "--encoder-embed-dim", "20"], None, None, False),
    ],
)
def test_lstm_counterpart_has_ours_embedding_layout(ours, embed, out_dim, tied):
    """The ``lstm`` counterpart's width sets its recurrent sizes only; its embedding tables and
    softmax sharing follow ours, so equal parameters means equal recurrent work."""
    ours_ns = _parsed(ours)
    base_ns = _parsed(baselines.lstm_args(77, ours_ns))
    assert base_ns.encoder_hidden_size == base_ns.decoder_hidden_size == 77
    assert base_ns.encoder_embed_dim == (embed or ours_ns.encoder_embed_dim)
    assert base_ns.decoder_embed_dim == (embed or ours_ns.decoder_embed_dim)
    assert base_ns.decoder_out_embed_dim == (out_dim or 77)
    assert bool(base_ns.share_decoder_input_output_embed) is tied


def test_matched_lstm_counterpart_does_the_same_matmul_work(tmp_path):
    """Matched on parameters, DenseRNN and its counterpart also match on matmul weights per token
    (with a width-coupled, untied counterpart they differed by 1.4x on the Tatoeba vocabulary)."""
    for lang in ("de", "en"):  # an 8k joint vocabulary, as the Tatoeba run's; building needs no data
        (tmp_path / f"dict.{lang}.txt").write_text("".join(f"w{i} 1\n" for i in range(8000)))
    (tmp_path / "train.de-en.de.idx").touch()  # names the language pair for the counterpart's build
    ours_args = ["--arch", "dense_lstm_small", "-s", "de", "-t", "en"]
    pairing, ours, base = baselines.match_baseline(str(tmp_path), "dense_lstm", ours_args)
    assert abs(pairing["param_gap"]) <= 0.05
    ratio = counterparts.matmul_params(ours, 1.0) / counterparts.matmul_params(base, 1.0)
    assert 0.9 <= ratio <= 1.1, ratio


def test_mixed_precision_options_reach_fairseq_train_as_amp_not_bf16():
    """fairseq's option parsing turns ``--bf16`` into ``--tpu`` (torch_xla), on GPUs too: the
    harness trains with ``--amp`` and keeps ``--bf16`` for its own decoding."""
    from fairseq import options

    a = bench_run.get_parser().parse_args(["--budget-minutes", "1", "--device", "cuda", "--amp", "--bf16"])
    args = measure.common_args("data", "save", a)
    assert "--amp" in args and "--bf16" not in args and "--cpu" not in args
    parsed = options.parse_args_and_arch(options.get_training_parser(), args + ["--arch", "lstm"])
    assert parsed.amp and not parsed.tpu
    assert "--amp" not in measure.common_args("data", "save", Namespace(**{**vars(a), "amp": False}))


def test_gpu_suite_says_what_is_wrong(tmp_path):
    """``benchmarks/gpu_suite.sh``: no CUDA device, or an unknown stage, is one clear line."""
    script = os.path.join(REPO, "benchmarks", "gpu_suite.sh")
    env = dict(os.environ, OUT=str(tmp_path / "out"), PYTHON=sys.executable)
    if not torch.cuda.is_available():
        p = subprocess.run(["bash", script, "tests"], env=env, capture_output=True, text=True)
        assert p.returncode != 0 and "torch sees no CUDA device" in p.stderr
    p = subprocess.run(["bash", script, "tests", "bogus"], env=dict(env, DEVICE="cpu"), capture_output=True, text=True)
    assert p.returncode == 2 and "unknown stage 'bogus'" in p.stderr


def _harness(tmp_path, *extra):
    raw = write_copy_corpus(tmp_path / "raw", n_train=300, n_valid=30, n_test=20, src="de", tgt="en")
    out = tmp_path / "out"
    # each test's --max-update ends the runs: a budget of seconds (--stop-time-hours) would end them
    # earlier on a loaded machine, after a number of updates that depends on the load
    argv = ["--corpus", str(raw), "--src", "de", "--tgt", "en", "--budget-minutes", "10", "--size", "tiny"]
    argv += ["--out", str(out), "--bpe-merges", "20", "--threads", "1", "--validate-interval-updates", "4"]
    argv += ["--log-interval", "2", "--paired-sentences", "6", "--paired-rounds", "2", "--paired-train-batches", "2"]
    assert bench_run.main(argv + list(extra)) == 0
    return out, json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_harness_end_to_end(tmp_path):
    """Prepare -> match parameters -> train ours + lstm -> side by side -> decode -> JSON, markdown, plot."""
    out, res = _harness(tmp_path, "--models", "gru_attention", "--max-update", "12")
    e = res["families"]["gru_attention"]
    assert abs(e["param_gap"]) <= 0.10 and 0.5 < e["work_ratio"] < 2
    for side in ("ours", "baseline"):
        s = e[side]
        assert s["train"]["updates"] == 12 and s["train"]["train_tokens_per_s"] > 0
        assert s["train"]["peak_rss_mib"] > 50 and s["train"]["peak_rss_source"] == "VmHWM"
        assert s["decode"]["sentences"] == 20 and "nrefs:1" in s["decode"]["signature"]
    assert e["baseline"]["arch"] == "lstm" and res["machine"]["device"] == "cpu" and res["machine"]["cpu"]
    trained = e["train_paired"]
    assert trained["ratio"] > 0 and len(trained["rounds"]) == 2 and trained["target_tokens_per_round"] > 0
    paired = e["decode_paired"]
    assert paired["sentences"] == 6 and len(paired["rounds"]) == 2 and paired["ratio"] > 0
    assert e["equal_updates"]["updates"] == 12 and e["convergence"]["baseline"]["updates"] is not None
    md = (out / "results.md").read_text()
    assert "| gru_attention |" in md and "sacreBLEU signature" in md
    assert (out / "loss_gru_attention.png").stat().st_size > 1000


@pytest.mark.slow
def test_harness_concurrent_against_a_plugin_baseline(tmp_path):
    """``--concurrent --baseline ARCH``: both models train at once; each reaches (or not) the other's best."""
    out, res = _harness(tmp_path, "--models", "dense_lstm_tiny", "--baseline", "gru_attention_tiny", "--concurrent",
                        "--max-update", "8")  # fmt: skip
    e = res["families"]["dense_lstm"]
    assert e["baseline"]["arch"] == "gru_attention_tiny" and e["baseline_width"] is None
    assert e["ours"]["params"] > 1000 and e["param_gap"] == pytest.approx(
        e["baseline"]["params"] / e["ours"]["params"] - 1
    )
    assert e["convergence"]["target"] == e["baseline"]["train"]["best_valid_loss"]
    assert e["convergence"]["baseline"]["updates"] == e["baseline"]["train"]["best_valid_updates"]
    for side in ("ours", "baseline"):
        assert e[side]["train"]["updates"] == 8 and len(e[side]["train"]["valid_curve"]) >= 2
    reached = e["convergence"]["ours"]["updates"]
    assert (reached is not None) == (e["ours"]["train"]["best_valid_loss"] <= e["convergence"]["target"] + 1e-9)
    assert res["options"]["concurrent"] and "both at once" in (out / "results.md").read_text()
    assert report.file_stem("a:b:--x=1,--y") == "a_b_--x-1_--y"


@pytest.mark.slow
def test_cpu_speed_side_by_side(tmp_path):
    """benchmarks/cpu_speed on a tiny prepared corpus: the quick-start pairing, both ratios by both
    clocks over the rounds, and the markdown row."""
    from fairseq_dense.data import prepare as prep

    raw = write_copy_corpus(tmp_path / "raw", n_train=200, n_valid=20, n_test=20, src="de", tgt="en")
    data_bin = os.path.join(prep.prepare(str(raw), str(tmp_path / "data"), "de", "en", merges=20), "bin")
    a = cpu_speed.get_parser().parse_args(
        ["--rounds", "2", "--train-batches", "1", "--decode-sentences", "4", "--decode-batch-size", "2"]
    )
    e = cpu_speed.measure_family("gru_attention", data_bin, a)
    assert e["baseline"][:2] == ["--arch", "lstm"] and abs(e["baseline_params"] / e["ours_params"] - 1) < 0.1
    for key in ("train", "decode"):
        assert len(e[key]["rounds"]) == 2 and e[key]["ratio"] > 0 and e[key]["cpu_ratio"] > 0
    assert e["decode"]["sentences"] == 4
    row = cpu_speed.table([e]).splitlines()[-1]
    assert row.startswith("| gru_attention | `gru_attention_small` | `lstm (width ")


def test_timed_rounds_times_any_number_of_sides():
    seen = []
    res = measure.timed_rounds({"a": 1, "b": 2, "c": 3}, [0, 1], 2, lambda side, item, i: seen.append(side), "cpu")
    assert seen == [1, 2, 3, 1, 2, 3, 3, 2, 1, 3, 2, 1]  # the order reversed every other round
    assert res["ratio"] is None and len(res["rounds"]) == 2
    assert set(res["rounds"][0]) == {"a_s", "b_s", "c_s", "a_cpu_s", "b_cpu_s", "c_cpu_s"}
    assert measure.ratios([{"x_s": 2.0, "y_s": 1.0}, {"x_s": 3.0, "y_s": 1.0}], "x", "y", "s")["median"] == 2.5
