"""Which models the benchmark runs, their fairseq counterparts, and parameter matching.

The families are discovered from fairseq's registries: every model registered by a
module of :mod:`fairseq_dense` is a family, so a family that lands later is
benchmarked without touching this file. Each family is paired with a fairseq
built-in counterpart (``BASELINES``; ``lstm`` when a family is not listed) whose
width is searched so that its parameter count is within ``tolerance`` (10%) of
ours on the same dictionary; both counts are recorded. Counting builds the models
in-process with exactly the command-line arguments the training run gets.
"""
import argparse
import logging
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

logger = logging.getLogger("benchmarks.families")

#: family (registered model name) -> fairseq built-in counterpart
BASELINES = {
    "densenmt": "fconv",
    "weighted_transformer": "transformer",
    "dense_lstm": "lstm",
    "fast_forward_lstm": "lstm",
    "gru_attention": "lstm",
}

#: arch size suffixes tried, in order, when a family is named without an arch
SIZE_PREFERENCE = {"small": ("small", "tiny"), "tiny": ("tiny", "small")}


def _layers(ours_cfg, key: str, default: int, lo: int = 1, hi: int = 6) -> int:
    from fairseq.utils import safe_getattr  # namespace or (struct) omegaconf config

    value = safe_getattr(ours_cfg, key)
    return max(lo, min(hi, value)) if isinstance(value, int) else default


