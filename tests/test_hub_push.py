"""``fairseq-dense-push``: exactly the export files, ``--dry-run``, links and special files refused (no network).

The shared tiny export is described in ``tests/hub_hostile_helpers.py``.
"""

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from fairseq_dense.hub.schema import write_manifest
from tests.hub_hostile_helpers import (
    SECRET,
    listed,
    tamper,
)

# ---------------------------------------------------------------- push: exactly the export files


class FakeApi:
    """Records what push_to_hub asks of huggingface_hub's ``HfApi`` (no network)."""

    calls = []

    def __init__(self, token=None):
        self.calls.append(("init",))

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id))

    def create_commit(self, operations, **kwargs):
        self.calls.append(("create_commit", {op.path_in_repo: op.path_or_fileobj for op in operations}))
        return SimpleNamespace(commit_url="https://hub/commit/1")


@pytest.fixture
def fake_hub(monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    FakeApi.calls = []
    return FakeApi.calls


def with_strays(gru, tmp_path: Path, marker: Path) -> Path:
    """The export with model.pt and stray files beside it: notes, a .env, a folder."""
    model_dir = tamper(gru.dir, tmp_path, lambda d, m: None, marker, resign=False)
    (model_dir / ".env").write_text(f"HF_TOKEN={SECRET}\n")
    (model_dir / "notes.txt").write_text(SECRET)
    (model_dir / "extra").mkdir()
    (model_dir / "extra" / "x.txt").write_text(SECRET)
    return model_dir


@pytest.mark.parametrize("pickle_flag", [[], ["--no-pickle"]])
def test_push_uploads_exactly_the_export_files(gru, tmp_path, marker, fake_hub, capsys, pickle_flag):
    from fairseq_dense.cli import push as push_cli

    model_dir = with_strays(gru, tmp_path, marker)
    assert push_cli.main([str(model_dir), "me/tiny", *pickle_flag]) == 0
    ((_, files),) = [c for c in fake_hub if c[0] == "create_commit"]
    expected = sorted([*listed(model_dir), "SHA256SUMS", "README.md"] + ([] if pickle_flag else ["model.pt"]))
    assert sorted(files) == expected
    assert all(files[name] == (model_dir / name).read_bytes() for name in files)
    out = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in out[:-1]] == [f"uploading {name}" for name in files]
    assert out[-1] == "https://hub/commit/1" and not marker.exists()


def test_push_dry_run_lists_and_uploads_nothing(gru, tmp_path, marker, fake_hub, capsys):
    from fairseq_dense.cli import push as push_cli

    model_dir = with_strays(gru, tmp_path, marker)
    assert push_cli.main([str(model_dir), "me/tiny", "--dry-run", "--no-pickle"]) == 0
    assert fake_hub == []
    *out, verdict = capsys.readouterr().out.splitlines()
    assert verdict == f"{model_dir}: loads as from_pretrained loads it; nothing uploaded (--dry-run)"
    assert sorted(line.split("\t")[0] for line in out) == sorted(
        f"would upload {name}" for name in [*listed(model_dir), "SHA256SUMS", "README.md"]
    )


@pytest.mark.parametrize(
    "what", ["symlinked card", "symlinked pickle", "card is a folder", "pickle is a fifo", "hard-linked card"]
)
def test_push_refuses_links_and_special_files(gru, tmp_path, marker, fake_hub, capsys, what):
    from fairseq_dense.cli import push as push_cli

    model_dir = with_strays(gru, tmp_path, marker)
    key = tmp_path / "id_rsa"
    key.write_text(SECRET)
    name = "README.md" if "card" in what else "model.pt"
    (model_dir / name).unlink()
    if "symlinked" in what:
        (model_dir / name).symlink_to(key)
    elif "hard-linked" in what:
        os.link(key, model_dir / name)
    elif "folder" in what:
        (model_dir / name).mkdir()
    else:
        os.mkfifo(model_dir / name)
    assert push_cli.main([str(model_dir), "me/tiny"]) == 1
    err = capsys.readouterr().err.strip()
    kind = {"symlinked": "a symbolic link", "hard-linked": "2 hard links"}.get(what.split()[0], "not a regular file")
    assert err == (
        f"fairseq-dense-push: error: {model_dir}: not uploaded: {name} ({kind}); only regular files of one hard "
        "link are uploaded (copy each file itself)"
    )
    assert fake_hub == [] and SECRET not in err


