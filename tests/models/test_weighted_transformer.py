"""Tests of the Weighted Transformer (Ahmed et al., 2017) and its training hooks."""

import json
import re

import pytest
import torch
from fairseq import optim, options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.models.transformer import TransformerModel
from fairseq.optim.lr_scheduler import build_lr_scheduler
from fairseq.tasks.translation import TranslationTask
from fairseq.trainer import Trainer

import fairseq_dense  # noqa: F401
from fairseq_dense import baselines
from fairseq_dense.models.weighted_transformer import WeightedTransformerModel
from fairseq_dense.modules.simplex import is_on_simplex, project_onto_simplex, simplex_parameters
from fairseq_dense.tasks.translation_exact_resume import TranslationExactResumeSimplexTask
from tests import helpers
from tests.models import families

TINY = baselines.flags(**families.TINY["weighted_transformer"])


# Most tests here are about kappa and alpha, so they build the paper's form, with the branch
# weights learned; tiny's default (both fixed to 1) has its own tests (test_default_fixes_the_branch_weights).
LEARNED = "--learned-branch-weights"


def parse(*flags, arch="weighted_transformer_tiny", task="translation_weighted", learned=True):
    parser = options.get_training_parser()
    extra = [LEARNED] if learned and arch.startswith("weighted_transformer") else []
    return options.parse_args_and_arch(
        parser,
        input_args=["/nonexistent", "--arch", arch, "--task", task, "--cpu", *extra, *flags],
    )


def build(*flags, arch="weighted_transformer_tiny", vocab=16):
    torch.manual_seed(0)
    d = helpers.dummy_dictionary(vocab)
    args = parse("--dropout", "0", *TINY, *flags, arch=arch)
    return WeightedTransformerModel.build_model(args, helpers.DummyTask(d)), d


def test_plain_cross_attention_decodes_the_same_with_and_without_its_cache():
    """fairseq's MultiheadAttention keeps encoder-decoder keys in place when the batch size is unchanged
    (beam copies of a sentence share them), so an arbitrary permutation of the cache is not its
    contract (tests/models/test_contract.py checks the other variants'): beam search with the cache
    (reorders, finished sentences leaving the batch) must find what it finds without it."""
    model, d = build("--decoder-plain-cross-attn")
    sample = helpers.make_sample(d)
    helpers.check_incremental_equals_full(model, sample)
    helpers.check_padding_invariance(model, sample)
    sample7 = helpers.make_sample(d, src_lengths=(5, 7, 3, 6, 4, 2, 7), tgt_lengths=(4, 6, 5, 3, 4, 2, 6))
    model.decoder.output_projection.weight.data[d.eos()] *= 3  # let some sentences finish early
    helpers.assert_same_hypotheses(
        helpers.beam_search(model, d, sample7), helpers.beam_search(model, d, sample7, cached=False), atol=1e-4
    )
    model, d = build("--dropout", "0.2", "--attention-dropout", "0.1", "--decoder-plain-cross-attn")
    helpers.check_all_params_get_finite_grads(model, sample)


def test_parameter_count_equals_transformer_plus_2m_per_block():
    d = helpers.dummy_dictionary(16)
    cases = (
        (
            "weighted_transformer_tiny",
            "transformer_tiny",
            4,
            2,
            [
                "--encoder-ffn-embed-dim",
                "256",
                "--decoder-ffn-embed-dim",
                "256",
                "--encoder-attention-heads",
                "4",
                "--decoder-attention-heads",
                "4",
            ],
        ),
        ("weighted_transformer_c", "transformer", 8, 2, ["--encoder-layers", "2", "--decoder-layers", "2"]),
    )
    for arch, base_arch, m, layers, base_flags in cases:
        weighted = WeightedTransformerModel.build_model(parse(arch=arch), helpers.DummyTask(d))
        base_args = parse(*base_flags, arch=base_arch, task="translation")
        base = TransformerModel.build_model(base_args, helpers.DummyTask(d))
        n_w = sum(p.numel() for p in weighted.parameters())
        n_b = sum(p.numel() for p in base.parameters())
        blocks = 2 * layers  # one branched block per encoder and per decoder layer
        assert n_w == n_b + blocks * 2 * m, arch
        assert len(list(weighted.branch_blocks())) == blocks


