"""Unit and CLI tests of Deep-Att / Deep-ED (fast-forward deep LSTMs, Zhou et al. 2016)."""

import argparse

import pytest
import torch
import torch.nn as nn

import fairseq_dense  # noqa: F401
from fairseq_dense.models.fast_forward_lstm import FastForwardLSTMModel
from fairseq_dense.modules.encoder_decoder import reverse_padded
from fairseq_dense.modules.fast_forward_lstm import FastForwardLSTM
from tests import helpers
from tests.models.families import build as build_family


def build(randomize_recurrent=True, **overrides):
    """A small model; recurrent matrices are randomised (they start at zero) so the tests see them."""
    return build_family("fast_forward_lstm", randomize_recurrent=randomize_recurrent, **overrides)


def test_recurrent_matrices_start_at_zero_and_are_tagged():
    model, _ = build(randomize_recurrent=False, init_std=0.05, encoder_layers=4, decoder_layers=3)
    rec_params = model.recurrent_parameters()
    # 2 columns x 4 encoder layers + 3 decoder layers, each one W_hh (4H x H)
    assert len(rec_params) == 2 * 4 + 3
    names = {n for n, p in model.named_parameters() if getattr(p, "param_group", None) == "recurrent"}
    assert all(n.endswith("weight_hh") for n in names) and len(names) == len(rec_params)
    assert all(p.abs().max() == 0 for p in rec_params)
    w = model.encoder.columns[0].layers[1].ff.weight
    assert w.abs().max() > 0 and abs(w.std().item() - 0.05) < 0.01


def _map_lstm_weights(stack: FastForwardLSTM, lstm: nn.LSTM, layer_offset: int = 0) -> None:
    """W_f = W_ih, b_f = b_ih + b_hh, recurrent W_hh = W_hh."""
    with torch.no_grad():
        for k, layer in enumerate(stack.layers):
            j = k - layer_offset
            if not 0 <= j < lstm.num_layers:
                continue
            layer.ff.weight.copy_(getattr(lstm, f"weight_ih_l{j}"))
            layer.ff.bias.copy_(getattr(lstm, f"bias_ih_l{j}") + getattr(lstm, f"bias_hh_l{j}"))
            layer.weight_hh.copy_(getattr(lstm, f"weight_hh_l{j}"))


def test_no_fast_forward_unidirectional_equals_stacked_lstm():
    """FF off, one direction: exactly ``nn.LSTM(num_layers=3)`` with mapped weights (Table 2 'No FF')."""
    torch.manual_seed(0)
    lstm = nn.LSTM(5, 7, num_layers=3)
    stack = FastForwardLSTM(5, 7, 3, fast_forward=False, interleave=False)
    _map_lstm_weights(stack, lstm)
    x = torch.randn(6, 4, 5)
    f, h, finals = stack(x)
    ref, (h_n, c_n) = lstm(x)
    torch.testing.assert_close(h, ref)
    torch.testing.assert_close(torch.stack([s[0] for s in finals]), h_n)
    torch.testing.assert_close(torch.stack([s[1] for s in finals]), c_n)


def test_encoder_column_without_ff_is_a_stacked_lstm():
    """The model's own encoder column (FF off, unidirectional, one column) == nn.LSTM on the embeddings."""
    model, d = build(no_fast_forward=True, no_interleave=True, encoder_columns=1)
    column = model.encoder.columns[0]
    lstm = nn.LSTM(8, 6, num_layers=3)
    _map_lstm_weights(column, lstm)
    src = helpers.random_tokens(d, [5, 5], left_pad=False)
    x = model.encoder.embed_tokens(src).transpose(0, 1)
    torch.testing.assert_close(column(x, torch.tensor([5, 5]))[1], lstm(x)[0])


def test_directions_alternate_inside_lengths():
    """Interleaved stack (FF off) == per-layer LSTMs, odd layers on each sequence reversed in its length."""
    torch.manual_seed(0)
    stack = FastForwardLSTM(5, 7, 3, fast_forward=False, interleave=True, first_reverse=True)
    lstms = [nn.LSTM(5 if k == 0 else 7, 7) for k in range(3)]
    for k, lstm in enumerate(lstms):
        _map_lstm_weights(stack, lstm, layer_offset=k)
    assert [layer.reverse for layer in stack.layers] == [True, False, True]
    lengths = torch.tensor([6, 3, 5])
    x = torch.randn(6, 3, 5)
    _, h, _ = stack(x, lengths)
    for b, n in enumerate(lengths.tolist()):
        y = x[:n, b : b + 1]
        for lstm, reverse in zip(lstms, [True, False, True]):
            y = lstm(y.flip(0))[0].flip(0) if reverse else lstm(y)[0]
        torch.testing.assert_close(h[:n, b : b + 1], y)


