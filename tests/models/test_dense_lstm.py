"""Tests of DenseRNN (``dense_lstm``): Eq. 6 equivalence, decoding properties, CLI."""

import argparse

import pytest
import torch
import torch.nn.functional as F

import fairseq_dense  # noqa: F401
from fairseq_dense.modules.dense_lstm_layer import shift_in_time
from fairseq_dense.modules.encoder_decoder import reverse_padded
from fairseq_dense.modules.lstm_cell import lstm_cell
from tests import helpers
from tests.models.families import build as build_family
from tests.models.families import variant


def build(**overrides):
    return build_family("dense_lstm", **overrides)


def build_variant(name, **overrides):
    return variant("dense_lstm", name, **overrides)


# ---------------------------------------------------------------- literal Eq. 6 reference


def literal_cell(w_x, w_h, bias, x, o_prev, cell):
    """Eq. 6 with an LSTM g: ``g(o_{t-1}^l, o_t^{l-1})`` as two separate matrices."""
    return lstm_cell(F.linear(x, w_x, bias) + F.linear(o_prev, w_h), cell)


def map_weights(lstm, lower: int, extra: int = 0):
    """Fused ``W_ih`` over ``[o_t^{l-1}; o_{t-1}^{l-1}; extra]`` -> literal ``W_x`` over
    ``[o_t^{l-1}; extra]`` and ``W_h`` over ``o_{t-1}^l = [o_{t-1}^{l-1}; h_{t-1}^l]``."""
    w = lstm.weight_ih_l0
    assert w.size(1) == 2 * lower + extra
    w_x = torch.cat([w[:, :lower], w[:, 2 * lower :]], 1)
    w_h = torch.cat([w[:, lower : 2 * lower], lstm.weight_hh_l0], 1)
    return w_x, w_h, lstm.bias_ih_l0 + lstm.bias_hh_l0


def literal_encoder(model, src_tokens, src_lengths):
    """Dense encoder, one sentence and one step at a time; right-padded tokens."""
    enc = model.encoder
    outs = torch.zeros(src_tokens.size(1), src_tokens.size(0), enc.num_layers * enc.hidden_size)
    for b in range(src_tokens.size(0)):
        n = int(src_lengths[b])
        o = [enc.embed_tokens(src_tokens[b, :n])]  # o^0 per position: n x E
        for layer in enc.layers:
            lower = o[-1].size(-1)
            halves = []
            for lstm, order in ((layer.forward_lstm, range(n)), (layer.backward_lstm, range(n - 1, -1, -1))):
                if lstm is None:
                    continue
                w_x, w_h, bias = map_weights(lstm, lower)
                size = lstm.hidden_size
                h, c = torch.zeros(1, size), torch.zeros(1, size)
                prev_o = torch.zeros(1, lower)  # o_{t-1}^{l-1}, zero before the first step
                res = [None] * n
                for t in order:
                    # recurrent input o_{t-1}^l = [h_{t-1}^0..h_{t-1}^{l-1}; h_{t-1}^l]
                    h, c = literal_cell(w_x, w_h, bias, o[-1][t : t + 1], torch.cat([prev_o, h], 1), c)
                    prev_o = o[-1][t : t + 1]
                    res[t] = h
                halves.append(torch.cat(res, 0))
            o.append(torch.cat([o[-1], torch.cat(halves, -1)], -1))
        outs[:n, b] = o[-1][:, enc.embed_tokens.embedding_dim :]
    return outs


