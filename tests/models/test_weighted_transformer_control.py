"""Control of the Weighted Transformer: one branch is the Transformer it modifies.

With M = 1 branch per block, kappa = alpha = 1 (fixed with ``--fixed-kappa --fixed-alpha``, or learned on the
one-point simplex with ``--learned-branch-weights``), Eq. 5-7 reduce to the post-norm Transformer layer:
``u = LN(x + attn(x) W^O + b^O)``, ``y = LN(u + FFN(u))``. Given the Transformer's
weights (the branched block stores ``W^O``, ``W1`` and ``W2`` transposed, as
``(M, fan_in, fan_out)`` slices), the model must compute what fairseq's
``transformer`` computes, in its output and in every gradient, and with the default
``--branch-residual-dropout outputs`` also in training mode with dropout. What is left
between the two at the same seed is the order of the random draws: the branch matrices
are drawn from the Transformer's distributions (``--branch-init transformer``, the
default), not from the same generator calls. The first-built choices (Xavier-uniform
branch matrices for their own shape, dropout on the heads before ``W^O``) are measured
against these in the ablation of ``docs/weighted_transformer.md``.
"""

import pytest
import torch
from fairseq import options
from fairseq.models.transformer import TransformerModel

import fairseq_dense  # noqa: F401
from fairseq_dense.models.weighted_transformer import WeightedTransformerModel
from tests import helpers
from tests.models.test_weighted_transformer import TINY

SHAPE = [*TINY, "--dropout", "0"]


def build(arch, task, *flags, vocab=16):
    d = helpers.dummy_dictionary(vocab)
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser, input_args=["/nonexistent", "--arch", arch, "--task", task, "--cpu", *SHAPE, *flags]
    )
    cls = TransformerModel if arch == "transformer" else WeightedTransformerModel
    return cls.build_model(args, helpers.DummyTask(d)), d


def branched_name(name: str) -> str:
    """The one-branch model's name of a fairseq ``transformer`` parameter."""
    if ".layers." not in name:
        return name
    if name.startswith("encoder.layers."):
        block, attn, attn_norm = "branched.", "self_attn.", "self_attn_layer_norm."
    else:
        block, attn, attn_norm = "cross_branched.", "encoder_attn.", "encoder_attn_layer_norm."
    renames = (
        (attn + "out_proj.weight", block + "out_weight"),
        (attn + "out_proj.bias", block + "out_bias"),
        (attn_norm, block + "attn_layer_norm."),
        (attn, block),
        ("fc1.weight", block + "fc1_weight"),
        ("fc1.bias", block + "fc1_bias"),
        ("fc2.weight", block + "fc2_weight"),
        ("fc2.bias", block + "fc2_bias"),
        ("final_layer_norm.", block + "final_layer_norm."),
    )
    for old, new in renames:
        if old in name:
            return name.replace(old, new)
    return name  # decoder self-attention: the Transformer's own module


def to_branched(name: str, value: torch.Tensor) -> torch.Tensor:
    """A Transformer tensor in the branched block's layout (M = 1)."""
    if name.endswith(("out_weight", "fc1_weight", "fc2_weight")):
        return value.t().unsqueeze(0)  # (out, in) -> (1, in, out)
    if name.endswith("fc1_bias"):
        return value.view(1, 1, -1)
    return value


def copy_transformer_into(weighted, base) -> None:
    own = dict(weighted.named_parameters())
    copied = set()
    with torch.no_grad():
        for name, value in base.named_parameters():
            target = branched_name(name)
            own[target].copy_(to_branched(target, value))
            copied.add(target)
    # every parameter came from the Transformer, except the branch weights (fixed at 1)
    assert set(own) - copied <= {n for n in own if n.endswith((".kappa", ".alpha"))}


@pytest.mark.parametrize(
    "flags", [["--learned-branch-weights"], ["--fixed-kappa", "--fixed-alpha"]], ids=["simplex", "fixed"]
)
def test_one_branch_is_the_transformer(flags):
    torch.manual_seed(0)
    base, d = build("transformer", "translation")
    weighted, _ = build(
        "weighted_transformer", "translation_weighted", "--encoder-branches", "1", "--decoder-branches", "1", *flags
    )
    for name, w in weighted.branch_weights().items():  # one-point simplex
        assert w.tolist() == [1.0], name
    assert sum(p.numel() for p in weighted.parameters()) == sum(p.numel() for p in base.parameters()) + (
        2 * 4 if "--learned-branch-weights" in flags else 0
    )  # kappa and alpha per block, 4 blocks
    copy_transformer_into(weighted, base)
    sample = helpers.make_sample(d)
    for model in (base, weighted):
        model.train()  # dropout 0: the training graph, deterministic
    out_b, extra_b = base(**sample["net_input"])
    out_w, extra_w = weighted(**sample["net_input"])
    torch.testing.assert_close(out_w, out_b, atol=1e-5, rtol=1e-5)
    # gradients of every Transformer parameter agree too
    target = torch.randn_like(out_b)
    (out_b * target).sum().backward()
    (out_w * target).sum().backward()
    own = dict(weighted.named_parameters())
    for name, p in base.named_parameters():
        mine = branched_name(name)
        torch.testing.assert_close(
            own[mine].grad, to_branched(mine, p.grad), atol=1e-5, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}"
        )


def test_one_branch_with_dropout_on_the_branch_outputs_is_the_transformer_in_training():
    """``--branch-residual-dropout outputs`` (the default) drops what the Transformer drops: at
    M = 1, with residual dropout on and the same seed, the training-mode outputs are equal (the
    ``heads`` placement, dropping before ``W^O``, is not)."""
    drop = ["--dropout", "0.3", "--attention-dropout", "0", "--activation-dropout", "0"]
    torch.manual_seed(0)
    base, d = build("transformer", "translation", *drop)
    one_branch = ["--encoder-branches", "1", "--decoder-branches", "1"]
    outputs = build(
        "weighted_transformer", "translation_weighted", *one_branch, *drop, "--branch-residual-dropout", "outputs"
    )[0]
    heads = build(
        "weighted_transformer", "translation_weighted", *one_branch, *drop, "--branch-residual-dropout", "heads"
    )[0]
    sample = helpers.make_sample(d)
    results = []
    for model in (base, outputs, heads):
        if model is not base:
            copy_transformer_into(model, base)
        model.train()
        torch.manual_seed(1)
        results.append(model(**sample["net_input"])[0])
    out_b, out_outputs, out_heads = results
    torch.testing.assert_close(out_outputs, out_b, atol=1e-5, rtol=1e-5)
    assert (out_heads - out_b).abs().max() > 1e-2
    for model in (base, outputs, heads):  # without dropout all three agree
        model.eval()
    evals = [m(**sample["net_input"])[0] for m in (base, outputs, heads)]
    torch.testing.assert_close(evals[1], evals[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(evals[2], evals[0], atol=1e-5, rtol=1e-5)


def test_control_fails_when_a_weight_differs():
    """The comparison can fail: one perturbed FFN weight changes the output."""
    torch.manual_seed(0)
    base, d = build("transformer", "translation")
    weighted, _ = build(
        "weighted_transformer", "translation_weighted", "--encoder-branches", "1", "--decoder-branches", "1"
    )
    copy_transformer_into(weighted, base)
    with torch.no_grad():
        weighted.encoder.layers[0].branched.fc2_weight[0, 0, 0] += 0.5
    sample = helpers.make_sample(d)
    base.eval()
    weighted.eval()
    out_b, _ = base(**sample["net_input"])
    out_w, _ = weighted(**sample["net_input"])
    assert (out_w - out_b).abs().max() > 1e-3
