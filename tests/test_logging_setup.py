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