def test_push_lists_every_refused_file_and_dry_run_shows_what_uploads(gru, tmp_path, marker, fake_hub, capsys):
    """A hard-linked card and a symlinked pickle: both named in one line; a dry run lists name, size, sha256."""
    import hashlib

    from fairseq_dense.cli import push as push_cli

    model_dir = with_strays(gru, tmp_path, marker)
    key = tmp_path / "id_rsa"
    key.write_text(SECRET)
    for name in ("README.md", "model.pt"):
        (model_dir / name).unlink()
    os.link(key, model_dir / "README.md")
    (model_dir / "model.pt").symlink_to(key)
    assert push_cli.main([str(model_dir), "me/tiny", "--dry-run"]) == 1
    err = capsys.readouterr().err.strip()
    assert "README.md (2 hard links), model.pt (a symbolic link)" in err and "\n" not in err and SECRET not in err
    (model_dir / "README.md").unlink()
    (model_dir / "model.pt").unlink()
    assert push_cli.main([str(model_dir), "me/tiny", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()[:-1]
    expected = [*listed(model_dir), "SHA256SUMS"]
    assert sorted(line.split("\t")[0] for line in lines) == sorted(f"would upload {n}" for n in expected)
    for line in lines:
        name, size, digest = line.removeprefix("would upload ").split("\t")
        data = (model_dir / name).read_bytes()
        assert size == f"{len(data)} bytes" and digest == f"sha256 {hashlib.sha256(data).hexdigest()}"
    assert fake_hub == []


@pytest.mark.parametrize("call", ["create_repo", "create_commit"])
def test_push_hub_failure_is_one_line(gru, tmp_path, marker, fake_hub, monkeypatch, capsys, call):
    """An id the hub refuses, no token, no network: one line naming the repository, not huggingface_hub's trace."""
    from huggingface_hub.errors import HFValidationError

    from fairseq_dense.cli import push as push_cli

    def refuse(*args, **kwargs):
        raise HFValidationError("Repo id must use alphanumeric chars\n(see the docs)")

    monkeypatch.setattr(FakeApi, call, refuse)
    assert push_cli.main([str(gru.dir), "me/tiny", "--no-pickle"]) == 1
    err = capsys.readouterr().err
    expected = "fairseq-dense-push: error: me/tiny: cannot upload to the hub: HFValidationError: Repo id must use "
    assert err == expected + "alphanumeric chars (see the docs)\n", err


# ---------------------------------------------------------------- push: only what a load accepts, the bytes it checked

RESIGNED = {
    "a bad dictionary line": (lambda d: open(d / "dict.tgt.txt", "a").write("zz\n"), "dict.tgt.txt: line 13 is not"),
    "a 3-field bpecodes line": (lambda d: (d / "bpecodes").write_text("a b c\n"), "bpecodes: line 1 is not a BPE"),
    "garbage weights": (lambda d: (d / "model.safetensors").write_bytes(b"\x08" + b"\0" * 15), "model.safetensors"),
    "a dictionary of the wrong size": (
        lambda d: open(d / "dict.tgt.txt", "a").write("zz 1\n"),
        "dict.tgt.txt: 17 symbols, but config.json",
    ),
}


@pytest.mark.parametrize("case", sorted(RESIGNED))
def test_push_refuses_what_a_load_refuses(gru, tmp_path, marker, fake_hub, capsys, case):
    from fairseq_dense.cli import push as push_cli

    edit, match = RESIGNED[case]
    model_dir = tamper(gru.dir, tmp_path, lambda d, m: edit(d), marker, resign=True)
    for dry_run in ([], ["--dry-run"]):
        assert push_cli.main([str(model_dir), "me/tiny", *dry_run]) == 1
        captured = capsys.readouterr()
        assert match in captured.err and captured.err.count("\n") == 1 and "upload" not in captured.out
    assert fake_hub == [] and not marker.exists()


def test_push_uploads_the_bytes_it_checked(gru, tmp_path, marker, fake_hub, monkeypatch):
    """Files rewritten (and re-signed) once they are checked: the checked bytes go up, SHA256SUMS included."""
    from fairseq_dense.hub import push

    model_dir = tamper(gru.dir, tmp_path, lambda d, m: None, marker, resign=False)
    checked = {name: (model_dir / name).read_bytes() for name in [*listed(model_dir), "SHA256SUMS", "README.md"]}
    check = push.load_model

    def check_then_swap(*args, **kwargs):
        loaded = check(*args, **kwargs)
        open(model_dir / "dict.tgt.txt", "a").write("zz 1\n")
        write_manifest(model_dir, listed(model_dir))
        return loaded

    monkeypatch.setattr(push, "load_model", check_then_swap)
    push.push_to_hub(model_dir, "me/tiny", include_pickle=False)
    ((_, files),) = [c for c in fake_hub if c[0] == "create_commit"]
    assert files == checked and (model_dir / "SHA256SUMS").read_bytes() != checked["SHA256SUMS"]