def test_direction_order_matters():
    """A forward layer at t ignores the future, a backward layer ignores the past."""
    torch.manual_seed(0)
    for first_reverse in (False, True):
        stack = FastForwardLSTM(4, 6, 1, first_reverse=first_reverse, init_std=0.5)
        with torch.no_grad():
            stack.layers[0].weight_hh.normal_(0, 0.5)
        lengths = torch.tensor([5, 5])
        x = torch.randn(5, 2, 4)
        x2 = x.clone()
        x2[2] += 1.0  # change position 2 only
        h, h2 = stack(x, lengths)[1], stack(x2, lengths)[1]
        unchanged = slice(3, 5) if first_reverse else slice(0, 2)
        changed = slice(0, 3) if first_reverse else slice(2, 5)
        torch.testing.assert_close(h[unchanged], h2[unchanged])
        assert (h[changed] - h2[changed]).abs().amax(dim=(1, 2)).min() > 0


def test_reverse_padded_is_an_involution_that_keeps_padding():
    x = torch.arange(4.0).view(4, 1, 1).expand(4, 2, 1)
    rev = reverse_padded(x, torch.tensor([3, 1]))
    assert rev[:, 0, 0].tolist() == [2, 1, 0, 3] and rev[:, 1, 0].tolist() == [0, 1, 2, 3]
    assert torch.equal(reverse_padded(rev, torch.tensor([3, 1])), x)


def test_deep_ed_vector_is_last_step_and_max_over_time():
    model, d = build(interface="deep_ed")
    model.eval()
    src = helpers.random_tokens(d, [5, 3], left_pad=False)
    lengths = torch.tensor([5, 3])
    enc = model.encoder
    e = enc(src, lengths)["encoder_out"][0]
    x = enc.embed_tokens(src).transpose(0, 1)
    (f1, h1, _), (f2, h2, _) = [c(x, lengths) for c in enc.columns]
    assert not enc.columns[0].layers[-1].reverse  # 3 layers, column 1 starts forward
    for b, n in enumerate(lengths.tolist()):
        expect = torch.cat([h1[n - 1, b], h2[:n, b].amax(0), f1[n - 1, b], f2[:n, b].amax(0)])
        torch.testing.assert_close(e[b], expect)
    assert e.shape == (2, 2 * 6 + 2 * 24)


def test_group_learning_rates_land_on_the_right_parameters():
    """``--lr-scheduler grouped``: the recurrent matrices get their own rate, everything else --lr.

    One Adam step moves each parameter by about its group's rate (the first
    Adam update is ``lr * g / (|g| + eps)``), so the rates are checked on the
    parameters themselves, not only on the optimizer's bookkeeping.
    """
    pytest.importorskip("fairseq_dense.lr_schedulers.grouped")
    from fairseq import optim, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.optim.lr_scheduler import build_lr_scheduler

    args = options.parse_args_and_arch(
        options.get_training_parser(),
        input_args=[
            "/nonexistent",
            "--arch",
            "fast_forward_lstm_tiny",
            "--optimizer",
            "adam",
            "--cpu",
            "--lr",
            "4e-5",
            "--lr-scheduler",
            "grouped",
            "--group-lr-scale",
            "recurrent=5e-4",
        ],
    )
    cfg = convert_namespace_to_omegaconf(args)
    model, d = build(randomize_recurrent=False)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = optim.build_optimizer(cfg.optimizer, params)
    sched = build_lr_scheduler(cfg.lr_scheduler, opt)
    assert sched.step_update(0) == {"default": 4e-5, "recurrent": 5e-4}
    groups = {g["group_name"]: g for g in opt.optimizer.param_groups}
    recurrent = {id(p) for p in model.recurrent_parameters()}
    assert {id(p) for p in groups["recurrent"]["params"]} == recurrent
    assert {id(p) for p in groups["default"]["params"]} == {id(p) for p in params} - recurrent

    before = {id(p): p.detach().clone() for p in params}
    sample = helpers.make_sample(d)
    out, _ = model(**sample["net_input"])
    torch.log_softmax(out, -1).gather(-1, sample["target"].unsqueeze(-1)).sum().neg().backward()
    opt.step()
    for p in params:
        step = (p.detach() - before[id(p)]).abs().max().item()
        expected = 5e-4 if id(p) in recurrent else 4e-5
        assert step <= expected * 1.01, step
        if p.dim() == 2 and p.grad.abs().max() > 1e-3:
            assert step > 0.5 * expected, step


def test_deep_ed_does_not_need_attention_sizes():
    model, _ = build(interface="deep_ed", encoder_fc_dim=0, attention_dim=0)
    assert model.decoder.attention is None and model.encoder.fc is None


