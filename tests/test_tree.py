"""What the committed tree holds: no absolute path of any machine (its work folders, temporary
folders, environments), only the few system paths a program or a fairseq default names."""

import re
import subprocess

from tests.helpers import REPO

#: a path of two or more folders from the root, after a line's start, a space, a bracket, "=", ":" or
#: "," (or a quote opened after one of them): ``/work/x/y`` or ``"/tmp/site"``, not ``"$DIR"/a/b`` or ``lr /10``
ABSOLUTE = re.compile(
    r"""(?:^|(?<=[\s(\[=:,])|(?<=[\s(\[=:,]["'`])|(?<=^["'`]))/[\w.+@-]+/[\w.+@-]+(?:/[\w.+@-]*)*""", re.M
)
#: system files programs read (/proc, /dev, /etc/hosts), system programs, fairseq's default
#: --plasma-path in logged options, the paths the tests give because no machine has them, the
#: ``/path/to`` of examples, and the argv[0] needle of the command-line hook
ALLOWED = re.compile(r"^/(dev|proc|usr/bin|nonexistent|path)/.*|^/(etc/hosts|tmp/plasma|fairseq_dense/cli/)$")


def absolute_paths(text: str):
    """The absolute paths in ``text`` that are not allowed (URLs are not paths: ``//`` follows a colon)."""
    return [m.group(0) for m in ABSOLUTE.finditer(text) if not ALLOWED.match(m.group(0).rstrip("."))]


def test_the_tree_names_no_machine_path():
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    found = {}
    for name in filter(None, files.stdout.split("\0")):
        try:
            text = (REPO / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):  # binary files, submodules
            continue
        if paths := absolute_paths(text):
            found[name] = sorted(set(paths))[:3]
    assert not found, f"absolute paths in {len(found)} files (write them relative to the repository): {found}"


def test_the_check_sees_paths_and_passes_urls():
    work, tmp = "/work", "/tmp"  # built here: this file is in the tree too
    text = f"see https://x.org/a/b, /dev/null; --user-dir {work}/main/user_dir and PYTHONPATH=$PWD:{tmp}/site"
    assert absolute_paths(text) == [f"{work}/main/user_dir", f"{tmp}/site"]
    assert absolute_paths('"$DIR"/a/b, lr /10, ${TMPDIR:-/tmp}/x') == []
