"""The quick-start pipeline (``make quickstart``), end to end on a small corpus.

The real command trains for minutes; this runs the same code path (synthetic
corpus -> sacremoses + BPE + fairseq-preprocess -> fairseq-train -> fairseq-generate
-> sacreBLEU) with a tiny model, a small corpus and a few seconds of training, and
checks what the user is promised: BLEU with its signature, wall times, examples.
"""
import os
import re
import shlex
import subprocess
import sys

import pytest

from fairseq_dense.data import synthetic

pytestmark = pytest.mark.slow


def run_quickstart(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "fairseq_dense.cli.quickstart", *map(str, args)],
        cwd=cwd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1"),
    )


def test_quickstart_trains_translates_and_scores(tmp_path):
    """With the default family's tiny size (the quick-start trains ``weighted_transformer_small``)."""
    raw = synthetic.write_corpus(str(tmp_path / "raw"), "en", "xx", sizes=(1500, 60, 40))
    proc = run_quickstart("--corpus", raw, "--src", "en", "--tgt", "xx", "--arch", "weighted_transformer_tiny",
                          "--minutes", "0.15", "--bpe-merges", "200", "--work-dir", tmp_path / "work",
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    m = re.search(r"Test BLEU \(raw, en->xx, weighted_transformer_tiny, beam 5\): (\d+\.\d+)", out)
    assert m, out
    assert 0.0 <= float(m.group(1)) <= 100.0
    assert re.search(r"sacreBLEU signature: nrefs:1\|case:mixed\|eff:no\|tok:13a\|smooth:exp\|version:", out), out
    assert re.search(r"wall time: [\d.]+ min \(prepare \d+s, train \d+s, generate\+score \d+s\)", out), out
    assert out.count("  SRC: ") == 5 and out.count("  HYP: ") == 5
    # progress was streamed while training ran
    assert re.search(r"^    (train|valid) \| epoch 001 \|", out, re.M), out
    # the task that projects kappa/alpha right after each step, not the model's fallback
    train_log = (tmp_path / "work" / "raw" / "train.log").read_text()
    assert "num_updates" in train_log
    logs = out + proc.stderr + train_log
    assert "--task translation_weighted" in logs, logs[-3000:]
    assert "as a fallback" not in logs, logs[-3000:]
    # the branch-weight statistics stay in the log, out of the streamed progress
    assert "kappa_ent" in train_log and "model/" not in out, out
    # the printed fairseq-interactive command translates raw input
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Translate your own sentences"))
    source = (tmp_path / "raw" / "test.en").read_text().splitlines()[0]
    inter = subprocess.run(shlex.split(lines[at + 1]), input=source + "\n", cwd=tmp_path, capture_output=True,
                           text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert inter.returncode == 0, inter.stderr[-3000:]
    assert re.search(r"^D-0\t\S+\t", inter.stdout, re.M), inter.stdout + inter.stderr[-2000:]


def test_quickstart_names_a_missing_corpus_file(tmp_path):
    raw = synthetic.write_corpus(str(tmp_path / "raw"), "en", "xx", sizes=(50, 5, 5))
    (tmp_path / "raw" / "valid.xx").unlink()
    proc = run_quickstart("--corpus", raw, "--src", "en", "--tgt", "xx", "--work-dir", tmp_path / "work",
                          cwd=tmp_path)
    assert proc.returncode != 0
    assert "valid.xx" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]


def _make_dry_run(*args) -> str:
    from tests.helpers import REPO

    # -n: print the commands only (nothing is installed or trained)
    out = subprocess.run(["make", "-n", "-C", str(REPO), "quickstart", *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_make_quickstart_uses_the_shared_tatoeba_corpus_when_present():
    from tests.helpers import SHARED_DATA

    if not (SHARED_DATA / "tatoeba-deu-eng" / "train.de").is_file():
        pytest.skip("../shared/data/tatoeba-deu-eng is not beside this clone")
    cmd = _make_dry_run()
    assert "--corpus ../shared/data/tatoeba-deu-eng --src de --tgt en" in cmd
    synthetic_cmd = _make_dry_run("CORPUS=")
    assert "fairseq_dense.cli.quickstart" in synthetic_cmd and "--corpus" not in synthetic_cmd
