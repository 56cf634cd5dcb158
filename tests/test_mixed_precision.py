"""Every paper preset trains in mixed precision: float16 with a loss scale, and bfloat16.

For each paper preset (tests/test_paper_presets.py's ``PAPER_ARCHS``, aliases of one
configuration once), the model is built as ``fairseq-train`` builds it with its paper recipe's
optimiser, rate, schedule and clipping (:func:`recipe`, from examples/<family>/), and trained for
:data:`UPDATES` updates as ``--amp`` trains: the forward under autocast, the loss scaled (fairseq's
initial scale 128), a step with a non-finite gradient skipped and the scale halved. Checked: no
module output is non-finite in the forward at initialisation (float16 overflows to inf past
65,504, as the GPU's does), at most :data:`MAX_SKIPPED` overflowing steps (the loss scale does not
collapse), a finite loss and finite weights at the end.

On the CPU the check runs at reduced widths (the family's tiny widths of
``benchmarks.counterparts.PAPER_PAIRS``), depth and structure the preset's: the paper sizes take
minutes a step in CPU float16. The per-layer gain is kept: every family initialises with a scale
that follows the fan-in (Xavier, PyTorch's defaults, ConvS2S's), but Deep-Att / Deep-ED's fixed
``N(0, init_std)``, whose ``init_std`` is scaled by ``sqrt(paper width / reduced width)`` here; its
embeddings, drawn with the same std, are larger than the paper's by that factor (a stricter check).
Float16 and bfloat16 run as CPU autocast runs them (``op_counts.cpu_lstm_kernel``: LSTMs on oneDNN
where the CPU has the instructions, else PyTorch's per-step form, so on any CPU). On CUDA, cuDNN
runs RNNs in float16 under bfloat16 autocast too: the float16 check covers that part of a
bfloat16 GPU run. CPU float16 / bfloat16 products are slow (about 1 s an update even at these
widths), so the suite runs the deepest paper preset of each family for :data:`UPDATES` updates;
``FAIRSEQ_DENSE_FULL_RELIABILITY=1`` runs every paper preset for 24.

The GPU stage (skipped without CUDA) trains every paper preset at its paper size, 50 updates under
float16 (``--amp``'s loss scale) and 50 under bfloat16, and decodes one batch with beam 5
(``test_paper_preset_trains_on_the_gpu``, 82 tests), and runs ``fairseq-train --fp16`` of every
Deep-Att / Deep-ED preset (12); the second line is Deep-Att's and Deep-ED's alone (6 tests)::

    python -m pytest -q -rA tests/test_mixed_precision.py -k gpu
    python -m pytest -q -rA tests/test_mixed_precision.py -k "gpu and (deep_att- or deep_ed- or deep_att] or deep_ed])"
"""

import math
import tempfile
from typing import Dict, List

import pytest
import torch
from fairseq import options
from fairseq.optim import lr_scheduler

from benchmarks import counterparts, measure, op_counts, synthetic
from tests import reliability_helpers as rh
from tests.test_paper_presets import PAPER_ARCHS, claims_of, family

#: each family's paper recipe: optimiser, rate, schedule, clipping (the script it is taken from)
RECIPES = {
    # examples/dense_lstm/train.sh
    "dense_lstm": "--optimizer adadelta --lr 1.0 --clip-norm 5.0 --lr-scheduler fixed",
    # examples/densenmt/train-iwslt14.sh (convs2s_anneal: the fixed rate until the validation loss rises)
    "densenmt": "--optimizer nag --lr 0.25 --momentum 0.99 --clip-norm 0.1 --lr-scheduler fixed",
    # examples/fast_forward_lstm/train-iwslt14.sh
    "fast_forward_lstm": "--optimizer adam --adam-betas (0.9,0.999) --lr 4e-5 --lr-scheduler grouped "
    "--group-lr-scale recurrent=5e-4 --clip-norm 0.0",
    # examples/gru_attention/train-iwslt14.sh
    "gru_attention": "--optimizer adam --lr 0.001 --clip-norm 5.0 --lr-scheduler fixed",
}


def recipe(arch: str) -> List[str]:
    """``arch``'s family's :data:`RECIPES`; the Weighted Transformer's as examples/weighted_transformer/train-wmt14.sh
    derives it from the preset's ``d_model`` and depth (rates ``d^-0.5`` and ``(d/N)^-0.5``, the paper's warm-ups)."""
    if family(arch) != "weighted_transformer":
        return RECIPES[family(arch)].split()
    d, n = int(claims_of(arch)["d_model"]), int(claims_of(arch)["layers"].split("+")[0])
    lr, branch = d**-0.5, (d / n) ** -0.5
    return (
        "--optimizer adam --adam-betas (0.9,0.98) --adam-eps 1e-9 --lr-scheduler grouped --learned-branch-weights "
        f"--lr {lr} --group-lr-scale default={lr},branch={branch} --group-warmup-updates default=4000,branch=400"
    ).split()


