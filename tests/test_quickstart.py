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

import json
import math
import os
import re
import shlex
import subprocess
import sys

import pytest

from fairseq_dense.cli import quickstart, quickstart_steps
from fairseq_dense.cli.quickstart_steps import Budget, Result, TrainLog, run_command, stop_reason
from fairseq_dense.data import prepare as prep
from fairseq_dense.data import tatoeba
from fairseq_dense.logs import parse_line
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


def _record(tag, **stats):
    """A line of ``fairseq-train --log-format json``: strings as fairseq formats them, the
    end-of-epoch and validation keys prefixed with their tag."""
    prefix = "" if tag == "train_inner" else tag + "_"
    body = {"epoch": 1, **{prefix + k: str(v) for k, v in stats.items()}}
    return f"2026-11-27 12:00:30 | INFO | {tag} | {json.dumps(body)}"


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_json_records_are_read_and_other_lines_ignored():
    assert parse_line(_record("train_inner", loss=9.716, num_updates=50))[:2] == (
        "train_inner", {"epoch": 1.0, "loss": 9.716, "num_updates": 50.0},
    )  # fmt: skip
    tag, stats, _ = parse_line(_record("valid", loss=7.5, best_loss=7.4, num_updates=100))
    assert tag == "valid" and stats["loss"] == 7.5 and stats["best_loss"] == 7.4
    for line in [_PARAMS_LINE, "12:00:00 | INFO | train | epoch 001 | loss 8.0 | num_updates 200", "{", ""]:
        assert parse_line(line)[:2] == (None, {})


def test_progress_lines_come_by_time_with_the_loss_since_the_last_line_and_the_time_left(capsys):
    clock = _Clock()
    log = TrainLog("densenmt_small", Budget(updates=200), clock=clock, interval_s=20)
    log.feed(_PARAMS_LINE)
    log.feed("12:00:00 | INFO | fairseq_cli.train | num. expert model params: 0 (num. trained: 0)")  # not the count
    clock.now = 10.0  # the first update, however long it took: a line at once
    log.feed(_record("train_inner", loss=10.0, num_updates=1))
    for n in range(2, 101):  # 2 updates a second: a line every 20 s, none in between
        clock.now = 10.0 + (n - 1) / 2
        log.feed(_record("train_inner", loss=7.0 if n > 61 else 9.0, num_updates=n))
    log.feed(_record("valid", loss=7.5, ppl=181, num_updates=100, best_loss=7.5))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "    densenmt_small: 1/200 updates, loss 10.000 (mean of the last 1 update), 0.2 min trained, "
        "time left: at the next line (a line every 20 s)"
    )
    # 20 s later: updates 2..41, all at loss 9; 40 updates in 20 s since the first line, 159 left
    assert out[1] == (
        "    densenmt_small: 41/200 updates, loss 9.000 (mean of the last 40 updates), 0.5 min trained, "
        "about 1.3 min left at 2.00 updates/s"
    )
    # updates 42..81: 20 at loss 9, 20 at loss 7 (the mean since the last line, not the epoch's)
    assert out[2] == (
        "    densenmt_small: 81/200 updates, loss 8.000 (mean of the last 40 updates), 0.8 min trained, "
        "about 1.0 min left at 2.00 updates/s"
    )
    assert out[3] == "    densenmt_small: validation after 100 updates: loss 7.500" and len(out) == 4
    log.feed(_record("train", loss=8.0, wps=1500, ups=2, num_updates=200, wall=100))
    log.finish(200, 100.0)
    assert capsys.readouterr().out == (
        "    densenmt_small: stopped after 200 updates: reached 200 updates (--max-update) (epoch average loss 8.000)\n"
    )
    assert (log.params, log.updates, log.best_loss, log.stop_reason) == (
        2877856, 200, 7.5, "reached 200 updates (--max-update)",
    )  # fmt: skip
    assert math.isclose(log.wps, 1500.0) and math.isclose(log.train_s, 100.0)


def test_a_resumed_run_counts_its_speed_from_this_process_and_its_time_from_the_checkpoint(capsys):
    clock = _Clock()
    log = TrainLog("wt", Budget(updates=400), start_updates=200, previous_s=60.0, clock=clock, interval_s=30)
    clock.now = 10.0
    log.feed(_record("train_inner", loss=5.0, num_updates=250))
    clock.now = 50.0
    log.feed(_record("train_inner", loss=4.0, num_updates=350))
    # 100 updates in 40 s: 2.5 updates/s, 50 left: 20 s; 60 s before the resume + 50 s
    assert capsys.readouterr().out.splitlines()[1] == (
        "    wt: 350/400 updates, loss 4.000 (mean of the last 1 update), 1.8 min trained, "
        "about 0.3 min left at 2.50 updates/s"
    )
    log.feed(_record("train", loss=4.9, wps=1500, num_updates=400))
    assert math.isclose(log.wps, 1500.0)  # weighted by the 200 updates of this epoch since the resume


