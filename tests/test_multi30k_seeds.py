"""Multi30k seeds: ``run.py side PAIR SIDE --seed N`` and the report's mean, spread and verdicts.

No training here: fairseq's commands are replaced by fakes that write the log lines the
code reads (fairseq's JSON epoch records), so each test runs in a fraction of a second.
"""

import importlib
import json
import os
import subprocess
import sys

import pytest

from fairseq_dense.logs import TIME_STOP
from fairseq_dense.seeds import verdict
from tests.helpers import REPO

TS = "2026-01-01 00:00:00"  # a fairseq log line's timestamp
HERE = os.path.join(REPO, "examples", "multi30k")
sys.path.insert(0, HERE)
run = importlib.import_module("run")
report = importlib.import_module("report")


def _valid(epoch, loss):
    return TS + ' | INFO | valid | {"epoch": %d, "valid_loss": "%.3f", "valid_num_updates": "%d"}\n' % (
        epoch,
        loss,
        epoch * 10,
    )


def _train(epoch, wall):
    return TS + ' | INFO | train | {"epoch": %d, "train_wall": "%d", "train_wps": "100"}\n' % (epoch, wall)


EARLY_STOP = "2026 | INFO | fairseq_cli.train | early stop since valid performance hasn't improved\ndone training\n"


def _run_log(lr, seed, losses, first_epoch=1, end=EARLY_STOP):
    """A converging run's log: its command line, one train and valid record an epoch, how it ended."""
    lines = [f"# fairseq-train data --seed {seed} --lr {lr:g}\n"]
    for epoch, loss in enumerate(losses, first_epoch):
        lines += [_valid(epoch, loss), _train(epoch, 10 * epoch)]
    return "".join(lines) + end


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A toy pair (rates 1e-3 and 2e-3) in fresh work and log folders of ``run`` and ``report``."""
    for module in (run, report):
        monkeypatch.setattr(module, "LOGS", str(tmp_path / "logs"))
    monkeypatch.setattr(run, "WORK", str(tmp_path / "work"))
    spec = {"rates": (1e-3, 2e-3), "model": "--arch a", "baseline": "--arch b", "warmup": 1, "claim": "c"}
    monkeypatch.setitem(run.PAIRS, "toy", spec)
    return tmp_path


def _sweep_logs(folder, losses):
    """Seed 1's complete sweep logs (``{rate: final loss}``) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for lr, loss in losses.items():
        text = "".join(_valid(e, loss + run.SWEEP_EPOCHS - e) for e in range(1, run.SWEEP_EPOCHS + 1))
        (folder / f"sweep-lr{lr:g}.log").write_text(f"# fairseq-train data --seed 1 --lr {lr:g}\n" + text)


def test_a_seed_is_a_run_folder_of_its_own_and_fairseqs_seed():
    assert run.run_name("model", 1) == "model"  # seed 1: the committed runs' folders
    assert run.run_name("model.fixed", 3) == "model.fixed.seed3"
    for name in ("model", "baseline.gpu-0.3h", "model.fixed.seed3", "baseline.seed12"):
        side, seed = run.split_run(name)
        assert run.run_name(side, seed) == name
    assert run.split_run("model.fixed.seed3") == ("model.fixed", 3)

    def seed_of(cmd):
        assert cmd.count("--seed") == 1
        return cmd[cmd.index("--seed") + 1]

    assert seed_of(run.train_args("weighted_transformer", "model", 2e-3)) == "1"
    seeded = run.train_args("weighted_transformer", "model.fixed.seed3", 2e-3)
    assert seed_of(seeded) == "3" and seeded[seeded.index("--save-dir") + 1].endswith(
        os.path.join("model.fixed.seed3", "lr0.002")
    )
    # a seed is trained with its side's options and sweep grid
    assert run.options("weighted_transformer", "model.fixed.seed3") == run.options(
        "weighted_transformer", "model.fixed"
    )
    assert run.rates("weighted_transformer", "model.fixed.seed2") == run.rates("weighted_transformer", "model.fixed")


