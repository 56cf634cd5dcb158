"""``fairseq-dense-export`` on crafted checkpoints, no eval in the plugin, every config key with hostile values.

The shared tiny models and the marker are described in ``tests/hub_hostile_helpers.py``.
"""

import ast
import json
import re
from pathlib import Path

import pytest
import torch

import fairseq_dense
from fairseq_dense import hub
from fairseq_dense.cli import export as export_cli
from fairseq_dense.hub import PretrainedModelError
from tests import helpers
from tests.hub_hostile_helpers import (
    Pickled,
    payload,
)

# ---------------------------------------------------------------- fairseq-dense-export on crafted checkpoints


def crafted_checkpoint(gru, tmp_path: Path, marker: Path, change) -> Path:
    """The shared checkpoint with ``change(state, marker)`` applied, saved anew."""
    state = torch.load(gru.ckpt, weights_only=True)
    change(state, marker)
    path = tmp_path / "crafted.pt"
    torch.save(state, path)
    return path


def _cfg_set(node, key: str, value) -> None:
    """Set an option in a checkpoint's config node (a dict, or a Namespace for argparse-style models)."""
    if isinstance(node, dict):
        node[key] = value
    else:
        setattr(node, key, value)


def _cfg(section: str, key: str, value):
    def change(state, marker):
        _cfg_set(state["cfg"][section], key, value(marker) if callable(value) else value)

    return change


def _fconv(state, marker):
    state["cfg"]["model"].update(_name="fconv", encoder_layers=payload(marker), decoder_layers=payload(marker))


def _namespace_fconv(state, marker):
    import argparse

    state["args"] = argparse.Namespace(
        arch="fconv",
        task="translation",
        encoder_layers=payload(marker),
        data=str(marker.parent),
        source_lang="src",
        target_lang="tgt",
    )


def _pickle_payload(state, marker):
    state["extra_state"] = Pickled(marker)


EXPORT_CASES = {
    "fconv eval": (_fconv, r"crafted.pt: architecture 'fconv' is not one of fairseq-dense's"),
    "fconv eval, legacy args": (_namespace_fconv, r"crafted.pt: architecture 'fconv' is not one of"),
    "expression as an integer": (
        _cfg("model", "encoder_embed_dim", payload),
        r"crafted.pt: key 'model.encoder_embed_dim' must be an integer",
    ),
    "interpolation": (_cfg("model", "dropout", "${oc.env:HOME}"), r"crafted.pt: key 'model.dropout' must be"),
    "task name": (_cfg("task", "_name", "os.system"), r"crafted.pt: task 'os.system' of the checkpoint"),
    "language path": (_cfg("task", "source_lang", "../../x"), r"crafted.pt: key 'task.source_lang'"),
    "unknown architecture": (_cfg("model", "_name", "future_model_tiny"), r"'future_model_tiny' is not one of"),
    "pickled object": (_pickle_payload, r"crafted.pt: cannot be read safely"),
    "not a tensor": (lambda s, m: s["model"].update(extra=[1, 2]), r"crafted.pt: 'model' entry 'extra' is not"),
    "beyond float16 with --fp16": (  # finite in the checkpoint: not 'holds non-finite values'
        lambda s, m: s["model"]["encoder.embed_tokens.weight"].view(-1)[0].fill_(1e6),
        r"crafted.pt: tensor 'encoder.embed_tokens.weight' overflows float16: export without --fp16",
        "--fp16",
    ),
}


