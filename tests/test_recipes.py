"""The CPU recipes in examples/ run end to end (a few updates on tiny data)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import helpers

REPO = Path(__file__).resolve().parent.parent


def run_recipe(script: str, env: dict, *args) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                    OMP_NUM_THREADS="1", **env)
    return subprocess.run(["bash", str(REPO / script), *args], cwd=REPO, env=full_env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("flags", [[], ["--fixed-kappa", "--fixed-alpha"]], ids=["full", "neither"])
def test_weighted_transformer_tatoeba_recipe_rows(tmp_path, flags):
    """Table 3 rows through the CPU recipe; the "neither" row has no branch parameter group,
    so the recipe must not address one (fairseq-train refuses unknown groups)."""
    raw = helpers.write_copy_corpus(tmp_path / "raw", n_train=200, n_valid=20, n_test=10, src="de", tgt="en")
    helpers.preprocess(raw, tmp_path / "data" / "bin", "de", "en")
    out = tmp_path / "out"
    proc = run_recipe("examples/weighted_transformer/tatoeba-cpu.sh",
                      {"DATA": str(tmp_path / "data"), "OUT": str(out), "MAX_UPDATE": "3",
                       "ARCHS": "weighted_transformer"}, *flags)
    log = (out / "weighted_transformer.train.log").read_text() if (out / "weighted_transformer.train.log").exists() else ""
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:] + log[-2000:]
    assert "num_updates 3" in log or "num_updates=3" in log
    assert "10 test sentences" in proc.stdout