def test_the_fixed_weight_side_is_the_learned_one_with_kappa_and_alpha_fixed():
    from fairseq import options

    from fairseq_dense.models.weighted_transformer.model import learns

    def parsed(side):
        cmd = run.train_args("weighted_transformer", side, 1e-3)
        return options.parse_args_and_arch(options.get_training_parser(), cmd[1:])

    fixed, learned = parsed("model.fixed"), parsed("model")
    assert not learns(fixed, "kappa") and not learns(fixed, "alpha")
    assert learns(learned, "kappa") and learns(learned, "alpha")
    assert fixed.task == learned.task == "translation_weighted"
    differ = {k for k in vars(fixed) if vars(fixed)[k] != vars(learned).get(k)}
    assert differ == {"fixed_kappa", "fixed_alpha", "save_dir"}
    assert run.rates("weighted_transformer", "model.fixed") == run.rates("weighted_transformer", "model")


def test_another_seed_trains_at_seed_1s_rate_without_sweeping(toy, monkeypatch):
    """Seed 2 reads seed 1's committed sweep, trains its own folder from update 0 with --seed 2 to
    early stopping, is scored into its own eval.json and keeps a model-only best checkpoint."""
    _sweep_logs(toy / "logs" / "toy" / "model", {1e-3: 5.0, 2e-3: 4.5})
    (toy / "work" / "data" / "bin").mkdir(parents=True)
    commands = []

    def fake_run(cmd, log, append, threads=None):
        commands.append(cmd)
        with open(log, "a") as f:
            f.write("# " + " ".join(cmd) + "\n" + _run_log(2e-3, 2, [6.0, 5.0, 5.1, 5.2])[1:])

    def fake_decode(pair, side, lr, subset, lenpen, threads):
        assert (pair, side, lr) == ("toy", "model.seed2", 2e-3)
        return ["fairseq-generate"], ["ein Hund."], {"sacrebleu": 30.0, "chrf": 50.0}

    monkeypatch.setattr(run, "run_command", fake_run)
    monkeypatch.setattr(run, "decode", fake_decode)
    run.side("toy", "model", 1, seed=2)
    (cmd,) = commands  # no sweep point trained: the converging run only
    assert cmd[cmd.index("--seed") + 1] == "2" and cmd[cmd.index("--lr") + 1] == "0.002"
    assert cmd[cmd.index("--save-dir") + 1] == str(toy / "work" / "toy" / "model.seed2" / "lr0.002")
    result = json.loads((toy / "logs" / "toy" / "model.seed2" / "eval.json").read_text())
    assert result["lr"] == 2e-3 and result["best_valid_loss"] == 5.0
    assert "--seed 2" in (toy / "logs" / "toy" / "model.seed2" / "train.log").read_text()
    assert not (toy / "logs" / "toy" / "model" / "eval.json").exists()  # seed 1 untouched

    commands.clear()
    run.side("toy", "model", 1, seed=2)  # again: finished and scored, nothing to do
    assert commands == []


