"""Smoke tests of the benchmark harness (``python -m benchmarks.run``) and ``fairseq-dense-plot``."""
import json
import os
import subprocess
import sys

import pytest
import torch

from benchmarks import beam_reorder, families, fill_reports, remeasure, report, train
from benchmarks import run as bench_run
from fairseq_dense.cli import plot
from tests.helpers import write_copy_corpus

LOG = """2026-01-01 10:00:00 | INFO | fairseq_cli.train | start
2026-01-01 10:00:02 | INFO | train_inner | {"epoch": 1, "update": 0.5, "loss": "5.1", "wps": "100", "wpb": "50", "num_updates": "2", "model/kappa_0": "0.5", "wall": "2"}
2026-01-01 10:00:04 | INFO | train_inner | {"epoch": 1, "update": 0.9, "loss": "4.9", "wps": "300", "wpb": "50", "num_updates": "4", "model/kappa_0": "0.6", "wall": "4"}
2026-01-01 10:00:05 | INFO | valid | {"epoch": 1, "valid_loss": "4.8", "valid_nll_loss": "4.7", "valid_num_updates": "4"}
2026-01-01 10:00:07 | INFO | train_inner | {"epoch": 2, "update": 1.5, "loss": "4.5", "wps": "310", "wpb": "50", "num_updates": "6", "model/kappa_0": "0.7", "wall": "7"}
2026-01-01 10:00:09 | INFO | train_inner | {"epoch": 2, "update": 1.9, "loss": "4.2", "wps": "290", "wpb": "50", "num_updates": "8", "model/kappa_0": "0.7", "wall": "9"}
2026-01-01 10:00:10 | INFO | valid | {"epoch": 2, "valid_loss": "4.4", "valid_nll_loss": "4.3", "valid_num_updates": "8"}
"""


def test_parse_log_and_summary(tmp_path):
    path = tmp_path / "train.log"
    path.write_text(LOG)
    log = plot.parse_log(str(path))
    assert [r["num_updates"] for r in log["train_inner"]] == [2, 4, 6, 8]
    assert [r["loss"] for r in log["valid"]] == [4.8, 4.4]
    assert log["valid"][1]["t"] == 10.0
    assert plot.model_stat_keys(log) == ["model/kappa_0"]
    s = train.summarise_log(str(path))
    assert s["updates"] == 8 and s["best_valid_loss"] == 4.4
    assert s["train_tokens_per_s"] == 300.0  # median of the intervals after the first two
    assert train.time_to_reach(s["valid_curve"], 4.5) == {"updates": 8, "seconds": 10.0}
    assert train.time_to_reach(s["valid_curve"], 1.0) == {"updates": None, "seconds": None}


def test_plot_cli(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(LOG)
    b.write_text(LOG.replace('"4.2"', '"4.0"'))
    out, stats = tmp_path / "loss.png", tmp_path / "stats.png"
    assert plot.main([str(a), str(b), "--labels", "ours", "base", "--out", str(out),
                      "--model-stats", str(stats), "--x", "wall"]) == 0
    assert out.stat().st_size > 1000 and stats.stat().st_size > 1000
    with pytest.raises(SystemExit, match="labels"):
        plot.main([str(a), "--labels", "x", "y"])
    with pytest.raises(SystemExit, match="not found"):
        plot.main([str(tmp_path / "missing.log")])
    (tmp_path / "empty.log").write_text("nothing\n")
    with pytest.raises(SystemExit, match="no fairseq JSON"):
        plot.main([str(tmp_path / "empty.log")])


def test_resolve_models_errors_and_defaults():
    fams = families.our_families()
    assert "gru_attention" in fams and "gru_attention_tiny" in fams["gru_attention"]
    assert families.resolve_models(["gru_attention"], "tiny")[0][:2] == ("gru_attention", "gru_attention_tiny")
    assert families.resolve_models(["gru_attention_small:--dropout=0.2"], "tiny") == [
        ("gru_attention", "gru_attention_small", ["--dropout", "0.2"])]
    with pytest.raises(ValueError, match="--models"):
        families.resolve_models(["lstm"], "tiny")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="VmHWM is Linux's")