def literal_decoder(model, enc_out, prev_output_tokens):
    """Dense decoder, one step at a time, attention through BahdanauAttention.forward."""
    dec = model.decoder
    bsz, steps = prev_output_tokens.shape
    memory = enc_out["encoder_layers"][0]  # dense: o^{L_e} = [h^1..h^{L_e}]
    mask = enc_out["encoder_padding_mask"][0]
    branches = memory.split(dec.context_dim // len(dec.attentions), -1)
    hs = [torch.zeros(bsz, dec.hidden_size) for _ in dec.layers]
    cs = [torch.zeros(bsz, dec.hidden_size) for _ in dec.layers]
    prev_o = torch.zeros(bsz, dec.embed_dim + dec.num_layers * dec.hidden_size)  # o_{t-1}^{L_d}
    weights = [
        map_weights(lstm, dec.embed_dim + j * dec.hidden_size, dec.context_dim) for j, lstm in enumerate(dec.layers)
    ]
    logits = []
    for t in range(steps):
        q = hs[dec.attention_layer - 1]
        ctx = torch.cat(
            [att(q, att.project_keys(k), k.transpose(0, 1), mask)[0] for att, k in zip(dec.attentions, branches)], -1
        )
        o = dec.embed_tokens(prev_output_tokens[:, t])
        for j, (w_x, w_h, bias) in enumerate(weights):
            rec = torch.cat([prev_o[:, : o.size(1)], hs[j]], 1)  # o_{t-1}^{j}
            hs[j], cs[j] = literal_cell(w_x, w_h, bias, torch.cat([o, ctx], 1), rec, cs[j])
            o = torch.cat([o, hs[j]], 1)
        prev_o = o
        logits.append(dec.output_layer(torch.tanh(dec.readout(torch.cat([o, ctx], 1)))))
    return torch.stack(logits, 1)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("variant", ["dc", "dcda", "dcda_l2"])
def test_fused_equals_literal_eq6(variant, bidirectional):
    """The fused per-layer LSTMs over ``[o_t^{l-1}; o_{t-1}^{l-1}]`` equal Eq. 6 computed literally."""
    model, d = build_variant(variant, no_encoder_bidirectional=not bidirectional)
    model.eval()
    sample = helpers.make_sample(d, left_pad_source=False)
    ni = sample["net_input"]
    with torch.no_grad():
        enc_out = model.encoder(ni["src_tokens"], ni["src_lengths"])
        ref = literal_encoder(model, ni["src_tokens"], ni["src_lengths"])
        torch.testing.assert_close(enc_out["encoder_layers"][0], ref, atol=1e-5, rtol=1e-5)
        full, _ = model.decoder(ni["prev_output_tokens"], encoder_out=enc_out)
        torch.testing.assert_close(
            full, literal_decoder(model, enc_out, ni["prev_output_tokens"]), atol=1e-5, rtol=1e-5
        )


# ---------------------------------------------------------------- decoding properties


def test_dense_attention_has_one_branch_per_encoder_layer():
    model, _ = build_variant("dcda")
    assert len(model.decoder.attentions) == 3 and model.decoder.context_dim == 30
    model, _ = build_variant("dc")  # DC alone: one attention over o^{L_e} = [h^1; h^2; h^3]
    assert len(model.decoder.attentions) == 1 and model.decoder.context_dim == 30
    model, _ = build_variant("baseline")
    assert len(model.decoder.attentions) == 1 and model.decoder.context_dim == 10


def test_shift_and_reverse_helpers():
    x = torch.arange(12.0).view(4, 3, 1)
    assert torch.equal(shift_in_time(x)[1:], x[:-1]) and shift_in_time(x)[0].abs().sum() == 0
    lengths = torch.tensor([4, 2, 3])
    r = reverse_padded(x, lengths)
    assert r[:, 1, 0].tolist() == [4.0, 1.0, 7.0, 10.0]
    assert torch.equal(reverse_padded(r, lengths), x)


def test_odd_hidden_ok_when_unidirectional():
    model, d = build_variant("dc", encoder_hidden_size=9, no_encoder_bidirectional=True)
    assert model.decoder.context_dim == 3 * 9  # one direction of 9 per layer, all three attended
    helpers.check_output_shape(model, helpers.make_sample(d), len(d))


def test_named_architectures_apply_switches():
    from fairseq.models import ARCH_CONFIG_REGISTRY

    expected = {
        "dense_lstm_baseline_4l": (4, 1024, False, False),
        "dense_lstm_baseline_6l": (6, 1024, False, False),
        "dense_lstm_6l": (6, 256, True, True),
        "dense_lstm_10l": (10, 256, True, True),
        "dense_lstm_dc_4l": (4, 128, True, False),
        "dense_lstm_dcda_4l": (4, 150, True, True),
        "dense_lstm_dc_8l": (8, 128, True, False),
        "dense_lstm_dcda_8l": (8, 142, True, True),
        "dense_lstm_tiny": (2, 32, True, True),
        "dense_lstm_small": (6, 96, True, True),
        "dense_lstm_baseline_small": (4, 384, False, False),
    }
    for arch, (layers, hidden, dc, da) in expected.items():
        ns = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[arch](ns)
        ARCH_CONFIG_REGISTRY[arch](ns)  # idempotent
        got = (ns.encoder_layers, ns.decoder_hidden_size, ns.dense_connections, ns.dense_attention)
        assert got == (layers, hidden, dc, da), arch
        ns = argparse.Namespace(decoder_layers=3, dense_attention=True)  # command line wins
        ARCH_CONFIG_REGISTRY[arch](ns)
        assert ns.decoder_layers == 3 and ns.dense_attention


# ---------------------------------------------------------------- CLI end to end


@pytest.mark.slow
def test_cli_train_and_generate(tmp_path):
    """Train ``dense_lstm_tiny`` (Adam for speed; the recipe's plateau schedule), beam-search, score."""
    import sacrebleu

    raw = helpers.write_copy_corpus(tmp_path / "raw", n_train=1500, n_valid=100, n_test=100)
    data = helpers.preprocess(raw, tmp_path / "bin")
    ckpt = tmp_path / "ckpt"
    helpers.run_cli(
        "fairseq-train",
        data,
        "--user-dir",
        helpers.USER_DIR,
        "--arch",
        "dense_lstm_tiny",
        "--task",
        "translation",
        "--criterion",
        "label_smoothed_cross_entropy_with_stats",
        "--label-smoothing",
        "0.1",
        "--optimizer",
        "adam",
        "--lr",
        "0.01",
        "--clip-norm",
        "1.0",
        "--lr-scheduler",
        "reduce_lr_on_plateau",
        "--lr-shrink",
        "0.1",
        "--batch-size",
        "32",
        "--max-epoch",
        "5",
        "--cpu",
        "--seed",
        "1",
        "--num-workers",
        "0",
        "--save-dir",
        ckpt,
        "--no-epoch-checkpoints",
        "--no-progress-bar",
        "--log-interval",
        "50",
    )
    gen = helpers.run_cli(
        "fairseq-generate",
        data,
        "--user-dir",
        helpers.USER_DIR,
        "--path",
        ckpt / "checkpoint_best.pt",
        "--gen-subset",
        "test",
        "--beam",
        "5",
        "--batch-size",
        "50",
        "--required-batch-size-multiple",
        "1",
        "--cpu",
        "--num-workers",
        "0",
    )
    hyps = helpers.hypotheses_from_generate(gen.stdout)
    refs = helpers.references_from_generate(gen.stdout)
    assert len(hyps) == 100
    bleu = sacrebleu.corpus_bleu([hyps[i] for i in sorted(hyps)], [[refs[i] for i in sorted(hyps)]]).score
    assert bleu > 60.0, f"copy-task BLEU {bleu:.1f}\n{gen.stdout[-2000:]}"