UPDATES = 24 if rh.FULL else 12
GPU_UPDATES = 50
FP16_INIT_SCALE = 128.0  # fairseq's --fp16-init-scale
MAX_SKIPPED = 2  # overflowing float16 steps allowed (the scale 128 -> 32)
VOCAB = 64

#: one preset per configuration: the aliases (the dataclass-default arch of a family) are left out
ALIASES = {"dense_lstm", "densenmt", "fast_forward_lstm", "gru_attention", "weighted_transformer"}
ARCHS = sorted(set(PAPER_ARCHS) - ALIASES)


def depth(arch: str) -> int:
    return sum(int(n) for n in claims_of(arch).get("layers", "1").split("+"))


#: the suite's: each family's deepest paper preset (the first in name order of the deepest)
DEEPEST = sorted({family(a): max((b for b in ARCHS if family(b) == family(a)), key=depth) for a in ARCHS}.values())
CPU_ARCHS = ARCHS if rh.FULL else DEEPEST


def parse(arch_args: List[str]):
    return options.parse_args_and_arch(options.get_training_parser(), ["data", *arch_args])


def reduced(arch: str) -> List[str]:
    """``arch`` at its family's tiny widths of ``PAPER_PAIRS`` (the pair whose arch it is, else the
    family's last), depth kept; a fixed-std initialisation scaled to keep the paper's per-layer gain."""
    fam = family(arch)
    pairs = [p for p in counterparts.PAPER_PAIRS.values() if p["family"] == fam]
    pair = next((p for p in pairs if p["ours"][1] == arch), pairs[-1])
    args = ["--arch", arch, *pair["tiny_ours"][len(pair["ours"]) :]]
    paper, small = parse(["--arch", arch]), parse(args)
    if hasattr(paper, "init_std"):
        gain = math.sqrt(paper.encoder_hidden_size / small.encoder_hidden_size)
        args += ["--init-std", str(paper.init_std * gain)]
    return args


def build(arch_args: List[str], device: str):
    """``(task, model, criterion, optimizer, cfg)`` as ``fairseq-train`` builds them with the family's recipe."""
    with tempfile.TemporaryDirectory() as tmp:
        dict_dir = synthetic.write_dicts(tmp, VOCAB)
        torch.manual_seed(1)
        args = [dict_dir, "-s", "de", "-t", "en", "--task", "translation_exact_resume_simplex", *arch_args]
        args += [*recipe(arch_args[1]), "--criterion", "label_smoothed_cross_entropy_with_stats"]
        side = measure.build_trainable([*args, "--label-smoothing", "0.1"])
    side[1].to(device)
    return side


def batches(max_tokens: int, device: str) -> List[Dict]:
    return [
        synthetic.make_batch(synthetic.batch_lengths(max_tokens, 24, quantile=q), VOCAB, seed=i, device=device)
        for i, q in enumerate((0.3, 0.7))
    ]


def train(arch_args: List[str], dtype: torch.dtype, updates: int, device: str, max_tokens: int) -> Dict:
    """Train as ``--amp`` does (float16: scaled loss, overflowing steps skipped) or under bfloat16 autocast;
    returns what the checks read."""
    side = build(arch_args, device)
    task, model, criterion, optimizer, cfg = side
    scheduler = lr_scheduler.build_lr_scheduler(cfg.lr_scheduler, optimizer)
    scheduler.step_update(0)
    samples = batches(max_tokens, device)
    bad_at_init = []

    def hook(module, inputs, out):
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if torch.is_tensor(t) and t.is_floating_point() and not torch.isfinite(t).all():
                bad_at_init.append(module.__class__.__name__ + " " + names[module])

    names = {m: n for n, m in model.named_modules()}
    hooks = [m.register_forward_hook(hook) for m in model.modules()]
    scale = FP16_INIT_SCALE if dtype == torch.float16 else 1.0
    skipped, losses = 0, []
    model.train()
    for i in range(updates):
        sample = samples[i % len(samples)]
        with op_counts.cpu_lstm_kernel(dtype), torch.autocast(device, dtype=dtype):
            loss, sample_size, _ = criterion(model, sample)
        for h in hooks:  # the forward at initialisation only
            h.remove()
        hooks = []
        (loss * scale).backward()
        optimizer.multiply_grads(1.0 / (scale * float(sample_size)))
        norm = optimizer.clip_grad_norm(cfg.optimization.clip_norm)
        if not torch.isfinite(norm):  # as fairseq's loss scalers: skip the step, halve the scale
            skipped += 1
            scale /= 2
            optimizer.zero_grad()
            continue
        task.optimizer_step(optimizer, model, i + 1)
        scheduler.step_update(i + 1)
        optimizer.zero_grad()
        losses.append(float(loss.detach()) / float(sample_size))
    bad_weights = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    return {
        "bad_at_init": bad_at_init,
        "skipped": skipped,
        "scale": scale,
        "losses": losses,
        "bad_weights": bad_weights,
        "side": side,
        "sample": samples[0],
    }