def same_dropout(ours_cfg, keys=("dropout",)) -> List[str]:
    """Ours' dropout rates as the counterpart's arguments (``--dropout 0.3`` ...).

    Both models of a pair train with the same regularisation: fairseq's built-ins
    default to 0.1 (``lstm``, ``fconv``) or 0.0 attention dropout (``transformer``),
    our archs follow their papers. The rate also decides the kernel (PyTorch's CPU
    flash attention has no dropout, so attention dropout > 0 takes the unfused path),
    so unequal rates make neither the speed nor the convergence comparison fair.
    """
    from fairseq.utils import safe_getattr  # namespace or (struct) omegaconf config

    out = []
    for key in keys:
        value = safe_getattr(ours_cfg, key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out += ["--" + key.replace("_", "-"), str(float(value))]
    return out


def same_embeddings(ours_cfg, width: int) -> List[str]:
    """Ours' embedding layout as ``lstm`` arguments: embedding sizes and output-table sharing.

    The ``lstm`` counterpart's width is searched for its recurrent stack only; its
    embedding tables get ours' sizes, and its softmax shares the target embedding when
    ours does. With the width coupled to the embeddings instead, the two models'
    parameter budgets were the same but split differently: a baseline with wide untied
    tables has fewer recurrent weights, so "matched parameters" meant unequal compute
    (DenseRNN: 1.38x the FLOPs per token of such a baseline). Sizes ours does not have
    (e.g. GRU's readout) fall back to the width.
    """
    from fairseq.utils import safe_getattr  # namespace or (struct) omegaconf config

    def dim(key):
        value = safe_getattr(ours_cfg, key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else width

    enc, dec = dim("encoder_embed_dim"), dim("decoder_embed_dim")
    out = ["--encoder-embed-dim", str(enc), "--decoder-embed-dim", str(dec)]
    if safe_getattr(ours_cfg, "share_all_embeddings", False) and enc == dec:
        return out + ["--decoder-out-embed-dim", str(dec), "--share-all-embeddings"]
    if safe_getattr(ours_cfg, "share_decoder_input_output_embed", False):
        return out + ["--decoder-out-embed-dim", str(dec), "--share-decoder-input-output-embed"]
    return out + ["--decoder-out-embed-dim", str(dim("decoder_out_embed_dim"))]


def lstm_args(width: int, ours_cfg) -> List[str]:
    """fairseq ``lstm``: bidirectional encoder with attention, as deep as ours (1-4 layers), hidden
    size ``width``, ours' embedding layout (:func:`same_embeddings`) and dropout."""
    enc = _layers(ours_cfg, "encoder_layers", 1, hi=4)
    dec = _layers(ours_cfg, "decoder_layers", 1, hi=4)
    w = str(width)
    return ["--arch", "lstm", "--encoder-layers", str(enc), "--decoder-layers", str(dec),
            "--encoder-bidirectional", "--encoder-hidden-size", w, "--decoder-hidden-size", w,
            *same_embeddings(ours_cfg, width), *same_dropout(ours_cfg)]


def fconv_args(width: int, ours_cfg) -> List[str]:
    """fairseq ``fconv`` (ConvS2S), 4 layers of kernel 3 each side (the DenseNMT paper's BASE-4L shape),
    ours' dropout."""
    n = _layers(ours_cfg, "encoder_layers", 4, hi=8)
    w = str(width)
    return ["--arch", "fconv", "--encoder-embed-dim", w, "--decoder-embed-dim", w,
            "--decoder-out-embed-dim", w, "--encoder-layers", f"[({w}, 3)] * {n}",
            "--decoder-layers", f"[({w}, 3)] * {n}", *same_dropout(ours_cfg)]


def transformer_args(width: int, ours_cfg) -> List[str]:
    """fairseq ``transformer`` with ours' depth and dropout rates, 4 heads, FFN 4x the model width."""
    enc = _layers(ours_cfg, "encoder_layers", 3)
    dec = _layers(ours_cfg, "decoder_layers", 3)
    w = str(width)
    return ["--arch", "transformer", "--encoder-layers", str(enc), "--decoder-layers", str(dec),
            "--encoder-embed-dim", w, "--decoder-embed-dim", w,
            "--encoder-ffn-embed-dim", str(4 * width), "--decoder-ffn-embed-dim", str(4 * width),
            "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
            *same_dropout(ours_cfg, ("dropout", "attention_dropout", "activation_dropout"))]


#: counterpart -> (width -> arch arguments, width step)
BASELINE_TEMPLATES: Dict[str, Tuple[Callable[[int, object], List[str]], int]] = {
    "lstm": (lstm_args, 1),
    "fconv": (fconv_args, 1),
    "transformer": (transformer_args, 4),  # width divisible by the 4 heads
}


@dataclass
class Pairing:
    """One family: our arch and its parameter-matched fairseq counterpart."""

    family: str
    ours_arch: str
    ours_args: List[str]
    baseline: str
    baseline_args: List[str] = field(default_factory=list)
    ours_params: int = 0
    baseline_params: int = 0
    baseline_width: int = 0

    @property
    def param_gap(self) -> float:
        """Relative parameter-count difference of the baseline vs ours."""
        return (self.baseline_params - self.ours_params) / max(1, self.ours_params)


def our_families() -> Dict[str, List[str]]:
    """``{model name: [arch names]}`` for every model registered by :mod:`fairseq_dense`."""
    import fairseq_dense  # noqa: F401  (registers everything)
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, MODEL_REGISTRY

    fams = {}
    for name, cls in MODEL_REGISTRY.items():
        if cls.__module__.startswith("fairseq_dense"):
            fams[name] = sorted(a for a, m in ARCH_MODEL_NAME_REGISTRY.items() if m == name)
    return dict(sorted(fams.items()))


def resolve_models(specs: Optional[List[str]], size: str) -> List[Tuple[str, str, List[str]]]:
    """Turn ``--models`` entries into ``(family, arch, extra args)``.

    An entry is a family name (its ``<family>_<size>`` arch is used), an arch name,
    or ``ARCH:--flag=value,--flag2=value`` to add model options (ablations).

    Raises:
        ValueError: for a name that is neither a registered family nor one of its archs.
    """
    fams = our_families()
    arch_to_family = {a: f for f, archs in fams.items() for a in archs}
    out = []
    for spec in specs or list(fams):
        name, _, extra = spec.partition(":")
        extra_args = []
        for item in filter(None, extra.split(",")):
            flag, eq, value = item.partition("=")
            extra_args += [flag] + ([value] if eq else [])
        if name in fams:
            for suffix in SIZE_PREFERENCE[size]:
                if f"{name}_{suffix}" in fams[name]:
                    arch = f"{name}_{suffix}"
                    break
            else:
                arch = name
            out.append((name, arch, extra_args))
        elif name in arch_to_family:
            out.append((arch_to_family[name], name, extra_args))
        else:
            raise ValueError(
                f"--models: {name!r} is not a fairseq_dense family or architecture "
                f"(families: {', '.join(fams) or 'none'})"
            )
    return out


def build_in_process(data_bin: str, arch_args: List[str]):
    """Build a model exactly as ``fairseq-train DATA <arch_args>`` would; returns ``(model, args)``."""
    import fairseq_dense  # noqa: F401  (our archs must be registered)
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, input_args=[data_bin, "--cpu", *arch_args])
    cfg = convert_namespace_to_omegaconf(args)  # as fairseq-train does
    task = tasks.setup_task(cfg.task)
    return task.build_model(cfg.model), cfg.model


def count_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def matmul_params(model, src_per_tgt: float) -> float:
    """Parameters taking part in a matmul per *target* token (for 6 * N * tokens FLOPs).

    Encoder parameters count ``src_per_tgt`` times (they see source tokens), input
    embedding tables and positional tables not at all (lookups), and the output
    projection once (also when tied to the target embedding).
    """
    def lookup_params(module) -> Tuple[int, Optional[object]]:
        n, emb = 0, None
        for name in ("embed_tokens", "embed_positions"):
            sub = getattr(module, name, None)
            if sub is not None and hasattr(sub, "parameters"):
                n += sum(p.numel() for p in sub.parameters())
                if name == "embed_tokens":
                    emb = sub
        return n, emb

    enc, dec = model.encoder, model.decoder
    enc_lookup, _ = lookup_params(enc)
    dec_lookup, dec_emb = lookup_params(dec)
    enc_n = count_params(enc) - enc_lookup
    dec_n = count_params(dec) - dec_lookup
    emb_w = getattr(dec_emb, "weight", None)
    if emb_w is not None and not _has_output_matrix(dec, emb_w):
        dec_n += emb_w.numel()  # tied softmax: the embedding table is also the output matmul
    return enc_n * src_per_tgt + dec_n


def _has_output_matrix(dec, emb_w) -> bool:
    """Whether the decoder has a parameter shaped like a ``V x d`` output projection besides its embedding."""
    v = emb_w.shape[0]
    return any(p.dim() == 2 and v in p.shape and p is not emb_w for p in dec.parameters())


def match_baseline(data_bin: str, family: str, ours_arch: str, ours_args: List[str],
                   tolerance: float = 0.10, baseline: Optional[str] = None,
                   param_ratio: float = 1.0) -> Tuple[Pairing, object, object]:
    """Find the baseline width whose parameter count is closest to ``param_ratio`` x ours.

    ``param_ratio`` 2.0 pairs ours with a baseline twice its size (DenseRNN's "half the
    parameters" claim); the tolerance then applies to that target.

    Returns:
        ``(pairing, ours_model, baseline_model)`` (models built on CPU, for FLOP counts).
    """
    ours_model, ours_ns = build_in_process(data_bin, ["--arch", ours_arch, *ours_args])
    ours_params = count_params(ours_model)
    target = int(round(ours_params * param_ratio))
    baseline = baseline or BASELINES.get(family, "lstm")
    make_args, step = BASELINE_TEMPLATES[baseline]
    cache: Dict[int, Tuple[int, object]] = {}

    def params_at(width: int) -> int:
        if width not in cache:
            model, _ = build_in_process(data_bin, make_args(width, ours_ns))
            cache[width] = (count_params(model), model)
        return cache[width][0]

    lo, hi = step, 8 * step
    while params_at(hi) < target and hi < 4096:
        lo, hi = hi, hi * 2
    while hi - lo > step:  # parameter count grows with width: bisect on multiples of step
        mid = (lo + hi) // 2 // step * step
        if params_at(mid) < target:
            lo = mid
        else:
            hi = mid
    width = min((lo, hi), key=lambda w: abs(params_at(w) - target))
    pairing = Pairing(family, ours_arch, list(ours_args), baseline, make_args(width, ours_ns),
                      ours_params, params_at(width), width)
    gap = (pairing.baseline_params - target) / max(1, target)
    if abs(gap) > tolerance:
        logger.warning("%s: closest %s has %d params vs target %d (%.1f%%), outside %.0f%%", family, baseline,
                       pairing.baseline_params, target, 100 * gap, 100 * tolerance)
    else:
        logger.info("%s: %s %d params vs %s width %d: %d params (%+.1f%%)", family, ours_arch, ours_params,
                    baseline, width, pairing.baseline_params, 100 * pairing.param_gap)
    return pairing, ours_model, cache[width][1]


def namespace_to_dict(ns: argparse.Namespace) -> Dict:
    return {k: v for k, v in vars(ns).items() if isinstance(v, (int, float, str, bool, type(None)))}
