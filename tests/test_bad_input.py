"""Bad input gives one clear line and a non-zero exit (the table in docs/reliability.md).

Most cases run in this process: the failing fairseq call raises, and
:func:`fairseq_dense.fairseq_tools.clear_error_message` must turn the exception into
the documented line. Four cases run the real command-line tools (started
together) to prove the one-line output, the exit status and the absence of a
traceback: an invalid option, mismatched dictionaries, an empty line for
``fairseq-dense-interactive`` and a checkpoint read without the plugin.
"""

import os
import re
import subprocess
import sys

import pytest
import torch

from fairseq_dense import validation
from fairseq_dense.checkpoints import safe_loading
from fairseq_dense.cli import fairseq_tools
from fairseq_dense.cli import interactive as dense_interactive
from tests import helpers
from tests import reliability_helpers as rh

pytestmark = pytest.mark.slow

ARCHS = rh.tiny_archs()


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_input")
    small = rh.tiny_corpus(root / "v8", n_train=16)  # 8 letters
    raw = rh.write_corpus(root / "v20" / "raw", n_train=16, vocab=20)
    other = rh.preprocess_inprocess(raw, root / "v20" / "bin")  # other dictionaries
    ckpt = root / "ckpt"
    rh.train_inprocess(
        rh.base_train_args(
            small, ckpt, ARCHS[0], 1, "--optimizer", "sgd", "--lr", "0.1", "--batch-size", "8", "--disable-validation"
        )
    )
    return {"root": root, "small": small, "other": other, "ckpt": ckpt / "checkpoint_last.pt"}


def _build(bin_dir, arch):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, [str(bin_dir), "--arch", arch]))
    task = tasks.setup_task(cfg.task)
    return task.build_model(cfg.model), cfg.model


def _message_of(fn, argv=("fairseq-train",)):
    with pytest.raises(BaseException) as info:
        fn()
    msg = fairseq_tools.clear_error_message(info.value, argv=list(argv))
    assert msg is not None, f"no clear message for {info.value!r}"
    return msg


@pytest.mark.skipif(len(ARCHS) < 2, reason="needs two families")
@pytest.mark.parametrize("arch", ARCHS)
def test_checkpoint_of_another_architecture(arch, corpora):
    other = ARCHS[(ARCHS.index(arch) + 1) % len(ARCHS)]
    model, model_cfg = _build(corpora["small"], arch)
    foreign, _ = _build(corpora["small"], other)
    with pytest.raises(validation.CheckpointMismatchError, match=rf"do not match {arch} .*another --arch"):
        model.load_state_dict(foreign.state_dict(), strict=True, model_cfg=model_cfg)


@pytest.mark.parametrize(
    "change, counts",
    [
        (lambda sd: sd.update(extra=torch.zeros(1)), "(0 missing; 1 unexpected, e.g. 'extra'; 2 shared)"),
        (lambda sd: sd.pop("bias"), "(1 missing, e.g. 'bias'; 0 unexpected; 1 shared)"),
    ],
)
def test_parameter_mismatch_gives_examples_only_of_what_is_there(change, counts):
    model = torch.nn.Linear(2, 2)
    state = model.state_dict()
    change(state)
    assert f"do not match Linear {counts}: it was trained" in validation.explain_state_dict_mismatch(model, state)


@pytest.mark.parametrize("arch", ARCHS)
def test_dictionaries_that_do_not_match_the_checkpoint(arch, corpora):
    model, model_cfg = _build(corpora["other"], arch)
    trained, _ = _build(corpora["small"], arch)
    with pytest.raises(validation.CheckpointMismatchError, match=r"dictionaries do not match the checkpoint"):
        model.load_state_dict(trained.state_dict(), strict=True, model_cfg=model_cfg)
    model.load_state_dict(_build(corpora["other"], arch)[0].state_dict(), strict=True, model_cfg=model_cfg)


def test_restore_other_architecture_through_fairseq_train(corpora, tmp_path):
    if len(ARCHS) < 2:
        pytest.skip("needs two families")
    args = rh.base_train_args(
        corpora["small"],
        tmp_path / "x",
        ARCHS[1],
        1,
        "--optimizer",
        "sgd",
        "--lr",
        "0.1",
        "--batch-size",
        "8",
        "--restore-file",
        str(corpora["ckpt"]),
        "--reset-optimizer",
    )
    msg = _message_of(lambda: rh.train_inprocess(args))
    assert msg.startswith(f"cannot load {corpora['ckpt']} (a {ARCHS[0]} checkpoint): ")
    assert f"do not match {ARCHS[1]}" in msg