def test_a_time_budget_counts_the_time_of_the_run_it_resumes_and_the_stop_comes_from_the_counters(capsys):
    clock = _Clock()
    log = TrainLog("gru", Budget(minutes=6.0), start_updates=40, previous_s=60.0, clock=clock)
    clock.now = 30.0
    log.feed(_record("train_inner", loss=6.25, num_updates=50))
    log.finish(120, 361.0)
    out = capsys.readouterr().out
    assert "gru: 50 updates, loss 6.250 (mean of the last 1 update), 1.5 min trained, 4.5 min left" in out
    assert "stopped after 120 updates: reached the time budget (--stop-time-hours)" in out
    assert stop_reason(Budget(updates=1600), 900, 50.0) == "reached --max-epoch"
    assert stop_reason(Budget(minutes=6.0), 900, 300.0) == "reached --max-epoch"


def _run(label, arch, seed, bleu, loss, family="weighted_transformer", error=""):
    folder = f"checkpoints-wt-seed{seed}" + "-baseline" * (label == "baseline")
    return Result(label, family, arch, [], folder, seed=seed, params=2_530_000, updates=1600, valid_loss=loss,
                  wps=5000.0 + seed, bleu=bleu, error=error)  # fmt: skip


def test_the_table_gives_mean_and_sd_over_seeds_with_their_number_and_a_verdict_per_pair():
    runs = []
    for seed, (ours, theirs) in enumerate([(31.6, 31.4), (31.8, 31.2), (31.7, 31.3)], start=1):
        runs += [
            _run("plugin", "wt_small", seed, ours, 3.9),
            _run("baseline", "transformer (width 128)", seed, theirs, 3.95),
        ]
    text = quickstart.table(runs)
    lines = text.splitlines()
    assert lines[0] == (
        "| family | model | arch | params | updates | seeds | valid loss, mean ± sd 3 seeds "
        "| test BLEU, mean ± sd 3 seeds | target tokens/s |"
    )
    assert lines[1] == "|---" * 9 + "|"
    assert lines[2] == (
        "| weighted_transformer | fairseq-dense | `wt_small` | 2.53M | 1600 | 3 | 3.90 ± 0.00 | 31.70 ± 0.10 | 5,002 |"
    )
    assert lines[3].endswith("| 3 | 3.95 ± 0.00 | 31.30 ± 0.10 | 5,002 |") and len(lines) == 4
    (pair,) = quickstart.pair_lines(runs)
    # 0.40 BLEU against t(0.975, 4) x 0.10 x sqrt(2/3) = 0.23; loss 0.05 lower, no spread
    assert pair.startswith("wt_small, 3 seeds, against transformer (width 128), 3 seeds: ")
    assert "test BLEU +0.40 (95% noise band: 0.23): ahead; valid loss -0.050" in pair
    assert pair.endswith(": ahead")
    # a failed seed is left out and counted; one seed alone has no ±
    runs[4] = _run("plugin", "wt_small", 3, 0, 0, error="error: command failed")
    mixed = quickstart.table(runs).splitlines()
    assert "mean ± sd over the seeds" in mixed[0] and "| 2 | 3.90 ± 0.00 | 31.70 ± 0.14 |" in mixed[2]
    single = quickstart.table(runs[:2]).splitlines()
    assert single[0] == "| family | model | arch | params | updates | valid loss | test BLEU | target tokens/s |"
    assert "| 1600 | 3.90 | 31.60 | 5,001 |" in single[2]
    (pair,) = quickstart.pair_lines(runs[:2])
    assert pair.startswith("wt_small, 1 seed, against ") and pair.endswith("-0.050: one seed each: no spread measured")


def test_each_seed_is_a_run_of_its_own(tmp_path):
    ours = Result("plugin", "densenmt", "densenmt_small", ["--arch", "densenmt_small"], "w/checkpoints-densenmt_small")
    base = Result("baseline", "densenmt", "fconv", [], "w/checkpoints-densenmt_small-baseline")
    assert quickstart.with_seed(ours, 1).save_dir == ours.save_dir  # seed 1: the folder of earlier versions
    assert (quickstart.with_seed(ours, 2).save_dir, quickstart.with_seed(ours, 2).seed) == (
        "w/checkpoints-densenmt_small-seed2",
        2,
    )
    assert quickstart.with_seed(base, 3).save_dir == "w/checkpoints-densenmt_small-seed3-baseline"
    assert ours.seed == 1 and base.save_dir.endswith("small-baseline")  # copies, not changed in place
    args = quickstart.get_parser().parse_args(["--arch", "a", "b", "--seeds", "3", "--seed", "5"])
    assert args.arch == ["a", "b"] and args.seeds == 3 and args.seed == 5
    settings = quickstart_steps.settings  # the seed of the run, not of the command line, decides reuse
    (tmp_path / "prepare.json").write_text("{}")
    assert settings(quickstart.with_seed(ours, 2), str(tmp_path), Budget(updates=4), args)["seed"] == 2