def test_branch_weights_are_tagged_and_on_the_simplex():
    model, _ = build()
    weights = model.branch_weights()
    assert len(weights) == 2 * 4 and set(weights) >= {"enc0.kappa", "dec1.alpha"}
    for name, block in model.branch_blocks():
        for p in (block.kappa, block.alpha):
            assert p.param_group == "branch" and p.on_simplex
            assert is_on_simplex(p, atol=1e-6) and (p > 0).all()
    stats = model.get_logging_stats()
    assert set(stats) == {f"{n}_{s}" for n in weights for s in ("ent", "max")}
    assert all(0 < v <= 1.3863 + 1e-4 for k, v in stats.items() if k.endswith("_ent"))


def test_ablation_flags():
    model, _ = build("--fixed-kappa")
    assert all(b.kappa is None and b.alpha is not None for _, b in model.branch_blocks())
    model, _ = build("--fixed-kappa", "--fixed-alpha")
    assert model.branch_weights() == {} and not simplex_parameters(model)
    model, _ = build("--no-simplex")
    assert not simplex_parameters(model)
    model.set_num_updates(1)  # nothing to project: no task needed


def test_default_fixes_the_branch_weights():
    """weighted_transformer_tiny (like _small) fixes kappa and alpha to 1 by default (measured:
    docs/weighted_transformer.md; the paper presets learn them, tests/test_paper_presets.py);
    --learned-branch-weights learns both (the paper), --fixed-kappa / --fixed-alpha fix one."""

    def learned(*flags):
        model = WeightedTransformerModel.build_model(
            parse(*TINY, *flags, learned=False), helpers.DummyTask(helpers.dummy_dictionary(16))
        )
        kinds = {(b.kappa is not None, b.alpha is not None) for _, b in model.branch_blocks()}
        assert len(kinds) == 1
        return kinds.pop()

    assert learned() == (False, False)
    assert learned(LEARNED) == (True, True)
    assert learned(LEARNED, "--fixed-alpha") == (True, False)
    assert learned(LEARNED, "--fixed-kappa") == (False, True)
    assert learned("--fixed-kappa", "--fixed-alpha") == (False, False)


def test_configurations_saved_before_the_fixed_default_keep_learned_weights():
    """A checkpoint's configuration from before fixed weights became the default holds
    fixed_kappa = fixed_alpha = False and no learned_branch_weights: its model is the learned one."""
    args = parse(*TINY, learned=False)
    args.fixed_kappa = args.fixed_alpha = False
    del args.learned_branch_weights
    cfg = convert_namespace_to_omegaconf(args).model
    model = WeightedTransformerModel.build_model(cfg, helpers.DummyTask(helpers.dummy_dictionary(16)))
    assert all(b.kappa is not None and b.alpha is not None for _, b in model.branch_blocks())
    assert len(model.branch_weights()) == 2 * 4


def test_loading_mismatched_branch_weights_names_the_flag():
    """A checkpoint with learned kappa/alpha into a model that fixes them (e.g. an older run
    resumed without --learned-branch-weights), or the other way round: a clear error."""
    learned, _ = build()
    fixed, _ = build("--fixed-kappa", "--fixed-alpha")
    with pytest.raises(RuntimeError, match="build it with --learned-branch-weights"):
        fixed.load_state_dict(learned.state_dict())
    with pytest.raises(RuntimeError, match="drop --learned-branch-weights"):
        learned.load_state_dict(fixed.state_dict())
    fixed.load_state_dict(build("--fixed-kappa", "--fixed-alpha")[0].state_dict())  # matching: loads


