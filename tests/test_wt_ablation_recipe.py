"""The Weighted Transformer ablation's commands parse and build (examples/weighted_transformer/ablation.py).

Every variant's full ``fairseq-train`` command goes through fairseq's own parser; the
model is built on a small dictionary and, for every pair of variants meant to have the
same shape (Transformer against Weighted Transformer), the parameter counts differ by
the branch weights only.
"""

import importlib.util
import os

import pytest
from fairseq import options

import fairseq_dense  # noqa: F401
from fairseq_dense.models.weighted_transformer import WeightedTransformerModel
from tests import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location(
    "wt_ablation", os.path.join(ROOT, "examples", "weighted_transformer", "ablation.py")
)
ablation = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ablation)


def parsed(variant):
    cmd = ablation.command(variant, 3e-3, 1, 1500, "/nonexistent/save")
    assert cmd[0] == "fairseq-train"
    return options.parse_args_and_arch(options.get_training_parser(), cmd[1:])


def build(variant):
    args = parsed(variant)
    assert args.lr == [3e-3] and args.max_update == 1500
    if variant in ablation.GROUPED:
        assert args.lr_scheduler == "grouped" and args.group_freeze_last == "branch=150"
    model = args.arch.startswith("weighted") and WeightedTransformerModel or None
    from fairseq.models.transformer import TransformerModel

    cls = model or TransformerModel
    return cls.build_model(args, helpers.DummyTask(helpers.dummy_dictionary(64)))


@pytest.mark.parametrize("pair", [("transformer", "wt"), ("transformer_4l", "wt_4l"), ("transformer_d256", "wt_d256")])
def test_variants_parse_build_and_match_their_transformer(pair):
    base, weighted = (build(v) for v in pair)
    n_base = sum(p.numel() for p in base.parameters())
    n_weighted = sum(p.numel() for p in weighted.parameters())
    blocks = len(list(weighted.branch_blocks()))
    assert n_weighted == n_base + blocks * 2 * 4  # kappa and alpha, M = 4, per block


def test_every_variant_has_the_quick_start_dropout_and_embeddings():
    """As in the quick-start (its fairseq baseline is matched the same way): dropout 0.1 on
    residuals and attention probabilities, none on FFN activations, separate tables."""
    for variant in ablation.VARIANTS:
        args = parsed(variant)
        assert (args.dropout, args.attention_dropout, args.activation_dropout) == (0.1, 0.1, 0.0), variant
        assert not args.share_all_embeddings, variant


def test_every_variant_parses_and_builds():
    for variant in ablation.VARIANTS:
        assert sum(p.numel() for p in build(variant).parameters()) > 0, variant


def test_full_run_continues_its_sweep_run(tmp_path, monkeypatch):
    """Seed 1's full run starts from the sweep run's checkpoint and log; the grouped one does not."""
    monkeypatch.setattr(ablation, "WORK", str(tmp_path / "work"))
    monkeypatch.setattr(ablation, "LOGS", str(tmp_path / "logs"))
    for variant in ("wt", "wt_grouped_schedule"):
        name = f"{variant}/lr0.003-seed1-{ablation.SWEEP_UPDATES}"
        os.makedirs(tmp_path / "work" / name)
        (tmp_path / "work" / name / "checkpoint_last.pt").write_bytes(b"weights")
        os.makedirs(tmp_path / "logs" / variant, exist_ok=True)
        (tmp_path / "logs" / f"{name}.log").write_text("sweep lines\n")
    save = tmp_path / "work" / "wt" / "full"
    head = ablation.continue_sweep_run("wt", 3e-3, 1, ablation.UPDATES, str(save))
    assert head.endswith("sweep lines\n") and (save / "checkpoint_last.pt").read_bytes() == b"weights"
    assert ablation.continue_sweep_run("wt", 3e-3, 1, ablation.UPDATES, str(save)) == ""  # resumes its own
    assert ablation.continue_sweep_run("wt", 3e-3, 2, ablation.UPDATES, str(tmp_path / "s2")) == ""  # no seed-2 sweep
    grouped = tmp_path / "work" / "g"
    assert ablation.continue_sweep_run("wt_grouped_schedule", 3e-3, 1, ablation.UPDATES, str(grouped)) == ""
    assert not grouped.exists()


def test_sweep_goes_past_the_grid_while_its_top_rate_wins(monkeypatch):
    """A variant whose best rate is the largest tried gets 2x that rate too (until it loses)."""
    optimum = 1.2e-2
    trained = []

    def fake_train(variant, lr, seed, updates):
        trained.append((lr, seed, updates))
        return f"{lr}:{seed}:{updates}"

    monkeypatch.setattr(ablation, "train", fake_train)
    monkeypatch.setattr(ablation, "valid_losses", lambda log: {500: abs(float(log.split(":")[0]) - optimum)})
    monkeypatch.setattr(ablation, "bleu", lambda *a: 0.0)
    ablation.run("wt")
    sweep = [lr for lr, _, updates in trained if updates == ablation.SWEEP_UPDATES]
    assert sweep == [1e-3, 3e-3, 6e-3, 1.2e-2, 2.4e-2]
    assert {(lr, seed) for lr, seed, updates in trained if updates == ablation.UPDATES} == {(1.2e-2, 1), (1.2e-2, 2)}


def test_sweep_is_finished_only_when_nothing_is_left_to_try():
    def finished(losses):
        return ablation.sweep(losses.get)[1]

    assert not finished({1e-3: 5.0, 3e-3: 4.0})  # a grid rate missing
    assert not finished({1e-3: 5.0, 3e-3: 4.5, 6e-3: 4.0})  # top rate best: 1.2e-2 due
    assert finished({1e-3: 5.0, 3e-3: 4.0, 6e-3: 4.5})
    assert finished({1e-3: 5.0, 3e-3: 4.5, 6e-3: 4.0, 1.2e-2: 4.2})
    assert finished({1e-3: 5.0, 3e-3: 4.5, 6e-3: 4.0, 1.2e-2: 3.9, 2.4e-2: 3.8})  # MAX_RATE reached


def test_logs_record_paths_relative_to_the_repository(tmp_path, monkeypatch):
    monkeypatch.setattr(ablation, "WORK", str(tmp_path / "work"))
    line = "# " + " ".join(ablation.command("wt", 3e-3, 1, 1500, str(tmp_path / "work" / "wt" / "run")))
    written = ablation.recipes.relative(line, ablation.WORK, "wt-ablation-work")
    assert "fairseq-train wt-ablation-work/data/bin --user-dir user_dir " in written
    assert "--save-dir wt-ablation-work/wt/run " in written and str(tmp_path) not in written
