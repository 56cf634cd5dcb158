"""The measurements: ``fairseq-train`` in a child process (one fresh process per model: its peak memory,
:func:`child_main`, and its JSON log), and models side by side in one process, taking turns on the same
batches (:func:`timed_rounds`: load changes on a shared machine hit all sides alike). Decoding speed forces
every hypothesis to one length, so that undertrained models' short or runaway outputs do not decide it.
"""

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def common_args(data_bin: str, save_dir: str, a) -> List[str]:
    """The ``fairseq-train`` arguments both models of a pair share (data, optimiser, schedule, budget)."""
    import fairseq_dense

    user_dir = os.path.dirname(os.path.abspath(fairseq_dense.__file__))
    args = [
        *(data_bin, "--user-dir", user_dir, "--task", "translation_exact_resume_simplex"),
        *("--source-lang", a.src, "--target-lang", a.tgt),
        *"--criterion label_smoothed_cross_entropy_with_stats --label-smoothing 0.1 --optimizer adam".split(),
        *("--adam-betas", "(0.9, 0.98)"),
        *f"--lr {a.lr} --clip-norm 1.0 --lr-scheduler inverse_sqrt --warmup-updates {a.warmup_updates}".split(),
        *f"--warmup-init-lr 1e-07 --max-tokens {a.max_tokens} --max-epoch 100000 --seed {a.seed}".split(),
        *f"--stop-time-hours {a.budget_minutes / 60:.6f} --log-format json --log-interval {a.log_interval}".split(),
        *("--validate-interval-updates", str(a.validate_interval_updates), "--save-dir", save_dir),
        *"--no-epoch-checkpoints --save-interval 100000 --num-workers 0 --skip-invalid-size-inputs-valid-test".split(),
    ]
    if a.max_update:
        args += ["--max-update", str(a.max_update)]
    if a.device == "cpu":
        args.append("--cpu")
    if a.amp:  # not --bf16: fairseq's option parsing turns --bf16 into --tpu (torch_xla), on GPUs too
        args.append("--amp")
    return args


def start_training(train_args: List[str], run_dir: str, threads: int):
    """Start ``fairseq-train <train_args>`` in a child in ``run_dir``, emptied first; returns (process, log file)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "command.json"), "w") as f:
        json.dump(["fairseq-train", *train_args], f, indent=1)
    from fairseq_dense.cli.quickstart_steps import command_env

    env = command_env(threads, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    log = open(os.path.join(run_dir, "train.log"), "w")
    cmd = [sys.executable, "-m", "benchmarks.measure", os.path.join(run_dir, "child_stats.json"), *train_args]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log


def finish_training(proc, log, run_dir: str, timeout_s: float) -> Dict:
    """A child of :func:`start_training`'s log path and peak memory (RuntimeError: its log's tail)."""
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()
    if proc.returncode != 0:
        with open(log.name, errors="replace") as f:
            tail = "".join(f.readlines()[-25:])
        raise RuntimeError(f"fairseq-train failed ({proc.returncode}); log {log.name}:\n{tail}")
    with open(os.path.join(run_dir, "child_stats.json")) as f:
        child = json.load(f)
    return {
        "log": log.name,
        "peak_rss_mib": child["vm_hwm_kib"] / 1024 if child.get("vm_hwm_kib") else None,
        "peak_rss_source": "VmHWM",
        "cuda_max_allocated_mib": child.get("cuda_max_allocated_bytes", 0) / 2**20 or None,
    }


def summarise_log(log_path: str, warmup_fraction: float = 0.2) -> Dict:
    """Steady-state throughput of one training log (the median of fairseq's ``wps``, target tokens/s, over the
    intervals after the first ``warmup_fraction`` of updates and the first two, which also discounts the
    intervals a validation pass fell into) and its validation curve."""
    from fairseq_dense.logs import parse_log

    log = parse_log(log_path)
    inner = [r for r in log["train_inner"] if isinstance(r.get("num_updates"), float)]
    valid = [r for r in log["valid"] if isinstance(r.get("loss"), float)]
    n_updates = max([r["num_updates"] for r in inner + valid] or [0.0])
    warm = max(warmup_fraction * n_updates, inner[1]["num_updates"] if len(inner) > 1 else 0.0)
    wps = [r["wps"] for r in inner if r["num_updates"] > warm and isinstance(r.get("wps"), float)]
    wps = wps or [r["wps"] for r in inner if isinstance(r.get("wps"), float)]  # too short a run: all of it
    best = min(valid, key=lambda r: r["loss"]) if valid else {}
    return {
        "updates": int(n_updates),
        "train_tokens_per_s": statistics.median(wps) if wps else None,
        "valid_curve": [(int(r["num_updates"]), r["t"], r["loss"]) for r in valid],
        "best_valid_loss": best.get("loss"),
        "best_valid_updates": int(best["num_updates"]) if best else None,
    }


def time_to_reach(valid_curve, target: Optional[float]) -> Dict:
    """First validation at or below ``target``: ``{"updates", "seconds"}`` (``None`` values if never)."""
    for updates, t, loss in valid_curve if target is not None else []:
        if loss <= target + 1e-9:
            return {"updates": updates, "seconds": t}
    return {"updates": None, "seconds": None}


def loss_at_equal_updates(ours_curve, base_curve) -> Optional[Dict]:
    """Validation losses at the last update count both curves validated at."""
    ours, base = ({u: loss for u, _, loss in curve} for curve in (ours_curve, base_curve))
    common = ours.keys() & base.keys()
    return {"updates": max(common), "ours": ours[max(common)], "baseline": base[max(common)]} if common else None


def sync(device: str) -> None:
    """Wait for the device's queued work (a no-op on the CPU), so that a clock read after it counts it."""
    if device == "cuda":
        torch.cuda.synchronize()