def test_child_peak_memory_excludes_the_parents(tmp_path):
    """A child started by a big parent reports its own peak (VmHWM), not the parent's resident size."""
    big = torch.ones(160 * 2**20 // 4 * 4)  # 640 MiB resident in this (parent) process
    code = ("import json, resource, sys; sys.path.insert(0, {root!r}); "
            "from benchmarks._train_child import vm_hwm_kib; "
            "print(json.dumps([vm_hwm_kib(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]))")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code.format(root=root)], capture_output=True, text=True, check=True)
    hwm_kib, maxrss_kib = json.loads(out.stdout.strip().splitlines()[-1])
    assert big.sum() > 0
    assert hwm_kib < 300 * 1024  # a bare interpreter plus benchmarks/_train_child.py
    assert maxrss_kib > 600 * 1024  # what ru_maxrss would have reported instead


def _parsed(args):
    from fairseq import options

    return options.parse_args_and_arch(options.get_training_parser(), input_args=["unused-data-dir", *args])


@pytest.mark.parametrize("ours, baseline", [
    (["--arch", "weighted_transformer_tiny"], "transformer"),
    (["--arch", "weighted_transformer_tiny", "--attention-dropout", "0.25", "--dropout", "0.2"], "transformer"),
    (["--arch", "densenmt_tiny", "--dropout", "0.35"], "fconv"),
    (["--arch", "gru_attention_tiny", "--dropout", "0.3"], "lstm"),
])
def test_counterpart_trains_with_ours_dropout(ours, baseline):
    """The fairseq counterpart gets ours' dropout rates, not its own defaults (same config, same kernels)."""
    ours_ns = _parsed(ours)
    make_args, _ = families.BASELINE_TEMPLATES[baseline]
    base_ns = _parsed(make_args(64, ours_ns))
    assert base_ns.arch == baseline
    keys = ("dropout", "attention_dropout", "activation_dropout") if baseline == "transformer" else ("dropout",)
    for key in keys:
        assert getattr(base_ns, key) == pytest.approx(getattr(ours_ns, key)), key
    if baseline == "transformer":  # the paper's attention dropout, where fairseq's default is 0.0
        assert base_ns.attention_dropout == ours_ns.attention_dropout > 0
    if baseline == "lstm":  # fairseq's lstm derives its in/out dropouts from --dropout
        assert base_ns.decoder_dropout_out == pytest.approx(ours_ns.dropout)


@pytest.mark.parametrize("ours, embed, out_dim, tied", [
    (["--arch", "dense_lstm_small"], 128, 128, True),  # tied softmax, embeddings narrower than the layers
    (["--arch", "fast_forward_lstm_tiny"], 32, None, False),  # no output size of its own: the width
    (["--arch", "gru_attention_tiny", "--decoder-embed-dim", "24", "--encoder-embed-dim", "20"], None, None, False),
])
def test_lstm_counterpart_has_ours_embedding_layout(ours, embed, out_dim, tied):
    """The ``lstm`` counterpart's width sets its recurrent sizes only; its embedding tables and
    softmax sharing follow ours, so equal parameters means equal recurrent work."""
    ours_ns = _parsed(ours)
    base_ns = _parsed(families.lstm_args(77, ours_ns))
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
    pairing, ours, base = families.match_baseline(str(tmp_path), "dense_lstm", "dense_lstm_small", ["-s", "de", "-t", "en"])
    assert abs(pairing.param_gap) <= 0.05
    ratio = families.matmul_params(ours, 1.0) / families.matmul_params(base, 1.0)
    assert 0.9 <= ratio <= 1.1, ratio


