"""fairseq's built-in counterpart of each plugin family, matched in parameters (the quick-start's ``--baseline``
and the benchmark harness pair models here).

Every model registered by a module of :mod:`fairseq_dense` is a family, paired with a fairseq built-in
(``BASELINES``; ``lstm`` when not listed) whose width is bisected until its parameter count is the closest to
ours on the same dictionaries. It takes ours' depth, dropout rates and (``lstm``) embedding layout, so that equal
parameters also means comparable work and regularisation.
"""

import logging
from typing import Dict, List, Tuple

from fairseq.utils import safe_getattr

logger = logging.getLogger(__name__)

#: family (registered model name) -> fairseq built-in counterpart
BASELINES = {
    "densenmt": "fconv",
    "weighted_transformer": "transformer",
    "dense_lstm": "lstm",
    "fast_forward_lstm": "lstm",
    "gru_attention": "lstm",
}


def _layers(ours_cfg, key: str, default: int, hi: int = 6) -> int:
    value = safe_getattr(ours_cfg, key)
    return max(1, min(hi, value)) if isinstance(value, int) else default


def flags(**options) -> List[str]:
    """``encoder_layers=2, encoder_bidirectional=True`` -> ``["--encoder-layers", "2", "--encoder-bidirectional"]``."""
    out = []
    for key, value in options.items():
        out += ["--" + key.replace("_", "-")] + ([] if value is True else [str(value)])
    return out


def same_dropout(ours_cfg, keys=("dropout",)) -> List[str]:
    """Ours' dropout rates as the counterpart's arguments: fairseq's built-ins default to 0.1 (``lstm``, ``fconv``)
    and no attention dropout (``transformer``), and the rate also picks the kernel (CPU flash attention has no
    dropout), so unequal rates would bias both the speed and the loss comparison."""
    rates = {key: safe_getattr(ours_cfg, key) for key in keys}
    return flags(**{k: float(v) for k, v in rates.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})


def same_embeddings(ours_cfg, width: int) -> List[str]:
    """Ours' embedding sizes (else the width) and softmax sharing as ``lstm`` arguments: the width then buys
    recurrent weights only (with wide untied tables, DenseRNN did 1.38x the FLOPs per token of such a baseline)."""

    def dim(key):
        value = safe_getattr(ours_cfg, key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else width

    enc, dec = dim("encoder_embed_dim"), dim("decoder_embed_dim")
    out = flags(encoder_embed_dim=enc, decoder_embed_dim=dec)
    if safe_getattr(ours_cfg, "share_all_embeddings", False) and enc == dec:
        return out + flags(decoder_out_embed_dim=dec, share_all_embeddings=True)
    if safe_getattr(ours_cfg, "share_decoder_input_output_embed", False):
        return out + flags(decoder_out_embed_dim=dec, share_decoder_input_output_embed=True)
    return out + flags(decoder_out_embed_dim=dim("decoder_out_embed_dim"))


def lstm_args(width: int, ours_cfg) -> List[str]:
    """fairseq ``lstm``: bidirectional encoder, attention, ours' depth (1-4), hidden size ``width``."""
    layers = {f"{side}_layers": _layers(ours_cfg, f"{side}_layers", 1, hi=4) for side in ("encoder", "decoder")}
    shape = flags(
        arch="lstm", **layers, encoder_bidirectional=True, encoder_hidden_size=width, decoder_hidden_size=width
    )
    return shape + same_embeddings(ours_cfg, width) + same_dropout(ours_cfg)


def fconv_args(width: int, ours_cfg) -> List[str]:
    """fairseq ``fconv``: ours' depth of kernel-3 layers each side (DenseNMT's BASE-4L shape), ``width`` channels."""
    layers = f"[({width}, 3)] * {_layers(ours_cfg, 'encoder_layers', 4, hi=8)}"
    dims = dict(encoder_embed_dim=width, decoder_embed_dim=width, decoder_out_embed_dim=width)
    return flags(arch="fconv", **dims, encoder_layers=layers, decoder_layers=layers) + same_dropout(ours_cfg)


def transformer_args(width: int, ours_cfg) -> List[str]:
    """fairseq ``transformer``: ours' depth and dropout rates, d_model ``width``, FFN 4x, 4 heads."""
    layers = {f"{side}_layers": _layers(ours_cfg, f"{side}_layers", 3) for side in ("encoder", "decoder")}
    dims = dict(encoder_embed_dim=width, decoder_embed_dim=width, encoder_ffn_embed_dim=4 * width)
    dims.update(decoder_ffn_embed_dim=4 * width, encoder_attention_heads=4, decoder_attention_heads=4)
    dropout = same_dropout(ours_cfg, ("dropout", "attention_dropout", "activation_dropout"))
    return flags(arch="transformer", **layers, **dims) + dropout


#: counterpart -> (width -> arch arguments, width step)
BASELINE_TEMPLATES = {"lstm": (lstm_args, 1), "fconv": (fconv_args, 1), "transformer": (transformer_args, 4)}


def our_families() -> Dict[str, List[str]]:
    """``{model name: [arch names]}`` for every model registered by :mod:`fairseq_dense`."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, MODEL_REGISTRY

    return {
        name: sorted(a for a, m in ARCH_MODEL_NAME_REGISTRY.items() if m == name)
        for name, cls in sorted(MODEL_REGISTRY.items())
        if cls.__module__.startswith("fairseq_dense")
    }


def train_config(train_args: List[str]):
    """fairseq's configuration of ``fairseq-train <train_args>`` (ValueError where its option parsing
    rejects them: argparse would exit the program)."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    try:
        return convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), train_args))
    except SystemExit:
        raise ValueError(f"fairseq-train rejects the arguments {' '.join(train_args)}")