def test_branch_init_transformer_draws_the_matrices_as_the_transformer_does():
    """--branch-init transformer (the default): each branch's W^O, W1, W2 and FFN biases have the
    bounds of fairseq's transformer matrices they split (whole fan-in / fan-out); xavier: their own
    shape's."""
    dims = ["--encoder-embed-dim", "128", "--decoder-embed-dim", "128"]
    ffn = ["--encoder-ffn-embed-dim", "512", "--decoder-ffn-embed-dim", "512"]
    xavier, _ = build(*dims, *ffn, "--branch-init", "xavier")
    matched, _ = build(*dims, *ffn)
    torch.manual_seed(0)
    base = TransformerModel.build_model(
        parse("--dropout", "0", *TINY, *dims, *ffn, arch="transformer_tiny", task="translation"),
        helpers.DummyTask(helpers.dummy_dictionary(16)),
    )
    layer = base.encoder.layers[0]

    def bound(t):
        return t.detach().abs().max().item()

    block = dict(matched.branch_blocks())["enc0"]
    own = dict(xavier.branch_blocks())["enc0"]
    for ours, theirs in (
        (block.out_weight, layer.self_attn.out_proj.weight),
        (block.fc1_weight, layer.fc1.weight),
        (block.fc2_weight, layer.fc2.weight),
        (block.fc1_bias, layer.fc1.bias),
        (block.fc2_bias, layer.fc2.bias),
    ):
        assert bound(ours) == pytest.approx(bound(theirs), rel=0.05)
    assert bound(block.out_bias) == 0 == bound(layer.self_attn.out_proj.bias)
    # the default draws each branch for its own shape: W2_i (128 x 128) twice the Transformer's bound
    assert bound(own.fc2_weight) > 1.8 * bound(layer.fc2.weight) and bound(own.fc1_bias) == 0
    for name, p in matched.named_parameters():  # same parameters, same shapes
        assert p.shape == dict(xavier.named_parameters())[name].shape, name
    with pytest.raises(SystemExit):
        parse("--branch-init", "kaiming")


def test_inference_weight_override():
    model, d = build()
    sample = helpers.make_sample(d)
    model.eval()
    learned, _ = model(**sample["net_input"])
    for mode in ("uniform", "random"):
        for _, block in model.branch_blocks():
            block.inference_weights = mode
        out, _ = model(**sample["net_input"])
        assert not torch.allclose(out, learned)
        block = model.encoder.layers[0].branched
        w = block.branch_weights("kappa")
        assert is_on_simplex(w)
        if mode == "uniform":
            torch.testing.assert_close(w, torch.full((4,), 0.25))
        helpers.check_incremental_equals_full(model, sample)
        model.train()
        assert block.branch_weights("kappa") is block.kappa  # training uses learned weights
        model.eval()


@pytest.mark.parametrize("mode", ["uniform", "random"])
def test_fixed_inference_weights_first_used_in_inference_mode(mode):
    """Fixed branch weights derived inside ``torch.inference_mode()`` (inference tensors) give the
    ``no_grad`` outputs, in later calls too."""
    model, d = build("--branch-weights-at-inference", mode)
    sample = helpers.make_sample(d)
    model.eval()
    with torch.no_grad():
        want, _ = model(**sample["net_input"])
    with torch.inference_mode():
        first, _ = model(**sample["net_input"])
        again, _ = model(**sample["net_input"])
    with torch.no_grad():
        after, _ = model(**sample["net_input"])
    for out in (first, again, after):
        torch.testing.assert_close(out, want)
    with torch.inference_mode():
        helpers.check_incremental_equals_full(model, sample)


def test_option_errors():
    for flags, flag in (
        (["--encoder-branches", "3"], "--encoder-branches"),
        (["--decoder-branches", "-1"], "--decoder-branches"),
        (["--decoder-ffn-embed-dim", "30"], "--decoder-ffn-embed-dim"),
        (["--cross-self-attention"], "--cross-self-attention"),
        (["--no-cross-attention"], "--no-cross-attention"),  # was silently ignored
        # fixed kappa and alpha: no learned weight to replace (it was silently ignored)
        (["--fixed-kappa", "--fixed-alpha", "--branch-weights-at-inference", "uniform"], "--branch-weights-at"),
    ):
        with pytest.raises(ValueError, match=flag):
            build(*flags)