def test_another_seed_never_sweeps(toy, monkeypatch):
    """Seed 1's sweep incomplete: seed 2 ends with what to run first, and trains nothing."""
    _sweep_logs(toy / "logs" / "toy" / "model", {1e-3: 5.0})  # 2e-3 not swept yet
    (toy / "work" / "data" / "bin").mkdir(parents=True)
    monkeypatch.setattr(run, "run_command", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(SystemExit, match=r"toy/model: seed 1's sweep is not complete \(rates 0.002\).*side toy model"):
        run.side("toy", "model", 1, parallel_sweep=True, seed=2)
    _sweep_logs(toy / "logs" / "toy" / "model", {2e-3: 4.0})  # complete: the rate, nothing trained
    assert run.sweep("toy", "model", 1, train=False) == 2e-3


def test_the_seed_option_and_the_side_are_checked(capsys):
    for cmd in (["side", "gru", "model", "--seed", "0"], ["pair", "gru", "--seed", "-1"], ["side", "gru", "model.x"]):
        with pytest.raises(SystemExit) as exit:
            run.main(cmd)
        assert exit.value.code == 2
    errors = capsys.readouterr().err
    assert (
        errors.count("seeds count from 1") == 2 and "side 'model.x' of pair gru: choose from model, baseline" in errors
    )


def test_the_verdicts_words_and_spread():
    """seeds.verdict (its figures by hand: tests/test_seeds.py) in the words of the committed verdicts."""
    words = {report.said(*verdict(a, b, True)[1:]) for a, b in ([[37.0, 37.2], [36.0, 36.2]],
             [[36.0, 36.2], [37.0, 37.2]], [[37.0, 37.2], [37.0, 37.4]], [[37.19], [36.88]])}  # fmt: skip
    assert words == {"confirmed", "not confirmed", "within noise", "one seed each: no spread to judge by"}
    runs = [{"eval": {"test": {"sacrebleu": v}}} for v in (1.0, 2.0, 3.0)]
    assert (
        report.spread(runs, "sacrebleu", ".2f") == "2.00 ± 1.00"
        and report.spread(runs[:1], "sacrebleu", ".1f") == "1.0"
    )


def _write_run(logs, side, lr, seed, losses, bleu, end=EARLY_STOP):
    folder = logs / "toy" / side
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.log").write_text(_run_log(lr, seed, losses, end=end))
    test = {"sacrebleu": bleu, "chrf": bleu + 25, "bleu_tok_lc": bleu}
    (folder / "eval.json").write_text(json.dumps({"lr": lr, "test": test, "machine": "m"}))


def test_the_report_gives_each_sides_seeds_mean_spread_and_verdicts(toy, monkeypatch):
    logs = toy / "logs"
    _sweep_logs(logs / "toy" / "model", {1e-3: 5.0, 2e-3: 4.5})
    _sweep_logs(logs / "toy" / "baseline", {1e-3: 5.0, 2e-3: 4.8})
    # seed 1 continues its sweep run (epochs 5 on); the other seeds start at epoch 1
    (logs / "toy" / "model" / "train.log").write_text(_run_log(2e-3, 1, [4.4, 4.0, 4.1, 4.1, 4.2, 4.3], 5))
    (logs / "toy" / "model" / "eval.json").write_text(json.dumps({"lr": 2e-3, "test": {"sacrebleu": 38.0, "chrf": 63}}))
    _write_run(logs, "model.seed2", 2e-3, 2, [6.0, 4.5, 4.1, 4.2, 4.2, 4.2, 4.3, 4.3], 38.4)
    _write_run(logs, "model.seed3", 2e-3, 3, [6.0, 4.5, 4.2, 4.0, 4.2, 4.3, 4.3, 4.3, 4.4], 38.2)
    _write_run(logs, "baseline", 2e-3, 1, [4.6, 4.3, 4.4, 4.4, 4.5, 4.5, 4.5], 37.0)
    time_stop = f"2026 | INFO | fairseq_cli.train | {TIME_STOP}: 0.1 > 0.1 hour(s)\ndone training\n"
    _write_run(logs, "baseline.seed2", 2e-3, 2, [6.0, 5.0], 30.0, end=time_stop)  # not counted
    _write_run(logs, "baseline.seed3", 2e-3, 3, [6.0, 4.6, 4.4, 4.5, 4.5, 4.5, 4.6, 4.6], 37.4)

    assert report.sides("toy") == [
        "model",
        "model.seed2",
        "model.seed3",
        "baseline",
        "baseline.seed2",
        "baseline.seed3",
    ]
    rows = [report.summarize("toy", side) for side in report.sides("toy")]
    seed2 = rows[1]
    assert seed2["seed"] == 2 and seed2["sweep"] == {} and seed2["best_epoch"] == 3 and seed2["best_loss"] == 4.1
    assert [c[3] for c in seed2["curve"]] == list(range(1, 9))  # its own run, not joined to seed 1's sweep
    assert [c[3] for c in rows[0]["curve"]] == list(range(1, 11))  # seed 1: the sweep's 4 epochs, then its run
    assert "seed 2, at seed 1's rate" in report.table(rows)

    by = report.groups(rows)
    assert [r["seed"] for r in by[("toy", "model")]["runs"]] == [1, 2, 3]
    assert [r["seed"] for r in by[("toy", "baseline")]["runs"]] == [1, 3]
    assert [r["side"] for r in by[("toy", "baseline")]["left"]] == ["baseline.seed2"]
    seeds = report.seeds_table(rows)
    assert (
        "| toy | model (`a`) | 3 (seeds 1, 2, 3) | 38.20 ± 0.20 | 63.20 ± 0.20 | 4.033 ± 0.058 | 4.3 ± 1.5 |" in seeds
    )
    assert (
        "| toy | baseline (`b`) | 2 (seeds 1, 3); not counted: baseline.seed2: no (time limit) | 37.20 ± 0.28 |"
        in seeds
    )

    band = verdict([38.0, 38.4, 38.2], [37.0, 37.4], True)[1]
    table = report.verdict_table(rows)
    bleu = f"| toy | model vs baseline | test sacreBLEU | 38.20 ± 0.20 (3) | 37.20 ± 0.28 (2) | +1.00 | ± {band:.2f} |"
    assert bleu + " confirmed |" in table
    assert [line.split(" | ")[2] for line in table.splitlines()[2:]] == [column for _, column, _, _ in report.METRICS]
    front = report.front_table(rows)
    assert "| toy | `a` | 38.20 ± 0.20 (3 seeds) | `b` | 37.20 ± 0.28 (2 seeds) | c |" in front

    # one seed a side: one row, no verdict; the front table shows the value as before
    rows = [r for r in rows if r["seed"] == 1]
    (row,) = report.verdict_table(rows).splitlines()[2:]
    assert row.endswith("| - | one seed each: no spread to judge by |")
    assert "| toy | `a` | 38.00 | `b` | 37.00 | c |" in report.front_table(rows)
    assert "| toy | model (`a`) | 1 (seed 1) | 38.00 | 63.00 | 4.000 | 6.0 |" in report.seeds_table(rows)


def test_a_variant_is_judged_against_the_side_it_names(toy, monkeypatch):
    """The model against the baseline, and a variant against each side it names under ``against``
    (the committed Weighted Transformer and Deep-Att verdicts: the committed-tables test)."""
    variants = {"model.x": {"options": "--arch a", "rates": (2e-3,), "against": ("baseline",)}}
    monkeypatch.setitem(run.PAIRS["toy"], "variants", variants)
    for side, bleu in (("model", 38.0), ("baseline", 37.0), ("model.x", 36.0)):
        _sweep_logs(toy / "logs" / "toy" / side, {2e-3: 4.5})
        _write_run(toy / "logs", side, 2e-3, 1, [4.4, 4.3, 4.4, 4.4, 4.5, 4.5, 4.5], bleu)
    rows = [report.summarize("toy", side) for side in report.sides("toy")]
    table = [line.split(" | ") for line in report.verdict_table(rows).splitlines()[2:] if line.startswith("| toy ")]
    assert [(cells[1], cells[-1]) for cells in table] == [
        ("model vs baseline", "one seed each: no spread to judge by |"),
        ("model.x vs baseline", "one seed each: no spread to judge by |"),
    ]
    assert table[1][5] == "-1.00"


def test_progress_reports_each_run_and_copies_its_logs(toy, capsys):
    work = toy / "work" / "toy"
    _sweep_logs(work / "model.fixed", {1e-3: 5.0})
    (work / "model.fixed" / "sweep-lr0.002.log").write_text("# fairseq-train --lr 0.002\n" + _valid(1, 7.0))
    (work / "model.seed2").mkdir(parents=True)
    log = _run_log(2e-3, 2, [6.0, 5.0], end="").replace(
        " data ", f" {work.parent}/data --user-dir {run.ROOT}/user_dir "
    )
    (work / "model.seed2" / "train.log").write_text(log)
    (work / "model.seed3").mkdir(parents=True)
    (work / "model.seed3" / "train.log").write_text(_run_log(2e-3, 3, [6.0, 5.0, 5.1]))
    (work / "model").mkdir()  # a side whose seed 1 ran elsewhere: nothing logged here
    run.progress(["toy"])
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "toy/model.fixed: sweep 0.001: 4/4 epochs; sweep 0.002: 1/4 epochs",
        "toy/model.seed2: lr 0.002, epoch 2, best 5.000 at epoch 2, training",
        "toy/model.seed3: lr 0.002, epoch 3, best 5.000 at epoch 2, early stopped",
    ]
    copied = (toy / "logs" / "toy" / "model.seed2" / "train.log").read_text()
    assert copied.count("| valid |") == 2
    # this machine's work folder and repository root are written relative to the root
    assert copied.startswith("# fairseq-train multi30k-work/data --user-dir user_dir --seed 2 ")
    assert (toy / "logs" / "toy" / "model.fixed" / "sweep-lr0.002.log").is_file()
    (toy / "logs" / "toy" / "model.seed3" / "eval.json").write_text(
        json.dumps({"best_valid_loss": 5.0, "test": {"sacrebleu": 31.5, "chrf": 55.0}})
    )
    run.progress(["toy"])
    assert capsys.readouterr().out.splitlines()[-1].endswith("early stopped; test sacreBLEU 31.5, chrF 55.0")