def test_export_refuses_averaging_checkpoints_of_two_architectures(gru, tmp_path, marker, capsys):
    """Checkpoints of another architecture with the same parameter shapes: one line naming the odd file."""
    arch = torch.load(gru.ckpt, weights_only=True)["cfg"]["model"]["_name"]
    other = next(a for a in sorted(hub.dense_architectures()) if a != arch)
    ckpt = crafted_checkpoint(gru, tmp_path, marker, _cfg("model", "_name", other))
    out = tmp_path / "out"
    rc = export_cli.main([str(ckpt), str(gru.ckpt), "--out", str(out), "--data", str(gru.data)])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and f"crafted.pt: architecture '{other}' differs from '{arch}'" in err, err
    assert len(err.splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("case", sorted(EXPORT_CASES))
def test_export_refuses_crafted_checkpoints(gru, tmp_path, marker, capsys, case):
    change, match, *flags = EXPORT_CASES[case]
    ckpt = crafted_checkpoint(gru, tmp_path, marker, change)
    out = tmp_path / "new" / "out"  # the folders the export creates for it go too
    try:
        rc = export_cli.main([str(ckpt), "--out", str(out), "--data", str(gru.data), *flags])
    finally:
        assert not marker.exists(), "the payload ran"
    err = capsys.readouterr().err.strip()
    assert rc == 1 and re.search(match, err), err
    assert len(err.splitlines()) == 1 and err.startswith("fairseq-dense-export: error: ")
    assert not out.parent.exists()


def test_export_refuses_transformer_path_option(transformer, tmp_path, marker, capsys):
    state = torch.load(transformer.ckpt, weights_only=True)
    _cfg_set(state["cfg"]["model"], "encoder_embed_path", str(helpers.REPO / "README.md"))  # fairseq would read it
    torch.save(state, tmp_path / "crafted.pt")
    rc = export_cli.main(
        [str(tmp_path / "crafted.pt"), "--out", str(tmp_path / "out"), "--data", str(transformer.data)]
    )
    err = capsys.readouterr().err
    assert rc == 1 and "key 'model.encoder_embed_path' must be null" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("force", [False, True])
def test_export_onto_a_symlinked_out_is_one_line(gru, tmp_path, capsys, force):
    """``--out`` naming a symbolic link (to a folder, an earlier export say) is refused in one line, with
    or without ``--force``: replacing it would swap the link, not the folder; both are left as they were."""
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("kept")
    out = tmp_path / "out"
    out.symlink_to(target)
    argv = [str(gru.ckpt), "--out", str(out), "--data", str(gru.data)] + (["--force"] if force else [])
    assert export_cli.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is a symbolic link" in err, err
    assert (
        out.is_symlink()
        and (target / "keep.txt").read_text() == "kept"
        and sorted(target.iterdir()) == [target / "keep.txt"]
    )


# ---------------------------------------------------------------- one export per --out, one line, the same bytes


def test_export_is_byte_reproducible(gru, tmp_path):
    """The session's export and a new one of the same checkpoint: the same files, byte for byte; torch's global
    random generator is left as it was (building the model draws from it, as a load's does)."""
    state = torch.get_rng_state()
    # one checkpoint given as a path, not a list (it was read as the list of its characters: 'c: no such ...')
    again = hub.export_checkpoint(
        str(gru.ckpt), tmp_path / "again", data=gru.data, bpe_codes=gru.dir.parent / "bpecodes"
    )
    assert torch.equal(state, torch.get_rng_state())
    names = sorted(p.name for p in gru.dir.iterdir())
    assert names == sorted(p.name for p in again.iterdir()) and "SHA256SUMS" in names
    assert [n for n in names if (gru.dir / n).read_bytes() != (again / n).read_bytes()] == []


def test_one_export_at_a_time_per_out(gru, tmp_path, capsys):
    """A live export's lock refuses a second one in one line and its temporary folder stays; a dead one's goes."""
    from fairseq_dense.save_lock import held_folder

    out = tmp_path / "out"
    argv = [str(gru.ckpt), "--out", str(out), "--data", str(gru.data)]
    live = tmp_path / ".out.export-0123abcd"
    with held_folder(str(tmp_path / ".out.export-lock"), RuntimeError):
        live.mkdir()
        assert export_cli.main(argv) == 1
        err = capsys.readouterr().err.strip()
        assert re.fullmatch(
            rf"fairseq-dense-export: error: {out}: another export to it is running \(process \d+.*\); wait for it",
            err,
        )
        assert live.is_dir() and not out.exists()
    assert export_cli.main(argv) == 0  # the lock's holder is gone: its leftover is removed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_an_out_filled_while_the_export_ran_is_not_replaced(gru, tmp_path, capsys, monkeypatch):
    """Another export (or the user) fills ``--out`` after the first check, before the lock: without ``--force`` it
    stays as it is (it was swapped out and removed)."""
    from fairseq_dense.hub import export

    out, held = tmp_path / "out", export.held_folder

    def fill_then_hold(*args):
        out.mkdir()
        (out / "theirs.txt").write_text("kept")
        return held(*args)

    monkeypatch.setattr(export, "held_folder", fill_then_hold)
    assert export_cli.main([str(gru.ckpt), "--out", str(out), "--data", str(gru.data)]) == 1
    assert (
        capsys.readouterr().err
        == f"fairseq-dense-export: error: {out}: exists and is not empty (use --force to replace it)\n"
    )
    assert [p.name for p in out.iterdir()] == ["theirs.txt"] and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_export_file_system_failures_are_one_line(gru, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "out"
    assert export_cli.main([str(gru.ckpt), "--out", str(out), "--data", str(gru.data)]) == 1
    err = capsys.readouterr().err.strip()
    assert re.fullmatch(rf"fairseq-dense-export: error: {tmp_path}/file\S*: [A-Za-z ]+ \(exporting\)", err), err


AVERAGE_LAST_MISUSE = {  # --average-last 0 failed with an IndexError, -1 silently averaged all but the oldest
    "0": (["--average-last", "0"], "--average-last 0: must be a positive number"),
    "-1": (["--average-last", "-1"], "--average-last -1: must be a positive number"),
    "a folder without it": ([], "{folder}: a folder; give checkpoint files, or the folder with --average-last N"),
}


@pytest.mark.parametrize("case", sorted(AVERAGE_LAST_MISUSE))
def test_export_average_last_misuse_is_one_line(gru, tmp_path, capsys, case):
    flags, message = AVERAGE_LAST_MISUSE[case]
    for epoch in (1, 2):
        (tmp_path / f"checkpoint{epoch}.pt").write_bytes(gru.ckpt.read_bytes())
    out = tmp_path / "out"
    assert export_cli.main([str(tmp_path), *flags, "--out", str(out), "--data", str(gru.data)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "fairseq-dense-export: error: " + message.format(folder=tmp_path), err
    assert not out.exists()


# ---------------------------------------------------------------- the plugin's own code evaluates nothing


def test_plugin_code_has_no_eval():
    """The architectures the loader builds contain no eval/exec (nor fairseq's eval_str_* helpers)."""
    package = Path(fairseq_dense.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name in ("eval", "exec", "eval_str_list", "eval_str_dict", "eval_bool") and not (
                    name == "eval" and isinstance(node.func, ast.Attribute)  # model.eval(): train/eval mode
                ):
                    found.append(f"{path.relative_to(package)}:{node.lineno}")
    assert found == []


# ---------------------------------------------------------------- every key, hostile values

HOSTILE_VALUES = [
    "(__import__('os').system('true'), 1)[1]",
    None,
    [],
    {},
    True,
    -1,
    0,
    1.5,
    2**40,
    "${oc.env:HOME}",
    "../x",
    ["x"],
    {"a": "b"},
]


def _key_paths(node, prefix=()):
    for key, value in node.items():
        yield prefix + (key,)
        if isinstance(value, dict):
            yield from _key_paths(value, prefix + (key,))


@pytest.mark.parametrize("family", ["gru", "transformer"])
def test_every_config_key_with_hostile_values(request, family):
    """Each key of a real config set to each hostile value: accepted, or one PretrainedModelError naming a key."""
    from fairseq_dense.hub.schema import check_config

    model = request.getfixturevalue(family)
    base = json.loads((model.dir / "config.json").read_text())
    refused = 0
    for path in list(_key_paths(base)) + [("task", "arch"), ("task", "data"), ("model", "_name"), ("user_dir",)]:
        for value in HOSTILE_VALUES:
            config = json.loads(json.dumps(base))
            node = config
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
            try:
                check_config(config, Path("config.json"))
            except PretrainedModelError as err:
                refused += 1
                message = str(err)
                assert "\n" not in message and re.search(r"config.json: (key '|not a fairseq-dense|format)", message)
            else:  # what passes is of a declared type: no hostile string passes, no object but an empty model
                assert not isinstance(value, str) or path[-1] in ("package_version", "fairseq_version"), path
                assert not isinstance(value, dict) or (path, value) == (("model",), {}), path
    assert refused > 10 * len(HOSTILE_VALUES)
