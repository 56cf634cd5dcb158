"""Importing the package changes nothing in its host; our entry points' logging survives fairseq's own set-up."""

import logging
import os
import re
import subprocess
import sys

import fairseq  # noqa: F401  (configures the root logger on import)
import pytest

from fairseq_dense.logging_setup import NOISE_WARNINGS, configure_logging
from tests import helpers


def matches_noise(message: str) -> bool:
    """Whether a warning's text is one of the noise the entry points hide."""
    return any(re.match(pattern, message) for _, pattern in NOISE_WARNINGS)


def test_configure_logging_replaces_the_root_configuration_fairseq_left():
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    try:
        root.setLevel(logging.DEBUG)  # what importing fairseq leaves behind
        root.addHandler(logging.StreamHandler())
        configure_logging("%(name)s: %(message)s")
        assert root.level == logging.INFO
        assert len(root.handlers) == 1
        assert root.handlers[0].formatter._fmt == "%(name)s: %(message)s"
        assert not logging.getLogger("matplotlib.font_manager").isEnabledFor(logging.DEBUG)
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        root.setLevel(saved[0])
        for h in saved[1]:
            root.addHandler(h)


def _emitted(verbose):
    """The warnings that reach the user after ``configure_logging(verbose=...)``."""
    import warnings

    saved = list(warnings.filters)
    root = logging.getLogger()
    handlers = (root.level, list(root.handlers))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.resetwarnings()
            warnings.simplefilter("always")
            configure_logging("%(message)s", verbose=verbose)
            warnings.warn("hydra.experimental.initialize() is no longer experimental. Use hydra.initialize()")
            warnings.warn(
                "\nThe version_base parameter is not specified.\nPlease specify a compatability version level"
            )
            warnings.warn(
                "`torch.cuda.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cuda', args...)`",
                FutureWarning,
            )
            warnings.warn(
                "'pin_memory' argument is set as true but no accelerator is found, "
                "then device pinned memory won't be used."
            )
            warnings.warn("a warning of the plugin's own")
        noise = [str(w.message) for w in caught if matches_noise(str(w.message))]
        return noise, [str(w.message) for w in caught]
    finally:
        warnings.filters[:] = saved
        for h in list(root.handlers):
            root.removeHandler(h)
        root.setLevel(handlers[0])
        for h in handlers[1]:
            root.addHandler(h)


def test_entry_points_hide_fairseq_and_torch_noise_unless_verbose():
    noise, everything = _emitted(verbose=False)
    assert noise == [] and everything == ["a warning of the plugin's own"]
    noise, everything = _emitted(verbose=True)
    assert len(noise) == 4 and everything[-1] == "a warning of the plugin's own"


#: run in a fresh interpreter that has imported fairseq: the program's state before and after importing the
#: package (``import``) or loading it as fairseq's ``--user-dir`` does (``user-dir PATH``); prints what changed
IMPORT_CHECK = r"""
import atexit, logging, sys, warnings
import fairseq, torch
from fairseq.models import ARCH_MODEL_REGISTRY

def state():
    loggers = {n: (l.level, list(l.handlers), l.propagate, l.disabled)
               for n, l in logging.root.manager.loggerDict.items() if isinstance(l, logging.Logger)}
    return {"warnings filters": list(warnings.filters), "loggers": loggers,
            "root logger": (logging.root.level, list(logging.root.handlers)),
            "logging.disable": logging.root.manager.disable, "sys.excepthook": sys.excepthook,
            "atexit handlers": atexit._ncallbacks(), "torch safe globals": set(torch.serialization.get_safe_globals())}

before = state()
if sys.argv[1] == "import":
    import fairseq_dense
else:
    from argparse import Namespace
    from fairseq import utils
    utils.import_user_module(Namespace(user_dir=sys.argv[2]))
after = state()
assert "dense_lstm_tiny" in ARCH_MODEL_REGISTRY and "fairseq_dense.hub" not in sys.modules
# loggers first made by the import (module loggers) are new, at their defaults: they change no output
new = set(after["loggers"]) - set(before["loggers"])
assert all(after["loggers"][n] == (logging.NOTSET, [], True, False) for n in new), new
after["loggers"] = {n: v for n, v in after["loggers"].items() if n not in new}
# the one process-wide change (fairseq_dense/__init__.py says why): argparse.Namespace in torch's safe loader
from argparse import Namespace
assert after["torch safe globals"] - before["torch safe globals"] <= {Namespace}
after["torch safe globals"] = before["torch safe globals"]
print(sorted(k for k in before if before[k] != after[k]))
"""


