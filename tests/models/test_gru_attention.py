"""Unit tests of the attentional GRU baseline."""

import torch

import fairseq_dense  # noqa: F401
from fairseq_dense.modules.bahdanau_attention import BahdanauAttention
from tests.models.families import build as build_family


def build(**overrides):
    return build_family("gru_attention", **overrides)


def test_tied_embeddings_share_storage():
    model, _ = build(share_decoder_input_output_embed=True)
    assert model.decoder.output_projection.weight is model.decoder.embed_tokens.weight


def test_attention_matches_loop_over_positions():
    """The batched scores equal Bahdanau's per-position formula."""
    torch.manual_seed(0)
    att = BahdanauAttention(query_dim=5, key_dim=6, attention_dim=4)
    keys = torch.randn(7, 2, 6)  # T x B x K
    query = torch.randn(2, 5)
    mask = torch.zeros(2, 7, dtype=torch.bool)
    mask[1, 5:] = True
    ctx, attn = att(query, att.project_keys(keys), keys.transpose(0, 1), mask)
    for b in range(2):
        scores = []
        for i in range(7):
            e = att.v(torch.tanh(att.key_proj(keys[i, b]) + att.query_proj(query[b])))
            scores.append(e if not mask[b, i] else torch.tensor([float("-inf")]))
        a = torch.softmax(torch.cat(scores), dim=0)
        torch.testing.assert_close(attn[b], a)
        torch.testing.assert_close(ctx[b], (a.unsqueeze(1) * keys[:, b]).sum(0))


def test_attention_gradients_match_the_tanh_formula():
    """The batched scores train like the literal ``v^T tanh(.)`` per position: same
    gradients for every attention parameter, the query and the keys, steps batched or not."""
    torch.manual_seed(0)
    att = BahdanauAttention(query_dim=5, key_dim=6, attention_dim=4)
    keys = torch.randn(7, 2, 6, requires_grad=True)  # T x B x K
    query = torch.randn(2, 3, 5, requires_grad=True)  # B x S x Q
    mask = torch.zeros(2, 7, dtype=torch.bool)
    mask[0, 4:] = True
    weight = torch.randn(2, 3, 6)

    def literal():
        k = att.key_proj(keys.transpose(0, 1))  # B x T x A
        e = att.v(torch.tanh(k.unsqueeze(1) + att.query_proj(query).unsqueeze(2))).squeeze(-1)
        a = torch.softmax(e.masked_fill(mask.unsqueeze(1), float("-inf")), dim=-1)
        return torch.bmm(a, keys.transpose(0, 1))

    def ours():
        return att(query, att.project_keys(keys), keys.transpose(0, 1), mask)[0]

    grads = []
    for f in (literal, ours):
        att.zero_grad()
        keys.grad = query.grad = None
        (f() * weight).sum().backward()
        grads.append([keys.grad.clone(), query.grad.clone()] + [p.grad.clone() for p in att.parameters()])
    for want, got in zip(*grads):
        torch.testing.assert_close(got, want)
