"""Mixed precision: what fairseq allows, and that every family trains without NaN/inf.

* ``--bf16 --cpu``: fairseq (``options.parse_args_and_arch``) turns ``--bf16`` into
  ``--tpu``, so the trainer asks torch_xla for a device and fails, on CPUs and
  GPUs alike; ``fairseq-train`` then prints one line saying so
  (tests/test_bad_input.py). bfloat16 through ``fairseq-train`` is our tasks'
  ``--bf16-autocast`` (tests/test_bf16_autocast.py trains every family under it on
  the CPU). Checked here on CPU: every model is dtype-clean: cast to bfloat16, a
  forward/backward pass keeps bfloat16 and gives finite gradients.
* GPUs: ``--fp16``, ``--amp`` and ``--bf16-autocast`` train every ``*_tiny``
  architecture for a few hundred updates without a non-finite loss or parameter.
  Skipped without CUDA.
"""

import math

import pytest
import torch

from tests import helpers
from tests import reliability_helpers as rh

ARCHS = rh.tiny_archs()
GPU_UPDATES = 300 if rh.FULL else 200


def test_fairseq_turns_bf16_into_tpu():
    from fairseq import options

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, ["data", "--arch", ARCHS[0], "--cpu", "--bf16"])
    assert args.bf16 and args.tpu  # hence fairseq's --bf16 is no bfloat16 on CPUs or GPUs (--bf16-autocast is)


@pytest.mark.parametrize("arch", ARCHS)
def test_model_is_dtype_clean_in_bfloat16(arch):
    torch.manual_seed(0)
    d = helpers.dummy_dictionary(12)
    model = rh.build_tiny_model(arch, d).to(torch.bfloat16)
    sample = helpers.make_sample(d)
    model.train()
    out, _ = model(**sample["net_input"])
    assert out.dtype == torch.bfloat16
    lprobs = torch.log_softmax(out.float(), dim=-1)
    loss = -lprobs.gather(-1, sample["target"].unsqueeze(-1)).squeeze(-1)
    loss.masked_fill(sample["target"].eq(d.pad()), 0.0).sum().backward()
    assert torch.isfinite(loss).all()
    bad = [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
    assert not bad, f"{arch}: non-finite bf16 gradients in {bad}"


@pytest.mark.parametrize("arch", ARCHS)
def test_incremental_decoding_runs_in_bfloat16(arch):
    """The beam-search path (per-sentence caches included) keeps the model's dtype and
    gives the float32 model's probabilities up to bfloat16 rounding."""
    torch.manual_seed(0)
    d = helpers.dummy_dictionary(12)
    model = rh.build_tiny_model(arch, d).eval()
    ni = helpers.make_sample(d)["net_input"]
    args = (ni["src_tokens"], ni["src_lengths"], ni["prev_output_tokens"])
    with torch.no_grad():
        ref = helpers.incremental_decode(model, *args).exp()
        model = model.to(torch.bfloat16)
        low = helpers.incremental_decode(model, *args).exp()
        out, _ = model.decoder(
            ni["prev_output_tokens"][:, :1], encoder_out=model.encoder(*args[:2]), incremental_state={}
        )
    assert out.dtype == torch.bfloat16
    mask = ni["prev_output_tokens"].ne(d.pad())
    assert torch.isfinite(low[mask]).all()
    assert (low - ref).abs()[mask].max() < 0.05


@pytest.fixture(scope="module")
def gpu_data(tmp_path_factory):
    return rh.tiny_corpus(tmp_path_factory.mktemp("precision"), n_train=256)


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", ["--fp16", "--amp", "--bf16-autocast"])
@pytest.mark.parametrize("arch", ARCHS)
def test_gpu_mixed_precision_trains_without_nan(arch, mode, gpu_data, tmp_path):
    args = rh.base_train_args(
        gpu_data,
        tmp_path / "ckpt",
        arch,
        GPU_UPDATES,
        mode,
        "--optimizer",
        "adam",
        "--lr",
        "0.002",
        "--clip-norm",
        "1.0",
        "--batch-size",
        "32",
        "--disable-validation",
    )
    args.remove("--cpu")
    losses = rh.train_inprocess(args)
    # fp16 loss scaling may skip a few overflowing steps (bfloat16 has no loss scale), but training must go on
    assert len(losses) >= GPU_UPDATES * 0.9, f"{arch} {mode}: only {len(losses)} updates"
    assert all(math.isfinite(v) for v in losses.values()), f"{arch} {mode}: non-finite loss"
    assert losses[max(losses)] < losses[min(losses)], f"{arch} {mode}: loss did not go down"
    state = rh.load_checkpoint(tmp_path / "ckpt" / "checkpoint_last.pt")["model"]
    bad = [k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    assert not bad, f"{arch} {mode}: non-finite parameters {bad}"