def timed_rounds(sides: Dict, items: list, rounds: int, step, device: str) -> Dict:
    """``step(side, item, i)`` for every item, each side in turn, ``rounds`` times (the sides' order reversed
    every other round), timed by the wall clock (``<side>_s``) and the calling thread's CPU time (``<side>_cpu_s``:
    with one torch thread all the work runs there, without waits for a core); ``ratio``, ``cpu_ratio``: the
    median of :func:`ratios` baseline / ours, if both are sides."""
    per_round = []
    for r in range(rounds):
        seconds, cpu = dict.fromkeys(sides, 0.0), dict.fromkeys(sides, 0.0)
        for i, item in enumerate(items):
            for name in list(sides) if r % 2 == 0 else list(sides)[::-1]:
                sync(device)
                t0, c0 = time.perf_counter(), time.thread_time()
                step(sides[name], item, i)
                sync(device)
                seconds[name] += time.perf_counter() - t0
                cpu[name] += time.thread_time() - c0
        per_round.append({**{f"{n}_s": seconds[n] for n in sides}, **{f"{n}_cpu_s": cpu[n] for n in sides}})
    both = "ours" in sides and "baseline" in sides
    return {
        "ratio": ratios(per_round, "baseline", "ours", "s")["median"] if both else None,
        "cpu_ratio": ratios(per_round, "baseline", "ours", "cpu_s")["median"] if both else None,
        "rounds": per_round,
        "threads": torch.get_num_threads(),
        "device": device,
    }


def ratios(per_round: list, slow: str, fast: str, clock: str = "cpu_s") -> Dict:
    """:func:`spread` of side ``slow``'s seconds / side ``fast``'s over the rounds of :func:`timed_rounds`
    (``clock``: ``s`` wall, ``cpu_s``)."""
    return spread([p[f"{slow}_{clock}"] / p[f"{fast}_{clock}"] for p in per_round if p[f"{fast}_{clock}"]])


