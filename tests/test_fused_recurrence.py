"""Deep-Att's recurrences on the fused LSTM kernels equal the step-by-step loop they replace.

The reference below is the implementation before the fused path (a Python loop over
time with ``addmm(f_t, h, W_hh^T)`` and an unfused cell, layer 1 of the decoder
stepped through the same loop): outputs and every gradient must match in float32,
for the encoder (both directions, padding) and the decoder, and a state dict saved
by that implementation (``tests/data/fast_forward_lstm_pre_fused.pt``) must load
unchanged and give the same outputs.

The encoder's operator calls in a training step must not grow with the source length
(every layer one fused call). Under autocast, step loops must cast each weight once per
forward, not once per step
(:func:`fairseq_dense.modules.lstm_cell.cast_once`): counted for Deep-Att, DenseRNN and the GRU.
"""

from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks import op_counts
from fairseq_dense.models.fast_forward_lstm.decoder import FastForwardLSTMDecoder
from fairseq_dense.modules.encoder_decoder import reverse_padded
from fairseq_dense.modules.fast_forward_lstm import FastForwardLSTMLayer
from fairseq_dense.modules.lstm_cell import lstm_cell
from tests import helpers
from tests.models import test_dense_lstm, test_fast_forward_lstm, test_gru_attention

PRE_FUSED = Path(__file__).parent / "data" / "fast_forward_lstm_pre_fused.pt"


def _loop(f, h, c, w_hh):
    """The pre-fused recurrence: one unfused cell per step, ``addmm(f_t, h, W_hh^T)``."""
    outs = []
    for f_t in f.unbind(0):
        h, c = lstm_cell(torch.addmm(f_t, h, w_hh.t()), c)
        outs.append(h)
    return torch.stack(outs), (h, c)


def _reference_layer_forward(self, x, lengths=None, state=None, f_size=None):
    """The pre-fused ``FastForwardLSTMLayer.forward``: ``f = W_f x + b`` for all steps, then the loop."""
    f = self.ff(x)
    if state is None:
        zeros = f.new_zeros(f.size(1), self.hidden_size)
        state = (zeros, zeros)
    if self.reverse:
        h, final = _loop(reverse_padded(f, lengths), state[0], state[1], self.weight_hh)
        h = reverse_padded(h, lengths)
    else:
        h, final = _loop(f, state[0], state[1], self.weight_hh)
    return f[..., : 4 * self.hidden_size if f_size is None else f_size], h, final


def _reference_attend_and_recur(self, f1_y, enc, proj_keys, encoder_out, state):
    """The pre-fused first decoder layer of Deep-Att (attention and one loop step per token)."""
    values = enc.transpose(0, 1)
    padding_mask = encoder_out["encoder_padding_mask"][0]
    if state is None:
        zeros = f1_y.new_zeros(f1_y.size(1), self.hidden_size)
        state = (zeros, zeros)
    fs, hs, attns = [], [], []
    for f1_y_t in f1_y.unbind(0):
        context, a = self.attention(state[0], proj_keys, values, padding_mask)
        f_t = f1_y_t + self.context_proj(context)
        _, state = _loop(f_t.unsqueeze(0), state[0], state[1], self.first.weight_hh)
        fs.append(f_t)
        hs.append(state[0])
        attns.append(a)
    return torch.stack(fs), torch.stack(hs), state, torch.stack(attns, dim=1)


def _reference_first_with_context(self, y, g, state):
    """Deep-ED's first decoder layer as the step loop ran it: ``f^1 = W_y y + b + g`` (``g = W_c e``),
    then one cell per step."""
    f1 = self.first.ff(y) + g.unsqueeze(0)  # the fixed context enters every step
    if state is None:
        zeros = f1.new_zeros(f1.size(1), self.hidden_size)
        state = (zeros, zeros)
    h1, final = _loop(f1, state[0], state[1], self.first.weight_hh)
    return f1, h1, final


def _outputs_and_grads(model, sample, seed=3):
    """Logits, and the gradient of a random projection of them w.r.t. every parameter."""
    model.zero_grad()
    out, _ = model(**sample["net_input"])
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
    (out * weights).sum().backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _reference(monkeypatch, model, sample):
    with monkeypatch.context() as m:
        m.setattr(FastForwardLSTMLayer, "forward", _reference_layer_forward)
        m.setattr(FastForwardLSTMDecoder, "_attend_and_recur", _reference_attend_and_recur)
        m.setattr(FastForwardLSTMDecoder, "_first_with_context", _reference_first_with_context)
        return _outputs_and_grads(model, sample)


def _assert_same(got, want):
    out, grads = got
    ref_out, ref_grads = want
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
    assert grads.keys() == ref_grads.keys()
    for name, ref in ref_grads.items():
        # float32 rounding only: sums in another order (gradients reach magnitudes of ~10 here)
        err = (grads[name] - ref).abs().max().item()
        assert err <= 1e-5 * max(1.0, ref.abs().max().item()), f"{name}: gradients differ by {err:.3g}"


