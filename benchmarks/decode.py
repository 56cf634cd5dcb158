"""Beam-search decoding speed (with and without the incremental cache), BLEU and attention maps.

Decoding runs in-process with fairseq's own ``SequenceGenerator`` on a checkpoint
written by the training run. "Without the incremental cache" is the same
generator with its ensemble wrapper told that the decoder is not incremental
(``EnsembleModel.has_incremental = False``): fairseq then calls
``decoder(prefix, encoder_out)`` on the whole prefix at every step and keeps the
last position, which is exactly what a decoder without a cache would cost. Both
variants decode the same sentences; the share of identical hypotheses is
recorded as a correctness check of the cache.
"""
import logging
import time
from typing import Dict, List, Optional

import torch

logger = logging.getLogger("benchmarks.decode")


def _register_extra_flops() -> None:
    """Teach torch's FLOP counter the kernels it counts as 0 FLOPs: the fused CPU LSTM/GRU
    layer (``mkldnn_rnn_layer`` and its backward), fairseq's time-batch-channel convolution (``conv_tbc``,
    used by ``fconv``) and the in-place ``addmm_`` (conv_tbc's backward, DenseNMT's
    convolutions)."""
    import math

    from torch.utils import flop_counter

    registry = getattr(flop_counter, "flop_registry", {})

    def known(op) -> bool:
        return op is None or op in registry or getattr(op, "default", None) in registry

    rnn = getattr(torch.ops.aten, "mkldnn_rnn_layer", None)
    if not known(rnn):
        @flop_counter.register_flop_formula(rnn)
        def _rnn_layer(input_shape, w_ih, w_hh, *args, out_shape=None, **kwargs) -> int:
            rows = math.prod(input_shape[:-1])  # time steps x batch
            return 2 * rows * (w_ih[0] * w_ih[1] + w_hh[0] * w_hh[1])

    rnn_back = getattr(torch.ops.aten, "mkldnn_rnn_layer_backward", None)
    if not known(rnn_back):
        @flop_counter.register_flop_formula(rnn_back)
        def _rnn_layer_backward(input_shape, w_ih, w_hh, *args, out_shape=None, **kwargs) -> int:
            rows = math.prod(input_shape[:-1])
            return 4 * rows * (w_ih[0] * w_ih[1] + w_hh[0] * w_hh[1])  # input/state and weight gradients

    def conv_tbc_flops(input_shape, weight_shape, pad) -> int:
        t, b, _ = input_shape
        k, c_in, c_out = weight_shape
        return 2 * (t + 2 * pad - k + 1) * b * k * c_in * c_out

    tbc = getattr(torch.ops.aten, "conv_tbc", None)
    if not known(tbc):
        @flop_counter.register_flop_formula(tbc)
        def _conv_tbc(input_shape, weight_shape, bias_shape=None, pad=0, *args, out_shape=None, **kwargs) -> int:
            return conv_tbc_flops(input_shape, weight_shape, pad)

    addmm_ = getattr(torch.ops.aten, "addmm_", None)  # conv_tbc's backward and our conv_rows use it
    if not known(addmm_):
        @flop_counter.register_flop_formula(addmm_)
        def _addmm_(self_shape, a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
            return 2 * a_shape[0] * a_shape[1] * b_shape[1]


def decode_flops(model, gen, sample) -> int:
    """FLOPs (matmuls, convolutions, attention) of one ``gen.generate`` call on ``sample``."""
    from torch.utils.flop_counter import FlopCounterMode

    _register_extra_flops()
    # the counter's module tracker hooks tensors that require grad, which fails for
    # parametrized weights under inference mode: count with gradients switched off
    flags = [(p, p.requires_grad) for p in model.parameters()]
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        with FlopCounterMode(display=False) as counter:
            gen.generate([model], sample)
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)
    return counter.get_total_flops()


