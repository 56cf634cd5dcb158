"""Fill a config from its model dataclass: what every named architecture does last.

fairseq builds a model from an ``argparse.Namespace`` as well as from a dataclass
config: ``options.parse_args_and_arch(parser, [..., "--arch", A])`` followed by
``task.build_model(args)`` (fairseq's own scripts, older tooling). On that path
the parser holds only the flags given on the command line, and the named
architecture function is what must set every other option the model reads, as
fairseq's ``base_architecture`` functions do. The dataclass defaults *are* the
base architecture, so the architecture functions take them from there.
"""

import dataclasses

from fairseq.utils import safe_getattr


def fill_defaults(cfg, config_class) -> None:
    """Set every field of ``config_class`` that ``cfg`` lacks (or holds as None) to its default.

    Idempotent and safe on an ``argparse.Namespace`` or a ``DictConfig`` (fairseq
    calls architecture functions on both); values already set are kept.

    Args:
        cfg: the options being filled in place.
        config_class: the model's ``FairseqDataclass`` (e.g. ``GRUAttentionConfig``).
    """
    defaults = config_class()
    for f in dataclasses.fields(config_class):
        default = getattr(defaults, f.name)
        if f.name.startswith("_") or (isinstance(default, str) and default.startswith("${")):
            continue  # "_name", and interpolations of other config groups (set by fairseq)
        setattr(cfg, f.name, safe_getattr(cfg, f.name, default))
