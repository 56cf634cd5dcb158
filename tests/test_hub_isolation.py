"""What a load opens and changes (audit hook), any directory name, messages that never quote a refused file.

The shared tiny models and the tampering are described in ``tests/hub_hostile_helpers.py``.
"""

import contextlib
import json
import os
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from fairseq_dense import hub
from fairseq_dense.hub import PretrainedModelError
from tests.hub_hostile_helpers import (
    GRU,
    SECRET,
    assert_refused,
    build_checkpoint,
    config_edit,
    lay_out_hub_cache,
    listed,
    load_torch_hub,
    permute_dictionary,
    rewrite_weights,
    set_key,
    tamper,
    user_dir_plugin,
)

# ---------------------------------------------------------------- what a load opens and changes (audit hook)

_AUDIT = {"events": None, "installed": False, "dir": None}
#: Audit events that name files: opening, listing, renaming, removing, copying, changing metadata.
_FILE_EVENTS = {
    "open",
    "os.listdir",
    "os.scandir",
    "os.rename",
    "os.remove",
    "os.rmdir",
    "os.mkdir",
    "os.chmod",
    "os.utime",
    "os.truncate",
    "os.symlink",
    "os.link",
    "shutil.copyfile",
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _audit_hook(event, args):
    events = _AUDIT["events"]
    if events is None or event not in _FILE_EVENTS:
        return
    writes = event != "open" and event not in ("os.listdir", "os.scandir")
    if event == "open":
        mode, flags = args[1], args[2]
        writes = bool(set(mode) & set("wax+")) if isinstance(mode, str) else bool((flags or 0) & _WRITE_FLAGS)
    for arg in args[:1] if event == "open" else args:
        if isinstance(arg, (str, bytes, os.PathLike)):
            path = os.fsdecode(arg)
            # the loader opens the model directory (O_DIRECTORY) and then its files relative to it (dir_fd),
            # which the event does not show: a plain name (or ../../blobs) is taken relative to that directory
            relative = _AUDIT["dir"] and ("/" not in path or path == "../../blobs")
            path = os.path.normpath(os.path.join(_AUDIT["dir"], path)) if relative else os.path.abspath(path)
            if event == "open" and (args[2] or 0) & os.O_DIRECTORY:
                _AUDIT["dir"] = path
            events.append((event, path, writes))


@contextlib.contextmanager
def audited():
    """Record every file event of the process (Python's audit hooks: builtins.open, os.open, ...)."""
    if not _AUDIT["installed"]:
        sys.addaudithook(_audit_hook)  # cannot be removed: it records only inside this context
        _AUDIT["installed"] = True
    _AUDIT["events"] = events = []
    _AUDIT["dir"] = None
    try:
        yield events
    finally:
        _AUDIT["events"] = None


def under(path: str, root: Path) -> bool:
    real = Path(os.path.realpath(path))
    return real == root.resolve() or root.resolve() in real.parents


def training_folder(work: Path) -> Path:
    """A fairseq save directory as a kill leaves it: a loadable checkpoint1.pt and a cut checkpoint_last.pt."""
    save = work / "checkpoints"
    save.mkdir(parents=True)
    state = {"model": {"w": torch.zeros(2)}, "optimizer_history": [{"num_updates": 7}], "cfg": None}
    torch.save(state, save / "checkpoint1.pt")
    torch.save(state, save / "full.bin")
    (save / "checkpoint_last.pt").write_bytes((save / "full.bin").read_bytes()[:100])
    (save / "full.bin").unlink()
    return save


def snapshot(folder: Path):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


@pytest.mark.parametrize(
    "task", ["translation", "translation_exact_resume", "translation_weighted", "translation_exact_resume_simplex"]
)
def test_loading_touches_nothing_but_the_model_files(tmp_path, monkeypatch, task):
    """Export and load a model of each task from inside a training folder: its checkpoints stay as they were.

    The project's tasks check and repair --save-dir where fairseq-train starts a
    training (never when a model is built); an inference load must not reach it
    either. Every route is audited: only the model directory's listed files are
    opened, for reading, and nothing of the training folder is opened, listed
    or changed.
    """
    from fairseq.tasks import TASK_REGISTRY

    src = tmp_path / "src"
    ckpt = build_checkpoint(src, GRU, task)
    work = tmp_path / "work"
    save = training_folder(work)
    before = snapshot(save)
    monkeypatch.chdir(work)
    with audited() as events:
        out = hub.export_checkpoint([ckpt], work / "export", data=src / "bin")
    assert json.loads((out / "config.json").read_text())["task"]["_name"] == task
    assert not [e for e in events if under(e[1], save)] and snapshot(save) == before
    cache = tmp_path / "hf-cache"
    lay_out_hub_cache(cache, "someone/tiny", out)
    blobs = next(cache.glob("models--*/blobs"))
    routes = {
        "dir": lambda: hub.from_pretrained(out),
        "hub_cache": lambda: hub.from_pretrained("someone/tiny", cache_dir=str(cache), local_files_only=True),
        "torch_hub": lambda: load_torch_hub(out, tmp_path),
    }
    for route, load in routes.items():
        with audited() as events:
            model = load()
        assert isinstance(model.translate("a b c", beam=2, max_len_b=4), str)
        assert type(model.task) is TASK_REGISTRY[task]
        # nothing written anywhere (but Python's bytecode cache of hubconf.py, on a first torch.hub import)
        written = [e for e in events if e[2] and "__pycache__" not in Path(e[1]).parts]
        assert written == [], (route, written)
        inside = [e for e in events if under(e[1], tmp_path)]
        assert not [e for e in inside if under(e[1], save)], route
        opened = sorted({Path(e[1]).name for e in inside if e[0] == "open"})
        model_files = [e for e in inside if any(under(e[1], d) for d in (out, blobs, blobs.parent / "snapshots"))]
        if route == "hub_cache":  # huggingface_hub reads its ref (and looks for a file list); the loader the files
            inside = [e for e in inside if e not in model_files and Path(e[1]).parent.name not in ("refs", "trees")]
        else:
            inside = [e for e in inside if e not in model_files]
        assert inside == [], (route, inside)
        if route != "hub_cache":
            assert opened == sorted([*listed(out), "SHA256SUMS", out.name]), (route, opened)  # and the folder
    assert snapshot(save) == before


# ---------------------------------------------------------------- any directory name is only a name

ODD_NAMES = [
    "-h",
    "--user-dir=evil_plugin",
    "decoy:v2",
    "${oc.env:DECOY_DIR}",
    'it\'s "quoted"',
    "back\\slash",
    "with space",
    "ünïcødé 模型",
    "new\nline",
    "~nosuchuser",
    "%(x)s {0}",
]


@pytest.fixture(scope="module")
def reference(gru):
    """The untampered export's target symbols and translation of ``a b c``."""
    model = hub.from_pretrained(gru.dir)
    return SimpleNamespace(symbols=model.tgt_dict.symbols, translation=model.translate("a b c", beam=2, max_len_b=4))


@pytest.mark.parametrize("name", ODD_NAMES, ids=ascii)
def test_any_directory_name_loads_its_own_files(gru, reference, tmp_path, monkeypatch, marker, name):
    """The directory is opened by name, never parsed: no option, no second path, no interpolation, no import.

    Beside it lie what a parser would reach instead: a ``decoy`` model whose
    target dictionary differs, named by ``decoy:v2`` (fairseq splits paths at
    ``:``) and by ``$DECOY_DIR`` (OmegaConf's ``${oc.env:...}``), and a
    ``--user-dir`` plugin whose import creates the marker.
    """
    shutil.copytree(gru.dir, tmp_path / name)
    decoy = shutil.copytree(gru.dir, tmp_path / "decoy")
    permute_dictionary(decoy, marker)
    user_dir_plugin(marker)
    monkeypatch.setenv("DECOY_DIR", str(decoy))
    monkeypatch.chdir(tmp_path)
    loads = [lambda: hub.from_pretrained(name)]
    if name in ODD_NAMES[:4]:  # the names a parser would read; torch.hub passes the name on as it is
        loads.append(lambda: load_torch_hub(Path(name), tmp_path))
    for load in loads:
        with audited() as events:
            model = load()
        assert not marker.exists(), "the plugin was imported"
        assert model.tgt_dict.symbols == reference.symbols
        assert model.translate("a b c", beam=2, max_len_b=4) == reference.translation
        stray = [e for e in events if under(e[1], tmp_path) and not under(e[1], tmp_path / name)]
        assert stray == [], stray


@pytest.mark.parametrize("name", ODD_NAMES, ids=ascii)
def test_any_directory_name_fails_in_one_line_naming_it(tmp_path, monkeypatch, name):
    """An empty directory of any name: one line that names it (non-printable characters escaped)."""
    from fairseq_dense.hub.schema import printable

    (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PretrainedModelError) as info:
        hub.from_pretrained(name)
    message = str(info.value)
    assert message.startswith(printable(Path(name) / "config.json") + ": missing") and "\n" not in message


# ---------------------------------------------------------------- messages never quote a refused file


def _append(name: str, text: str):
    def edit(model_dir, marker):
        with open(model_dir / name, "a") as f:
            f.write(text)

    return edit


QUOTE_CASES = {
    "config value": (config_edit(set_key("model.dropout", SECRET)), "config.json: key 'model.dropout'"),
    "config key": (config_edit(set_key(f"model.{SECRET} x", 1)), "config.json: key 'model.<not a plain name>'"),
    "language": (config_edit(set_key("task.source_lang", SECRET + "/..")), "config.json: key 'task.source_lang'"),
    "architecture": (config_edit(set_key("arch", SECRET)), "config.json: key 'arch'"),
    "dictionary line": (_append("dict.tgt.txt", SECRET + "\n"), "dict.tgt.txt: line 13 is not"),
    "dictionary duplicate": (_append("dict.tgt.txt", "a 1 #fairseq:overwrite\n"), "dict.tgt.txt: line 13"),
    "bpe codes line": (_append("bpecodes", SECRET + " a b\n"), "bpecodes: line 3 is not"),
    "manifest line": (_append("SHA256SUMS", SECRET + "\n"), "SHA256SUMS: line 6 is not"),
    "tensor name": (
        lambda d, m: rewrite_weights(d, lambda state, meta: state.update({f"{SECRET} x": torch.zeros(1)})),
        r"model.safetensors: does not match .*'<not a plain name>'",
    ),
}


@pytest.mark.parametrize("case", sorted(QUOTE_CASES))
def test_messages_never_quote_the_refused_file(gru, tmp_path, marker, case):
    edit, match = QUOTE_CASES[case]
    model_dir = tamper(gru.dir, tmp_path, edit, marker, resign=case != "manifest line")
    message = assert_refused(lambda: hub.from_pretrained(model_dir), match, marker)
    assert SECRET not in message and "fairseq:overwrite" not in message
