"""The quick-start (``make quickstart``): its bundled corpus, the pipeline end to end, its errors.

The real command trains for minutes per model; the end-to-end test runs the same code
path (bundled Tatoeba -> sacremoses + BPE + fairseq-preprocess -> fairseq-train ->
fairseq-generate -> sacreBLEU, plugin model and its fairseq baseline) on 64 pairs of each
split with tiny models and a few seconds of training, and checks what the user is
promised: the progress line, both rows, BLEU with its signature, examples, and a
``fairseq-interactive`` command that translates.
"""

import math
import os
import re
import shlex
import subprocess
import sys

import pytest

from fairseq_dense.cli import quickstart
from fairseq_dense.cli.quickstart_steps import Result, TrainLog
from fairseq_dense.data import prepare as prep
from fairseq_dense.data import tatoeba
from tests.helpers import REPO


def test_bundled_corpus_decompresses_to_the_documented_parallel_files(tmp_path):
    raw = tatoeba.extract(str(tmp_path / "raw"))
    with open(os.path.join(tatoeba.BUNDLED_DIR, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    for split, n in tatoeba.LINES.items():
        src = prep.read_lines(os.path.join(raw, f"{split}.de"))
        tgt = prep.read_lines(os.path.join(raw, f"{split}.en"))
        assert len(src) == len(tgt) == n, split
        assert f"| {split} | {n:,} |" in readme
        assert all(s.strip() for s in src[:100]) and all(t.strip() for t in tgt[:100])
    for text in (readme, open(os.path.join(tatoeba.BUNDLED_DIR, "LICENSE"), encoding="utf-8").read()):
        assert "tatoeba.org" in text and "manythings.org/anki" in text and "2018-05-13" in text
    assert "CC-BY 2.0 FR" in readme
    # a slice: the first N pairs of every split, still parallel
    small = tatoeba.extract(str(tmp_path / "small"), max_lines=10)
    assert prep.read_lines(os.path.join(small, "test.en")) == prep.read_lines(os.path.join(raw, "test.en"))[:10]
    prep.check_parallel(small, "de", "en")


def test_progress_line_and_figures_from_the_training_log(capsys):
    log = TrainLog("densenmt_small", minutes=6.0, previous_s=60.0)
    for line in [
        "12:00:00 | INFO | fairseq_cli.train | num. shared model params: 2,877,856 (num. trained: 2,877,856)",
        "12:00:30 | INFO | train_inner | epoch 001:     50 / 812 loss=9.716, ppl=841.2, wps=2000, ups=2.5, "
        "wpb=800, bsz=60, num_updates=50, lr=0.0015, gnorm=1.2, train_wall=20, wall=30",
        "12:01:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.5 | ppl 181 | num_updates 60 "
        "| best_loss 7.5",
        "12:01:00 | INFO | train | epoch 001 | loss 8.0 | wps 1500 | ups 2 | wpb 750 | num_updates 60 | wall 40",
    ]:
        log.feed(line)
    out = capsys.readouterr().out
    assert "densenmt_small: 50 updates, loss 9.716, 1.5 min trained, 4.5 min left" in out
    assert "densenmt_small: validation after 60 updates: loss 7.500" in out
    assert (log.params, log.updates, log.best_loss) == (2877856, 60, 7.5)
    assert math.isclose(log.wps, 1500.0)


def _fails_with_one_line(argv) -> str:
    with pytest.raises(SystemExit) as info:
        quickstart.main(argv)
    message = str(info.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    return message


def test_errors_are_one_line_naming_the_file(tmp_path):
    work = ["--work-dir", str(tmp_path / "work")]
    missing = tmp_path / "no-such-corpus"
    assert str(missing) in _fails_with_one_line(["--corpus", str(missing), "--src", "de", "--tgt", "en", *work])
    raw = tatoeba.extract(str(tmp_path / "raw"), max_lines=20)
    with open(os.path.join(raw, "valid.en"), "w", encoding="utf-8") as f:
        f.write("one line\n")
    message = _fails_with_one_line(["--corpus", raw, "--src", "de", "--tgt", "en", *work])
    assert "valid.de has 20 lines" in message and "valid.en has 1" in message
    os.remove(os.path.join(raw, "test.en"))
    assert "test.en: file not found" in _fails_with_one_line(["--corpus", raw, "--src", "de", "--tgt", "en", *work])


def test_all_families_takes_each_family_cpu_arch_from_the_registry():
    from fairseq_dense.baselines import our_families

    archs = quickstart.family_archs()
    assert sorted(archs) == sorted(f"{family}_{quickstart.CPU_SIZE}" for family in our_families())
    assert len(archs) == 5 and quickstart.DEFAULT_ARCH in archs
    failed = Result("plugin", "densenmt", "densenmt_small", [], "", error="error: command failed")
    assert "| densenmt | fairseq-dense | `densenmt_small` | error: command failed |" in quickstart.table([failed])


def test_default_arch_is_the_best_family_of_the_readme_table():
    """``DEFAULT_ARCH`` is the plugin row with the best test BLEU in the README's measured table."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("<!-- quickstart-families:begin -->")[1].split("<!-- quickstart-families:end -->")[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in block.strip().splitlines()[2:]]
    ours = {row[2].strip("`"): float(row[6]) for row in rows if row[1] == "fairseq-dense"}
    assert sorted(ours) == sorted(quickstart.family_archs())
    assert max(ours, key=ours.get) == quickstart.DEFAULT_ARCH


def _make_dry_run(*args) -> str:
    # -n: print the commands only (nothing is installed or trained)
    out = subprocess.run(["make", "-n", "-C", str(REPO), "quickstart", *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.replace("\\\n", " ").splitlines()
    return " ".join(next(line for line in lines if "fairseq_dense.cli.quickstart" in line).split())


def test_the_bundled_corpus_is_the_default_and_synthetic_only_explicit():
    assert quickstart.get_parser().parse_args([]).corpus == quickstart.BUNDLED
    default = _make_dry_run()
    assert "--corpus tatoeba --src de --tgt en" in default and "synthetic" not in default
    assert "--corpus synthetic" in _make_dry_run("CORPUS=synthetic")
    assert "--corpus /data/x --src fr --tgt en" in _make_dry_run("CORPUS=/data/x", "SRC=fr", "TGT=en")
    assert "synthetic" not in _make_dry_run("CORPUS=")
    assert "--baseline" in _make_dry_run("BASELINE=1") and "--baseline" not in default


@pytest.mark.slow
def test_quickstart_with_baseline_on_a_slice_of_the_bundled_corpus(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    args = ["--max-lines", "64", "--arch", "weighted_transformer_tiny", "--baseline", "--minutes", "0.05",
            "--bpe-merges", "100", "--beam", "1", "--work-dir", str(tmp_path / "work")]  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "fairseq_dense.cli.quickstart", *args], cwd=tmp_path,
                          capture_output=True, text=True, env=env)  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "Test BLEU (tatoeba-deu-eng-first64, de->en, beam 1, " in out, out
    # progress while training, both models side by side
    assert re.search(
        r"^    weighted_transformer_tiny: \d+ updates, loss [\d.]+, [\d.]+ min trained, [\d.]+ min left", out, re.M
    )
    cells = r"\| ([\d.]+)M \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d,]+) \|"
    ours = re.search(r"^\| weighted_transformer \| fairseq-dense \| `weighted_transformer_tiny` " + cells, out, re.M)
    base = re.search(r"^\| weighted_transformer \| fairseq baseline \| `transformer \(width \d+\)` " + cells, out, re.M)
    assert ours and base, out
    for row in (ours, base):
        params, updates, loss, bleu, wps = row.groups()
        assert int(updates) > 0 and 0 < float(loss) < 20 and 0 <= float(bleu) <= 100 and int(wps.replace(",", "")) >= 0
    assert abs(float(base.group(1)) / float(ours.group(1)) - 1) < 0.15  # matched sizes
    assert re.search(r"^sacreBLEU signature: nrefs:1\|case:mixed\|eff:no\|tok:13a\|smooth:exp\|version:", out, re.M)
    assert out.count("  SRC: ") == 5 and out.count("  HYP: ") == 5 and out.count("  BASELINE: ") == 5
    # the Weighted Transformer trains with the task that projects its branch weights each step
    work = tmp_path / "work" / "tatoeba-deu-eng-first64"
    train_log = (work / "train-weighted_transformer_tiny.log").read_text()
    assert "--task translation_weighted" in proc.stderr and "found off the simplex" not in train_log
    assert "model/" not in out  # per-layer statistics stay in the log
    # the printed fairseq-interactive command translates raw German
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Translate your own sentences"))
    cmd = shlex.split(lines[at + 1])
    assert os.path.basename(cmd[0]) in ("fairseq-interactive", "python", "python3") and "--bpe-codes" in cmd
    inter = subprocess.run(cmd, input="Ich habe Hunger.\n", capture_output=True, text=True, env=env)
    assert inter.returncode == 0, inter.stderr[-3000:]
    assert re.search(r"^D-0\t\S+\t", inter.stdout, re.M), inter.stdout + inter.stderr[-2000:]
