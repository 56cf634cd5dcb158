"""``fairseq-dense-average``: the last N checkpoints of any family, averaged, load and generate."""

import re

import pytest
import torch

from fairseq_dense.cli import average
from fairseq_dense.modules.simplex import is_on_simplex
from tests import reliability_helpers as rh


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    return rh.tiny_corpus(tmp_path_factory.mktemp("average_data"), 40)  # 5 updates per epoch


def _update_checkpoints(save):
    found = [(int(re.match(r"checkpoint_\d+_(\d+)\.pt", p.name).group(1)), p) for p in save.glob("checkpoint_*_*.pt")]
    return [p for _, p in sorted(found)]


@pytest.mark.slow
@pytest.mark.parametrize("arch", rh.tiny_archs())
def test_average_of_the_last_two_checkpoints_loads_and_generates(arch, data_bin, tmp_path):
    from fairseq import checkpoint_utils
    from fairseq.sequence_generator import SequenceGenerator

    save = tmp_path / "ckpt"
    train = ["--optimizer", "adam", "--lr", "0.01", "--batch-size", "8", "--save-interval-updates", "1"]
    rh.train_inprocess(rh.base_train_args(data_bin, save, arch, 3, *train))
    ckpts = _update_checkpoints(save)
    assert len(ckpts) == 3
    out = tmp_path / "averaged.pt"
    average.main([str(save), "--num-update-checkpoints", "2", "--output", str(out)])

    a, b = (rh.load_checkpoint(p)["model"] for p in ckpts[1:])
    avg = rh.load_checkpoint(out)["model"]
    assert list(avg) == list(a)
    moved = 0
    for k, v in avg.items():
        if v.is_floating_point():
            torch.testing.assert_close(v, (a[k] + b[k]) / 2, rtol=0, atol=1e-6)
            moved += not torch.equal(a[k], b[k])
        if k.endswith((".kappa", ".alpha")):
            assert is_on_simplex(v, atol=1e-6), k
    assert moved, "the two checkpoints are equal: the average proves nothing"

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(out)])
    task.load_dataset("valid")
    batches = task.get_batch_iterator(task.dataset("valid"), max_sentences=4).next_epoch_itr(shuffle=False)
    sample = next(batches)
    for m in models:
        m.eval()
    hyps = task.inference_step(
        SequenceGenerator(models, task.target_dictionary, beam_size=2, max_len_b=8), models, sample
    )
    assert len(hyps) == sample["nsentences"]
    assert all(h[0]["tokens"][-1] == task.target_dictionary.eos() for h in hyps)


@pytest.fixture
def bad(tmp_path):
    save = tmp_path / "ckpt"
    save.mkdir()
    torch.save({"model": {"w": torch.ones(2)}}, save / "checkpoint_1_1.pt")
    torch.save({"model": {"v": torch.ones(2)}}, save / "checkpoint_1_2.pt")
    (save / "checkpoint_1_3.pt").write_bytes(b"cut")
    torch.save({"model": {}, "x": torch.ones(1).numpy()[0]}, save / "np.pt")  # a numpy scalar: a refused global
    return save


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["{save}", "--num-update-checkpoints", "5"],
            r"--num-update-checkpoints 5: .* holds 3 checkpoint_<epoch>_<updates>.pt files, 5",
        ),
        (
            ["{save}/checkpoint_1_1.pt", "{save}/checkpoint_1_2.pt"],
            r"checkpoint_1_1\.pt holds other parameters than .*checkpoint_1_2\.pt",
        ),
        (["{save}/checkpoint_1_3.pt"], r"checkpoint_1_3\.pt: cannot be read safely as a fairseq checkpoint"),
        (["{save}/np.pt"], r"np\.pt: [^\x1b]* \(UnpicklingError: Unsupported global: GLOBAL numpy\.[^\x1b]*\)$"),
        (["{save}/missing.pt"], r"missing\.pt: no such checkpoint file"),
        (["{save}"], r"give one folder with --num-update-checkpoints"),
        (["{save}", "--num-epoch-checkpoints", "0"], r"--num-epoch-checkpoints: must be a positive number, not 0"),
        (["{save}/checkpoint_1_1.pt", "--checkpoint-upper-bound", "1"], r"give one folder with .*or checkpoint files"),
        (["{save}", "--checkpoint-upper-bound", "-1"], r"--checkpoint-upper-bound: must be a positive number, not -1"),
        (
            ["{save}", "--num-update-checkpoints", "2", "--checkpoint-upper-bound", "1"],
            r"--num-update-checkpoints 2: .* holds 1 checkpoint_<epoch>_<updates>.pt files up to 1, 2 needed",
        ),
        (["{save}/checkpoint_1_1.pt", "--output", "{save}"], r"cannot write .*ckpt: Is a directory"),
        (["{save}/checkpoint_1_1.pt", "--output", "{save}/checkpoint_1_1.pt/a.pt"], r"cannot write .*: File exists"),
    ],
)
def test_bad_input_gives_a_usage_error_naming_the_cause(bad, tmp_path, capsys, argv, message):
    out = tmp_path / "avg.pt"
    with pytest.raises(SystemExit) as e:
        average.main(["--output", str(out)] + [a.format(save=bad) for a in argv])
    assert e.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.search(message, last), last
    assert not out.exists() and not (tmp_path / "avg.pt.tmp").exists() and not (bad.parent / "ckpt.tmp").exists()


