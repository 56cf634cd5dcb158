"""Every family on a CUDA device: the same outputs as on CPU, incremental decoding equal
to the full pass, beam search with the cache equal to beam search without it, and a
mixed-precision (autocast) forward/backward with finite gradients.

Skipped without CUDA (CI has none); run on a GPU machine with
``pytest tests/test_cuda.py tests/test_precision.py``.
"""

import pytest
import torch

from tests import helpers
from tests import reliability_helpers as rh

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

ARCHS = rh.tiny_archs()


@pytest.fixture(autouse=True)
def _exact_float32():
    """No TF32 in matmuls or cuDNN convolutions, so float32 CUDA results compare with CPU."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _sample(d, device):
    from fairseq import utils

    sample = helpers.make_sample(d, src_lengths=(5, 7, 3, 6), tgt_lengths=(4, 6, 5, 3))
    return utils.move_to_cuda(sample) if device == "cuda" else sample


@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_matches_cpu_and_incremental_equals_full(arch):
    torch.manual_seed(0)
    d = helpers.dummy_dictionary(12)
    model = rh.build_tiny_model(arch, d).eval()
    with torch.no_grad():
        ref, _ = model(**_sample(d, "cpu")["net_input"])
        model = model.cuda()
        sample = _sample(d, "cuda")
        out, _ = model(**sample["net_input"])
    mask = sample["net_input"]["prev_output_tokens"].ne(d.pad())
    diff = (torch.log_softmax(out.float(), -1).cpu() - torch.log_softmax(ref.float(), -1)).abs()
    assert diff.amax(-1)[mask.cpu()].max() < 1e-4, f"{arch}: CUDA vs CPU log-probs differ by {diff.max()}"
    helpers.check_incremental_equals_full(model, sample, atol=1e-4)
    helpers.check_reorder_incremental_state(model, sample, atol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_beam_search_with_cache_equals_without(arch):
    torch.manual_seed(0)
    d = helpers.dummy_dictionary(12)
    model = rh.build_tiny_model(arch, d).eval().cuda()
    out_proj = getattr(model.decoder, "output_projection", None)
    if getattr(out_proj, "bias", None) is not None:  # let some sentences finish early
        with torch.no_grad():
            out_proj.bias[d.eos()] += 0.1
    sample = _sample(d, "cuda")
    helpers.assert_same_hypotheses(
        helpers.beam_search(model, d, sample), helpers.beam_search(model, d, sample, cached=False), atol=1e-4
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_autocast_forward_backward(arch, dtype):
    """What ``fairseq-train --amp`` does per step (float16 autocast), and bfloat16 autocast:
    the loss is close to float32's and every parameter gets a finite gradient."""
    torch.manual_seed(0)
    d = helpers.dummy_dictionary(12)
    model = rh.build_tiny_model(arch, d).cuda().train()
    sample = _sample(d, "cuda")
    target = sample["target"]

    def loss_of(out):
        lprobs = torch.log_softmax(out.float(), dim=-1)
        nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        return nll.masked_fill(target.eq(d.pad()), 0.0).sum()

    model.eval()  # no dropout: the two losses must be comparable
    with torch.no_grad():
        ref = loss_of(model(**sample["net_input"])[0])
    model.train()
    with torch.autocast("cuda", dtype=dtype):
        out, _ = model(**sample["net_input"])
    assert out.dtype in (dtype, torch.float32)
    loss = loss_of(out)
    loss.backward()
    assert torch.isfinite(loss)
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, f"{arch}: parameters without gradient under autocast: {missing}"
    bad = [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
    assert not bad, f"{arch}: non-finite gradients under {dtype} autocast: {bad}"
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=dtype):
        low = loss_of(model(**sample["net_input"])[0])
    assert abs(low.item() - ref.item()) < 0.02 * abs(ref.item()) + 0.1, (arch, low.item(), ref.item())
