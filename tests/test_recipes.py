"""The CPU recipes in examples/ run end to end (a few updates on tiny data)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import helpers

REPO = Path(__file__).resolve().parent.parent


def run_recipe(script: str, env: dict, *args) -> subprocess.CompletedProcess:
    full_env = dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        OMP_NUM_THREADS="1",
        **env,
    )
    return subprocess.run(
        ["bash", str(REPO / script), *args], cwd=REPO, env=full_env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
@pytest.mark.parametrize("flags", [[], ["--fixed-kappa", "--fixed-alpha"]], ids=["full", "neither"])
def test_weighted_transformer_tatoeba_recipe_rows(tmp_path, flags):
    """Table 3 rows through the CPU recipe; the "neither" row has no branch parameter group,
    so the recipe must not address one (fairseq-train refuses unknown groups)."""
    raw = helpers.write_copy_corpus(tmp_path / "raw", n_train=200, n_valid=20, n_test=10, src="de", tgt="en")
    helpers.preprocess(raw, tmp_path / "data" / "bin", "de", "en")
    out = tmp_path / "out"
    proc = run_recipe(
        "examples/weighted_transformer/tatoeba-cpu.sh",
        {"DATA": str(tmp_path / "data"), "OUT": str(out), "MAX_UPDATE": "3", "ARCHS": "weighted_transformer"},
        *flags,
    )
    log_path = out / "weighted_transformer.train.log"
    log = log_path.read_text() if log_path.exists() else ""
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:] + log[-2000:]
    assert "num_updates 3" in log or "num_updates=3" in log
    assert "10 test sentences" in proc.stdout


@pytest.mark.slow
def test_gru_attention_tatoeba_recipe(tmp_path):
    """The dropout / beam-vs-greedy recipe: subsets the corpus, prepares it (BPE, binarised),
    trains once per dropout and decodes each model with beam 5 and greedily."""
    raw = helpers.write_copy_corpus(tmp_path / "raw", n_train=200, n_valid=20, n_test=10, src="de", tgt="en")
    out = tmp_path / "out"
    proc = run_recipe(
        "examples/gru_attention/tatoeba-cpu.sh",
        {
            "RAW": str(raw),
            "DATA": str(tmp_path / "data"),
            "OUT": str(out),
            "EVERY": "2",
            "MAX_EPOCH": "1",
            "ARCH": "gru_attention_tiny",
        },
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # every 2nd training pair, the validation and test splits whole
    assert len((tmp_path / "data.raw" / "train.de").read_text().splitlines()) == 100
    assert len((tmp_path / "data.raw" / "test.en").read_text().splitlines()) == 10
    for p in ("0.5", "0.0"):
        log = (out / f"dropout{p}.train.log").read_text()
        assert f"dropout: {p}" in log or f"'dropout': {p}" in log, log[:3000]
        for beam in ("5", "1"):
            assert f"dropout {p}, beam {beam}: 10 test sentences" in proc.stdout
        # beam 5 where every recipe writes it (NAME.test.txt)
        assert "beam=5" in (out / f"dropout{p}.test.txt").read_text()
        assert "beam=1" in (out / f"dropout{p}.greedy.txt").read_text()


@pytest.mark.slow
def test_densenmt_tatoeba_recipe_with_fconv_row(tmp_path):
    """The DenseNMT CPU recipe trains and decodes one of our architectures and fairseq's
    `fconv` configured as BASE-4L (`fconv_base_4l`), with the same command."""
    raw = helpers.write_copy_corpus(tmp_path / "raw", n_train=200, n_valid=20, n_test=10, src="de", tgt="en")
    helpers.preprocess(raw, tmp_path / "data" / "bin", "de", "en")
    out = tmp_path / "out"
    proc = run_recipe(
        "examples/densenmt/tatoeba-cpu.sh",
        {"DATA": str(tmp_path / "data"), "OUT": str(out), "MAX_UPDATE": "3", "ARCHS": "densenmt_tiny fconv_base_4l"},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    fconv_log = (out / "fconv_base_4l.train.log").read_text()
    assert "FConvModel" in fconv_log and "[(256, 3)] * 4" in fconv_log, fconv_log[:3000]
    for arch in ("densenmt_tiny", "fconv_base_4l"):
        assert f"{arch}: 10 test sentences" in proc.stdout