def _generate(bin_dir, ckpt, *extra):
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import generate

    parser = options.get_generation_parser()
    args = options.parse_args_and_arch(
        parser, [str(bin_dir), "--path", str(ckpt), "--cpu", "--gen-subset", "test", "--batch-size", "4", *extra]
    )
    with safe_loading():  # fairseq-generate loads an sgd checkpoint as FAIRSEQ_DENSE_CLI=1 lets it
        generate.main(convert_namespace_to_omegaconf(args))


def test_sentence_longer_than_max_positions_is_refused(corpora):
    msg = _message_of(lambda: _generate(corpora["small"], corpora["ckpt"], "--max-source-positions", "3"))
    assert msg.startswith("Size of sample #") and "--skip-invalid-size-inputs-valid-test" in msg


def test_bf16_on_cpu_says_why(corpora, tmp_path):
    args = rh.base_train_args(
        corpora["small"],
        tmp_path / "bf16",
        ARCHS[0],
        1,
        "--optimizer",
        "adam",
        "--lr",
        "0.001",
        "--batch-size",
        "8",
        "--bf16",
    )
    msg = _message_of(lambda: rh.train_inprocess(args), argv=["fairseq-train", "--bf16"])
    assert msg.startswith("--bf16 needs a TPU in fairseq") and "--bf16-autocast" in msg
    # with the task's bfloat16 option, the task refuses the pair before fairseq looks for a TPU
    msg = _message_of(lambda: rh.train_inprocess([*args, "--bf16-autocast"]), argv=["fairseq-train", "--bf16"])
    assert msg.startswith("--bf16-autocast cannot be combined with --bf16: ")


def test_non_utf8_bytes_in_fairseq_preprocess(tmp_path):
    raw = rh.write_corpus(tmp_path / "raw", n_train=4)
    lines = (raw / "train.src").read_bytes().split(b"\n")
    lines[2] = b"a \xff b"
    (raw / "train.src").write_bytes(b"\n".join(lines))
    msg = _message_of(lambda: rh.preprocess_inprocess(raw, tmp_path / "bin"), argv=["fairseq-preprocess"])
    assert msg == f"{raw / 'train.src'}:3: not valid UTF-8 (byte 0xff at column 3)"


def test_empty_lines_are_refused(tmp_path):
    assert list(validation.check_nonempty_lines(["a\n", "b"])) == ["a\n", "b"]
    with pytest.raises(validation.InputError, match=r"^in.txt:2: empty or whitespace-only line"):
        list(validation.check_nonempty_lines(["a\n", " \t\n", "b\n"], "in.txt"))
    path = tmp_path / "in.txt"
    path.write_bytes(b"a b\n\xfe\n")
    with open(path, "rb") as f, pytest.raises(validation.InputError, match=r"in.txt:2: not valid UTF-8"):
        list(iter(dense_interactive.CheckedLines(f, "in.txt").readline, ""))


@pytest.mark.parametrize("name", ["missing.txt", "."])
def test_unreadable_input_file_is_one_line(tmp_path, name):
    """``--input`` naming no file, or a folder: one line naming it, before fairseq is started."""
    source = tmp_path / name
    with pytest.raises(SystemExit) as info:
        dense_interactive.main([str(tmp_path), "--path", str(tmp_path / "c.pt"), "--input", str(source)])
    expected = rf"fairseq-dense-interactive: error: {re.escape(str(source))}: cannot be read \(.+\)"
    assert re.fullmatch(expected, str(info.value)), info.value


def test_option_error_is_one_line_in_process():
    def raise_from_package():
        exec(compile("raise ValueError('--sumlen must be >= 2')", fairseq_tools.__file__, "exec"))

    assert _message_of(raise_from_package) == "--sumlen must be >= 2"
    with pytest.raises(KeyError) as info:
        {}["x"]
    assert fairseq_tools.clear_error_message(info.value) is None  # anything else keeps its traceback


def test_error_lines_name_the_command():
    assert fairseq_tools.tool_name("venv/bin/fairseq-train") == "fairseq-train"
    assert fairseq_tools.tool_name("x/site-packages/fairseq_cli/generate.py") == "fairseq-generate"
    assert fairseq_tools.tool_name("x/fairseq_dense/cli/train_ddp.py") == "fairseq-dense-train-ddp"


def _one_line_failure(proc, expected_start):
    err = proc.stderr.strip().splitlines()
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert err and err[-1].startswith(expected_start), proc.stderr[-3000:]
    return err[-1]


