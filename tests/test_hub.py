"""Pickle-free export, ``from_pretrained``, hub cache, torch.hub and push (issue #7).

Every registered ``*_tiny`` architecture of fairseq_dense is trained for a few
updates through fairseq's own ``train.main`` (in this process: one fairseq
import for all families), exported, loaded back with ``from_pretrained`` and
checked against ``fairseq-generate``'s code path on the original checkpoint.
Families registered later are covered automatically.
"""

import hashlib
import json
import math
import os
import pickle
import re
import shutil
import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from fairseq.hub_utils import GeneratorHubInterface

import fairseq_dense
from fairseq_dense import hub
from fairseq_dense.cli import export as export_cli
from fairseq_dense.cli import push as push_cli
from fairseq_dense.hub import PretrainedModelError, export_checkpoint
from tests import helpers
from tests.reliability_helpers import preprocess_inprocess

TINY_ARCHS = sorted(a for a in hub.dense_architectures() if a.endswith("_tiny"))
FIRST = "gru_attention_tiny" if "gru_attention_tiny" in TINY_ARCHS else TINY_ARCHS[0]
GEN = dict(beam=5, max_len_b=12)  # a cap keeps beam search of barely trained models short
#: Extra fairseq-train flags a family's tiny arch needs (none so far).
EXTRA_TRAIN_FLAGS = {}
_CACHE = {}


def _fairseq_main(module, parser, argv):
    from fairseq import options

    module.main(options.parse_args_and_arch(parser, argv) if parser is not None else argv)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """One tiny copy corpus, binarized once, shared by every architecture."""
    root = tmp_path_factory.mktemp("hub")
    raw = helpers.write_copy_corpus(root / "raw", n_train=160, n_valid=16, n_test=5)
    preprocess_inprocess(raw, root / "bin")
    codes = root / "bpecodes"
    codes.write_text("#version: 0.2\nx y\n")  # a merge that never fires on single letters
    lines = (raw / "test.src").read_text().splitlines()
    return SimpleNamespace(root=root, raw=raw, bin=root / "bin", codes=codes, test_lines=lines)


def trained(corpus, arch: str) -> Path:
    """Train ``arch`` for 2 epochs (40 updates) through fairseq-train's main; cached."""
    if ("ckpt", arch) not in _CACHE:
        from fairseq import options
        from fairseq_cli import train

        save = corpus.root / f"ckpt-{arch}"
        _fairseq_main(
            train,
            options.get_training_parser(),
            [
                str(corpus.bin),
                "--arch",
                arch,
                "--task",
                "translation",
                "--optimizer",
                "adam",
                "--lr",
                "0.01",
                "--criterion",
                "label_smoothed_cross_entropy_with_stats",
                "--max-epoch",
                "2",
                "--batch-size",
                "8",
                "--save-dir",
                str(save),
                "--cpu",
                "--seed",
                "1",
                "--num-workers",
                "0",
                "--disable-validation",
                "--no-progress-bar",
                "--log-format",
                "simple",
                *EXTRA_TRAIN_FLAGS.get(arch, []),
            ],
        )
        _CACHE["ckpt", arch] = save
    return _CACHE["ckpt", arch]


def exported(corpus, arch: str) -> Path:
    """checkpoint_last.pt of ``arch`` exported with BPE, moses and model.pt; cached."""
    if ("export", arch) not in _CACHE:
        _CACHE["export", arch] = export_checkpoint(
            [trained(corpus, arch) / "checkpoint_last.pt"],
            corpus.root / f"export-{arch}",
            data=corpus.bin,
            bpe_codes=corpus.codes,
            write_pickle=True,
        )
    return _CACHE["export", arch]