@pytest.mark.slow
def test_harness_end_to_end(tmp_path):
    """Prepare -> match parameters -> train ours + lstm -> decode -> JSON, markdown, plots (< 40 s)."""
    raw = write_copy_corpus(tmp_path / "raw", n_train=300, n_valid=30, n_test=20, src="de", tgt="en")
    out = tmp_path / "out"
    rc = bench_run.main([
        "--suite", "all", "--corpus", str(raw), "--src", "de", "--tgt", "en", "--budget-minutes", "0.5",
        "--models", "gru_attention", "--size", "tiny", "--out", str(out), "--bpe-merges", "20",
        "--max-update", "12", "--threads", "1", "--validate-interval-updates", "4", "--log-interval", "2",
        "--uncached-sentences", "6", "--paired-sentences", "6", "--paired-rounds", "2",
        "--paired-train-batches", "2",
    ])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    e = res["families"]["gru_attention"]
    assert abs(e["param_gap"]) <= 0.10
    for side in ("ours", "baseline"):
        s = e[side]
        assert s["train"]["updates"] == 12 and s["train"]["train_tokens_per_s"] > 0
        assert s["train"]["peak_rss_mib"] > 50 and 0 < s["mfu"] < 1
        assert s["train"]["peak_rss_source"] == "VmHWM"
        assert s["decode"]["full"]["sentences"] == 20 and "nrefs:1" in s["decode"]["signature"]
        assert s["decode"]["cache_subset"]["identical_hypotheses"] == 1.0
    assert e["baseline"]["arch"] == "lstm" and e["ours"]["attention"]
    assert res["machine"]["device"] == "cpu" and res["machine"]["cpu"]
    trained = e["train_paired"]
    assert trained["ratio"] > 0 and len(trained["rounds"]) == 2 and trained["target_tokens_per_round"] > 0
    assert trained["flops_per_step"]["ours"] > 0 and trained["flops_per_step"]["baseline"] > 0
    paired = e["decode_paired"]
    assert paired["sentences"] == 6 and len(paired["rounds"]) == 2 and paired["ratio"] > 0
    assert paired["flops_per_sentence"]["ours"] > 0 and paired["flops_per_sentence"]["baseline"] > 0
    assert paired["flop_normalised_ratio"] == pytest.approx(paired["ratio"] * paired["flop_ratio"])
    r = report.ratios(e)
    assert r["beam_paired"] == paired["ratio"]
    assert r["train_tokens_per_s"] > 0 and r["params"] == pytest.approx(1 / (1 + e["param_gap"]))
    md = (out / "results.md").read_text()
    assert "| gru_attention |" in md and "sacreBLEU signature" in md
    for png in ("loss_gru_attention.png", "attention_gru_attention_ours.png", "bleu_vs_params.png"):
        assert (out / png).stat().st_size > 1000, png
    repo = tmp_path / "repo"
    (repo / "examples" / "gru_attention").mkdir(parents=True)
    (repo / "benchmarks").mkdir()
    (repo / "examples" / "gru_attention" / "RESULTS.md").write_text("# claim\n<!-- figures:start -->\nold\n<!-- figures:end -->\nverdict\n")
    (repo / "benchmarks" / "README.md").write_text("# bench\n")
    assert fill_reports.main([str(out / "results.json"), "--repo", str(repo)]) == 0
    filled = (repo / "examples" / "gru_attention" / "RESULTS.md").read_text()
    assert "old" not in filled and "| gru_attention |" in filled and filled.endswith("verdict\n")
    assert "loss_gru_attention.png" in filled
    assert "| gru_attention |" in (repo / "benchmarks" / "README.md").read_text()
    # the side-by-side decoding comparison can be re-measured on the run's checkpoints
    # (and so can peak memory, each recorded command again for a few updates in a fresh child)
    assert remeasure.main([str(out / "results.json"), "--sentences", "4", "--train-batches", "2", "--rounds", "1",
                           "--threads", "1", "--what", "decode", "train", "memory", "--memory-updates", "3"]) == 0
    again = json.loads((out / "results.json").read_text())["families"]["gru_attention"]
    assert again["decode_paired"]["sentences"] == 4 and again["train_paired"]["batches"] == 2
    assert again["train_paired"]["remeasured"]["command"].startswith("python -m benchmarks.remeasure")
    for side in ("ours", "baseline"):
        mem = again[side]["train"]
        assert mem["peak_rss_source"] == "VmHWM" and mem["peak_rss_remeasured"]["updates"] == 3
        assert 50 < mem["peak_rss_mib"] < 4096
    md = (out / "results.md").read_text()
    assert "were re-measured on" in md and "peak memory figures were re-measured" in md
    # decoding with and without the skipped beam reorders: same hypotheses
    assert beam_reorder.main([str(out / "results.json"), "--sentences", "4", "--rounds", "1", "--threads", "1",
                              "--out", str(tmp_path / "beam_reorder.json")]) == 0
    skip = json.loads((tmp_path / "beam_reorder.json").read_text())["families"]["gru_attention"]
    assert skip["same_hypotheses"] and skip["sentences"] == 4 and skip["speed_ratio_skip_vs_every_reorder"] > 0