VARIANTS = {
    "att": dict(interface="deep_att"),
    "ed": dict(interface="deep_ed"),
    "ed-noff": dict(interface="deep_ed", no_fast_forward=True),
    "att-noff": dict(interface="deep_att", no_fast_forward=True),
    "att-1col-uni": dict(interface="deep_att", encoder_columns=1, no_interleave=True),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_fused_equals_step_loop_outputs_and_gradients(monkeypatch, name):
    """float32, left-padded sources of different lengths, right-padded targets."""
    model, d = test_fast_forward_lstm.build(**VARIANTS[name])
    model.train()  # dropout is 0: train mode only switches on the training kernels
    sample = helpers.make_sample(d, src_lengths=(5, 9, 3), tgt_lengths=(4, 7, 6))
    want = _reference(monkeypatch, model, sample)
    got = _outputs_and_grads(model, sample)
    assert all(g.abs().max() > 0 for n, g in want[1].items() if "weight_hh" in n)  # the recurrence is exercised
    _assert_same(got, want)


def test_checkpoint_of_the_step_loop_loads_and_gives_its_outputs(monkeypatch):
    """A state dict saved by the pre-fused code: same keys, same outputs and gradients."""
    saved = torch.load(PRE_FUSED, weights_only=True)
    for name, entry in saved.items():
        model, d = test_fast_forward_lstm.build(**entry["overrides"])
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()  # nothing of the freshly built model may survive the load
        model.load_state_dict(entry["state_dict"], strict=True)
        sample = helpers.make_sample(d)
        _assert_same(_outputs_and_grads(model, sample), _reference(monkeypatch, model, sample))
        helpers.check_incremental_equals_full(model, sample)


class _CastCounter(TorchDispatchMode):
    """Counts float32 -> low-precision casts of tensors shaped like one of ``shapes``."""

    def __init__(self, shapes):
        super().__init__()
        self.shapes = shapes
        self.casts = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._to_copy.default and tuple(args[0].shape) in self.shapes:
            self.casts += args[0].dtype == torch.float32 and (kwargs or {}).get("dtype") == torch.bfloat16
        return func(*args, **(kwargs or {}))


def _weight_casts(model, d, tgt_len, onednn: bool):
    """Weight-shaped bf16 casts in one training forward with targets of ``tgt_len`` tokens (LSTMs on
    oneDNN's kernel or on PyTorch's per-step form, ``cpu_lstm_kernel``)."""
    shapes = {tuple(p.shape) for p in model.parameters() if p.dim() == 2}
    shapes |= {s[::-1] for s in shapes} | {s[:1] for s in shapes}  # transposed views; biases (and sums)
    sample = helpers.make_sample(d, src_lengths=(5, 6), tgt_lengths=(tgt_len, tgt_len - 1))
    counter = _CastCounter(shapes)
    with op_counts.cpu_lstm_kernel(torch.bfloat16, onednn), torch.autocast("cpu", dtype=torch.bfloat16), counter:
        out, _ = model(**sample["net_input"])
    assert out.dtype == torch.bfloat16
    return counter.casts


@pytest.mark.parametrize("onednn", helpers.BF16_LSTM_KERNELS)
@pytest.mark.parametrize(
    "family, build",
    [
        ("deep_att", lambda: test_fast_forward_lstm.build()),
        ("deep_ed", lambda: test_fast_forward_lstm.build(interface="deep_ed")),
        ("dense_lstm", lambda: test_dense_lstm.build_variant("baseline")),
        ("dense_lstm_dcda_l2", lambda: test_dense_lstm.build_variant("dcda_l2")),
        ("gru_attention", test_gru_attention.build),
    ],
)
def test_autocast_casts_weights_once_per_forward(family, build, onednn):
    """Under bf16 autocast the weight casts of a forward do not grow with the target length."""
    model, d = build()
    model.train()
    short, long = _weight_casts(model, d, 4, onednn), _weight_casts(model, d, 12, onednn)
    assert short > 0  # the counter sees autocast's casts at all
    assert long == short, f"{family}: {short} weight casts for 4 target tokens, {long} for 12"


def test_encoder_operator_calls_do_not_grow_with_the_source_length():
    """Every encoder layer is one fused call: forward + backward launch as many kernels
    (``op_counts.StepCounter``: a fused LSTM call as cuDNN runs it, on either CPU kernel) for
    12 source tokens as for 4 (the step loop launched about a dozen more per layer and step)."""
    model, d = test_fast_forward_lstm.build()
    model.train()
    counts = []
    for n in (4, 12):
        src = helpers.random_tokens(d, [n, n - 1], left_pad=True)
        model.zero_grad(set_to_none=True)  # no accumulation into the first count's gradients
        counter = op_counts.StepCounter(model)
        try:
            with counter:
                out = model.encoder(src, torch.tensor([n, n - 1]))["encoder_out"][0]
                out.sum().backward()
        finally:
            counter.close()
        counts.append(sum(counter.launches.values()))
    assert counts[0] == counts[1], f"encoder operator calls grow with the source length: {counts}"


def test_deep_ed_decoder_operator_calls_do_not_grow_with_the_target_length():
    """Deep-ED's decoder runs no step loop in training: every layer, the first included (its fixed
    context as extra input columns), is one fused call, so forward + backward launch as many
    kernels (``op_counts.StepCounter``) for 12 target tokens as for 4."""
    model, d = test_fast_forward_lstm.build(interface="deep_ed")
    model.train()
    counts = []
    for n in (4, 12):
        sample = helpers.make_sample(d, src_lengths=(5, 6), tgt_lengths=(n, n - 1))
        model.zero_grad(set_to_none=True)
        counter = op_counts.StepCounter(model)
        try:
            with counter:
                out, _ = model(**sample["net_input"])
                out.sum().backward()
        finally:
            counter.close()
        counts.append(sum(counter.launches.values()))
    # (padding-dependent kernels may differ by an operator or two; a step loop adds dozens)
    assert counts[1] <= counts[0], f"decoder operator calls grow with the target length: {counts}"
