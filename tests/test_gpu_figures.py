"""The prepared GPU command (``benchmarks/gpu_figures.sh``): a CPU smoke run of every stage but the
CUDA tests, and the parts of its measurement that can be checked without a GPU."""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import counterparts, gpu_figures

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_gpu_command_cpu_smoke(tmp_path):
    # a transformer-class pair: no LSTM under bfloat16 autocast, which oneDNN runs only on CPUs with bf16
    out = tmp_path / "out"
    args = (
        "--tiny --pairs wt_a_fixed --vocab 100 --max-tokens 128 --steps 1 --warmup 1 "
        "--decode-sentences 4 --decode-length 4"
    )
    env = dict(os.environ, DEVICE="cpu", TESTS_S="0", OUT=str(out), PYTHON=sys.executable, ARGS=args)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH")]))
    proc = subprocess.run(
        ["bash", os.path.join(REPO, "benchmarks", "gpu_figures.sh")], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stages = (out / "stages.log").read_text()
    assert "figures: exit 0" in stages, (out / "figures.log").read_text()[-3000:]
    assert "fairseq imports already, nothing installed" in stages  # no reinstall where fairseq imports
    r = json.loads((out / "gpu_figures.json").read_text())
    assert r["gemm_peak_tflops"]["bf16"] > 0 and r["datasheet_peak_tflops"] is None  # a CPU has no datasheet row
    for side in ("ours", "counterpart"):
        e = r["pairs"]["wt_a_fixed"][side]
        counts = e["counts"]
        assert counts["matmul_flops_per_token"] > 0 and counts["six_n_flops_per_token"] == 6 * counts["matmul_weights"]
        # the counted FLOPs of a transformer are the 6N estimate's within attention's share
        assert 0.9 < counts["matmul_flops_per_token"] / counts["six_n_flops_per_token"] < 1.6
        for precision in ("amp", "bf16"):
            m = e[precision]
            assert m["target_tokens_per_s"] > 0 and m["mfu"] > 0 and m["mfu_6n"] > 0
            assert m["mfu_datasheet"] is None
            assert m["kernels_per_step"]["kernels"] > 0 and m["beam5"]["sentences_per_s"] > 0
    md = (out / "gpu_figures.md").read_text()
    assert "| wt_a_fixed | ours | amp |" in md and "| counted / 6N |" in md


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