def copy_of(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# ---------------------------------------------------------------- round trip, every family


@pytest.mark.slow
@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_round_trip_matches_fairseq_generate(corpus, arch, tmp_path):
    """from_pretrained(export).translate(beam 5) == fairseq-generate on the original checkpoint."""
    from fairseq import options
    from fairseq_cli import generate

    ckpt, out = trained(corpus, arch) / "checkpoint_last.pt", exported(corpus, arch)
    _fairseq_main(
        generate,
        options.get_generation_parser(),
        [
            str(corpus.bin),
            "--path",
            str(ckpt),
            "--gen-subset",
            "test",
            "--beam",
            "5",
            "--batch-size",
            "1",
            "--required-batch-size-multiple",
            "1",
            "--max-len-b",
            "12",
            "--cpu",
            "--results-path",
            str(tmp_path),
        ],
    )
    generated = (tmp_path / "generate-test.txt").read_text()
    hyps = helpers.hypotheses_from_generate(generated)
    scores = {
        int(line.split("\t")[0][2:]): float(line.split("\t")[1])
        for line in generated.splitlines()
        if line.startswith("H-")
    }
    assert sorted(hyps) == list(range(len(corpus.test_lines)))

    model = hub.from_pretrained(out)
    assert isinstance(model, GeneratorHubInterface)
    assert sorted(os.listdir(out)) == sorted(
        [
            "README.md",
            "SHA256SUMS",
            "bpecodes",
            "config.json",
            "dict.src.txt",
            "dict.tgt.txt",
            "model.pt",
            "model.safetensors",
        ]
    )
    for i, line in enumerate(corpus.test_lines):
        best = model.generate([model.encode(line)], **GEN)[0][0]  # what .translate() runs
        assert model.decode(best["tokens"]) == hyps[i], (arch, line)
        assert best["score"].item() / math.log(2) == pytest.approx(scores[i], abs=1e-5)
    assert model.translate(corpus.test_lines[0], **GEN) == hyps[0]
    assert model.sample(corpus.test_lines[1:3], **GEN) == [hyps[1], hyps[2]]

    # the optional pickle-based model.pt loads in plain fairseq with the same weights
    from fairseq import checkpoint_utils

    models, _ = checkpoint_utils.load_model_ensemble([str(out / "model.pt")])
    for name, tensor in models[0].state_dict().items():
        assert torch.equal(tensor, model.models[0].state_dict()[name]), name


def test_every_family_is_covered():
    """Each fairseq_dense model has a *_tiny arch, so the round trip covers every family."""
    families = {cls for cls in hub.dense_architectures().values()}
    covered = {hub.dense_architectures()[a] for a in TINY_ARCHS}
    assert families == covered


# ---------------------------------------------------------------- export options and CLI


@pytest.mark.slow
def test_cli_export_average_fp16_and_model_card(corpus, tmp_path):
    from huggingface_hub import ModelCard
    from safetensors.torch import load_file

    ckpt_dir, out = trained(corpus, FIRST), tmp_path / "avg"
    # the real command line, in its own process (fairseq-dense-export once installed)
    proc = helpers.run_cli(
        sys.executable,
        "-m",
        "fairseq_dense.cli.export",
        ckpt_dir,
        "--average-last",
        "2",
        "--fp16",
        "--out",
        out,
        "--data",
        corpus.bin,
        "--bleu",
        "12.5",
        "--bleu-signature",
        "nrefs:1|case:mixed|tok:13a|version:2.4.0",
        "--dataset",
        "copy-task",
        "--license",
        "mit",
        "--tokenizer",
        "none",
        cwd=helpers.REPO,
    )
    assert proc.stdout.strip() == str(out)
    umask = os.umask(0o022)  # the process's umask (the export's files carry its permissions)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask
    assert {stat.S_IMODE(f.stat().st_mode) for f in out.iterdir()} == {0o666 & ~umask}
    config = json.loads((out / "config.json").read_text())
    assert config["checkpoints"] == ["checkpoint1.pt", "checkpoint2.pt"]
    assert config["weights_dtype"] == "float16" and config["tokenizer"] is None and config["bpe"] is None
    assert config["arch"] == FIRST and config["package_version"] == fairseq_dense.__version__
    weights = load_file(str(out / "model.safetensors"))
    c1, c2 = (torch.load(ckpt_dir / f"checkpoint{i}.pt", weights_only=True)["model"] for i in (1, 2))
    for name, tensor in weights.items():
        assert tensor.dtype == torch.float16, name
        torch.testing.assert_close(tensor, ((c1[name].double() + c2[name].double()) / 2).half())
    model = hub.from_pretrained(out)
    assert isinstance(model.translate(corpus.test_lines[0], **GEN), str)
    n_params = sum(p.numel() for p in model.models[0].parameters())

    card = ModelCard.load(out / "README.md")
    assert card.data.library_name == "fairseq" and card.data.license == "mit"
    assert card.data.eval_results[0].metric_value == 12.5
    assert card.data.eval_results[0].metric_config.startswith("nrefs:1")
    assert f"{n_params:,}" in card.text and "model.pt" not in os.listdir(out)
    (row,) = [line for line in card.text.splitlines() if line.startswith("| sacreBLEU |")]
    assert len(re.split(r"(?<!\\)\|", row)) == 4, row  # two cells: the signature's pipes escaped, as tables need


@pytest.mark.skipif("gru_attention_tiny" not in TINY_ARCHS, reason="uses the GRU's tied-embedding option")
def test_tied_weights_are_stored_once(corpus, tmp_path):
    from safetensors import safe_open

    state = torch.load(trained(corpus, "gru_attention_tiny") / "checkpoint_last.pt", weights_only=True)
    model_cfg = state["cfg"]["model"]
    if isinstance(model_cfg, dict):
        model_cfg["share_decoder_input_output_embed"] = True
    else:
        model_cfg.share_decoder_input_output_embed = True
    state["model"]["decoder.output_projection.weight"] = state["model"]["decoder.embed_tokens.weight"]
    torch.save(state, tmp_path / "tied.pt")
    out = export_checkpoint([tmp_path / "tied.pt"], tmp_path / "out", data=corpus.bin)
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        names, tied = set(f.keys()), json.loads(f.metadata()["tied_weights"])
    assert len(tied) == 1 and set(tied) | set(tied.values()) == {
        "decoder.output_projection.weight",
        "decoder.embed_tokens.weight",
    }
    assert not set(tied) & names
    decoder = hub.from_pretrained(out).models[0].decoder
    assert decoder.output_projection.weight is decoder.embed_tokens.weight
    torch.testing.assert_close(decoder.embed_tokens.weight, state["model"]["decoder.embed_tokens.weight"])


def test_export_refuses_bad_input_and_leaves_nothing(corpus, tmp_path, capsys):
    ckpt = trained(corpus, FIRST) / "checkpoint_last.pt"
    no_dicts = tmp_path / "empty"
    no_dicts.mkdir()
    rc = export_cli.main(
        [
            str(ckpt),
            "--out",
            str(tmp_path / "out"),
            "--data",
            str(no_dicts),
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
        ]
    )
    assert rc == 1 and "dict.src.txt" in capsys.readouterr().err
    with pytest.raises(PretrainedModelError, match="exists and is not empty"):
        export_checkpoint([ckpt], exported(corpus, FIRST), data=corpus.bin)
    with pytest.raises(PretrainedModelError, match="needs 5"):
        export_checkpoint([ckpt.parent], tmp_path / "out", data=corpus.bin, average_last=5)
    assert sorted(os.listdir(tmp_path)) == ["empty"]  # no half-written or temporary directory


# ---------------------------------------------------------------- hub cache, torch.hub, names, push


def lay_out_hub_cache(cache: Path, repo_id: str, snapshots, main: str) -> None:
    """Write a cache as huggingface_hub does: blobs by hash, snapshots of symlinks, refs."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    for commit, folder in snapshots.items():
        snap = repo / "snapshots" / commit
        snap.mkdir(parents=True)
        for f in folder.iterdir():
            blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
            shutil.copyfile(f, blob)
            (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(main)


def test_hub_repo_id_offline_with_revision_pinning(corpus, tmp_path, monkeypatch):
    import huggingface_hub

    good = exported(corpus, FIRST)
    broken = copy_of(good, tmp_path / "broken")
    (broken / "bpecodes").unlink()
    commit_a, commit_b = "a" * 40, "b" * 40
    cache = tmp_path / "cache"
    lay_out_hub_cache(cache, "fairseq-dense/tiny-copy", {commit_a: good, commit_b: broken}, main=commit_b)

    calls = []
    real = huggingface_hub.snapshot_download
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: calls.append(k) or real(*a, **k))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = hub.from_pretrained("fairseq-dense/tiny-copy", revision=commit_a, cache_dir=str(cache))
    local = hub.from_pretrained(good)
    for line in corpus.test_lines[:3]:
        assert model.translate(line, **GEN) == local.translate(line, **GEN)
    with pytest.raises(PretrainedModelError, match="bpecodes"):  # main is the broken commit
        hub.from_pretrained("fairseq-dense/tiny-copy", cache_dir=str(cache))
    with pytest.raises(PretrainedModelError, match="revision v9.*offline"):
        hub.from_pretrained("fairseq-dense/tiny-copy", revision="v9", cache_dir=str(cache))
    assert calls and all(k["local_files_only"] for k in calls)
    assert all("*.pt" not in p and "model.pt" not in p for k in calls for p in k["allow_patterns"])


def test_torch_hub_load_and_named_models(corpus, monkeypatch):
    out = exported(corpus, FIRST)
    assert torch.hub.load(str(helpers.REPO), "list_models", source="local") == hub.hub_models()
    model = torch.hub.load(str(helpers.REPO), "from_pretrained", str(out), source="local")
    line = corpus.test_lines[0]
    expected = hub.from_pretrained(out).translate(line, **GEN)
    assert model.translate(line, **GEN) == expected
    cls = hub.dense_architectures()[FIRST]
    monkeypatch.setattr(cls, "hub_models", classmethod(lambda c: {"tiny-copy": {"path": str(out)}}))
    assert hub.from_pretrained("tiny-copy").translate(line, **GEN) == expected
    assert fairseq_dense.from_pretrained is hub.from_pretrained
    with pytest.raises(TypeError, match="no_such_option"):
        hub.from_pretrained(out, no_such_option=1)
    raw = hub.from_pretrained(out, tokenizer=None, bpe=None, dropout=0.25, lenpen=0.5)
    assert raw.tokenizer is None and raw.bpe is None and raw.cfg.generation.lenpen == 0.5
    assert raw.cfg.model.dropout == 0.25 and raw.translate(line, lenpen=1.0, **GEN) == expected


class FakeApi:
    """Records what push_to_hub asks of huggingface_hub's ``HfApi`` (no network)."""

    calls = []

    def __init__(self, token=None):
        self.calls.append(("init", token))

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))

    def create_commit(self, operations, **kwargs):
        files = {op.path_in_repo: op.path_or_fileobj for op in operations}
        self.calls.append(("create_commit", files, kwargs))
        return SimpleNamespace(commit_url="https://hub/commit/1")