def test_fallback_projection_without_the_projecting_task(caplog):
    model, _ = build()
    before = {k: v.clone() for k, v in model.branch_weights().items()}
    model.set_num_updates(0)  # on the simplex (e.g. a trained model loaded for generation)
    assert all(torch.equal(v, before[k]) for k, v in model.branch_weights().items())
    alpha = model.decoder.layers[1].cross_branched.alpha
    with torch.no_grad():
        alpha.add_(0.01)  # what an unprojected step does
    expected = project_onto_simplex(alpha.detach().clone())
    with caplog.at_level("WARNING"):
        model.set_num_updates(1)
    assert "--task translation_exact_resume_simplex" in caplog.text
    torch.testing.assert_close(alpha.detach(), expected, atol=0, rtol=0)
    model = model.to(torch.bfloat16)  # no fallback for half-precision weights
    with torch.no_grad():
        model.decoder.layers[1].cross_branched.alpha.add_(0.1)
    with pytest.raises(RuntimeError, match="--task translation_exact_resume_simplex"):
        model.set_num_updates(2)


def test_real_updates_under_plain_translation_task_stay_on_simplex():
    d = helpers.dummy_dictionary(16)
    args = parse(
        "--optimizer", "adam", "--lr", "0.05", "--lr-scheduler", "fixed", "--dropout", "0", *TINY, task="translation"
    )
    cfg = convert_namespace_to_omegaconf(args)
    task = TranslationTask(cfg.task, d, d)
    model = task.build_model(cfg.model)
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    for step in range(3):
        trainer.train_step(samples(d, 1, seed=step))
    model.set_num_updates(trainer.get_num_updates())  # what the next train_step does first
    for name, w in model.branch_weights().items():
        assert is_on_simplex(w, atol=1e-6), name


def test_inference_weights_option_reaches_every_block():
    model, _ = build("--branch-weights-at-inference", "uniform", "--decoder-branched-self-attn")
    assert {b.inference_weights for _, b in model.branch_blocks()} == {"uniform"}
    assert len(list(model.branch_blocks())) == 6


# ------------------------------------------------------------ real fairseq updates
def make_trainer(*flags):
    d = helpers.dummy_dictionary(16)
    args = parse(
        "--optimizer",
        "adam",
        "--criterion",
        "label_smoothed_cross_entropy_with_stats",
        "--lr-scheduler",
        "grouped",
        "--lr",
        "0.05",
        "--dropout",
        "0",
        *TINY,
        *flags,
    )
    cfg = convert_namespace_to_omegaconf(args)
    torch.manual_seed(0)
    task = TranslationExactResumeSimplexTask(cfg.task, d, d)
    model = task.build_model(cfg.model)
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    return trainer, model, d


def samples(d, n, seed):
    return [helpers.make_sample(d, seed=seed + i) for i in range(n)]


def test_projection_after_real_updates_with_update_freq_2(monkeypatch):
    trainer, model, d = make_trainer("--update-freq", "2", "--group-lr-scale", "branch=0.5")
    import fairseq_dense.tasks.translation_exact_resume as tw

    seen = []
    real = tw.project_parameters_after_step

    def spy(m, optimizer):
        before = {k: v.clone() for k, v in model.branch_weights().items()}
        n = real(m, optimizer)
        seen.append((before, {k: v.clone() for k, v in model.branch_weights().items()}, n))
        return n

    monkeypatch.setattr(tw, "project_parameters_after_step", spy)
    for step in range(4):
        trainer.train_step(samples(d, 2, seed=10 * step))
    assert trainer.get_num_updates() == 4 and len(seen) == 4  # once per update
    moved = 0
    for before, after, n in seen:
        assert n == 8
        for name, w in after.items():
            assert is_on_simplex(w, atol=1e-6), name
            torch.testing.assert_close(w, project_onto_simplex(before[name]), atol=0, rtol=0)
            moved += not is_on_simplex(before[name], atol=1e-6)
    assert moved > 0  # the large branch learning rate really pushed them off the simplex