@pytest.mark.parametrize(
    "arch, expect",
    [
        (
            "deep_att",
            dict(
                interface="deep_att",
                encoder_layers=9,
                decoder_layers=7,
                encoder_columns=2,
                encoder_hidden_size=512,
                encoder_embed_dim=256,
            ),
        ),
        ("deep_ed", dict(interface="deep_ed", encoder_layers=9, decoder_layers=7)),
        ("deep_att_1x1", dict(encoder_layers=1, decoder_layers=1, interface="deep_att")),
        ("deep_att_2x2", dict(encoder_layers=2, decoder_layers=2)),
        ("deep_att_5x3", dict(encoder_layers=5, decoder_layers=3)),
        ("deep_att_2x2_no_ff", dict(encoder_layers=2, no_fast_forward=True)),
        ("deep_att_1col", dict(encoder_layers=9, encoder_columns=1)),
        ("deep_att_uni", dict(encoder_layers=9, no_interleave=True, encoder_columns=2)),
        ("fast_forward_lstm_tiny_ed", dict(interface="deep_ed", encoder_hidden_size=32)),
    ],
)
def test_named_architectures(arch, expect):
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    assert ARCH_MODEL_REGISTRY[arch] is FastForwardLSTMModel
    ns = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[arch](ns)
    ARCH_CONFIG_REGISTRY[arch](ns)  # idempotent
    for k, v in expect.items():
        assert getattr(ns, k) == v, (arch, k)


@pytest.mark.slow
def test_cli_train_and_generate(tmp_path):
    """fairseq-train learns the copy task with Deep-Att and Deep-ED; fairseq-generate (beam 5) decodes it."""
    import sacrebleu

    raw = helpers.write_copy_corpus(
        tmp_path / "raw", n_train=1500, n_valid=50, n_test=50, vocab=8, min_len=3, max_len=6
    )
    data = helpers.preprocess(raw, tmp_path / "bin")
    for arch, threshold in (("fast_forward_lstm_tiny", 80.0), ("fast_forward_lstm_tiny_ed", 40.0)):
        save = tmp_path / arch
        helpers.run_cli(
            "fairseq-train",
            data,
            "--user-dir",
            helpers.USER_DIR,
            "--arch",
            arch,
            "--task",
            "translation",
            "--criterion",
            "label_smoothed_cross_entropy_with_stats",
            "--label-smoothing",
            "0.1",
            "--optimizer",
            "adam",
            "--lr",
            "0.005",
            "--clip-norm",
            "1.0",
            "--max-tokens",
            "300",
            "--max-update",
            "300",
            "--dropout",
            "0.0",
            "--cpu",
            "--seed",
            "1",
            "--save-dir",
            save,
            "--no-epoch-checkpoints",
            "--no-last-checkpoints",
            "--log-format",
            "simple",
            "--log-interval",
            "50",
            "--num-workers",
            "0",
        )
        out = helpers.run_cli(
            "fairseq-generate",
            data,
            "--user-dir",
            helpers.USER_DIR,
            "--path",
            save / "checkpoint_best.pt",
            "--beam",
            "5",
            "--batch-size",
            "64",
            "--required-batch-size-multiple",
            "1",
            "--cpu",
            "--gen-subset",
            "test",
            "--num-workers",
            "0",
        ).stdout
        hyps, refs = helpers.hypotheses_from_generate(out), helpers.references_from_generate(out)
        assert len(hyps) == 50
        ids = sorted(refs)
        bleu = sacrebleu.corpus_bleu([hyps[i] for i in ids], [[refs[i] for i in ids]]).score
        assert bleu > threshold, f"{arch}: BLEU {bleu:.1f} on the copy task"


def test_init_scale_explains_which_stack_trains_at_which_init():
    """examples/fast_forward_lstm/init_scale.py, whose figures the Multi30k verdict cites (at the
    Multi30k size, H 192): at the paper's init the plain stack shrinks h layer by layer while FF
    keeps its scale; at std 0.2 FF's linear f path grows about std * sqrt(2H) per layer and
    saturates the gates, while the plain stack keeps its scale."""
    import importlib.util
    import os

    path = os.path.join(helpers.REPO, "examples", "fast_forward_lstm", "init_scale.py")
    spec = importlib.util.spec_from_file_location("init_scale", path)
    init_scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(init_scale)
    ff, plain = init_scale.scales(0.07, True, 4, 192), init_scale.scales(0.07, False, 4, 192)
    assert plain[-1][1] < plain[0][1] / 5  # h shrinks through the plain stack
    assert ff[-1][1] > ff[0][1]  # and does not with FF
    ff, plain = init_scale.scales(0.2, True, 4, 192), init_scale.scales(0.2, False, 4, 192)
    assert ff[-1][0] > 10 * ff[0][0] and ff[-1][2] > 0.3  # f grows; most gates saturate
    assert plain[-1][2] == 0 and 0.5 < plain[-1][1] / plain[0][1] < 2  # the plain stack keeps its scale
