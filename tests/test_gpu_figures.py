"""The prepared GPU command (``benchmarks/gpu_figures.sh``): a CPU dry run of its presets stage (its GPU
tests collected and skipped) and its figures stage, and the parts of its measurement that can be checked
without a GPU (the A/A gate, skipped updates, the datasheet peaks)."""

import json
import os
import subprocess
import sys

import pytest
import torch

from benchmarks import counterparts, gpu_figures

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_gpu_command_cpu_dry_run(tmp_path):
    # a transformer-class pair: no LSTM under bfloat16 autocast, which oneDNN runs only on CPUs with bf16
    out = tmp_path / "out"
    tiny = "--tiny --vocab 100 --max-len 24"
    env = dict(
        os.environ,
        DEVICE="cpu",
        TESTS_S="0",
        OUT=str(out),
        PYTHON=sys.executable,
        FIGURES_ARGS=f"{tiny} --pairs wt_a_fixed --shapes 64x1 32x2 --rounds 2 --updates 1",
    )
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH")]))
    script = os.path.join(REPO, "benchmarks", "gpu_figures.sh")
    proc = subprocess.run(["bash", script], cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stages = (out / "stages.log").read_text()
    assert "fairseq imports already, nothing installed" in stages  # no reinstall where fairseq imports
    assert "presets: exit 0" in stages, (out / "presets.log").read_text()[-3000:]
    if not torch.cuda.is_available():  # each family's paper preset twice, deep_att's --fp16 run once
        assert "13 skipped" in (out / "presets.log").read_text().splitlines()[-1], stages
    assert "figures: exit 0" in stages, (out / "figures.log").read_text()[-3000:]

    r = json.loads((out / "gpu_figures.json").read_text())
    assert r["datasheet_peak_tflops"] is None  # a CPU has no datasheet row
    assert r["optimizer"] == "fused_adam" and "fused_vs_adam" in r["pairs"]
    assert list(r["pairs"])[0] == "aa"  # the A/A pair first, at every shape
    assert set(r["pairs"]["aa"]["bf16"]) == {"64x1", "32x2"}
    pair = r["pairs"]["wt_a_fixed"]
    assert set(pair["bf16"]) == {"64x1", "32x2"} and set(pair["amp"]) == {"64x1"}
    for m in [*pair["bf16"].values(), *pair["amp"].values()]:
        assert len(m["rounds"]) == 2 and m["updates_per_round"] == 1
        assert m["ratio"]["min"] <= m["ratio"]["median"] <= m["ratio"]["max"]
        for side in ("ours", "counterpart"):
            assert m[side]["tokens_per_s"]["median"] > 0 and m[side]["timed_updates"] == 2
            assert m[side]["skipped_updates"] == 0  # no loss scaling on a CPU: nothing overflows
    for side in ("ours", "counterpart"):
        e = pair[side]
        # the counted FLOPs of a transformer are the 6N estimate's within attention's share
        assert 0.9 < e["counted_flops_per_token"] / e["six_n_flops_per_token"] < 1.6
        assert e["kernels"]["kernels"] > 0
    md = (out / "gpu_figures.md").read_text()
    assert "| wt_a_fixed | amp | 64x1 |" in md and "A/A (the transformer against itself" in md


def _results(aa_ratios, shapes=("32768x1", "8192x4")):
    """A results dict of the figures: the A/A pair at ``aa_ratios`` (shape -> ratio) and one more pair."""

    def m(ratio):
        side = {"tokens_per_s": {"median": 1000.0, "min": 900.0, "max": 1100.0}, "skipped_updates": 0,
                "timed_updates": 10}  # fmt: skip
        return {"ours": side, "counterpart": side, "ratio": {"median": ratio, "min": ratio - 0.01, "max": ratio + 0.01}}

    return {
        "command": "x", "date": "d", "commit": "c", "device_name": "NVIDIA H100 80GB HBM3", "torch": "t",
        "datasheet_peak_tflops": 989.4, "gemm_peak_tflops": 700.0, "optimizer": "fused_adam", "vocab": 32000,
        "shapes": list(shapes), "rounds": 5, "updates": 2,
        "pairs": {"aa": {"bf16": {s: m(x) for s, x in aa_ratios.items()}}, "gru": {"bf16": {shapes[0]: m(0.777)}}},
    }  # fmt: skip


def test_no_ratio_is_read_unless_the_aa_pair_is_within_tolerance():
    ok, line = gpu_figures.aa_gate(_results({"32768x1": 1.02, "8192x4": 0.97}))
    assert ok and "ratios read" in line
    assert "0.777" in gpu_figures.markdown(_results({"32768x1": 1.02, "8192x4": 0.97}))
    for aa in ({"32768x1": 1.02, "8192x4": 1.08}, {"32768x1": 0.94, "8192x4": 1.0}, {"32768x1": 1.0}):
        r = _results(aa)
        ok, line = gpu_figures.aa_gate(r)
        assert not ok and "no ratio below is read" in line
        md = gpu_figures.markdown(r)
        assert "0.777" not in md and "| gru | bf16 | 32768x1 |" in md and "not read (A/A)" in md
        assert line in md


class _Trainer:
    """What ``time_shape`` uses of fairseq's Trainer; every ``skip``-th update overflows (no update counted)."""

    def __init__(self, skip=0):
        self.updates, self.calls, self.skip = 0, 0, skip

    def get_num_updates(self):
        return self.updates

    def train_step(self, batches):
        self.calls += 1
        self.updates += not (self.skip and self.calls % self.skip == 0)


def test_time_shape_counts_the_skipped_updates_of_each_side():
    trainers = {"ours": _Trainer(skip=3), "counterpart": _Trainer()}
    m = gpu_figures.time_shape(trainers, [[{"ntokens": 10}], [{"ntokens": 5}, {"ntokens": 15}]], 3, "cpu")
    # 2 warm-up updates (calls 1-2), then 6 timed (calls 3-8): calls 3 and 6 overflow
    assert m["ours"]["skipped_updates"] == 2 and m["counterpart"]["skipped_updates"] == 0
    assert m["ours"]["timed_updates"] == 6 and m["target_tokens_per_round"] == 30 and len(m["rounds"]) == 3
    assert trainers["ours"].calls == trainers["counterpart"].calls == 8


def test_shapes_are_checked():
    with pytest.raises(SystemExit):
        gpu_figures.get_parser().parse_args(["--shapes", "32k"])
    assert gpu_figures.get_parser().parse_args(["--shapes", "8192x4"]).shapes == ["8192x4"]


def test_pairs_run_in_the_order_given():
    assert list(counterparts.paper_pairs(["gru", "wt_a", "deep_att"])) == ["gru", "wt_a", "deep_att"]
    assert list(counterparts.paper_pairs()) == list(counterparts.PAPER_PAIRS)


@pytest.mark.parametrize(
    "name, tflops",
    [("NVIDIA H100 80GB HBM3", 989.4), ("NVIDIA H100 PCIe", 756.0), ("NVIDIA H200", 989.4), ("Some GPU", None)],
)
def test_datasheet_peak(name, tflops):
    peak = gpu_figures.datasheet_peak(name)
    assert (peak is None) if tflops is None else peak == pytest.approx(tflops * 1e12)