def test_the_thread_count_is_said_and_passed_to_every_fairseq_command(monkeypatch, capsys, tmp_path):
    """The quick-start chooses once (``--threads``, else :func:`fairseq_dense.threads.choose_threads`:
    one thread on a busy 2-CPU machine) and gives every fairseq command that many."""
    seen = {}

    def stop(args, parser):
        seen["threads"] = args.threads
        raise SystemExit("error: stop here")

    monkeypatch.setattr(quickstart, "choose_corpus", stop)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (5.9, 5.0, 4.0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    with pytest.raises(SystemExit):
        quickstart.main(["--work-dir", str(tmp_path)])
    assert seen["threads"] == 1
    said = capsys.readouterr().err
    assert "each fairseq command runs with 1 CPU thread(s) (2 CPUs, load average 5.9; --threads N or" in said
    with pytest.raises(SystemExit):
        quickstart.main(["--threads", "3", "--work-dir", str(tmp_path)])
    assert seen["threads"] == 3 and "with 3 CPU thread(s) (--threads)\n" in capsys.readouterr().err
    out = run_command(
        [sys.executable, "-c", "import os; print(os.environ['OMP_NUM_THREADS'])"], str(tmp_path / "l"), threads=2
    )
    assert out == "2\n"


def test_ctrl_c_ends_with_one_line_saying_how_to_resume(monkeypatch, capsys, tmp_path):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(quickstart, "choose_corpus", interrupted)
    argv = ["--max-lines", "20", "--seeds", "2", "--threads", "1", "--work-dir", str(tmp_path / "work")]
    assert quickstart.main(argv) == 130
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and last.startswith("interrupted: ")
    assert last.endswith("run the same command again: python -m fairseq_dense.cli.quickstart " + shlex.join(argv))


def test_the_log_file_holds_each_line_as_soon_as_it_is_read(tmp_path):
    log_path = tmp_path / "run.log"
    seen = []
    command = [sys.executable, "-c", "import time; print('first', flush=True); time.sleep(0.5); print('second')"]
    run_command(command, str(log_path), lambda line: seen.append(log_path.read_text().splitlines()[-1]))
    assert seen == ["first", "second"]  # in the file before the command goes on


def test_a_finished_model_is_found_and_never_trained_past_its_budget(tmp_path):
    save = tmp_path / "ckpt"
    save.mkdir()
    assert not quickstart_steps.budget_met(str(save), Budget(updates=100))  # nothing trained yet
    import torch

    # what fairseq's loader needs of a checkpoint to read its update count and training time
    history = [{"num_updates": 100, "criterion_name": "x", "optimizer_name": "adam", "lr_scheduler_state": {}}]
    extra = {"previous_training_time": 400.0, "train_iterator": {"epoch": 1}}
    state = {"model": {}, "optimizer_history": history, "extra_state": extra, "args": None, "cfg": None}

    torch.save(state, save / "checkpoint_last.pt")
    assert quickstart_steps.budget_met(str(save), Budget(updates=100))
    assert not quickstart_steps.budget_met(str(save), Budget(updates=200))  # continues
    assert quickstart_steps.budget_met(str(save), Budget(minutes=6.0))
    assert not quickstart_steps.budget_met(str(save), Budget(minutes=7.0))
    with pytest.raises(SystemExit, match=r"trained for 100 updates, more than --updates 50: pass --fresh"):
        quickstart_steps.budget_met(str(save), Budget(updates=50))


def test_a_cut_run_is_not_resumed_on_other_data(tmp_path, monkeypatch):
    """A run cut short (Ctrl-C) and started again after the data changed (--lowercase, --bpe-merges, other raw
    text) is not continued from its checkpoint: its embeddings belong to the other dictionary."""
    data, model = tmp_path / "data", Result("plugin", "f", "a", ["--arch", "a"], str(tmp_path / "checkpoints-a"))
    data.mkdir()
    args = quickstart.get_parser().parse_args(["--threads", "1"])
    trained = []

    def cut(cmd, *a, **kw):
        trained.append(cmd)
        raise InterruptedError  # as Ctrl-C would, without stopping pytest

    monkeypatch.setattr(quickstart_steps, "run_command", cut)
    for merges, stop in ((10, InterruptedError), (20, SystemExit)):
        (data / "prepare.json").write_text(json.dumps({"merges": merges}))
        with pytest.raises(stop) as info:
            quickstart_steps.train_and_score(model, str(data), str(tmp_path), [], "en", Budget(updates=4), args)
    assert len(trained) == 1 and "checkpoints-a was trained on other data: pass --fresh" in str(info.value)


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


def test_the_synthetic_corpus_is_written_again_for_other_suffixes(tmp_path, monkeypatch):
    """A synthetic corpus written for en-xx is not taken for --src ab (whose train.ab it lacks)."""
    write = quickstart.synthetic.write_corpus
    monkeypatch.setattr(quickstart.synthetic, "write_corpus", lambda d, s, t: write(d, s, t, sizes=(3, 1, 1)))
    parser = quickstart.get_parser()
    for suffixes in ([], ["--src", "ab"]):
        args = parser.parse_args(["--corpus", "synthetic", "--work-dir", str(tmp_path), *suffixes])
        raw = quickstart.choose_corpus(args, parser)[0]
    assert sorted(os.listdir(raw)) == sorted(f"{split}.{lang}" for split in prep.SPLITS for lang in ("ab", "xx"))


def test_fewer_pairs_than_a_batch_are_refused(capsys, tmp_path):
    """fairseq-train batches by multiples of 8 sentences: 7 pairs a split would end in its traceback."""
    with pytest.raises(SystemExit) as info:
        quickstart.main(["--max-lines", "7", "--threads", "1", "--updates", "1", "--work-dir", str(tmp_path)])
    assert info.value.code == 2 and "error: --max-lines takes at least 8 pairs" in capsys.readouterr().err


def test_all_families_with_arch_is_refused(capsys, monkeypatch):
    """``--all-families`` trains every family's arch: an --arch beside it would be ignored without a word."""
    monkeypatch.setattr(quickstart, "choose_corpus", lambda *a: pytest.fail("went on to the corpus"))
    with pytest.raises(SystemExit) as info:
        quickstart.main(["--all-families", "--arch", "densenmt_small", "--threads", "1"])
    assert info.value.code == 2 and "error: --all-families trains each family's" in capsys.readouterr().err


def test_all_families_takes_each_family_cpu_arch_from_the_registry():
    from fairseq_dense.baselines import our_families

    archs = quickstart.family_archs()
    assert sorted(archs) == sorted(f"{family}_{quickstart.CPU_SIZE}" for family in our_families())
    assert len(archs) == 5 and quickstart.DEFAULT_ARCH in archs
    failed = Result("plugin", "densenmt", "densenmt_small", [], "", error="error: command failed")
    assert "| densenmt | fairseq-dense | `densenmt_small` | error: command failed |" in quickstart.table([failed])


def test_default_arch_is_the_best_family_of_the_readme_table():
    """``DEFAULT_ARCH`` is the plugin row with the best (mean) test BLEU in the README's measured table."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("<!-- quickstart-families:begin -->")[1].split("<!-- quickstart-families:end -->")[0]
    lines = [[c.strip() for c in line.strip("|").split("|")] for line in block.strip().splitlines()]
    bleu = next(i for i, name in enumerate(lines[0]) if name.startswith("test BLEU"))
    # "31.65" (one seed) or "31.52 ± 0.12" (the mean over seeds)
    ours = {row[2].strip("`"): float(row[bleu].split()[0]) for row in lines[2:] if row[1] == "fairseq-dense"}
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
    assert "--corpus data/x --src fr --tgt en" in _make_dry_run("CORPUS=data/x", "SRC=fr", "TGT=en")
    assert "synthetic" not in _make_dry_run("CORPUS=")
    assert "--baseline" in _make_dry_run("BASELINE=1") and "--baseline" not in default
    several = _make_dry_run("SEEDS=3", "ARCH=densenmt_small weighted_transformer_small", "THREADS=1")
    assert "--seeds 3 --arch densenmt_small weighted_transformer_small --threads 1" in several
    assert "--seeds" not in default and "--threads" not in default


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
    # a progress line at the first update, and why it stopped
    assert re.search(
        r"^    weighted_transformer_tiny: 1/4 updates, loss [\d.]+ \(mean of the last 1 update\)", out, re.M
    )
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
    assert "--task translation_exact_resume_simplex" in proc.stderr and "found off the simplex" not in train_log
    assert "model/" not in out  # per-layer statistics stay in the log
    assert "UserWarning" not in proc.stderr and "tensorboardX" not in proc.stderr  # quiet by default

    # the printed command translates raw German; the export translates the same
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Translate your own sentences"))
    cmd = shlex.split(lines[at + 1])
    assert cmd[:3] == ["env", "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1"] and "--bpe-codes" in cmd
    assert os.path.basename(cmd[3]) in ("fairseq-dense-interactive", "python", "python3")
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
