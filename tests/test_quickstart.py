"""The quick-start (``make quickstart``): its bundled corpus, the pipeline end to end, its errors.

The real command trains 1,600 updates per model; the end-to-end test runs the same code
path (bundled Tatoeba -> sacremoses + BPE + fairseq-preprocess -> fairseq-train ->
fairseq-generate -> sacreBLEU, plugin model and its fairseq baseline, export) on 64 pairs
of each split with tiny models and a few updates, and checks what the user is promised:
the progress line and why training stopped, both rows at equal updates, BLEU with its
signature, examples, a ``fairseq-dense-interactive`` command that translates, an export
that ``fairseq_dense.from_pretrained`` loads and that translates as that command does,
and a second run that trains nothing and changes no file.
"""

import math
import os
import re
import shlex
import subprocess
import sys

import pytest

from fairseq_dense.cli import quickstart, quickstart_run
from fairseq_dense.cli.quickstart_steps import Budget, Result, TrainLog
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


_PARAMS_LINE = "12:00:00 | INFO | fairseq_cli.train | num. shared model params: 2,877,856 (num. trained: 2,877,856)"


def _inner(updates, loss, wall):
    return (
        f"12:00:30 | INFO | train_inner | epoch 001:     {updates} / 812 loss={loss}, ppl=841.2, wps=2000, ups=2.5, "
        f"wpb=800, bsz=60, num_updates={updates}, lr=0.0015, gnorm=1.2, train_wall=20, wall={wall}"
    )


def test_progress_lines_show_the_interval_loss_the_time_left_and_why_training_stopped(capsys):
    log = TrainLog("densenmt_small", Budget(updates=200))
    for line in [
        _PARAMS_LINE,
        _inner(50, 9.716, 25),
        _inner(100, 7.5, 50),
        "12:01:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.5 | ppl 181 | num_updates 100 "
        "| best_loss 7.5",
        "12:01:01 | INFO | fairseq_cli.train | Stopping training due to num_updates: 200 >= max_update: 200",
        "12:01:02 | INFO | fairseq_cli.train | end of epoch 1 (average epoch stats below)",
        "12:01:02 | INFO | train | epoch 001 | loss 8.0 | wps 1500 | ups 2 | wpb 750 | num_updates 200 | wall 100",
        "12:01:03 | INFO | fairseq_cli.train | done training in 99.0 seconds",
    ]:
        log.feed(line)
    out = capsys.readouterr().out
    # 100 updates in 50 s: 2 updates/s, 100 updates left: 50 s
    assert "densenmt_small: 100/200 updates, loss 7.500 (mean of the last 50 updates), 0.8 min trained, " in out
    assert "about 0.8 min left at 2.00 updates/s" in out
    assert "densenmt_small: validation after 100 updates: loss 7.500" in out
    # the epoch's running average is never shown as a progress line's loss
    assert "loss 8.000 (mean" not in out
    assert (
        "densenmt_small: stopped after 200 updates: reached 200 updates (--max-update) (epoch average loss 8.000)"
        in out
    )
    assert (log.params, log.updates, log.best_loss, log.stop_reason) == (
        2877856, 200, 7.5, "reached 200 updates (--max-update)",
    )  # fmt: skip
    assert math.isclose(log.wps, 1500.0) and math.isclose(log.train_s, 100.0)


def test_progress_after_a_resume_whose_wall_meter_reads_zero(capsys):
    """fairseq's ``wall`` stays 0 after a resume from a mid-epoch checkpoint: the time left comes
    from the intervals' ``train_wall`` instead of '? min left at 0.00 updates/s'."""
    log = TrainLog("wt", Budget(updates=400), previous_s=60.0)
    log.feed("12:00:00 | INFO | fairseq_cli.train | Loaded checkpoint x/checkpoint_last.pt (epoch 1 @ 200 updates)")
    log.feed(_inner(250, 5.0, 0))
    log.feed(_inner(300, 4.8, 0))
    out = capsys.readouterr().out
    # 100 updates in 2 x 20 s of train_wall: 2.5 updates/s, 100 left: 40 s
    assert "wt: 300/400 updates, loss 4.800 (mean of the last 50 updates), 1.7 min trained, " in out
    assert "about 0.7 min left at 2.50 updates/s" in out
    log.feed("12:01:02 | INFO | train | epoch 001 | loss 4.9 | wps 1500 | ups 2 | wpb 750 | num_updates 300 | wall 0")
    assert math.isclose(log.train_s, 100.0)  # 60 s before the resume, 2 x 20 s after