def test_checkpoint_upper_bound_leaves_out_the_later_checkpoints(tmp_path):
    """``--checkpoint-upper-bound K``: the last N checkpoints up to update (or epoch) K, not the last N."""
    for k in (1, 2, 3):
        torch.save({"model": {"w": torch.full((2,), float(k))}}, tmp_path / f"checkpoint_1_{k}.pt")
        torch.save({"model": {"w": torch.full((2,), 10.0 * k)}}, tmp_path / f"checkpoint{k}.pt")
    for kind, expected in (("update", 1.5), ("epoch", 15.0)):
        out = tmp_path / f"{kind}.pt"
        argv = [str(tmp_path), f"--num-{kind}-checkpoints", "2", "--checkpoint-upper-bound", "2", "--output", str(out)]
        assert average.main(argv) == 0
        assert torch.equal(rh.load_checkpoint(out)["model"]["w"], torch.full((2,), expected)), kind


@pytest.fixture(scope="module")
def update_run(data_bin, tmp_path_factory):
    """A gru_attention_tiny run of 3 updates with a checkpoint after each."""
    save = tmp_path_factory.mktemp("update_run") / "ckpt"
    train = ["--optimizer", "adam", "--lr", "0.01", "--batch-size", "8", "--save-interval-updates", "1"]
    rh.train_inprocess(rh.base_train_args(data_bin, save, "gru_attention_tiny", 3, *train))
    return save


@pytest.mark.slow
def test_export_average_last_equals_average_then_export(data_bin, update_run, tmp_path):
    """``fairseq-dense-export --average-last N`` and ``fairseq-dense-average`` then ``fairseq-dense-export``
    write bit-identical weights: both average through ``fairseq_dense.checkpoints.average_models``."""
    from safetensors.torch import load_file

    from fairseq_dense.cli import export

    save = update_run
    common = ["--tokenizer", "none", "--data", str(data_bin)]
    # three: a mean of two rounds alike in float32 and float64 (halving is exact), of three not
    assert export.main([str(save), "--average-last", "3", "--update-based", "--out", str(tmp_path / "a"), *common]) == 0
    averaged = tmp_path / "averaged.pt"
    assert average.main([str(save), "--num-update-checkpoints", "3", "--output", str(averaged)]) == 0
    assert export.main([str(averaged), "--out", str(tmp_path / "b"), *common]) == 0
    a, b = (load_file(str(tmp_path / d / "model.safetensors")) for d in "ab")
    assert list(a) == list(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and torch.equal(a[name], b[name]), name
    c1, c2 = (rh.load_checkpoint(p)["model"] for p in _update_checkpoints(save)[:2])
    assert any(not torch.equal(c1[k], c2[k]) for k in a), "the checkpoints are equal: the test proves nothing"


@pytest.mark.slow
def test_export_force_swaps_the_folder_and_removes_what_killed_exports_left(data_bin, update_run, tmp_path):
    """``--force`` swaps the new export with the old one in one step (``renameat2``), so ``--out`` always
    holds one of them; the temporary folders of an export killed midway are removed by the next one."""
    import json

    from fairseq_dense.cli import export
    from fairseq_dense.hub.export import swap_paths

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "f").write_text("a"), (b / "f").write_text("b")
    swap_paths(a, b)
    assert (a / "f").read_text() == "b" and (b / "f").read_text() == "a"

    out = tmp_path / "model"
    common = ["--tokenizer", "none", "--data", str(data_bin), "--out", str(out)]
    assert export.main([str(update_run / "checkpoint_1_1.pt"), *common]) == 0
    killed = [tmp_path / ".model.export-abc123", tmp_path / ".model.export-old-99"]  # a killed export's folders
    for leftover in killed:
        leftover.mkdir()
        (leftover / "config.json").write_text("{}")
    assert export.main([str(update_run / "checkpoint_1_3.pt"), *common]) == 1  # not without --force
    assert export.main([str(update_run / "checkpoint_1_3.pt"), *common, "--force"]) == 0
    assert json.loads((out / "config.json").read_text())["checkpoints"] == ["checkpoint_1_3.pt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "model"]