def spread(values: List[float]) -> Dict:
    """``{"median", "min", "max"}`` of ``values``."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def build_trainable(train_args: List[str]):
    """``(task, model, criterion, optimizer, cfg)`` as ``fairseq-train <train_args>`` builds them."""
    from fairseq import optim, tasks

    from fairseq_dense.baselines import train_config

    cfg = train_config(train_args)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.common.amp:  # as fairseq's Trainer: float16 autocast in train_step, scaled loss
        optimizer = optim.AMPOptimizer.build_optimizer(cfg, params)
    else:
        optimizer = optim.build_optimizer(cfg.optimizer, params)
    return task, model, task.build_criterion(cfg.criterion), optimizer, cfg


def train_step(side, sample, update: int = 1, *, dtype=None, counter=None, saved=None) -> torch.Tensor:
    """One training step of a :func:`build_trainable` ``side`` as fairseq's Trainer takes it: forward under
    autocast in ``dtype`` (None: none; float16 with fairseq's ``--amp`` optimizer, which also scales the loss),
    gradients over the sample size, clipping, the task's optimizer step; ``counter``/``saved`` (``op_counts``)
    watch it in phases. Returns the loss, detached (reading it waits for the device)."""
    from fairseq.optim.amp_optimizer import AMPOptimizer

    from benchmarks import op_counts

    task, model, criterion, optimizer, cfg = side
    phase = counter.phase if counter else lambda name: contextlib.nullcontext()
    dtype = torch.float16 if isinstance(optimizer, AMPOptimizer) else dtype
    model.train()
    criterion.train()
    autocast = torch.autocast(sample["target"].device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None)
    with op_counts.cpu_lstm_kernel(dtype or torch.float32):
        with phase("forward"), saved or contextlib.nullcontext(), autocast:
            loss, sample_size, _ = criterion(model, sample)
        with phase("backward"):
            optimizer.backward(loss)
        with phase("optimizer"):
            optimizer.multiply_grads(1.0 / float(sample_size or 1))
            optimizer.clip_grad_norm(cfg.optimization.clip_norm)
            task.optimizer_step(optimizer, model, update)
            optimizer.zero_grad()
    return loss.detach()


def train_speed(sides: Dict, *, batches: int, rounds: int, device: str = "cpu") -> Dict:
    """Training steps (:func:`train_step`) of ``sides`` (``{name: build_trainable(...)}``) on the same
    ``batches`` real batches of the first side's training split (the first of a shuffled epoch, cycled if
    fewer), interleaved over ``rounds`` (:func:`timed_rounds`: ``ratio`` is ours / baseline tokens/s)."""
    from fairseq import utils

    task, model, _, _, cfg = next(iter(sides.values()))
    task.load_dataset(cfg.dataset.train_subset, combine=False, epoch=1)
    itr = task.get_batch_iterator(
        dataset=task.dataset(cfg.dataset.train_subset),
        max_tokens=cfg.dataset.max_tokens,
        max_sentences=cfg.dataset.batch_size,
        ignore_invalid_inputs=True,
        seed=1,
        num_workers=0,
        max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
    ).next_epoch_itr(shuffle=True)
    samples = [s for _, s in zip(range(batches + 1), itr)]
    samples = [utils.move_to_cuda(s) if device == "cuda" else s for s in (samples * (batches + 1))[: batches + 1]]
    for side in sides.values():
        side[1].to(device)
        # warm-up: every batch shape once (on CUDA: cuDNN algorithm search, allocator growth)
        for sample in samples if device == "cuda" else samples[:1]:
            train_step(side, sample, 1)
    res = timed_rounds(sides, samples[1:], rounds, lambda side, s, i: train_step(side, s, 2 + i), device)
    return {**res, "batches": batches, "target_tokens_per_round": sum(int(s["ntokens"]) for s in samples[1:])}


def load_checkpoint(path: str, data_bin: str, device: str = "cpu", bf16: bool = False):
    """A fairseq checkpoint of any model, in eval mode, and its task with the test split loaded."""
    from fairseq import checkpoint_utils

    from fairseq_dense.checkpoints import safe_loading  # (imports the plugin: registers every model)

    with safe_loading():  # the argparse.Namespace of fairseq's lstm, fconv and --optimizer sgd
        models, _, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data_bin})
    model = models[0].eval().to(device)
    task.load_dataset("test")
    return (model.to(torch.bfloat16) if bf16 else model), task


def decode_batches(dataset, sentences: int, batch_size: int, device: str, spread: bool = True) -> list:
    """Batches by source length of ``sentences`` sentences (0: all) of ``dataset``, spread over it (else its first)."""
    from fairseq import utils

    n = min(len(dataset), sentences or len(dataset))
    indices = list(range(len(dataset)))[:: max(1, len(dataset) // n)][:n] if spread else list(range(n))
    order = sorted(indices, key=lambda i: (int(dataset.src_sizes[i]), i))
    out = [dataset.collater([dataset[i] for i in order[j : j + batch_size]]) for j in range(0, len(order), batch_size)]
    return [utils.move_to_cuda(s) for s in out] if device == "cuda" else out


def generator(model, task, beam: int, fixed_length: int = 0):
    """fairseq's ``SequenceGenerator`` of beam ``beam``; ``fixed_length``: every hypothesis that many tokens."""
    from fairseq.sequence_generator import SequenceGenerator

    length = {"max_len_a": 0, "max_len_b": fixed_length, "min_len": fixed_length} if fixed_length else {}
    return SequenceGenerator([model], task.target_dictionary, beam_size=beam, **length)


