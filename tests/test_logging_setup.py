"""Our entry points' logging survives fairseq's own root-logger set-up."""

import logging

import fairseq  # noqa: F401  (configures the root logger on import)

from fairseq_dense.logging_setup import configure_logging


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

    from fairseq_dense import logging_setup

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
        noise = [str(w.message) for w in caught if logging_setup.matches_noise(str(w.message))]
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


def test_python_api_is_quiet_by_default_and_verbose_on_request(tmp_path):
    """``import fairseq_dense`` leaves the root logger as it was (fairseq's import sets it to
    DEBUG with a handler), and loading and translating prints nothing but the translation;
    ``FAIRSEQ_DENSE_VERBOSE=1`` shows the warnings of fairseq's dependencies again."""
    import os
    import subprocess
    import sys
    from types import SimpleNamespace

    from tests import helpers, test_hub

    raw = helpers.write_copy_corpus(tmp_path / "raw", n_train=160, n_valid=16, n_test=5)
    test_hub.preprocess_inprocess(raw, tmp_path / "bin")
    (tmp_path / "bpecodes").write_text("#version: 0.2\nx y\n")
    corpus = SimpleNamespace(root=tmp_path, raw=raw, bin=tmp_path / "bin", codes=tmp_path / "bpecodes")
    model_dir = test_hub.exported(corpus, "gru_attention_tiny")
    trained = test_hub.trained(corpus, "gru_attention_tiny")
    script = (
        "import logging, fairseq_dense\n"
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
    env.pop("FAIRSEQ_DENSE_VERBOSE", None)
    quiet = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert quiet.stdout.splitlines()[0] == f"root {logging.WARNING} 0", quiet.stdout
    assert [line.split(" ")[0] for line in quiet.stdout.splitlines()[1:]] == ["translation", "fairseq"], quiet.stdout
    assert quiet.stderr == "", quiet.stderr[-3000:]
    env["FAIRSEQ_DENSE_VERBOSE"] = "1"
    loud = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert loud.returncode == 0 and "pin_memory" in loud.stderr, loud.stderr[-3000:]