@pytest.mark.parametrize("how", ["import", "user-dir package", "user-dir checkout"])
def test_importing_the_package_registers_and_changes_nothing_else(how):
    """Warnings filters, the logging tree, ``sys.excepthook``, exit handlers and torch's safe globals (but for
    ``argparse.Namespace``) are as they were, in a program that imported fairseq first; the hub is not imported
    (``FAIRSEQ_DENSE_CLI`` unset)."""
    user_dir = {"user-dir package": helpers.REPO / "fairseq_dense", "user-dir checkout": helpers.USER_DIR}
    argv = ["import"] if how == "import" else ["user-dir", str(user_dir[how])]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSEQ_DENSE_")}
    env["PYTHONPATH"] = str(helpers.REPO)
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_CHECK, *argv], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]", proc.stdout


def test_python_api_leaves_output_to_the_program(tmp_path):
    """Loading and translating print nothing but the translations: the root logger stays as it was (fairseq's
    import sets it to DEBUG with a handler), so fairseq's INFO lines do not show; the warnings of fairseq's
    dependencies are the program's to filter (:func:`fairseq_dense.logging_setup.hide_noise` does it)."""
    from types import SimpleNamespace

    from tests import test_hub

    raw = helpers.write_copy_corpus(tmp_path / "raw", n_train=160, n_valid=16, n_test=5)
    test_hub.preprocess_inprocess(raw, tmp_path / "bin")
    (tmp_path / "bpecodes").write_text("#version: 0.2\nx y\n")
    corpus = SimpleNamespace(root=tmp_path, raw=raw, bin=tmp_path / "bin", codes=tmp_path / "bpecodes")
    model_dir = test_hub.exported(corpus, "gru_attention_tiny")
    trained = test_hub.trained(corpus, "gru_attention_tiny")
    script = (
        "import logging, sys, fairseq_dense\n"
        "if sys.argv[1:]: fairseq_dense.logging_setup.hide_noise()\n"
        "root = logging.getLogger()\n"
        "print('root', root.level, len(root.handlers))\n"
        f"model = fairseq_dense.from_pretrained({str(model_dir)!r})\n"
        "print('translation', model.translate('a b c', beam=2))\n"
        # fairseq's own hub interface logs the checkpoint's whole configuration at INFO
        "from fairseq_dense.models.gru_attention import GRUAttentionModel\n"
        f"hub = GRUAttentionModel.from_pretrained({str(trained)!r}, 'checkpoint_last.pt', "
        f"data_name_or_path={str(corpus.bin)!r})\n"
        "print('fairseq hub', hub.translate('a b c', beam=2))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(helpers.REPO), OMP_NUM_THREADS="1")
    for hide in ([], ["hide"]):
        proc = subprocess.run(
            [sys.executable, "-c", script, *hide], env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.splitlines()[0] == f"root {logging.WARNING} 0", proc.stdout
        assert [line.split(" ")[0] for line in proc.stdout.splitlines()[1:]] == ["translation", "fairseq"], proc.stdout
        warned = [line for line in proc.stderr.splitlines() if "Warning: " in line]
        assert len(warned) == len(proc.stderr.splitlines()) // 2, proc.stderr[-3000:]  # each with its source line
        assert all(matches_noise(line.split("Warning: ", 1)[1]) for line in warned), proc.stderr
        assert (proc.stderr == "") == bool(hide), proc.stderr[-3000:]