def test_push_uploads_a_checked_directory(corpus, tmp_path, monkeypatch, capsys):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    FakeApi.calls = []
    out = exported(corpus, FIRST)
    assert push_cli.main([str(out), "me/tiny", "--private", "--commit-message", "hello", "--no-pickle"]) == 0
    assert FakeApi.calls[1] == ("create_repo", "me/tiny", dict(private=True, exist_ok=True, repo_type="model"))
    _, files, commit = FakeApi.calls[2]
    assert commit["commit_message"] == "hello" and commit["repo_id"] == "me/tiny"
    expected = sorted(set(os.listdir(out)) - {"model.pt"})
    assert sorted(files) == expected and all(files[name] == (out / name).read_bytes() for name in files)
    listing = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in listing[:-1]] == [n for n in files] and listing[-1] == "https://hub/commit/1"
    FakeApi.calls = []
    assert push_cli.main([str(tmp_path), "me/tiny"]) == 1 and FakeApi.calls == []


# ---------------------------------------------------------------- safety and errors


class _Payload:
    """Unpickling this creates the marker file (stands for arbitrary code)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _refuse(*args, **kwargs):
    raise AssertionError("the loading path tried to unpickle")


def test_malicious_pickle_is_never_executed(corpus, tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    torch.save({"model": _Payload(marker), "cfg": None}, evil)
    torch.load(evil, weights_only=False)  # the payload is live ...
    assert marker.exists()
    marker.unlink()

    model_dir = copy_of(exported(corpus, FIRST), tmp_path / "dir")
    for name in ("model.pt", "checkpoint_best.pt", "pytorch_model.bin"):
        shutil.copyfile(evil, model_dir / name)
    cache = tmp_path / "cache"
    lay_out_hub_cache(cache, "evil/model", {"c" * 40: model_dir}, main="c" * 40)
    with monkeypatch.context() as m:
        for target, name in ((torch, "load"), (pickle, "load"), (pickle, "loads"), (pickle, "Unpickler")):
            m.setattr(target, name, _refuse)
        assert isinstance(hub.from_pretrained(model_dir).translate(corpus.test_lines[0], **GEN), str)
        hub.from_pretrained("evil/model", cache_dir=str(cache), local_files_only=True)
    assert not marker.exists()  # ... but loading never ran it
    with pytest.raises(PretrainedModelError, match="evil.pt: cannot be read safely"):
        export_checkpoint([evil], tmp_path / "out", data=corpus.bin)
    assert not marker.exists() and not (tmp_path / "out").exists()


def _edit_json(path: Path, **changes):
    config = json.loads(path.read_text())
    for key, value in changes.items():
        target = config
        *parents, leaf = key.split("__")
        for p in parents:
            target = target[p]
        target[leaf] = value
    path.write_text(json.dumps(config))


def resign(model_dir: Path) -> None:
    """Rewrite SHA256SUMS for the files still there: the checks behind the checksums are tested."""
    from fairseq_dense.hub.schema import parse_manifest, write_manifest

    listed = parse_manifest(str(model_dir / "SHA256SUMS"), (model_dir / "SHA256SUMS").read_bytes())
    write_manifest(model_dir, [n for n in listed if (model_dir / n).exists()])


ERROR_CASES = {
    "missing config": (lambda d: (d / "config.json").unlink(), "config.json: missing"),
    "missing weights": (lambda d: (d / "model.safetensors").unlink(), "model.safetensors: missing"),
    "missing dictionary": (lambda d: (d / "dict.tgt.txt").unlink(), "dict.tgt.txt: missing"),
    "missing bpe codes": (lambda d: (d / "bpecodes").unlink(), "bpecodes: missing"),
    "missing manifest": (lambda d: (d / "SHA256SUMS").unlink(), "SHA256SUMS: missing; .* re-export"),
    "dictionary outside the directory": (
        lambda d: _edit_json(d / "config.json", dictionaries__target__file="../dict.tgt.txt"),
        "config.json: key 'dictionaries.target.file' must be 'dict.tgt.txt'",
    ),
    "invalid json": (lambda d: (d / "config.json").write_text("{arch"), "config.json: not valid JSON"),
    "unknown architecture": (
        lambda d: _edit_json(d / "config.json", arch="future_model_tiny"),
        "config.json: key 'arch': unknown architecture \\(a string of 17 characters, not a registered",
    ),
    "unknown option": (
        lambda d: _edit_json(d / "config.json", model__future_option=3),
        "config.json: key 'model.future_option' is not accepted",
    ),
    "dictionary size": (
        lambda d: open(d / "dict.tgt.txt", "a").write("ZZ 1\n"),
        "dict.tgt.txt: 33 symbols, but config.json",
    ),
    "weights vs dictionaries": (
        lambda d: (
            open(d / "dict.tgt.txt", "a").write("ZZ 1\n"),
            _edit_json(d / "config.json", dictionaries__target__size=33),
        ),
        # the model's own load_state_dict names the tensor and the dictionary sizes
        r"model.safetensors: the weights do not load into .*the dictionaries do not match the checkpoint",
    ),
    "truncated weights": (
        lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:999]),
        "model.safetensors: corrupted",
    ),
    "garbage weights": (lambda d: (d / "model.safetensors").write_bytes(b"\x00" * 64), "model.safetensors: corrupted"),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_each_error_names_the_file(corpus, tmp_path, case):
    damage, message = ERROR_CASES[case]
    model_dir = copy_of(exported(corpus, FIRST), tmp_path / "dir")
    damage(model_dir)
    if (model_dir / "SHA256SUMS").exists():
        resign(model_dir)  # tests/test_hub_hostile.py checks that the checksums alone catch each change
    with pytest.raises(PretrainedModelError, match=message) as info:
        hub.from_pretrained(model_dir)
    assert "\n" not in str(info.value) and info.value.__cause__ is None


def test_not_a_directory_nor_repo_id(tmp_path):
    with pytest.raises(PretrainedModelError, match="no such model directory"):
        hub.from_pretrained(str(tmp_path / "nope"))
    with pytest.raises(PretrainedModelError, match="neither a model directory nor a hub repository id"):
        hub.from_pretrained("not a repo!")