def test_command_line_tools_print_one_line(corpora, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", FAIRSEQ_DENSE_CLI="1")
    env.pop("FAIRSEQ_DENSE_TRACEBACK", None)
    ud = str(helpers.USER_DIR)
    empty_input = "a b c\n   \n"
    cmds = {
        "option": (
            [
                str(helpers.BIN / "fairseq-train"),
                str(corpora["small"]),
                "--user-dir",
                ud,
                "--cpu",
                "--arch",
                "gru_attention_tiny",
                "--encoder-hidden-size",
                "0",
                "--batch-size",
                "8",
                "--save-dir",
                str(tmp_path / "opt"),
            ],
            None,
        ),
        "dict": (
            [
                str(helpers.BIN / "fairseq-generate"),
                str(corpora["other"]),
                "--user-dir",
                ud,
                "--cpu",
                "--path",
                str(corpora["ckpt"]),
                "--gen-subset",
                "test",
            ],
            None,
        ),
        "empty": (
            [
                sys.executable,
                "-m",
                "fairseq_dense.cli.interactive",
                str(corpora["small"]),
                "--cpu",
                "--path",
                str(corpora["ckpt"]),
                "--source-lang",
                "src",
                "--target-lang",
                "tgt",
            ],
            empty_input,
        ),
        "plugin": (
            [
                str(helpers.BIN / "fairseq-generate"),
                str(corpora["small"]),
                "--cpu",
                "--path",
                str(corpora["ckpt"]),
                "--gen-subset",
                "test",
            ],
            None,
        ),
    }
    procs = {
        k: subprocess.Popen(
            c, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path
        )
        for k, (c, _) in cmds.items()
    }
    out = {k: p.communicate(input=cmds[k][1], timeout=300) for k, p in procs.items()}
    res = {k: subprocess.CompletedProcess(cmds[k][0], procs[k].returncode, *out[k]) for k in cmds}

    _one_line_failure(res["option"], "fairseq-train: error: --encoder-hidden-size must be a positive integer")
    line = _one_line_failure(res["dict"], f"fairseq-generate: error: cannot load {corpora['ckpt']}")
    assert "the dictionaries do not match the checkpoint" in line
    _one_line_failure(res["empty"], "fairseq-dense-interactive: error: stdin:2: empty or whitespace-only line")
    assert "H-0\t" in res["empty"].stdout  # the lines before the bad one were translated
    # without --user-dir no plugin code runs: fairseq/torch's own error (documented), still non-zero
    assert res["plugin"].returncode != 0
    assert "argparse.Namespace" in res["plugin"].stderr or "_name" in res["plugin"].stderr


def test_truncated_checkpoint_last(corpora, tmp_path):
    """A ``checkpoint_last.pt`` cut short (e.g. a crash during fairseq's non-atomic copy)."""
    save = tmp_path / "ckpt"
    save.mkdir()
    (save / "checkpoint_last.pt").write_bytes(corpora["ckpt"].read_bytes()[:5000])
    args = rh.base_train_args(
        corpora["small"], save, ARCHS[0], 2, "--optimizer", "sgd", "--lr", "0.1", "--batch-size", "8"
    )
    msg = _message_of(lambda: rh.train_inprocess(args))
    assert msg.startswith(f"cannot read checkpoint {save / 'checkpoint_last.pt'}: the file is truncated")


def test_truncated_checkpoint_last_under_fairseqs_task_names_the_restore_file(corpora, tmp_path):
    """With fairseq's ``translation`` (which does not fall back by itself) the error names the
    newest checkpoint that loads and the exact flag to resume from it."""
    save = tmp_path / "ckpt"
    save.mkdir()
    intact = save / "checkpoint_1_1.pt"
    intact.write_bytes(corpora["ckpt"].read_bytes())
    (save / "checkpoint_last.pt").write_bytes(corpora["ckpt"].read_bytes()[:5000])
    args = rh.base_train_args(
        corpora["small"],
        save,
        ARCHS[0],
        2,
        "--task",
        "translation",
        "--optimizer",
        "sgd",
        "--lr",
        "0.1",
        "--batch-size",
        "8",
    )
    msg = _message_of(lambda: rh.train_inprocess(args))
    assert msg.startswith(f"cannot read checkpoint {save / 'checkpoint_last.pt'}: the file is truncated"), msg
    assert msg.endswith(f"the newest checkpoint that loads is {intact} (1 updates): rerun with --restore-file {intact}")


def test_checkpoint_the_safe_loader_refuses_is_not_called_truncated(tmp_path):
    """A whole checkpoint holding a global torch's safe loader refuses (a numpy scalar, as older fairseq runs saved)
    is not "truncated": no advice to replace it with an older one; torch's own error (the global it refuses) stays."""
    import numpy as np
    import torch
    from fairseq import checkpoint_utils

    path = tmp_path / "checkpoint_last.pt"
    torch.save({"model": {"w": torch.zeros(2)}, "extra_state": {"best": np.float64(3.5)}}, path)
    with pytest.raises(Exception) as info:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert "Weights only load failed" in str(info.value)
    assert fairseq_tools.clear_error_message(info.value) is None
