"""Every console script of setup.py exits 0 on success and 1 or 2 on failure.

Run through the installed scripts (``<venv>/bin/fairseq-dense-*``, which call
``sys.exit(main())``), not only ``main()``: a ``main`` that returns anything but 0 or
``None`` (a path, say) makes a successful command exit 1. The scripts import the
package from ``PYTHONPATH``, so they run this checkout's code.
"""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import REPO

BIN = Path(sys.executable).parent


def console_scripts():
    """``{script name: "module:function"}`` from setup.py's ``entry_points``."""
    tree = ast.parse((REPO / "setup.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "entry_points":
            entries = ast.literal_eval(node.value)["console_scripts"]
            return dict(tuple(part.strip() for part in e.split("=")) for e in entries)
    raise AssertionError("setup.py has no entry_points")


def run(script, *args, cwd=None, stdin=None):
    exe = BIN / script
    if not exe.exists():
        pytest.skip(f"{exe} is not installed (pip install -e . creates it)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.run(
        [str(exe), *map(str, args)], cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=300
    )


def _corpus(root: Path, n=30) -> Path:
    root.mkdir(parents=True)
    for split in ("train", "valid", "test"):
        for lang, words in (("de", "ich bin hier"), ("en", "i am here")):
            (root / f"{split}.{lang}").write_text("".join(f"{words} {i}\n" for i in range(n)), encoding="utf-8")
    return root


def _simple_log(path: Path) -> Path:
    lines = [
        f"2026-01-01 00:00:0{i} | INFO | train_inner | epoch 001:  {10 * i} / 50 loss={9 - i}.0, "
        f"num_updates={10 * i}, wall={i}"
        for i in range(1, 4)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _success_and_failure(tmp_path):
    """``{script: ([success args] or None, [failure args])}``: a real successful run where one
    is cheap (``--help`` would not reach ``main``'s return), and a failing one for every script."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for i in (1, 2):
        torch.save({"model": {"w": torch.full((2,), float(i))}}, ckpt / f"checkpoint_1_{i}.pt")
    corpus = _corpus(tmp_path / "raw")
    log = _simple_log(tmp_path / "train.log")
    missing = tmp_path / "missing"
    return {
        "fairseq-dense-average": (
            [ckpt, "--num-update-checkpoints", "2", "--output", tmp_path / "avg.pt"],
            [ckpt, "--num-update-checkpoints", "5", "--output", tmp_path / "avg2.pt"],
        ),
        "fairseq-dense-prepare": (
            ["--raw", corpus, "--src", "de", "--tgt", "en", "--dest", tmp_path / "prep", "--bpe-merges", "20"],
            ["--raw", missing, "--src", "de", "--tgt", "en", "--dest", tmp_path / "prep2"],
        ),
        "fairseq-dense-synth": ([tmp_path / "synth", "--sizes", "20", "5", "5"], ["--sizes", "1"]),
        "fairseq-dense-plot": ([log, "--out", tmp_path / "loss.png"], [missing, "--out", tmp_path / "x.png"]),
        "fairseq-dense-quickstart": (None, ["--corpus", missing, "--src", "de", "--tgt", "en"]),
        "fairseq-dense-export": (None, [missing / "c.pt", "--out", tmp_path / "export"]),
        "fairseq-dense-push": (None, [missing, "owner/name"]),
        "fairseq-dense-train-ddp": (None, []),
        "fairseq-dense-interactive": (None, [tmp_path / "prep" / "bin", "--path", missing / "c.pt"]),
        "fairseq-dense-branch-weights": (None, [missing / "c.pt", "--out", tmp_path / "bw"]),
    }


def test_every_console_script_exits_0_on_success_and_1_or_2_on_failure(tmp_path):
    cases = _success_and_failure(tmp_path)
    assert sorted(cases) == sorted(console_scripts()), "a console script of setup.py without a case here"
    for script, (good, bad) in cases.items():  # in order: interactive reads prepare's output
        if good is not None:
            ok = run(script, *good, cwd=tmp_path, stdin="")
            assert ok.returncode == 0, f"{script}: exit {ok.returncode}\n{ok.stdout[-1500:]}{ok.stderr[-1500:]}"
            # quiet by default: none of fairseq's or torch's notices (-v: the next test)
            assert "tensorboardX" not in ok.stderr and "Warning" not in ok.stderr, f"{script}: {ok.stderr[-1500:]}"
            if script == "fairseq-dense-average":  # a command that computes with torch says its thread count
                assert "1 CPU thread (OMP_NUM_THREADS=1; set OMP_NUM_THREADS to choose)" in ok.stderr, ok.stderr
        failed = run(script, *bad, cwd=tmp_path, stdin="")
        assert failed.returncode in (1, 2), f"{script} {bad}: exit {failed.returncode}\n{failed.stderr[-1500:]}"
        assert failed.stderr.strip(), f"{script} {bad}: failed without a message"
    assert (
        (tmp_path / "avg.pt").is_file() and (tmp_path / "prep" / "bin").is_dir() and (tmp_path / "loss.png").is_file()
    )
    avg = torch.load(tmp_path / "avg.pt", weights_only=True)["model"]["w"]
    torch.testing.assert_close(avg, torch.full((2,), 1.5))


def test_quiet_by_default_and_verbose_with_v(tmp_path):
    """The plugin's entry points hide fairseq's import-time notice (and hydra's warnings); ``-v`` shows it."""
    log = _simple_log(tmp_path / "train.log")
    loud = run("fairseq-dense-plot", log, "--out", tmp_path / "b.png", "-v")
    assert loud.returncode == 0, loud.stderr
    assert "Please install tensorboardX" in loud.stderr


def test_thread_count_leaves_busy_cores_out_and_obeys_omp_num_threads(monkeypatch):
    from fairseq_dense import threads
    from fairseq_dense.threads import apply_threads, choose_threads

    assert choose_threads({}, cpus=2, load=0.2) == (2, "2 CPUs, load average 0.2")
    assert choose_threads({}, cpus=2, load=5.9) == (1, "2 CPUs, load average 5.9")  # busy: never 0, never 2
    assert choose_threads({}, cpus=16, load=3.6)[0] == 12
    assert choose_threads({"OMP_NUM_THREADS": "3"}, cpus=2, load=9.0) == (3, "OMP_NUM_THREADS=3")
    for bad in ("many", "0", "2.5", "\u00b2", "\u0663", str(2**31)):  # "²", "٣" pass str.isdigit; torch takes a C int
        n, reason = choose_threads({"OMP_NUM_THREADS": bad}, cpus=4, load=1.0)
        assert n == 3 and f"OMP_NUM_THREADS={bad!r} ignored" in reason
    monkeypatch.setattr(threads, "load_average", lambda: None)  # a system without one (Windows)
    assert choose_threads({}, cpus=4) == (4, "4 CPUs")
    saved = torch.get_num_threads()
    try:
        assert apply_threads({"OMP_NUM_THREADS": "1"}) == (1, "OMP_NUM_THREADS=1")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(saved)
