"""What the long recipes of ``examples/`` (Multi30k, the Weighted Transformer ablation) share: fairseq
commands run into logs, the committed copies of those logs, and tables written between markers of a doc.

Commands run by :func:`fairseq_dense.cli.quickstart_steps.run_command`; their logs are read by
:mod:`fairseq_dense.logs`.
"""

import os
import re
import sys

from fairseq_dense.checkpoints import replacing
from fairseq_dense.cli.quickstart_steps import run_command
from fairseq_dense.logs import NOTES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_DIR = os.path.join(ROOT, "user_dir")
DEVICE = os.environ.get("DEVICE", "cpu")  # "cuda": train and decode on the GPU
#: the lines the reports read: commands, epoch summaries and validations, and the log reader's notes (the
#: parameter count, how a run ended)
KEEP = re.compile(r"^# |\| INFO \| (valid|train) \| \{|" + NOTES.pattern)


def device_args():
    return ["--cpu"] if DEVICE == "cpu" else []


def need(data_bin: str) -> None:
    """End the command with what to run first when ``data_bin`` holds no prepared corpus."""
    if not os.path.isdir(data_bin):
        sys.exit(f"{data_bin}: no prepared data; run `python {sys.argv[0]} prepare` first")


def generate(data_bin: str, checkpoint: str, options, threads=None):
    """``(command, its output)``: beam-5 translations by ``checkpoint`` (``options``: the subset, languages...)."""
    cmd = [
        *("fairseq-generate", data_bin, "--user-dir", USER_DIR, "--path", checkpoint, *device_args(), *options),
        *"--beam 5 --batch-size 64 --required-batch-size-multiple 1 --remove-bpe".split(),
    ]
    return cmd, run_command(cmd, os.devnull, threads=threads)


def relative(text: str, work: str, name: str) -> str:
    """``text`` with the work folder ``work`` written ``name`` and the repository root dropped: paths
    relative to the root, what the committed logs and scores record."""
    return text.replace(os.path.abspath(work), name).replace(ROOT + os.sep, "")


def copy_log(src: str, dest: str, work: str, name: str) -> None:
    """Keep the :data:`KEEP` lines of ``src`` in ``dest``, paths :func:`relative` (a run and a progress
    report may copy the same log at once: each writes its own temporary file)."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    tmp = f"{dest}.tmp{os.getpid()}"
    with open(src) as f, open(tmp, "w") as out:
        out.writelines(relative(line, work, name) for line in f if KEEP.search(line))
    os.replace(tmp, dest)


def markdown(head: str, lines) -> str:
    """A markdown table: ``head``'s cells (``|``-separated) and ``lines``, rows written as such."""
    return "\n".join([f"| {head} |", "|" + "---|" * len(head.split(" | ")), *lines])


def write_between(path: str, name: str, text: str) -> None:
    """Put ``text`` between the ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` lines of ``path`` (a file
    without them is left as it is)."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    with open(path) as f:
        content = f.read()
    if begin in content:
        head, rest = content.split(begin, 1)
        with replacing(path) as tmp, open(tmp, "w") as f:
            f.write(head + begin + "\n" + text + "\n" + end + rest.split(end, 1)[1])