def load_checkpoint(path: str, data_bin: str, device: str = "cpu", bf16: bool = False):
    """Load a fairseq checkpoint of any registered model; returns ``(model, task)`` in eval mode."""
    import fairseq_dense  # noqa: F401
    from fairseq import checkpoint_utils

    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data_bin})
    model = models[0].eval().to(device)
    if bf16:
        model = model.to(torch.bfloat16)
    return model, task


def _batches(dataset, indices: List[int], batch_size: int, device: str):
    from fairseq import utils

    order = sorted(indices, key=lambda i: (int(dataset.src_sizes[i]), i))
    for j in range(0, len(order), batch_size):
        sample = dataset.collater([dataset[i] for i in order[j:j + batch_size]])
        yield utils.move_to_cuda(sample) if device == "cuda" else sample


def spread(indices: List[int], n: int) -> List[int]:
    """``n`` of ``indices`` spread evenly over them (every ``len/n``-th; all when ``n >= len``)."""
    step = max(1, len(indices) // max(1, n))
    return indices[::step][:n]


def spread_batches(dataset, sentences: int, batch_size: int, device: str) -> list:
    """Batches of ``sentences`` test sentences spread over the split (the side-by-side decoders')."""
    return list(_batches(dataset, spread(list(range(len(dataset))), sentences), batch_size, device))


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def beam_decode(model, task, indices: List[int], beam: int = 5, batch_size: int = 32, device: str = "cpu",
                incremental: bool = True, max_len_a: float = 1.2, max_len_b: int = 10,
                fixed_length: int = 0) -> Dict:
    """Decode test sentences ``indices`` with beam search; time only the generator calls.

    ``fixed_length`` > 0 forces every hypothesis to exactly that many tokens before EOS
    (``min_len = max_len``), so that speed does not depend on how long a model's outputs are.

    Returns:
        ``{"sentences", "tokens", "seconds", "sentences_per_s", "tokens_per_s", "hyps": {id: token ids}}``.
    """
    from fairseq.sequence_generator import SequenceGenerator

    dataset = task.dataset("test")
    if fixed_length:
        max_len_a, max_len_b = 0, fixed_length
    gen = SequenceGenerator([model], task.target_dictionary, beam_size=beam, max_len_a=max_len_a,
                            max_len_b=max_len_b, min_len=fixed_length or 1)
    if not incremental:
        gen.model.has_incremental = False
    hyps, n_tok, seconds = {}, 0, 0.0
    with torch.inference_mode():
        for sample in _batches(dataset, indices, batch_size, device):
            _sync(device)
            t0 = time.perf_counter()
            out = gen.generate([model], sample)
            _sync(device)
            seconds += time.perf_counter() - t0
            for sid, h in zip(sample["id"].tolist(), out):
                toks = h[0]["tokens"].int().cpu()
                hyps[sid] = toks
                n_tok += len(toks)
    return {"sentences": len(hyps), "tokens": n_tok, "seconds": seconds,
            "sentences_per_s": len(hyps) / seconds if seconds else None,
            "tokens_per_s": n_tok / seconds if seconds else None, "hyps": hyps}


def detokenised(task, hyps: Dict[int, torch.Tensor], tgt_lang: str) -> Dict[int, str]:
    """Token ids -> text without BPE -> Moses-detokenised text."""
    from sacremoses import MosesDetokenizer

    from fairseq_dense.data.prepare import moses_lang

    detok = MosesDetokenizer(lang=moses_lang(tgt_lang))
    out = {}
    for sid, toks in hyps.items():
        text = task.target_dictionary.string(toks, bpe_symbol="subword_nmt")
        out[sid] = detok.detokenize(text.split())
    return out


def bleu(hyps: Dict[int, str], refs: List[str]) -> Dict:
    """sacreBLEU of the decoded sentences against their raw references, with signature."""
    import sacrebleu

    ids = sorted(hyps)
    metric = sacrebleu.metrics.BLEU()
    score = metric.corpus_score([hyps[i] for i in ids], [[refs[i] for i in ids]])
    return {"bleu": round(score.score, 2), "signature": str(metric.get_signature()), "sentences": len(ids)}


def decode_report(ckpt: str, data_bin: str, raw_test_tgt: str, tgt_lang: str, *, device: str = "cpu",
                  bf16: bool = False, beam: int = 5, batch_size: int = 32, max_sentences: int = 0,
                  uncached_sentences: int = 40, threads: int = 0, greedy_bleu: bool = True,
                  fixed_length: int = 20) -> Dict:
    """Everything measured on a trained checkpoint: beam speed, cache speed-up, BLEU.

    Args:
        ckpt: checkpoint path.
        data_bin: binarised data folder (holds the test split).
        raw_test_tgt: raw (untokenised) test references, one per line.
        tgt_lang: target language code (for the Moses detokeniser).
        max_sentences: decode only the first N test sentences for BLEU/speed (0: all).
        uncached_sentences: sentences (spread over the test set) decoded with and without the cache.
        greedy_bleu: also decode with beam 1 (the GRU report's beam vs greedy comparison).
        fixed_length: output length forced in the speed comparison (cached vs uncached, and
            against other models), so that undertrained models' short or runaway outputs do
            not decide the speed.
    """
    if threads:
        torch.set_num_threads(threads)
    model, task = load_checkpoint(ckpt, data_bin, device, bf16)
    task.load_dataset("test")
    n = len(task.dataset("test"))
    indices = list(range(n if not max_sentences else min(n, max_sentences)))
    full = beam_decode(model, task, indices, beam, batch_size, device)
    with open(raw_test_tgt, encoding="utf-8") as f:
        refs = f.read().splitlines()
    scores = bleu(detokenised(task, full["hyps"], tgt_lang), refs)
    greedy = beam_decode(model, task, indices, 1, batch_size, device) if greedy_bleu else None
    subset = spread(indices, uncached_sentences)
    cached = beam_decode(model, task, subset, beam, batch_size, device, fixed_length=fixed_length)
    uncached = beam_decode(model, task, subset, beam, batch_size, device, incremental=False,
                           fixed_length=fixed_length)
    same = sum(torch.equal(cached["hyps"][i], uncached["hyps"][i]) for i in subset) / max(1, len(subset))
    strip = ("hyps",)
    return {
        "beam": beam, "batch_size": batch_size, "device": device, "dtype": "bfloat16" if bf16 else "float32",
        "full": {k: v for k, v in full.items() if k not in strip},
        "cache_subset": {
            "sentences": len(subset),
            "fixed_length": fixed_length,
            "incremental": {k: v for k, v in cached.items() if k not in strip},
            "uncached": {k: v for k, v in uncached.items() if k not in strip},
            "speedup": (uncached["seconds"] / cached["seconds"]) if cached["seconds"] else None,
            "identical_hypotheses": same,
        },
        "greedy": None if greedy is None else {
            "bleu": bleu(detokenised(task, greedy["hyps"], tgt_lang), refs)["bleu"],
            **{k: v for k, v in greedy.items() if k not in strip}},
        **scores,
    }


def attention_maps(ckpt: str, data_bin: str, n: int = 3, device: str = "cpu") -> Optional[List[Dict]]:
    """Teacher-forced attention of a few short test sentences, or ``None`` if the model returns none.

    Returns:
        list of ``{"src": [tokens], "tgt": [tokens], "attn": tgt_len x src_len list}``.
    """
    model, task = load_checkpoint(ckpt, data_bin, device)
    for m in model.modules():  # fairseq's lstm returns attention only when asked
        if hasattr(m, "need_attn"):
            m.need_attn = True
    task.load_dataset("test")
    ds = task.dataset("test")
    cand = [i for i in range(len(ds)) if 6 <= int(ds.src_sizes[i]) <= 14 and 6 <= int(ds.tgt_sizes[i]) <= 14]
    picks = cand[:: max(1, len(cand) // n)][:n] or list(range(min(n, len(ds))))
    out = []
    with torch.inference_mode():
        for i in picks:
            sample = next(_batches(ds, [i], 1, device))
            _, extra = model(**sample["net_input"])
            attn = extra.get("attn") if isinstance(extra, dict) else None
            if isinstance(attn, (list, tuple)):
                attn = attn[0] if attn else None
            if attn is None:
                return None
            src = [task.source_dictionary[t] for t in sample["net_input"]["src_tokens"][0].tolist()]
            tgt = [task.target_dictionary[t] for t in sample["target"][0].tolist()]
            out.append({"src": src, "tgt": tgt, "attn": attn[0].float().cpu().tolist()})
    return out


def paired_speed(ours_ckpt: str, baseline_ckpt: str, data_bin: str, *, sentences: int = 200, rounds: int = 3,
                 beam: int = 5, batch_size: int = 32, fixed_length: int = 20, device: str = "cpu",
                 bf16: bool = False, threads: int = 0) -> Dict:
    """Beam decoding speed of two models measured side by side, batch by batch.

    Both checkpoints are loaded into one process; every batch of the same test
    sentences is decoded by one model and then by the other (the order alternates
    from round to round), with every hypothesis forced to ``fixed_length`` tokens.
    Load changes on a shared machine therefore hit both models alike, which timing
    one model after the other (minutes apart) does not guarantee.

    The FLOPs each model spends on the first batch are counted too (torch's FLOP
    counter), so that a speed gap can be told apart from a work gap: at equal
    parameter counts one architecture may simply do more arithmetic per token.

    Returns:
        ``{"ratio": ours sentences/s / baseline sentences/s (median over rounds),
        "flop_ratio": ours FLOPs / baseline FLOPs per decoded sentence,
        "flop_normalised_ratio": ratio x flop_ratio (> 1: ours decodes more FLOP/s),
        "rounds": [{"ours_s", "baseline_s"}], "sentences", ...}``.
    """
    from fairseq.sequence_generator import SequenceGenerator

    if threads:
        torch.set_num_threads(threads)
    models = {}
    for side, ckpt in (("ours", ours_ckpt), ("baseline", baseline_ckpt)):
        model, task = load_checkpoint(ckpt, data_bin, device, bf16)
        task.load_dataset("test")
        gen = SequenceGenerator([model], task.target_dictionary, beam_size=beam, max_len_a=0,
                                max_len_b=fixed_length, min_len=fixed_length)
        models[side] = (model, task, gen)
    dataset = models["ours"][1].dataset("test")
    batches = spread_batches(dataset, sentences, batch_size, device)
    per_round = []
    with torch.inference_mode():
        flops = {}
        for side in ("ours", "baseline"):  # warm-up (allocator, thread pools) and FLOP count
            model, _, gen = models[side]
            gen.generate([model], batches[0])
            flops[side] = decode_flops(model, gen, batches[0]) / len(batches[0]["id"])
        for r in range(rounds):
            seconds = {"ours": 0.0, "baseline": 0.0}
            order = ("ours", "baseline") if r % 2 == 0 else ("baseline", "ours")
            for sample in batches:
                for side in order:
                    model, _, gen = models[side]
                    _sync(device)
                    t0 = time.perf_counter()
                    gen.generate([model], sample)
                    _sync(device)
                    seconds[side] += time.perf_counter() - t0
            per_round.append({"ours_s": seconds["ours"], "baseline_s": seconds["baseline"]})
    ratios = sorted(p["baseline_s"] / p["ours_s"] for p in per_round if p["ours_s"])
    ratio = ratios[len(ratios) // 2] if ratios else None
    flop_ratio = flops["ours"] / flops["baseline"] if flops["baseline"] else None
    return {
        "ratio": ratio,
        "ratios": ratios,
        "flops_per_sentence": flops,
        "flop_ratio": flop_ratio,
        "flop_normalised_ratio": ratio * flop_ratio if ratio and flop_ratio else None,
        "rounds": per_round,
        "sentences": sum(len(b["id"]) for b in batches),
        "beam": beam,
        "batch_size": batch_size,
        "fixed_length": fixed_length,
        "device": device,
        "dtype": "bfloat16" if bf16 else "float32",
        "threads": torch.get_num_threads(),
    }
