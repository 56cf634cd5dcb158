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
    gradients for every attention parameter, the query and the keys."""
    torch.manual_seed(0)
    att = BahdanauAttention(query_dim=5, key_dim=6, attention_dim=4)
    keys = torch.randn(7, 2, 6, requires_grad=True)  # T x B x K
    query = torch.randn(2, 5, requires_grad=True)  # B x Q
    mask = torch.zeros(2, 7, dtype=torch.bool)
    mask[0, 4:] = True
    weight = torch.randn(2, 6)

    def literal():
        k = att.key_proj(keys.transpose(0, 1))  # B x T x A
        e = att.v(torch.tanh(k + att.query_proj(query).unsqueeze(1))).squeeze(-1)
        a = torch.softmax(e.masked_fill(mask, float("-inf")), dim=-1)
        return torch.bmm(a.unsqueeze(1), keys.transpose(0, 1)).squeeze(1)

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


def test_split_gru_checkpoints_load_into_the_cell():
    """A state dict of the earlier split GRU (``W_y y + b_y``, ``W_c c``, ``W_hh s + b_hh``) loads into the
    ``nn.GRUCell``, whose step equals the hand-rolled one that form ran (reset gate on ``W_hn s + b_hn``)."""
    torch.manual_seed(0)
    model, _ = build()
    sd = model.state_dict()
    w_ih, b_y, w_hh, b_hh = (sd.pop(f"decoder.cell.{k}") for k in ("weight_ih", "bias_ih", "weight_hh", "bias_hh"))
    E = model.decoder.encoder_dim
    w_c, w_y = w_ih[:, :E], w_ih[:, E:]
    sd.update({"decoder.input_proj_c.weight": w_c, "decoder.input_proj_y.weight": w_y})
    sd.update({"decoder.input_proj_y.bias": b_y, "decoder.hidden_proj.weight": w_hh, "decoder.hidden_proj.bias": b_hh})
    loaded, _ = build()
    loaded.load_state_dict(sd)  # fairseq's load upgrades the state dict first
    c, y, h = torch.randn(3, E), torch.randn(3, w_y.size(1)), torch.randn(3, w_hh.size(1))
    i_r, i_z, i_n = (y @ w_y.t() + b_y + c @ w_c.t()).chunk(3, dim=-1)
    h_r, h_z, h_n = (h @ w_hh.t() + b_hh).chunk(3, dim=-1)
    r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    torch.testing.assert_close(loaded.decoder.cell(torch.cat([c, y], dim=-1), h), n + z * (h - n))
