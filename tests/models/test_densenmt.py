"""Unit and end-to-end tests of DenseNMT."""

import argparse

import pytest
import sacrebleu
import torch
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY

import fairseq_dense  # noqa: F401
from fairseq_dense.models.densenmt import DenseNMTConfig, DenseNMTModel
from fairseq_dense.modules.dense_attention import DenseAttention
from fairseq_dense.modules.dense_conv import FeatureBuffer, conv_rows, glu_rows
from tests import helpers
from tests.models.families import build as build_family


def build(**overrides):
    return build_family("densenmt", **overrides)


ARCHS = [arch for arch, model in ARCH_MODEL_NAME_REGISTRY.items() if model == "densenmt"]  # every preset


def _memory_inputs(dims, embed_dim=6, src_len=5, bsz=2):
    torch.manual_seed(1)
    layers = [torch.randn(src_len, bsz, c) for c in dims]
    emb = torch.randn(src_len, bsz, embed_dim)
    mask = torch.zeros(bsz, src_len, dtype=torch.bool)
    mask[1, :2] = True  # left padding in the second sentence
    query = torch.randn(bsz, 3, 7)
    return layers, emb, mask, query


def _hand_attention(q, k, v, mask):
    scores = q @ k.transpose(1, 2)
    scores = scores.masked_fill(mask.unsqueeze(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def test_dense_att2_is_sum_of_single_layer_attentions():
    dims = [3, 4, 5]
    att = DenseAttention("dense2", dims, embed_dim=6, attention_dim=7)
    layers, emb, mask, q = _memory_inputs(dims)
    out, _ = att(q, *att.project_memory(torch.cat(layers, -1), emb, mask))
    expected = 0
    for h, kp, vp in zip(layers, att.key_projs, att.value_projs):
        h, h0 = h.transpose(0, 1), emb.transpose(0, 1)  # B x T x C
        k = h @ kp.weight.t() + kp.bias  # L_i(h^i)
        v = torch.cat([h, h0], -1) @ vp.weight.t() + vp.bias  # L_i([h^i, h^0])
        expected = expected + _hand_attention(q, k, v, mask)
    torch.testing.assert_close(out, expected)


def test_dense_att1_matches_equation_9():
    dims = [3, 4, 5]
    att = DenseAttention("dense1", dims, embed_dim=6, attention_dim=7)
    layers, emb, mask, q = _memory_inputs(dims)
    out, attn = att(q, *att.project_memory(torch.cat(layers, -1), emb, mask))
    h = torch.cat(layers, -1).transpose(0, 1)
    k = h @ att.key_proj.weight.t() + att.key_proj.bias
    v = h @ att.value_proj.weight.t() + att.value_proj.bias
    v = v + emb.transpose(0, 1) @ att.embed_proj.weight.t() + att.embed_proj.bias
    torch.testing.assert_close(out, _hand_attention(q, k, v, mask))
    assert attn[1, :, :2].abs().max() == 0


@pytest.mark.parametrize("mode", ["multistep", "dense1", "dense2"])
def test_length_scale_multiplies_each_sentence_by_sqrt_of_its_source_length(mode):
    dims = [3, 4, 5] if mode != "multistep" else [5]
    plain = DenseAttention(mode, dims, embed_dim=6, attention_dim=7)
    scaled = DenseAttention(mode, dims, embed_dim=6, attention_dim=7, scale_by_source_length=True)
    scaled.load_state_dict(plain.state_dict())
    layers, emb, mask, q = _memory_inputs(dims)  # sentence 2 has 2 padded positions of 5
    out, attn = plain(q, *plain.project_memory(torch.cat(layers, -1), emb, mask))
    out_s, attn_s = scaled(q, *scaled.project_memory(torch.cat(layers, -1), emb, mask))
    torch.testing.assert_close(attn_s, attn)  # the weights are untouched
    torch.testing.assert_close(out_s[0], out[0] * 5**0.5)
    torch.testing.assert_close(out_s[1], out[1] * 3**0.5)


def test_summary_layers_bound_input_width():
    sumlen, embed, growth, att_dim = 3, 8, 6, 4
    model, _ = build(
        sumlen=sumlen,
        encoder_layers=7,
        decoder_layers=7,
        decoder_hidden_size=growth,
        encoder_hidden_size=growth,
        attention_dim=att_dim,
    )
    enc_bound = (sumlen - 1) * growth + embed
    dec_bound = (sumlen - 1) * (growth + att_dim) + embed  # a decoder layer adds z^l and a^l
    enc_widths = [c.in_channels for c in model.encoder.convs] + [s.in_features for s in model.encoder.summaries]
    dec_widths = [c.in_channels for c in model.decoder.convs] + [s.in_features for s in model.decoder.summaries]
    assert len(model.encoder.summaries) == len(model.decoder.summaries) == 3  # after layers 2, 4, 6
    assert max(enc_widths) == enc_bound and max(dec_widths) == dec_bound
    assert model.decoder.fc2.in_features <= dec_bound
    unbounded, _ = build(encoder_layers=7, decoder_layers=7, encoder_hidden_size=growth)
    assert max(c.in_channels for c in unbounded.encoder.convs) > enc_bound


def test_feature_buffer_matches_naive_concatenation():
    """The copy-free dense stack gives the naive torch.cat result and gradients."""
    torch.manual_seed(0)
    t, b, d0, g, k, n = 6, 3, 5, 4, 3, 3
    x0 = torch.randn(d0, t, b, dtype=torch.float64, requires_grad=True)
    ws = [torch.randn(k, d0 + i * g, 2 * g, dtype=torch.float64, requires_grad=True) for i in range(n)]
    bs = [torch.randn(2 * g, dtype=torch.float64, requires_grad=True) for _ in range(n)]

    def buffered():
        buf = FeatureBuffer(d0 + n * g, t, b, 1, 1, x0)
        buf.append(x0 * 1.0)
        for w, bias in zip(ws, bs):
            buf.append(glu_rows(conv_rows(buf.rows(), w, bias)))
        return buf.center(buf.rows())

    def naive():
        feats = [x0 * 1.0]
        for w, bias in zip(ws, bs):
            inp = torch.cat(feats, 0).permute(1, 2, 0).contiguous()  # C x T x B -> T x B x C
            feats.append(glu_rows(torch.conv_tbc(inp, w, bias, 1).permute(2, 0, 1)))
        return torch.cat(feats, 0)

    weights = torch.randn(d0 + n * g, t, b, dtype=torch.float64)
    got, want = buffered(), naive()
    torch.testing.assert_close(got, want)
    for a, c in zip(
        torch.autograd.grad((got * weights).sum(), [x0] + ws + bs),
        torch.autograd.grad((want * weights).sum(), [x0] + ws + bs),
    ):
        torch.testing.assert_close(a, c)


def test_named_archs_build_and_keep_their_settings():
    d = helpers.dummy_dictionary(16)
    sizes = {}
    for arch in ARCHS:
        ns = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[arch](ns)
        ARCH_CONFIG_REGISTRY[arch](ns)  # idempotent
        cfg = DenseNMTConfig(**{k: v for k, v in vars(ns).items() if k in DenseNMTConfig.__dataclass_fields__})
        if arch != "densenmt_wmt_en_de_15":  # large: only its settings are checked
            model = DenseNMTModel.build_model(cfg, helpers.DummyTask(d))
            sizes[arch] = sum(p.numel() for p in model.parameters() if p.requires_grad)
        assert cfg.attention == {"1": "dense1", "2": "dense2"}.get(arch[-1], cfg.attention)
    ns = argparse.Namespace()
    ARCH_CONFIG_REGISTRY["densenmt_wmt_en_de_15"](ns)
    assert ns.sumlen == 6 and ns.encoder_layers == 15 and ns.attention == "dense2"
    # Table 2: the 4-layer ablations have roughly the same size (embeddings excluded here)
    four = [v for k, v in sizes.items() if "4l" in k]
    assert max(four) / min(four) < 1.25, sizes


# ---------------------------------------------------------------- end to end


@pytest.mark.slow
def test_cli_train_and_generate_each_attention_mode(tmp_path):
    """fairseq-train + fairseq-generate --beam 5 for every attention mode.

    dense2 (the tiny default) trains long enough to learn the copy task; dense1
    and multistep (with a summary layer, NAG and the convs2s_anneal schedule)
    train briefly and must decode every test sentence.
    """
    raw = helpers.write_copy_corpus(tmp_path / "raw", n_train=2000, n_valid=100, n_test=100)
    data = helpers.preprocess(raw, tmp_path / "bin")
    common = [
        "--user-dir",
        helpers.USER_DIR,
        "--arch",
        "densenmt_tiny",
        "--cpu",
        "--max-tokens",
        "1000",
        "--criterion",
        "label_smoothed_cross_entropy_with_stats",
        "--no-epoch-checkpoints",
        "--log-format",
        "simple",
        "--seed",
        "1",
    ]
    runs = {
        "dense2": ["--optimizer", "adam", "--lr", "0.005", "--clip-norm", "1", "--max-update", "200", "--dropout", "0"],
        "dense1": ["--attention", "dense1", "--optimizer", "adam", "--lr", "0.005", "--max-update", "30"],
        "multistep": [
            "--attention",
            "multistep",
            "--encoder-layers",
            "3",
            "--sumlen",
            "2",
            "--optimizer",
            "nag",
            "--lr",
            "0.25",
            "--clip-norm",
            "0.1",
            "--lr-scheduler",
            "convs2s_anneal",
            "--stop-min-lr",
            "1e-4",
            "--max-update",
            "30",
        ],
    }
    for mode, extra in runs.items():
        save = tmp_path / mode
        helpers.run_cli("fairseq-train", data, *common, *extra, "--save-dir", save)
        gen = helpers.run_cli(
            "fairseq-generate",
            data,
            "--user-dir",
            helpers.USER_DIR,
            "--path",
            save / "checkpoint_last.pt",
            "--beam",
            "5",
            "--batch-size",
            "100",
            "--required-batch-size-multiple",
            "1",
            "--cpu",
            "--gen-subset",
            "test",
            "--print-alignment",
        )
        hyps = helpers.hypotheses_from_generate(gen.stdout)
        assert len(hyps) == 100, (mode, gen.stdout[-2000:])
        assert any(line.startswith("A-") for line in gen.stdout.splitlines())
        if mode == "dense2":
            refs = helpers.references_from_generate(gen.stdout)
            bleu = sacrebleu.corpus_bleu([hyps[i] for i in sorted(hyps)], [[refs[i] for i in sorted(hyps)]])
            assert bleu.score > 80, bleu


def _decode(model, sample):
    ni = sample["net_input"]
    with torch.no_grad():
        return helpers.incremental_decode(model, ni["src_tokens"], ni["src_lengths"], ni["prev_output_tokens"])


def cached_count(module) -> int:
    """Number of derived weights currently cached in ``module`` and its submodules."""
    from fairseq_dense.modules.inference_weights import InferenceWeightCache

    return sum(len(m._inference_weights()) for m in module.modules() if isinstance(m, InferenceWeightCache))


def test_inference_weight_cache_follows_parameter_updates():
    """Decoding reuses the normalised weights, but never stale ones.

    fairseq's optimizers write through ``p.data`` (no version bump) in train mode, and
    ``load_state_dict`` copies under ``no_grad`` (version bump) possibly in eval mode:
    both must reach the next decoding run.
    """
    model, d = build(sumlen=3, encoder_layers=4, decoder_layers=5)
    other, _ = build(sumlen=3, encoder_layers=4, decoder_layers=5)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.1 * torch.randn_like(p))
    sample = helpers.make_sample(d)
    model.eval()
    before = _decode(model, sample)
    assert cached_count(model.decoder) > 0  # the step matrices and softmax weights were reused
    torch.testing.assert_close(_decode(model, sample), before)

    model.load_state_dict(other.state_dict())  # in eval mode, weights cached
    other.eval()
    torch.testing.assert_close(_decode(model, sample), _decode(other, sample))

    model.train()  # an optimizer step writes through .data, then fairseq calls eval()
    for p in model.parameters():
        p.data.mul_(0.5)
    model.eval()
    after = _decode(model, sample)
    ref, _ = build(sumlen=3, encoder_layers=4, decoder_layers=5)
    ref.load_state_dict(model.state_dict())
    ref.eval()
    torch.testing.assert_close(after, _decode(ref, sample))
    assert not torch.allclose(after, before)


def test_inference_weight_cache_off_with_gradients():
    """Training and any forward with autograd on derive the weights afresh (gradients must flow)."""
    model, d = build(sumlen=3, encoder_layers=4, decoder_layers=5)
    sample = helpers.make_sample(d)
    model.eval()
    ni = sample["net_input"]
    helpers.incremental_decode(model, ni["src_tokens"], ni["src_lengths"], ni["prev_output_tokens"])
    assert cached_count(model) == 0
    model.train()
    model(**ni)[0].sum().backward()
    assert cached_count(model) == 0
    assert all(p.grad is not None for p in model.decoder.fc3.parameters())