def check(arch: str, r: Dict, dtype: torch.dtype, updates: int) -> None:
    what = f"{arch} under {str(dtype).split('.')[1]} autocast"
    assert not r["bad_at_init"], f"{what}: non-finite outputs at initialisation in {r['bad_at_init'][:6]}"
    allowed = MAX_SKIPPED if dtype == torch.float16 else 0
    assert r["skipped"] <= allowed, (
        f"{what}: {r['skipped']} of {updates} steps overflowed (loss scale {r['scale']:g}), at most {allowed} allowed"
    )
    assert r["losses"] and all(map(math.isfinite, r["losses"])), f"{what}: losses {r['losses']}"
    assert not r["bad_weights"], f"{what}: non-finite weights {r['bad_weights'][:6]}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("arch", CPU_ARCHS)
def test_paper_preset_trains_in_low_precision(arch, dtype):
    check(arch, train(reduced(arch), dtype, UPDATES, "cpu", max_tokens=48), dtype, UPDATES)


def test_fp16_model_keeps_the_fast_forward_stack_in_float32():
    """``--fp16`` casts the model with ``half()``: Deep-Att keeps all but its embeddings and softmax side
    in float32, and its forward and backward at initialisation (loss scale 128) are finite. The update
    itself needs CUDA (fairseq's FP16 optimisers do): the GPU stage's."""
    _, model, criterion, _, _ = build(reduced("deep_att"), "cpu")
    model.half()
    model.train()
    loss, _, _ = criterion(model, batches(48, "cpu")[0])
    (loss * FP16_INIT_SCALE).backward()
    assert torch.isfinite(loss), loss
    bad = [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
    assert not bad, f"non-finite float16 gradients in {bad[:6]}"
    kept = {n.split(".")[0] + "." + n.split(".")[1] for n, p in model.named_parameters() if p.dtype == torch.float32}
    assert kept == {"encoder.columns", "encoder.fc", "decoder.first", "decoder.context_proj", "decoder.rest"} | {
        "decoder.attention"
    }, kept


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("arch", ARCHS)
def test_paper_preset_trains_on_the_gpu(arch, dtype):
    """The paper size, 50 updates of 2,048-token batches, then beam 5 on one batch."""
    r = train(["--arch", arch], dtype, GPU_UPDATES, "cuda", max_tokens=2048)
    check(arch, r, dtype, GPU_UPDATES)
    task, model, *_ = r["side"]
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=dtype):
        hypos = measure.generator(model, task, 5, 20).generate([model], r["sample"])
    assert len(hypos) == r["sample"]["nsentences"] and all(len(h) == 5 for h in hypos)


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("arch", [a for a in ARCHS if family(a) == "fast_forward_lstm"])
def test_fast_forward_paper_preset_trains_with_fp16_on_the_gpu(arch, tmp_path):
    """``fairseq-train --fp16`` (the half() model, fairseq's FP16 optimiser and loss scaler) at the paper size."""
    data = rh.tiny_corpus(tmp_path / "corpus", n_train=256)
    args = rh.base_train_args(data, tmp_path / "ckpt", arch, GPU_UPDATES, "--fp16", *recipe(arch))
    args.remove("--cpu")
    losses = rh.train_inprocess([*args, "--batch-size", "32", "--disable-validation"])
    assert losses and all(math.isfinite(v) for v in losses.values()), f"{arch} --fp16: losses {losses}"
    state = rh.load_checkpoint(tmp_path / "ckpt" / "checkpoint_last.pt")
    scale = state["last_optimizer_state"].get("loss_scale")
    assert scale is not None and scale >= FP16_INIT_SCALE / 2**MAX_SKIPPED, f"{arch} --fp16: loss scale {scale}"
    bad = [k for k, v in state["model"].items() if v.is_floating_point() and not torch.isfinite(v).all()]
    assert not bad, f"{arch} --fp16: non-finite parameters {bad}"