def test_a_time_budget_counts_the_time_of_the_run_it_resumes(capsys):
    log = TrainLog("gru", Budget(minutes=6.0), previous_s=60.0)
    log.feed("12:00:00 | INFO | fairseq_cli.train | Loaded checkpoint x/checkpoint_last.pt (epoch 1 @ 40 updates)")
    log.feed(_inner(50, 6.25, 30))
    log.feed("12:06:00 | INFO | fairseq_cli.train | Stopping training due to cumulative_training_time: 0.11 > "
             "stop_time_hours: 0.1 hour(s)")  # fmt: skip
    log.feed("12:06:00 | INFO | fairseq_cli.train | done training in 300.0 seconds")
    out = capsys.readouterr().out
    assert "gru: 50 updates, loss 6.250 (mean of the last 10 updates), 1.5 min trained, 4.5 min left" in out
    assert "stopped after 50 updates: reached the time budget (--stop-time-hours)" in out


def test_a_finished_model_is_found_and_never_trained_past_its_budget(tmp_path):
    save = tmp_path / "ckpt"
    save.mkdir()
    assert not quickstart_run.budget_met(str(save), Budget(updates=100))  # nothing trained yet
    import torch

    # what fairseq's loader needs of a checkpoint to read its update count and training time
    history = [{"num_updates": 100, "criterion_name": "x", "optimizer_name": "adam", "lr_scheduler_state": {}}]
    extra = {"previous_training_time": 400.0, "train_iterator": {"epoch": 1}}
    state = {"model": {}, "optimizer_history": history, "extra_state": extra, "args": None, "cfg": None}

    torch.save(state, save / "checkpoint_last.pt")
    assert quickstart_run.budget_met(str(save), Budget(updates=100))
    assert not quickstart_run.budget_met(str(save), Budget(updates=200))  # continues
    assert quickstart_run.budget_met(str(save), Budget(minutes=6.0))
    assert not quickstart_run.budget_met(str(save), Budget(minutes=7.0))
    with pytest.raises(SystemExit, match=r"trained for 100 updates, more than --updates 50: pass --fresh"):
        quickstart_run.budget_met(str(save), Budget(updates=50))


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
    assert f"--updates {quickstart.DEFAULT_UPDATES}" in default and "--minutes" not in default
    assert quickstart.get_parser().parse_args([]).updates == quickstart.DEFAULT_UPDATES == 1600
    timed = _make_dry_run("MINUTES=6")
    assert "--minutes 6" in timed and "--updates" not in timed
    assert "--max-lines 300" in _make_dry_run("MAX_LINES=300") and "--fresh" in _make_dry_run("FRESH=1")
    assert "--corpus synthetic" in _make_dry_run("CORPUS=synthetic")
    assert "--corpus /data/x --src fr --tgt en" in _make_dry_run("CORPUS=/data/x", "SRC=fr", "TGT=en")
    assert "synthetic" not in _make_dry_run("CORPUS=")
    assert "--baseline" in _make_dry_run("BASELINE=1") and "--baseline" not in default


#: sentences whose apostrophes, quotes and hyphens fairseq's Moses defaults would escape or split
TRICKY = ['Wie geht\'s? Ich schreibe eine E-Mail an "Tom".', "Das ist Toms T-Shirt, nicht Marys.", "Ich habe Hunger."]


