"""torchrun worker for tests/test_ddp.py: several trainings in one process group.

Started as ``-m tests.ddp_worker --worker [--backend B] -- SPEC.json`` (the
launcher's worker protocol); SPEC lists one ``fairseq-train`` argument list per
architecture. Each goes through :func:`fairseq_dense.cli.train_ddp.rank_main`, as
``fairseq-dense-train-ddp`` runs it, but the ~5 s fairseq import is paid once.
"""

import json
import sys

from fairseq_dense.cli import train_ddp


def main() -> None:
    argv = sys.argv[1:]
    opts, _ = train_ddp.build_parser().parse_known_args(argv[: argv.index("--")])
    spec_path = argv[argv.index("--") + 1]
    with open(spec_path) as f:
        runs = json.load(f)
    for args in runs:
        train_ddp.rank_main(args, opts.backend)


if __name__ == "__main__":
    main()