def test_freeze_is_bit_identical_also_after_resume(tmp_path):
    flags = ["--group-lr-scale", "branch=0.5", "--group-freeze-last", "branch=3", "--max-update", "8"]
    trainer, model, d = make_trainer(*flags)
    data = samples(d, 8, seed=0)
    for i in range(6):  # updates 1..5 train kappa/alpha, 6..8 are frozen
        if i == 5:
            frozen = {k: v.clone() for k, v in model.branch_weights().items()}
            other = model.encoder.layers[0].branched.fc1_weight.detach().clone()
            trainer.consolidate_optimizer()  # as fairseq's checkpoint_utils does
            trainer.save_checkpoint(str(tmp_path / "ckpt.pt"), {"train_iterator": {"epoch": 1}})
        trainer.train_step([data[i]])
    assert trainer.lr_scheduler.lrs["branch"] == 0.0

    def check(m):
        for k, v in m.branch_weights().items():
            assert torch.equal(v, frozen[k]), k
        assert not torch.equal(m.encoder.layers[0].branched.fc1_weight, other)

    for i in range(6, 8):
        trainer.train_step([data[i]])
    check(model)

    resumed, model2, _ = make_trainer(*flags)
    resumed.load_checkpoint(str(tmp_path / "ckpt.pt"))
    assert resumed.get_num_updates() == 5
    for i in range(5, 8):
        resumed.train_step([data[i]])
    assert resumed.get_num_updates() == 8
    check(model2)


def test_bf16_master_weights_are_projected():
    """fairseq's FP16Optimizer (bf16 on CPU; the trainer would take --bf16 --cpu for TPU)."""
    d = helpers.dummy_dictionary(16)
    args = parse(
        "--optimizer",
        "adam",
        "--lr-scheduler",
        "grouped",
        "--lr",
        "0.05",
        "--bf16",
        "--group-lr-scale",
        "branch=0.5",
        "--dropout",
        "0",
        *TINY,
    )
    cfg = convert_namespace_to_omegaconf(args)
    torch.manual_seed(0)
    task = TranslationExactResumeSimplexTask(cfg.task, d, d)
    model = task.build_model(cfg.model).to(torch.bfloat16)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = optim.FP16Optimizer.build_optimizer(cfg, params)
    build_lr_scheduler(cfg.lr_scheduler, opt).step_update(0)
    masters = {id(p16): p32 for p16, p32 in zip(opt.fp16_params, opt.fp32_params)}
    for step in range(2):
        sample = helpers.make_sample(d, seed=step)
        out, _ = model(**sample["net_input"])
        opt.backward(torch.log_softmax(out.float(), -1).gather(-1, sample["target"].unsqueeze(-1)).mean())
        task.optimizer_step(opt, model, step)
        opt.zero_grad()
    for _, block in model.branch_blocks():
        for p in (block.kappa, block.alpha):
            master = masters[id(p)]
            assert p.dtype == torch.bfloat16 and master.dtype == torch.float32
            assert is_on_simplex(master, atol=1e-6)
            assert torch.equal(p.data, master.data.to(torch.bfloat16))


