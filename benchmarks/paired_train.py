"""Training speed of two models measured side by side in one process, batch by batch.

``benchmarks.run`` trains every model with the ``fairseq-train`` CLI in its own
process, one after the other: the figures users get, but minutes apart, so a
change in the machine's load between the two runs enters the ratio. This module
builds both models exactly as their recorded ``fairseq-train`` command would
(task, model, criterion, optimizer), takes the same real training batches, and
times forward + backward + optimizer step for one model and then the other, batch
by batch (the order alternating per round). It also counts the FLOPs of one
training step of each (torch's FLOP counter, backward included), so that a speed
gap can be told apart from a work gap.
"""
import logging
import time
from typing import Dict, List

import torch

logger = logging.getLogger("benchmarks.paired_train")


def build_trainable(train_args: List[str]):
    """``(task, model, criterion, optimizer, cfg)`` as ``fairseq-train <train_args>`` would build them."""
    import fairseq_dense  # noqa: F401
    from fairseq import optim, options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, input_args=list(train_args))
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.common.amp:  # as fairseq's Trainer: float16 autocast in train_step, scaled loss
        optimizer = optim.AMPOptimizer.build_optimizer(cfg, params)
    else:
        optimizer = optim.build_optimizer(cfg.optimizer, params)
    return task, model, criterion, optimizer, cfg


def training_batches(task, model, cfg, n: int, seed: int = 1) -> List[Dict]:
    """The first ``n`` batches of a shuffled epoch of the training split (``--max-tokens`` sized);
    a split with fewer batches is cycled through."""
    from fairseq import utils

    task.load_dataset(cfg.dataset.train_subset, combine=False, epoch=1)
    itr = task.get_batch_iterator(
        dataset=task.dataset(cfg.dataset.train_subset), max_tokens=cfg.dataset.max_tokens,
        max_sentences=cfg.dataset.batch_size,
        max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
        ignore_invalid_inputs=True, seed=seed, num_workers=0,
    ).next_epoch_itr(shuffle=True)
    out = []
    for sample in itr:
        out.append(sample)
        if len(out) == n:
            break
    if not out:
        raise ValueError(f"no training batch in {cfg.dataset.train_subset} (all sentences too long?)")
    return (out * n)[:n]


def _step(task, model, criterion, optimizer, sample, update_num: int, clip_norm: float) -> None:
    model.train()
    optimizer.zero_grad()
    task.train_step(sample, model, criterion, optimizer, update_num)
    if clip_norm > 0:
        optimizer.clip_grad_norm(clip_norm)
    task.optimizer_step(optimizer, model, update_num)


def step_flops(side, sample) -> int:
    """FLOPs of one training step (forward, backward, optimizer) on ``sample``."""
    from torch.utils.flop_counter import FlopCounterMode

    from benchmarks.decode import _register_extra_flops

    _register_extra_flops()
    task, model, criterion, optimizer, cfg = side
    with FlopCounterMode(display=False) as counter:
        _step(task, model, criterion, optimizer, sample, 1, cfg.optimization.clip_norm)
    return counter.get_total_flops()


def paired_train_speed(ours_args: List[str], baseline_args: List[str], *, batches: int = 8, rounds: int = 3,
                       threads: int = 0, device: str = "cpu") -> Dict:
    """Target tokens/s of both models on the same batches, interleaved.

    Args:
        ours_args / baseline_args: ``fairseq-train`` arguments (without the program name).
        batches: training batches per round.
        rounds: rounds; the reported ratio is the median of the per-round ratios.

    Returns:
        ``{"ratio": ours tok/s / baseline tok/s, "flop_ratio": ours / baseline FLOPs per step,
        "flop_normalised_ratio", "rounds": [...], "target_tokens", ...}``.
    """
    from fairseq import utils

    if threads:
        torch.set_num_threads(threads)
    sides = {"ours": build_trainable(ours_args), "baseline": build_trainable(baseline_args)}
    task, model, _, _, cfg = sides["ours"]
    samples = training_batches(task, model, cfg, batches + 1)
    if device == "cuda":
        samples = [utils.move_to_cuda(s) for s in samples]
        for s in sides.values():
            s[1].cuda()
    warm, samples = samples[0], samples[1:]
    tokens = sum(int(s["ntokens"]) for s in samples)
    flops = {}
    for name, side in sides.items():  # warm-up step, then a counted one
        task, model, criterion, optimizer, cfg = side
        _step(task, model, criterion, optimizer, warm, 1, cfg.optimization.clip_norm)
        flops[name] = step_flops(side, warm)
        if device == "cuda":  # cuDNN algorithm search and the caching allocator meet every batch shape once
            for sample in samples:
                _step(task, model, criterion, optimizer, sample, 1, cfg.optimization.clip_norm)
            torch.cuda.synchronize()
    per_round = []
    for r in range(rounds):
        seconds = {"ours": 0.0, "baseline": 0.0}
        order = ("ours", "baseline") if r % 2 == 0 else ("baseline", "ours")
        for i, sample in enumerate(samples):
            for name in order:
                task, model, criterion, optimizer, cfg = sides[name]
                if device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                _step(task, model, criterion, optimizer, sample, 2 + i, cfg.optimization.clip_norm)
                if device == "cuda":
                    torch.cuda.synchronize()
                seconds[name] += time.perf_counter() - t0
        per_round.append({"ours_s": seconds["ours"], "baseline_s": seconds["baseline"]})
    ratios = sorted(p["baseline_s"] / p["ours_s"] for p in per_round if p["ours_s"])
    ratio = ratios[len(ratios) // 2] if ratios else None
    flop_ratio = flops["ours"] / flops["baseline"] if flops["baseline"] else None
    return {
        "ratio": ratio,
        "ratios": ratios,
        "rounds": per_round,
        "target_tokens_per_round": tokens,
        "batches": len(samples),
        "flops_per_step": flops,
        "flop_ratio": flop_ratio,
        "flop_normalised_ratio": ratio * flop_ratio if ratio and flop_ratio else None,
        "threads": torch.get_num_threads(),
        "device": device,
    }