def test_rnn_and_conv_tbc_flops_are_counted():
    """torch's FLOP counter skips the fused CPU LSTM kernel and fconv's conv_tbc unless taught;
    the side-by-side FLOP ratios need both."""
    from fairseq.modules import ConvTBC
    from torch.utils.flop_counter import FlopCounterMode

    from benchmarks.decode import _register_extra_flops

    _register_extra_flops()
    _register_extra_flops()  # idempotent
    conv = ConvTBC(4, 6, 3, padding=1)
    x = torch.randn(9, 2, 4, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        conv(x).sum().backward()
    forward = 2 * 9 * 2 * 3 * 4 * 6  # 2 x T_out x B x K x C_in x C_out
    # backward: input and weight gradients, each a product per tap over the rows it overlaps
    # (the centre tap all 9 x 2 rows, the two shifted taps 8 x 2 without the padding)
    backward = 2 * (2 * (16 + 16 + 18) * 4 * 6)
    assert counter.get_total_flops() == forward + backward
    lstm = torch.nn.LSTM(10, 6, num_layers=2, bidirectional=True)
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        lstm(torch.randn(7, 3, 10))
    rows = 7 * 3
    expected = 2 * rows * 2 * (10 * 24 + 6 * 24) + 2 * rows * 2 * (12 * 24 + 6 * 24)
    assert counter.get_total_flops() == expected
    x = torch.randn(7, 3, 10, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        lstm(x)[0].sum().backward()
    assert counter.get_total_flops() == 3 * expected  # backward: gradients of inputs/states and weights


def test_decode_flops_of_a_weight_normalised_model():
    """FLOP counting works under inference mode for parametrized (weight-normalised) layers."""
    from fairseq.sequence_generator import SequenceGenerator

    from benchmarks.decode import decode_flops
    from tests.models.test_densenmt import build
    from tests import helpers

    model, d = build(sumlen=3, encoder_layers=4, decoder_layers=5)
    model.eval()
    sample = helpers.make_sample(d)
    gen = SequenceGenerator([model], d, beam_size=2, max_len_a=0, max_len_b=4, min_len=4)
    with torch.inference_mode():
        flops = decode_flops(model, gen, sample)
    assert flops > 0
    assert all(p.requires_grad for p in model.parameters())  # restored


SIMPLE_LOG = """2026-11-23 07:50:00 | INFO | fairseq_cli.train | start
2026-11-23 07:54:01 | INFO | train_inner | epoch 001:     50 / 436 loss=10.186, nll_loss=9.681, model/recurrent_norm=7.6822, wps=978.9, num_updates=50, lr_default=0.001, wall=186
2026-11-23 07:59:05 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.453 | nll_loss 7.688 | ppl 206.22 | num_updates 135
2026-11-23 07:59:06 | INFO | train | epoch 001 | loss 9.361 | nll_loss 8.711 | num_updates 135 | wall 490
"""


def test_parse_log_reads_simple_format(tmp_path):
    """The recipes in examples/ log with --log-format simple; their curves must be readable too."""
    log = tmp_path / "simple.log"
    log.write_text(SIMPLE_LOG)
    runs = plot.parse_log(str(log))
    assert runs["train_inner"] == [{"loss": 10.186, "nll_loss": 9.681, "model/recurrent_norm": 7.6822, "wps": 978.9,
                                    "num_updates": 50.0, "lr_default": 0.001, "wall": 186.0, "t": 241.0}]
    assert runs["valid"] == [{"loss": 8.453, "nll_loss": 7.688, "ppl": 206.22, "num_updates": 135.0, "t": 545.0}]
    assert runs["train"][0]["loss"] == 9.361 and runs["train"][0]["num_updates"] == 135.0
    assert plot.series(runs["valid"], "loss") == ([135.0], [8.453])


def test_recipe_table(tmp_path, capsys):
    from benchmarks import recipe_table

    (tmp_path / "a.train.log").write_text(SIMPLE_LOG)
    (tmp_path / "a.test.txt").write_text("H-0\t-1.0\tx\nGenerate test with beam=5: BLEU4 = 1.23, 20/5/1/0 (BP=1.0)\n")
    (tmp_path / "b.train.log").write_text(SIMPLE_LOG.replace("loss 8.453", "loss 8.1"))
    assert recipe_table.main([str(tmp_path / "a.train.log"), str(tmp_path / "b.train.log"),
                              "--plot", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert "| a | 135 | 8.453 (135) | 8.453 | 1.23 |" in out and "| b | 135 | 8.100 (135) | 8.100 | n/a |" in out
    assert (tmp_path / "c.png").stat().st_size > 1000
    with pytest.raises(SystemExit, match="not found"):
        recipe_table.main([str(tmp_path / "missing.train.log")])


def test_recipe_table_names_runs_of_one_arch_by_folder(tmp_path, capsys):
    """Table 3 rows train the same arch into different folders: the rows must stay apart."""
    from benchmarks import recipe_table

    for row, loss in (("full", "8.453"), ("neither", "8.9")):
        (tmp_path / row).mkdir()
        (tmp_path / row / "wt.train.log").write_text(SIMPLE_LOG.replace("loss 8.453", f"loss {loss}"))
    (tmp_path / "other.train.log").write_text(SIMPLE_LOG)
    assert recipe_table.main([str(tmp_path / "full" / "wt.train.log"), str(tmp_path / "neither" / "wt.train.log"),
                              str(tmp_path / "other.train.log")]) == 0
    out = capsys.readouterr().out
    assert "| full/wt | 135 | 8.453 (135) |" in out and "| neither/wt | 135 | 8.900 (135) |" in out
    assert "| other | 135 |" in out


def test_verdict_never_prints_a_miss_as_the_threshold():
    assert report._verdict(1.07, 1.0) == "met (1.07)"
    assert report._verdict(0.7123, 1.0) == "missed (0.71)"
    assert report._verdict(0.9986, 1.0) == "missed (0.999)"
    assert report._verdict(0.99996, 1.0) == "missed (0.99996)"
    assert report._verdict(0.2999, 0.30) == "missed (0.2999)"
    assert report._verdict(None, 1.0) == "n/a"


def test_mixed_precision_options_reach_fairseq_train_as_amp_not_bf16():
    """fairseq's option parsing turns ``--bf16`` into ``--tpu`` (torch_xla), on GPUs too: the
    harness trains with ``--amp`` and keeps ``--bf16`` for its own decoding."""
    from fairseq import options

    args = train.common_args("data", "save", "de", "en", 1.0, device="cuda", amp=True)
    assert "--amp" in args and "--bf16" not in args and "--cpu" not in args
    parsed = options.parse_args_and_arch(options.get_training_parser(), args + ["--arch", "lstm"])
    assert parsed.amp and not parsed.tpu
    assert "--amp" not in train.common_args("data", "save", "de", "en", 1.0)
    with pytest.raises(SystemExit, match="--amp needs --device cuda"):
        bench_run.main(["--corpus", "x", "--budget-minutes", "1", "--amp"])


def test_gpu_suite_says_what_is_wrong(tmp_path):
    """``benchmarks/gpu_suite.sh``: no CUDA device, or an unknown stage, is one clear line."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "gpu_suite.sh")
    env = dict(os.environ, OUT=str(tmp_path / "out"), PYTHON=sys.executable)
    if not torch.cuda.is_available():
        p = subprocess.run(["bash", script, "tests"], env=env, capture_output=True, text=True)
        assert p.returncode != 0 and "torch sees no CUDA device" in p.stderr
    p = subprocess.run(["bash", script, "tests", "bogus"], env=dict(env, DEVICE="cpu"), capture_output=True, text=True)
    assert p.returncode == 2 and "unknown stage 'bogus'" in p.stderr


def test_concurrent_convergence_says_what_is_wrong(tmp_path):
    from benchmarks import concurrent_convergence as cc

    with pytest.raises(SystemExit):  # argparse: not NAME=ARGS
        cc.get_parser().parse_args([str(tmp_path), "--src", "de", "--tgt", "en", "--model", "dense_lstm_tiny",
                                    "--reference", "x", "--budget-minutes", "1", "--out", str(tmp_path)])
    (tmp_path / "dict.en.txt").write_text("a 1\n")
    base = [str(tmp_path), "--src", "de", "--tgt", "en", "--budget-minutes", "1", "--out", str(tmp_path / "o")]
    for extra, message in [
        (["--model", "a=--arch,x", "--reference", "a"], "at least two"),
        (["--model", "a=--arch,x", "--model", "a=--arch,y", "--reference", "a"], "must differ"),
        (["--model", "a=--arch,x", "--model", "b=--arch,y", "--reference", "c"], "none of the --model names"),
    ]:
        with pytest.raises(SystemExit, match=message):
            cc.check_args(cc.get_parser().parse_args(base + extra))
    bad_bin = base.copy()
    bad_bin[0] = str(tmp_path / "missing")
    with pytest.raises(SystemExit, match="no dict.en.txt"):
        cc.check_args(cc.get_parser().parse_args(bad_bin + ["--model", "a=--arch,x", "--model", "b=--arch,y",
                                                             "--reference", "a"]))
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_concurrent_convergence_end_to_end(tmp_path):
    """Two tiny models trained at once; each reaches (or not) the reference's best loss."""
    from benchmarks import concurrent_convergence as cc
    from fairseq_dense.data.prepare import prepare

    raw = write_copy_corpus(tmp_path / "raw", n_train=300, n_valid=30, n_test=20, src="de", tgt="en")
    data = os.path.join(prepare(str(raw), str(tmp_path / "prep"), "de", "en", merges=20, workers=1), "bin")
    out = tmp_path / "out"
    assert cc.main([data, "--src", "de", "--tgt", "en", "--budget-minutes", "1", "--max-update", "8",
                    "--validate-interval-updates", "4", "--log-interval", "2", "--out", str(out),
                    "--model", "gru=--arch,gru_attention_tiny", "--model", "dense=--arch,dense_lstm_tiny",
                    "--reference", "gru"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["reference"] == "gru" and res["threads_per_run"] == 1
    gru, dense = res["runs"]["gru"], res["runs"]["dense"]
    assert res["target_valid_loss"] == gru["summary"]["best_valid_loss"]
    assert gru["reached"]["updates"] == gru["summary"]["best_valid_updates"]
    for run in (gru, dense):
        assert run["summary"]["updates"] == 8 and len(run["summary"]["valid_curve"]) >= 2
        assert run["params"] > 1000 and "--max-update" in run["command"]
    reached = dense["reached"]["updates"]
    best = dense["summary"]["best_valid_loss"]
    assert (reached is not None) == (best <= res["target_valid_loss"] + 1e-9)
    md = (out / "results.md").read_text()
    assert "| `gru` |" in md and "| `dense` |" in md
    assert (out / "curves.png").stat().st_size > 1000 and (out / "curves_wall.png").stat().st_size > 1000
