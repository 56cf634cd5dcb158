"""The mixed-precision forms of DenseNMT's convolutions and the Weighted Transformer's block.

Each new form is compared, in float32, with a copy of the computation it replaced (outputs
and gradients from the same weights); under bfloat16 autocast (on the CPU, standing in for
a GPU) the share of matmul-class FLOPs that run in bfloat16 and the activation bytes kept for
backward are measured as the benchmarks measure them (``benchmarks.proxies.measure_side``: one
training step as ``fairseq-train`` takes it, counted by ``benchmarks/op_counts.py``).
"""

import pytest
import torch
import torch.nn.functional as F
from fairseq import utils

from benchmarks import proxies
from fairseq_dense.baselines import flags
from fairseq_dense.models.densenmt import DenseNMTConfig, DenseNMTModel
from fairseq_dense.models.densenmt import decoder as densenmt_decoder
from fairseq_dense.models.densenmt import encoder as densenmt_encoder
from fairseq_dense.modules import dense_conv
from fairseq_dense.modules.branched_attention import BranchedAttention
from fairseq_dense.modules.dense_conv import FeatureBuffer, conv_rows
from tests import helpers
from tests.models.families import TINY

BF16 = torch.bfloat16


def grads_of(model, run):
    """``(output, {name: grad})`` of ``run(model)`` against fixed random output weights."""
    model.zero_grad(set_to_none=True)
    out = run(model)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    (out * weights).sum().backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same(a, b, atol=1e-5, rtol=1e-4):
    out_a, grads_a = a
    out_b, grads_b = b
    torch.testing.assert_close(out_a, out_b, atol=atol, rtol=rtol)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], atol=atol, rtol=rtol, msg=name)


# ------------------------------------------------------------------------ DenseNMT


class _TapsReference(torch.autograd.Function):
    """DenseNMT's convolution before ``conv_tbc``: in-place ``addmm_`` taps over strided views
    (which autocast does not cast), with its own backward."""

    @staticmethod
    def forward(ctx, x, weight, bias, time, left):
        k, c, o = weight.shape
        b = x.size(2)
        out = bias.unsqueeze(1).expand(o, time * b).contiguous()
        for j in range(k):
            out.addmm_(weight[j].t(), x[:, left + j : left + j + time].reshape(c, time * b))
        ctx.save_for_backward(x, weight)
        ctx.geometry = (time, left)
        return out.view(o, time, b)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        time, left = ctx.geometry
        k, c, o = weight.shape
        b = x.size(2)
        g = grad.reshape(o, time * b)
        grad_x = x.new_zeros(x.shape)
        for j in range(k):
            grad_x[:, left + j : left + j + time].view(c, time * b).addmm_(weight[j], g)
        grad_w = torch.stack([torch.mm(x[:, left + j : left + j + time].reshape(c, time * b), g.t()) for j in range(k)])
        return grad_x, grad_w, g.sum(dim=1), None, None


def taps_reference(x, weight, bias, time=None, left=0):
    """The taps over frames ``[left, left + time + k - 1)`` of ``x`` (default: all; ``conv_rows``'s form)."""
    time = x.size(1) - left - weight.size(0) + 1 if time is None else time
    return _TapsReference.apply(x, weight, bias, time, left)


DENSENMT = TINY["densenmt"]  # tests/models/families.py
DENSENMT_VARIANTS = [
    dict(),
    dict(sumlen=3, encoder_layers=4, decoder_layers=5),
    dict(encoder_connections="residual", decoder_connections="residual", attention="multistep"),
    dict(
        encoder_hidden_sizes=[3, 5, 7],
        encoder_kernel_sizes=[3, 1, 4],
        encoder_layers=3,
        decoder_kernel_sizes=[2, 3],
        sumlen=2,
    ),
]


def densenmt_forward(model, sample):
    return model(**sample["net_input"])[0]


@pytest.mark.parametrize("overrides", DENSENMT_VARIANTS)
def test_densenmt_conv_tbc_form_equals_the_addmm_taps(overrides, monkeypatch):
    """The whole model, outputs and every gradient, with today's and the previous convolution."""
    model, d = helpers.build_tiny(DenseNMTModel, DenseNMTConfig, DENSENMT, 16, **overrides)
    sample = helpers.make_sample(d)
    new = grads_of(model, lambda m: densenmt_forward(m, sample))
    for module in (densenmt_encoder, densenmt_decoder):
        monkeypatch.setattr(module, "conv_rows", taps_reference)
    old = grads_of(model, lambda m: densenmt_forward(m, sample))
    assert_same(new, old)