def _files(folder):
    return {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_quickstart_with_baseline_on_a_slice_of_the_bundled_corpus(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    args = ["--max-lines", "64", "--arch", "weighted_transformer_tiny", "--baseline", "--updates", "4",
            "--bpe-merges", "100", "--beam", "1", "--work-dir", str(tmp_path / "work")]  # fmt: skip
    command = [sys.executable, "-m", "fairseq_dense.cli.quickstart", *args]
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "Test BLEU (tatoeba-deu-eng-first64, de->en, beam 1, 4 updates each, " in out, out
    # progress while training (64 pairs: 2 updates an epoch, so no 50-update line), why it stopped
    assert re.search(
        r"^    weighted_transformer_tiny: stopped after 4 updates: reached 4 updates \(--max-update\)", out, re.M
    )
    cells = r"\| ([\d.]+)M \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d,]+) \|"
    ours = re.search(r"^\| weighted_transformer \| fairseq-dense \| `weighted_transformer_tiny` " + cells, out, re.M)
    base = re.search(r"^\| weighted_transformer \| fairseq baseline \| `transformer \(width \d+\)` " + cells, out, re.M)
    assert ours and base, out
    for row in (ours, base):
        params, updates, loss, bleu, wps = row.groups()
        assert int(updates) == 4 and 0 < float(loss) < 20 and 0 <= float(bleu) <= 100 and int(wps.replace(",", "")) >= 0
    assert abs(float(base.group(1)) / float(ours.group(1)) - 1) < 0.15  # matched sizes
    assert re.search(r"^sacreBLEU signature: nrefs:1\|case:mixed\|eff:no\|tok:13a\|smooth:exp\|version:", out, re.M)
    assert out.count("  SRC: ") == 5 and out.count("  HYP: ") == 5 and out.count("  BASELINE: ") == 5
    # the Weighted Transformer trains with the task that projects its branch weights each step
    work = tmp_path / "work" / "tatoeba-deu-eng-first64"
    train_log = (work / "train-weighted_transformer_tiny.log").read_text()
    assert "--task translation_weighted" in proc.stderr and "found off the simplex" not in train_log
    assert "model/" not in out  # per-layer statistics stay in the log
    assert "UserWarning" not in proc.stderr and "tensorboardX" not in proc.stderr  # quiet by default

    # the printed command translates raw German; the export translates the same
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Translate your own sentences"))
    cmd = shlex.split(lines[at + 1])
    assert os.path.basename(cmd[0]) in ("fairseq-dense-interactive", "python", "python3") and "--bpe-codes" in cmd
    inter = subprocess.run(cmd, input="\n".join(TRICKY) + "\n", capture_output=True, text=True, env=env)
    assert inter.returncode == 0, inter.stderr[-3000:]
    by_cli = {int(m.group(1)): m.group(2) for m in re.finditer(r"^D-(\d+)\t\S+\t(.*)$", inter.stdout, re.M)}
    assert sorted(by_cli) == [0, 1, 2], inter.stdout + inter.stderr[-2000:]
    exported = tmp_path / "work" / quickstart.EXPORT_NAME
    assert f"fairseq_dense.from_pretrained({str(exported)!r})" in out

    import fairseq_dense
    from fairseq_dense.data.prepare import _init_tokenizer, _tokenize

    model = fairseq_dense.from_pretrained(str(exported))
    assert model.translate(TRICKY, beam=1) == [by_cli[i] for i in range(3)]
    # the model reads text tokenised as its training data was (no &apos;, no @-@)
    _init_tokenizer("de", False)
    for sentence in TRICKY:
        assert model.tokenize(sentence) == _tokenize(sentence)

    # a second run reports the finished models: nothing trained, no file changed
    before = _files(tmp_path / "work")
    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "fairseq_cli.train" not in again.stderr and again.stdout.count("a finished run, read back from") == 2
    assert ours.group(0) in again.stdout and base.group(0) in again.stdout
    assert _files(tmp_path / "work") == before
    # --fresh trains again
    fresh = subprocess.run([*command, "--fresh"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert fresh.returncode == 0 and "fairseq_cli.train" in fresh.stderr and "read back" not in fresh.stdout


def test_prepare_makes_the_bundled_corpus_available_with_one_command(tmp_path, capsys):
    dest = tmp_path / "data" / "tatoeba"
    assert prep.main(["--corpus", "tatoeba-deu-eng", "--dest", str(dest), "--max-lines", "40"]) == 0
    raw = tmp_path / "data" / "tatoeba-raw"
    assert len(prep.read_lines(str(raw / "test.en"))) == 40
    assert (dest / "bin" / "dict.de.txt").is_file() and (dest / "bpecodes").is_file()
    with open(dest / "prepare.json", encoding="utf-8") as f:
        assert '"merges": 4000' in f.read()  # the quick-start's merges by default
    for argv, message in [
        (["--corpus", "tatoeba-deu-eng", "--src", "fr"], "--src/--tgt must be de and en"),
        (["--raw", str(raw), "--src", "de", "--tgt", "en", "--max-lines", "5"], "with --corpus only"),
        (["--raw", str(raw)], "--raw needs --src and --tgt"),
        (["--corpus", "no-such-corpus"], "invalid choice: 'no-such-corpus'"),
    ]:
        with pytest.raises(SystemExit) as e:
            prep.main([*argv, "--dest", str(tmp_path / "x")])
        assert e.value.code == 2 and message in capsys.readouterr().err.strip().splitlines()[-1]