def build_in_process(data_bin: str, arch_args: List[str]):
    """Build a model exactly as ``fairseq-train DATA <arch_args>`` would; returns ``(model, cfg.model)``."""
    from fairseq import tasks

    cfg = train_config([data_bin, "--cpu", *arch_args])
    return tasks.setup_task(cfg.task).build_model(cfg.model), cfg.model


def count_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def match_baseline(
    data_bin: str, family: str, ours_args: List[str], tolerance: float = 0.10, param_ratio: float = 1.0
) -> Tuple[Dict, object, object]:
    """``(pairing, ours_model, baseline_model)`` for the counterpart width whose parameter count is closest to
    ``param_ratio`` x ours; ``pairing``: ``baseline_args``, ``baseline_width``, ``param_gap`` and both counts."""
    ours_model, ours_cfg = build_in_process(data_bin, ours_args)
    target = round(count_params(ours_model) * param_ratio)
    make_args, step = BASELINE_TEMPLATES[BASELINES.get(family, "lstm")]
    built: Dict[int, Tuple[int, object]] = {}

    def params_at(width: int) -> int:
        if width not in built:
            model, _ = build_in_process(data_bin, make_args(width, ours_cfg))
            built[width] = (count_params(model), model)
        return built[width][0]

    lo, hi = step, 8 * step
    while params_at(hi) < target and hi < 4096:
        lo, hi = hi, hi * 2
    while hi - lo > step:  # parameters grow with the width: bisect on multiples of step
        mid = (lo + hi) // 2 // step * step
        lo, hi = (mid, hi) if params_at(mid) < target else (lo, mid)
    width = min((lo, hi), key=lambda w: abs(params_at(w) - target))
    gap = (params_at(width) - target) / max(1, target)
    if abs(gap) > tolerance:
        logger.warning("%s: the closest counterpart is %+.1f%% off the target size", family, 100 * gap)
    pairing = {
        "baseline_args": make_args(width, ours_cfg),
        "baseline_width": width,
        "param_gap": gap,
        "ours_params": count_params(ours_model),
        "baseline_params": params_at(width),
    }
    return pairing, ours_model, built[width][1]