# ------------------------------------------------------------------------ CLI
@pytest.mark.slow
def test_cli_train_generate_and_dump(tmp_path):
    raw = helpers.write_copy_corpus(tmp_path / "raw", n_train=2000, n_valid=50, n_test=50, vocab=8, max_len=6)
    data = helpers.preprocess(raw, tmp_path / "bin")
    ckpt = tmp_path / "ckpt"
    train = helpers.run_cli(
        "fairseq-train",
        data,
        "--user-dir",
        helpers.USER_DIR,
        "--task",
        "translation_weighted",
        "--arch",
        "weighted_transformer_tiny",
        LEARNED,
        "--encoder-embed-dim",
        "32",
        "--decoder-embed-dim",
        "32",
        "--encoder-ffn-embed-dim",
        "64",
        "--decoder-ffn-embed-dim",
        "64",
        "--share-all-embeddings",
        "--criterion",
        "label_smoothed_cross_entropy_with_stats",
        "--label-smoothing",
        "0.1",
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9, 0.98)",
        "--adam-eps",
        "1e-9",
        "--lr-scheduler",
        "grouped",
        "--lr",
        "0.003",
        "--group-warmup-updates",
        "default=40,branch=10",
        "--group-lr-scale",
        "default=0.02,branch=0.05",
        "--group-freeze-last",
        "branch=20",
        "--max-update",
        "240",
        "--max-tokens",
        "800",
        "--cpu",
        "--seed",
        "1",
        "--disable-validation",
        "--save-dir",
        ckpt,
        "--save-interval-updates",
        "50",
        "--no-epoch-checkpoints",
        "--log-interval",
        "40",
        "--log-format",
        "simple",
    )
    # branch weights and both groups' learning rates are logged
    assert "model/enc0.kappa_ent" in train.stderr + train.stdout
    assert "lr_branch" in train.stderr + train.stdout
    gen = helpers.run_cli(
        "fairseq-generate",
        data,
        "--user-dir",
        helpers.USER_DIR,  # any translation task generates
        "--path",
        ckpt / "checkpoint_last.pt",
        "--beam",
        "5",
        "--batch-size",
        "64",
        "--required-batch-size-multiple",
        "1",
        "--cpu",
    )
    hyps = helpers.hypotheses_from_generate(gen.stdout)
    refs = helpers.references_from_generate(gen.stdout)
    assert len(hyps) == len(refs) == 50
    bleu = float(re.search(r"BLEU4 = ([\d.]+)", gen.stdout).group(1))
    assert bleu >= 40, gen.stdout[-1500:]  # an untrained model scores about 0

    from fairseq_dense.cli.dump_branch_weights import main as dump

    out = tmp_path / "weights"
    mids = [str(p) for p in ckpt.glob("checkpoint_*_*.pt")]  # every 50 updates (not at epoch ends)
    assert mids
    dump([str(ckpt / "checkpoint_last.pt"), *mids, "--out", str(out)])
    series = json.loads(out.with_name("weights.json").read_text())
    updates = [c["num_updates"] for c in series["checkpoints"]]
    assert updates == sorted(updates) and updates[-1] == 240 and len(updates) >= 2
    last = series["checkpoints"][-1]["weights"]
    assert set(last) >= {"encoder.layers.0.branched.kappa", "decoder.layers.1.cross_branched.alpha"}
    assert all(abs(sum(v) - 1) < 1e-5 and min(v) >= 0 for v in last.values())
    assert out.with_name("weights.png").stat().st_size > 1000


# ------------------------------------------------------------ any task: projected on the step itself
def test_plain_translation_task_every_checkpoint_on_simplex(tmp_path):
    """Under fairseq's ``translation`` (with ``--update-freq 2``) kappa/alpha are projected on
    the optimizer step itself: on the simplex right after each update, so in every checkpoint."""
    d = helpers.dummy_dictionary(16)
    args = parse(
        "--optimizer",
        "adam",
        "--lr",
        "0.05",
        "--lr-scheduler",
        "grouped",
        "--group-lr-scale",
        "branch=0.5",
        "--update-freq",
        "2",
        "--dropout",
        "0",
        *TINY,
        task="translation",
    )
    cfg = convert_namespace_to_omegaconf(args)
    torch.manual_seed(0)
    task = TranslationTask(cfg.task, d, d)
    model = task.build_model(cfg.model)
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    start = {k: v.clone() for k, v in model.branch_weights().items()}
    for step in range(3):
        trainer.train_step(samples(d, 2, seed=10 * step))
        trainer.consolidate_optimizer()  # as fairseq's checkpoint_utils does
        trainer.save_checkpoint(str(tmp_path / f"ckpt{step}.pt"), {"train_iterator": {"epoch": 1}})
        saved = torch.load(tmp_path / f"ckpt{step}.pt", map_location="cpu", weights_only=True)["model"]
        for name in (k for k in saved if k.endswith((".kappa", ".alpha"))):
            assert is_on_simplex(saved[name], atol=1e-6), (step, name, float(saved[name].sum()))
    assert trainer.get_num_updates() == 3
    assert any(not torch.equal(v, start[k]) for k, v in model.branch_weights().items())  # they trained