def test_on_a_gpu_the_length_penalties_are_decoded_at_once(toy, monkeypatch):
    """The three valid decodes start together (a barrier of three passes only then); test after them."""
    import threading

    barrier = threading.Barrier(len(run.LENPENS), timeout=20)
    order = []

    def fake_decode(pair, side, lr, subset, lenpen, threads):
        if subset == "valid":
            barrier.wait()
        order.append((subset, lenpen))
        return ["fairseq-generate"], [f"ein Hund {lenpen}."], {"sacrebleu": lenpen}

    monkeypatch.setattr(run, "DEVICE", "cuda")
    monkeypatch.setattr(run, "machine", lambda: "GPU")
    monkeypatch.setattr(run, "decode", fake_decode)
    result = run.evaluate("toy", "model.seed2", 1e-3, 1)
    assert result["lenpen"] == max(run.LENPENS) and order[-1] == ("test", max(run.LENPENS))
    assert sorted(order[:-1]) == [("valid", p) for p in sorted(run.LENPENS)]
    assert result["valid_by_lenpen"] == {f"{p:g}": {"sacrebleu": p} for p in run.LENPENS}


def test_gpu_seeds_packs_what_the_gpu_machine_needs_and_unpacks_what_comes_back(tmp_path):
    """``gpu_seeds.sh pack`` copies the prepared corpus and references (no fairseq needed once the
    corpus is prepared); ``unpack`` puts a collect's run folders into the committed logs."""
    script = os.path.join(HERE, "gpu_seeds.sh")
    work, raw, data = tmp_path / "work", tmp_path / "raw", tmp_path / "pack"
    for path in ("data/bin/dict.en.txt", "data/bin/train.en-de.en.bin", "data/bpecodes", "data/tok/valid.de",
                 "data/tok/test.de", "data/tok/train.de"):  # fmt: skip
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(path)
    raw.mkdir()
    for name in ("valid.de", "test_2016_flickr.de", "train.de"):
        (raw / name).write_text(name)
    env = dict(os.environ, MULTI30K_WORK=str(work), MULTI30K_RAW=str(raw), DATA=str(data))
    subprocess.run(["bash", script, "pack"], check=True, env=env, cwd=tmp_path, capture_output=True)
    packed = sorted(str(p.relative_to(data)) for p in data.rglob("*") if p.is_file())
    assert packed == [
        "data/bin/dict.en.txt", "data/bin/train.en-de.en.bin", "data/bpecodes", "data/tok/test.de",
        "data/tok/valid.de", "raw/test_2016_flickr.de", "raw/valid.de",
    ]  # fmt: skip
    (raw / "valid.de").unlink()  # a missing reference ends the pack, the earlier pack left as it was
    assert subprocess.run(["bash", script, "pack"], env=env, cwd=tmp_path, capture_output=True).returncode != 0
    assert sorted(str(p.relative_to(data)) for p in data.rglob("*") if p.is_file()) == packed
    assert sorted(os.listdir(tmp_path)) == ["pack", "raw", "work"]  # no half-copied pack

    back = tmp_path / "back"
    (back / "toy" / "model.seed2").mkdir(parents=True)
    (back / "toy" / "model.seed2" / "eval.json").write_text("{}")
    (tmp_path / "out").mkdir()
    subprocess.run(["tar", "-czf", str(tmp_path / "out" / "logs.tgz"), "-C", str(back), "toy"], check=True)
    (tmp_path / "examples" / "multi30k" / "logs").mkdir(parents=True)
    out = subprocess.run(
        ["bash", script, "unpack", str(tmp_path / "out")], cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.strip() == "1 runs scored"
    assert (tmp_path / "examples" / "multi30k" / "logs" / "toy" / "model.seed2" / "eval.json").is_file()
    (back / "toy" / "model.seed2" / "eval.json").rename(back / "toy" / "model.seed2" / "train.log")  # none scored yet
    subprocess.run(["tar", "-czf", str(tmp_path / "out" / "logs.tgz"), "-C", str(back), "toy"], check=True)
    out = subprocess.run(
        ["bash", script, "unpack", str(tmp_path / "out")], cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.strip() == "0 runs scored"
    usage = subprocess.run(["bash", script], capture_output=True, text=True)
    assert usage.returncode == 2 and "gpu_seeds.sh launch" in usage.stdout


def test_a_run_counts_only_once_scored_at_its_best_loss(toy):
    def row(**changes):
        base = {"pair": "toy", "side": "model", "seed": 1, "ending": "early stopped", "best_loss": 4.0}
        base.update(curve=[(10, 1.0, 4.0, 1)], eval={"best_valid_loss": 4.0}, epochs=1, patience_out=None)
        return {**base, **changes}

    def counted(r):
        return report.groups([r])[("toy", "model")]["runs"] == [r]

    assert counted(row()) and counted(row(ending="epoch cap"))
    assert counted(row(eval={"test": {}}))  # scores written before they recorded the loss
    # trained on after a time limit and finished, the old scores not replaced yet
    stale = row(eval={"best_valid_loss": 4.2})
    assert not counted(stale) and "model: not scored at its best loss yet" in report.seeds_table([stale])
    assert not counted(row(ending="stopped by time")) and not counted(row(ending="training"))
    assert "not counted: model: no (interrupted)" in report.seeds_table([row(ending="training")])
    assert "not counted: model: no training logged" in report.seeds_table([row(curve=[], eval=None)])


def test_the_committed_logs_read_back_to_the_committed_tables():
    """The report of the committed logs is the committed RESULTS.md tables and the README's row per family."""
    rows = [report.summarize(pair, side) for pair in run.PAIRS for side in report.sides(pair)]
    results = (REPO / "examples" / "multi30k" / "RESULTS.md").read_text()
    readme = (REPO / "README.md").read_text()
    for doc, name, text in (
        (results, "table", report.table(rows)),
        (results, "seeds", report.seeds_table(rows)),
        (results, "verdicts", report.verdict_table(rows)),
        (readme, "table", report.front_table(rows)),
    ):
        assert doc.split(f"<!-- multi30k-{name}:begin -->")[1].split(f"<!-- multi30k-{name}:end -->")[0].strip() == text
