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