def test_half_precision_under_another_task_is_refused_at_once():
    """Only ``translation_exact_resume_simplex`` reaches fp32 master copies: --fp16/--bf16 elsewhere stop
    before the first update, with a one-line (ValueError) message naming the task."""
    d = helpers.dummy_dictionary(16)
    cfg = convert_namespace_to_omegaconf(parse("--dropout", "0", *TINY, task="translation"))
    model = TranslationTask(cfg.task, d, d).build_model(cfg.model).to(torch.bfloat16)
    with pytest.raises(ValueError, match="train with --task translation_exact_resume_simplex"):
        model.set_num_updates(0)  # what the first train_step does first
    hooked = TranslationExactResumeSimplexTask(cfg.task, d, d).build_model(cfg.model).to(torch.bfloat16)
    hooked.set_num_updates(0)
    off = parse("--dropout", "0", "--no-simplex", *TINY, task="translation")
    plain = TranslationTask(cfg.task, d, d).build_model(convert_namespace_to_omegaconf(off).model)
    plain.to(torch.bfloat16).set_num_updates(0)  # nothing to keep on the simplex


def test_plain_cross_attn_moves_the_branches_to_decoder_self_attention():
    default, _ = build()
    plain, _ = build("--decoder-plain-cross-attn")
    # same parameters: the decoder's branched block (2M branch weights and the FFNs) moves
    # from the encoder-decoder attention to the self-attention
    assert sum(p.numel() for p in plain.parameters()) == sum(p.numel() for p in default.parameters())
    names = [n for n, _ in plain.branch_blocks()]
    assert names == ["enc0", "enc1", "dec0.self", "dec1.self"]
    assert all(layer.cross_branched is None and layer.encoder_attn is not None for layer in plain.decoder.layers)
    with pytest.raises(ValueError, match="--decoder-branched-self-attn"):
        build("--decoder-plain-cross-attn", "--decoder-branched-self-attn")


# The cross-entropy of one fixed batch, recorded from the block before the speed work of issue 53
# (main 6f6b69e, torch 2.13 CPU, float32, dropout 0): a rewrite of the block for speed must
# give the same numbers, in train and in eval mode.
RECORDED_LOSSES = {
    ("--fixed-kappa", "--fixed-alpha"): 3.2419698238372803,
    (): 3.0487334728240967,
    ("--encoder-branches", "2"): 3.6595075130462646,
    ("--decoder-branched-self-attn",): 3.875577926635742,
    ("--encoder-normalize-before", "--decoder-normalize-before"): 3.164761543273926,
}


@pytest.mark.parametrize("flags", list(RECORDED_LOSSES), ids=lambda f: " ".join(f) or "learned")
def test_loss_of_a_fixed_batch_is_unchanged(flags):
    model, d = build(*flags)
    sample = helpers.make_sample(d, src_lengths=(5, 9, 3), tgt_lengths=(4, 7, 6))
    for train in (True, False):
        model.train(train)
        out, _ = model(**sample["net_input"])
        loss = torch.nn.functional.cross_entropy(
            out.view(-1, out.size(-1)), sample["target"].view(-1), ignore_index=d.pad()
        )
        assert loss.item() == pytest.approx(RECORDED_LOSSES[flags], rel=1e-5)
