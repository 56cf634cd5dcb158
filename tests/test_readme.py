"""The documented commands run as written, in the order the README gives, in an empty folder.

The documents are README.md and the pages its "Everything else, in order" list names,
in that order (:data:`DOCUMENTS`): each goes on from the files the blocks before it
create. Every ```bash and ```python block of them carries a tag in the HTML comment
before it, ``<!-- readme-test: KIND (why) -->``:

- ``run``: run verbatim, in order, in one bash session (python blocks with
  ``python``), in an empty folder, with ``UPDATES=20 MAX_LINES=100`` in the environment
  (the budget the README itself names). ``make test`` is run as ``make -n test``: the
  suite cannot run itself.
- ``make -n``: each line is a ``make`` command; its dry run must print a quick-start
  command line that the quick-start's own parser accepts.
- ``setup``: the commands that make the environment the other blocks run in (this
  test's environment: the interpreter running it and its console scripts on PATH).
- ``show``: not run, and the reason says why (it needs a hub account or the network).

``make`` gets ``STAMP= PY=<this interpreter>`` through ``MAKEFLAGS`` so that it uses
this environment instead of installing a ``.venv`` in the empty folder.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_dense.cli import quickstart
from tests.helpers import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
#: README.md, then the pages of its "Everything else, in order" list, in that order
DOCUMENTS = ("README.md", "docs/cli.md", "docs/hub.md", "docs/quickstart.md")
TAGGED = re.compile(r"<!-- readme-test: ([a-z -]+?)(?: \([^)]*\))? -->\n```(bash|python)\n(.*?)```", re.S)
ANY_BLOCK = re.compile(r"^```(bash|python)$", re.M)
KINDS = ("run", "make -n", "setup", "show")
BUDGET = {"UPDATES": "20", "MAX_LINES": "100"}


def _text(document: str) -> str:
    return (REPO / document).read_text(encoding="utf-8")


def blocks():
    """``[(kind, language, text)]`` of the documents' tagged command blocks, in order."""
    return [block for document in DOCUMENTS for block in TAGGED.findall(_text(document))]


def test_the_readme_lists_the_pages_in_the_order_they_run():
    listed = re.findall(r"^\d+\. \[(docs/[\w.]+)\]", README, re.M)
    assert tuple(listed) == DOCUMENTS[1:], listed


def test_every_command_block_is_tagged_with_how_it_is_checked():
    for document in DOCUMENTS:
        text = _text(document)
        assert len(TAGGED.findall(text)) == len(ANY_BLOCK.findall(text)), f"{document}: an untagged block"
    found = blocks()
    assert {kind for kind, _, _ in found} <= set(KINDS), {kind for kind, _, _ in found}
    run = "".join(text for kind, _, text in found if kind == "run")
    for name in BUDGET:  # the small budget is one the README shows
        assert f"{name}=" in README and f"${name}" in run or name in run, name


def _env(tmp_path: Path) -> dict:
    bin_dir = os.path.dirname(sys.executable)
    return dict(
        os.environ,
        **BUDGET,
        PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        MAKEFLAGS=f"STAMP= PY={sys.executable}",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        HOME=os.environ.get("HOME", str(tmp_path)),
    )


def _script(tmp_path: Path) -> str:
    """The ``run`` blocks as one bash script (python blocks written to files and run)."""
    lines = ["set -euo pipefail"]
    for i, (kind, language, text) in enumerate(blocks()):
        if kind != "run":
            continue
        if language == "python":
            path = tmp_path / f"readme-block-{i}.py"
            path.write_text(text, encoding="utf-8")
            err = shlex.quote(str(path.with_suffix(".err")))  # kept apart: the Python API must be quiet
            lines.append(f"python {shlex.quote(str(path))} 2> {err} || {{ cat {err} >&2; false; }}")
            continue
        lines.append(re.sub(r"^make test\b", "make -n test", text, flags=re.M))
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_readme_commands_run_as_written_in_an_empty_folder(tmp_path):
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / "Makefile").symlink_to(REPO / "Makefile")
    env = _env(tmp_path)
    proc = subprocess.run(
        ["bash", "-c", _script(tmp_path)], cwd=clone, env=env, capture_output=True, text=True, timeout=900
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    # the quick-start trained the budget's updates, scored, exported; the CLI example trained and averaged
    assert "reached 20 updates (--max-update)" in proc.stdout, proc.stdout[-3000:]
    assert re.search(r"^\| weighted_transformer \| fairseq-dense \| `weighted_transformer_small` \|", proc.stdout, re.M)
    assert (clone / "quickstart-work" / "model" / "config.json").is_file()
    assert (clone / "checkpoints" / "gru" / "averaged.pt").is_file()
    assert re.search(r"^D-0\t", proc.stdout, re.M), proc.stdout[-3000:]  # fairseq-dense-interactive translated
    assert "1 CPU thread (OMP_NUM_THREADS=1; " in proc.stderr  # ... and said its thread count
    assert re.search(r"BLEU = [\d.]+", proc.stdout), proc.stdout[-3000:]  # sacreBLEU of fairseq-generate
    assert (clone / "checkpoints" / "gru" / "loss.png").is_file()  # fairseq-dense-plot
    assert (clone / "exports" / "gru-deu-eng" / "config.json").is_file()  # docs/hub.md's exports
    assert (clone / "exports" / "gru-avg5" / "model.pt").is_file()
    assert "would upload config.json" in proc.stdout, proc.stdout[-3000:]  # fairseq-dense-push --dry-run
    for err in sorted(tmp_path.glob("readme-block-*.err")):  # the Python blocks printed nothing else
        assert err.read_text() == "", f"{err.name}: {err.read_text()[-3000:]}"

    # a second make quickstart reports the finished run: nothing trained, no file changed
    work = clone / "quickstart-work"
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in work.rglob("*") if p.is_file()}
    again = subprocess.run(["make", "quickstart"], cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert "a finished run, read back from" in again.stdout and "fairseq_cli.train" not in again.stderr
    after = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in work.rglob("*") if p.is_file()}
    assert after == before, sorted(
        str(p) for p in set(after) ^ set(before) | {p for p in before if after.get(p) != before[p]}
    )


def _quickstart_argv(make_args):
    out = subprocess.run(
        ["make", "-n", "-f", str(REPO / "Makefile"), "quickstart", *make_args],
        capture_output=True,
        text=True,
        env=dict(os.environ, MAKEFLAGS=f"STAMP= PY={sys.executable}"),
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout.replace("\\\n", " ")
    line = next(line for line in text.splitlines() if "fairseq_dense.cli.quickstart" in line)
    return shlex.split(line.split("fairseq_dense.cli.quickstart", 1)[1])


def test_readme_make_lines_give_options_the_quickstart_accepts():
    lines = [
        line.split("#")[0].split()
        for kind, _, text in blocks()
        if kind == "make -n"
        for line in text.strip().splitlines()
    ]
    assert len(lines) >= 5
    parser = quickstart.get_parser()
    seen = set()
    for words in lines:
        assert words[:2] == ["make", "quickstart"], words
        args = parser.parse_args(_quickstart_argv(words[2:]))  # exits (fails) on an unknown option
        seen |= {k for k in ("baseline", "all_families", "fresh") if getattr(args, k)}
        seen |= {"minutes"} if args.minutes else set()
    assert seen == {"baseline", "all_families", "fresh", "minutes"}