def paired_decode(
    models: Dict, *, sentences: int, rounds: int, batch_size: int, length: int, device: str = "cpu"
) -> Dict:
    """Beam-5 sentences/s of ``models`` (``{"ours"/"baseline": (model in eval mode, task with the test split
    loaded)}``), interleaved (:func:`timed_rounds`) on ``sentences`` test sentences of the baseline's spread over
    the split, every hypothesis forced to ``length`` tokens."""
    sides = {name: (model, generator(model, task, 5, length)) for name, (model, task) in models.items()}
    batches = decode_batches(models["baseline"][1].dataset("test"), sentences, batch_size, device)
    with torch.inference_mode():
        for model, gen in sides.values():  # warm-up: allocator, thread pools
            gen.generate([model], batches[0])
        res = timed_rounds(sides, batches, rounds, lambda side, s, i: side[1].generate([side[0]], s), device)
    return {**res, "sentences": sum(len(b["id"]) for b in batches), "fixed_length": length}


def beam_bleu(ckpt: str, data_bin: str, raw_test_tgt: str, a) -> Dict:
    """Beam-5 decoding of the test split (its first ``a.decode_sentences``; 0: all) in batches of
    ``a.decode_batch_size``: sentences/s and sacreBLEU of the detokenised output against the raw
    references (``a``: the harness's options, also ``tgt``, ``device`` and ``bf16``)."""
    from fairseq_dense.cli.quickstart_steps import score
    from fairseq_dense.data.prepare import moses_lang, read_lines

    model, task = load_checkpoint(ckpt, data_bin, a.device, a.bf16)
    gen, hyps, seconds = generator(model, task, 5), {}, 0.0
    with torch.inference_mode():
        for sample in decode_batches(task.dataset("test"), a.decode_sentences, a.decode_batch_size, a.device, False):
            t0 = time.perf_counter()
            out = gen.generate([model], sample)
            seconds += time.perf_counter() - t0
            hyps.update((sid, h[0]["tokens"].int().cpu()) for sid, h in zip(sample["id"].tolist(), out))
    refs, ids = read_lines(raw_test_tgt), sorted(hyps)
    text = [task.target_dictionary.string(hyps[i], bpe_symbol="subword_nmt") for i in ids]
    bleu, signature, _ = score(text, [refs[i] for i in ids], moses_lang(a.tgt), lowercase=False)
    return {
        "sentences": len(ids),
        "sentences_per_s": len(ids) / seconds if seconds else None,
        "bleu": round(bleu, 2),
        "signature": signature,
    }


def vm_hwm_kib() -> Optional[int]:
    """Peak resident set size of this process since ``exec`` (KiB), or None off Linux."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return None


def child_main() -> None:
    """``python -m benchmarks.measure STATS.json <fairseq-train arguments>`` (:func:`start_training`): ``fairseq-train``
    in this process, then its peak memory into STATS.json: ``VmHWM``, the peak resident set since ``exec`` (Linux
    carries the parent's high-water mark into ``ru_maxrss``), and the CUDA allocator's peak, visible only here."""
    stats_path, sys.argv = sys.argv[1], ["fairseq-train"] + sys.argv[2:]
    from fairseq_cli.train import cli_main

    try:
        cli_main()
    finally:
        stats = {"vm_hwm_kib": vm_hwm_kib()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            stats["cuda_max_allocated_bytes"] = torch.cuda.max_memory_allocated()
        with open(stats_path, "w") as f:
            json.dump(stats, f)


if __name__ == "__main__":
    child_main()