def test_conv_rows_window_equals_taps_with_offset():
    """``conv_rows`` over a frame window equals the previous form reading the padded buffer at ``left``."""
    torch.manual_seed(0)
    t, b, k = 5, 3, 2
    x0 = torch.randn(4, t, b, dtype=torch.float64, requires_grad=True)
    w = torch.randn(k, 4, 6, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(6, dtype=torch.float64, requires_grad=True)
    buf = FeatureBuffer(4, t, b, 3, 1, x0)
    buf.append(x0 * 1.0)
    got = conv_rows(buf.conv_input(k, 2), w, bias)
    want = taps_reference(buf.rows(), w, bias, t, 2)
    torch.testing.assert_close(got, want)
    g = torch.randn(got.shape, dtype=torch.float64)
    for a, c in zip(
        torch.autograd.grad(got, [x0, w, bias], g, retain_graph=True), torch.autograd.grad(want, [x0, w, bias], g)
    ):
        torch.testing.assert_close(a, c)
    with pytest.raises(ValueError, match="frames"):
        buf.rows(first=4)


def test_feature_buffer_takes_the_autocast_dtype():
    x = torch.randn(3, 4, 2)
    assert FeatureBuffer(3, 4, 2, 1, 1, x).data.dtype == torch.float32
    with torch.autocast("cpu", dtype=BF16):
        assert FeatureBuffer(3, 4, 2, 1, 1, x).data.dtype == BF16


def test_densenmt_matmul_flops_run_in_bf16_under_autocast(monkeypatch, proxy_setup):
    dict_dir, sample = proxy_setup
    m = proxies.measure_side(dict_dir, ["--arch", "densenmt_tiny"], sample)
    assert m["bf16"]["low_precision_share"] >= 0.99 and m["fp32"]["low_precision_share"] == 0.0
    # the counter sees the previous form's float32 taps (and its buffer in the input's dtype)
    for module in (densenmt_encoder, densenmt_decoder):
        monkeypatch.setattr(module, "conv_rows", taps_reference)
    monkeypatch.setattr(dense_conv, "compute_dtype", lambda like: like.dtype)
    assert proxies.measure_side(dict_dir, ["--arch", "densenmt_tiny"], sample)["bf16"]["low_precision_share"] < 0.9


# ------------------------------------------------------------- Weighted Transformer


def reference_block(blk, x, key=None, key_padding_mask=None, attn_mask=None):
    """The branched block as computed before the mixed-precision forms (float additive masks,
    kappa/alpha products even when fixed to 1, float32 layer norms); dropout off."""
    T, B, C = x.shape
    M, H, d = blk.num_branches, blk.num_heads, blk.head_dim
    N = T * B
    h = blk.attn_layer_norm(x) if blk.normalize_before else x
    kv = h if blk.self_attention else key
    S = kv.size(0)
    q = blk.q_proj(h).view(T, B, H, d).permute(1, 2, 0, 3)
    k = blk.k_proj(kv).view(S, B, H, d).permute(1, 2, 0, 3)
    v = blk.v_proj(kv).view(S, B, H, d).permute(1, 2, 0, 3)
    mask = None if attn_mask is None else attn_mask.to(q.dtype).view(1, 1, T, S)
    if key_padding_mask is not None:
        pad = key_padding_mask.view(B, 1, 1, S)
        pad = torch.zeros(pad.shape, dtype=q.dtype).masked_fill(pad, float("-inf"))
        mask = pad if mask is None else mask + pad
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).permute(2, 0, 1, 3).reshape(N, M, C // M)
    ones = torch.ones(M)
    kappa = ones if blk.kappa is None else blk.kappa
    alpha = ones if blk.alpha is None else blk.alpha
    w_out = blk.out_weight * kappa.view(M, 1, 1)
    b_out = blk.out_bias.view(1, 1, C) * kappa.view(M, 1, 1)
    w2 = (blk.fc2_weight * alpha.view(M, 1, 1)).reshape(-1, C)
    u = torch.baddbmm(x.reshape(N, C).view(1, N, C) + b_out, o.transpose(0, 1), w_out)
    if not blk.normalize_before:
        u = blk.attn_layer_norm(u)
    f = blk.final_layer_norm(u) if blk.normalize_before else u
    f = blk.activation_fn(torch.baddbmm(blk.fc1_bias, f, blk.fc1_weight)).transpose(0, 1)
    res = torch.mm(alpha.view(1, M), u.reshape(M, N * C)).view(N, C)
    y = res + torch.addmm(blk.fc2_bias * alpha.sum(), f.reshape(N, -1), w2)
    if not blk.normalize_before:
        y = blk.final_layer_norm(y)
    return y.view(T, B, C)


def causal(t):
    return utils.fill_with_neg_inf(torch.zeros(t, t)).triu(1)  # fairseq's future mask


BLOCK_VARIANTS = {
    "self_causal_padded": dict(self_attention=True),
    "self_causal": dict(self_attention=True),
    "self_padded_pre_norm": dict(self_attention=True, normalize_before=True),
    "cross_padded": dict(self_attention=False, kdim=12),
    "cross_learned_weights": dict(self_attention=False, learn_kappa=True, learn_alpha=True),
    "pre_norm_learned_heads_dropout": dict(normalize_before=True, learn_kappa=True, residual_dropout="heads"),
    "recompute": dict(recompute=True, learn_alpha=True),
}


def make_block(**kw):
    torch.manual_seed(0)
    base = dict(embed_dim=16, num_heads=4, num_branches=4, ffn_embed_dim=32, learn_kappa=False, learn_alpha=False)
    return BranchedAttention(**{**base, **kw}).train()


def block_inputs(name, blk, T=5, B=3):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(T, B, 16, generator=g, requires_grad=True)
    S = 6 if not blk.self_attention else T
    key = None if blk.self_attention else torch.randn(S, B, blk.k_proj.in_features, generator=g, requires_grad=True)
    kpm = torch.zeros(B, S, dtype=torch.bool)
    kpm[0, -2:] = True
    kpm[1, 0] = True
    return dict(
        x=x,
        key=key,
        key_padding_mask=kpm if "padded" in name or name.startswith("cross") else None,
        attn_mask=causal(T) if "causal" in name else None,
    )


@pytest.mark.parametrize("name", sorted(BLOCK_VARIANTS))
def test_branched_block_equals_the_previous_computation(name):
    blk = make_block(**BLOCK_VARIANTS[name])
    inputs = block_inputs(name, blk)
    leaves = [t for t in (inputs["x"], inputs["key"]) if t is not None]

    def run(new):
        def fn(m):
            if new:
                out, _ = m(**inputs)
            else:
                out = reference_block(m, **inputs)
            return out

        out, grads = grads_of(blk, fn)
        grads.update({f"input{i}": t.grad.clone() for i, t in enumerate(leaves)})
        for t in leaves:
            t.grad = None
        return out, grads

    assert_same(run(True), run(False))


def test_recompute_replays_the_dropout():
    """With dropout on, recomputing the residual sums in backward gives the same gradients."""
    results = []
    for recompute in (False, True):
        blk = make_block(dropout=0.3, recompute=recompute, learn_alpha=True)
        inputs = block_inputs("self_causal_padded", blk)
        torch.manual_seed(5)
        results.append(grads_of(blk, lambda m: m(**inputs)[0]))
    assert_same(*results, atol=0, rtol=0)


def test_block_under_autocast_is_as_close_to_float32_as_the_previous_computation():
    blk = make_block(dropout=0.1)
    x = torch.randn(5, 3, 16)
    blk.eval()
    with torch.no_grad():
        want = reference_block(blk, x)
        with torch.autocast("cpu", dtype=BF16):
            new = blk(x)[0].float()
            old = reference_block(blk, x).float()
    assert (new - want).abs().max() <= 1.5 * (old - want).abs().max() + 1e-2


def test_branched_block_state_dict_names_are_unchanged():
    blk = make_block(learn_kappa=True, learn_alpha=True)
    assert sorted(blk.state_dict()) == sorted(
        ["q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias"]
        + ["out_weight", "out_bias", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias", "kappa", "alpha"]
        + [f"{n}_layer_norm.{p}" for n in ("attn", "final") for p in ("weight", "bias")]
    )


# Configuration (A)'s shape at a tiny width: M = H = 8 branches, d_ff = 4 C. Attention dropout
# off: with it, the CPU's SDPA takes its float32 math path (GPU kernels drop in bf16).
WT_TINY = flags(
    encoder_embed_dim=32,
    decoder_embed_dim=32,
    encoder_ffn_embed_dim=128,
    decoder_ffn_embed_dim=128,
    encoder_attention_heads=8,
    decoder_attention_heads=8,
    encoder_layers=2,
    decoder_layers=2,
    attention_dropout=0.0,
)


#: (block, step) whose saved bytes miss the target, each with its ratio here: in float32 the default block
#: keeps its (M, T*B, C) branch tensors (1.70x; 1.77x at configuration (A)'s size, docs/benchmarks.md)
KNOWN_MISSES = {("default", "fp32")}


@pytest.mark.parametrize("block", ["default", "branch_recompute"])
def test_weighted_transformer_within_targets_of_transformer(block, proxy_setup):
    """Every matmul-class FLOP in bf16 under autocast, and the activation bytes kept for backward per
    target token at most 1.5x fairseq's transformer of the same sizes, in float32 and under autocast
    (a known miss is held as one: the test fails when it is met, so that the table is updated)."""
    dict_dir, sample = proxy_setup
    extra = ["--branch-recompute"] if block == "branch_recompute" else []
    ours = proxies.measure_side(dict_dir, ["--arch", "weighted_transformer", *WT_TINY, *extra], sample)
    base = proxies.measure_side(dict_dir, ["--arch", "transformer", *WT_TINY], sample)
    r = proxies.ratios(ours, base)
    assert r["low_precision_ours"] >= proxies.TARGETS["low_precision"], r
    for step in ("fp32", "bf16"):
        within = r[f"saved_bytes_{step}"] <= proxies.TARGETS["saved_bytes"]
        assert within != ((block, step) in KNOWN_MISSES), (block, step, r)
