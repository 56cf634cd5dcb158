"""Which models the harness runs, the paper-size pairs, and how much matmul work each does per token (the
parameter-matched counterpart of each family: :mod:`fairseq_dense.baselines`, the quick-start's too)."""

from typing import Dict, List, Optional, Tuple

from fairseq_dense.baselines import count_params, flags, our_families


def parse_spec(spec: str) -> Tuple[str, List[str]]:
    """``ARCH:--flag=v,--flag2`` -> ``("ARCH", ["--flag", "v", "--flag2"])``."""
    name, _, extra = spec.partition(":")
    args = []
    for item in filter(None, extra.split(",")):
        flag, eq, value = item.partition("=")
        args += [flag] + ([value] if eq else [])
    return name, args


def resolve_models(specs: Optional[List[str]], size: str) -> List[Tuple[str, str, List[str]]]:
    """``--models`` entries (a family: its ``<family>_<size>`` arch, else the other size; an arch; or
    ``ARCH:--flag=value,...``, an ablation) -> ``(family, arch, extra args)``; ValueError for any other name."""
    fams = our_families()
    arch_to_family = {a: f for f, archs in fams.items() for a in archs}
    out = []
    for spec in specs or list(fams):
        name, extra = parse_spec(spec)
        if name in fams:
            sizes = (size, "tiny" if size == "small" else "small")
            arch = next((f"{name}_{s}" for s in sizes if f"{name}_{s}" in fams[name]), name)
            out.append((name, arch, extra))
        elif name in arch_to_family:
            out.append((arch_to_family[name], name, extra))
        else:
            raise ValueError(
                f"--models: {name!r} is not a fairseq_dense family or architecture "
                f"(families: {', '.join(fams) or 'none'})"
            )
    return out


def matmul_params(model, src_per_tgt: float) -> float:
    """Weights taking part in a matmul per *target* token (6 x this = training FLOPs per token): encoder weights
    ``src_per_tgt`` times, embedding and positional tables not at all (lookups), a tied output projection once."""

    def lookups(module):
        tables = [getattr(module, n, None) for n in ("embed_tokens", "embed_positions")]
        return sum(count_params(t) for t in tables if hasattr(t, "parameters")), tables[0]

    enc_lookup, _ = lookups(model.encoder)
    dec_lookup, dec_emb = lookups(model.decoder)
    dec_n = count_params(model.decoder) - dec_lookup
    emb_w = getattr(dec_emb, "weight", None)
    if emb_w is not None:
        v = emb_w.shape[0]
        if not any(p.dim() == 2 and v in p.shape and p is not emb_w for p in model.decoder.parameters()):
            dec_n += emb_w.numel()  # tied softmax: the embedding table is also the output matmul
    return (count_params(model.encoder) - enc_lookup) * src_per_tgt + dec_n


def _lstm_pair(family: str, arch: str, layers: int, dropout: float, sizes, tiny_sizes, embed=16, **tiny) -> Dict:
    """A recurrent family against fairseq's ``lstm`` of ``layers`` and ``dropout``; ``sizes``, ``tiny_sizes``: the
    counterpart's (encoder hidden, decoder hidden, embedding, output) widths; ours' tiny: ``embed`` and ``tiny``."""
    small = flags(encoder_embed_dim=embed, decoder_embed_dim=embed, encoder_hidden_size=16, decoder_hidden_size=16)
    paper_lstm, tiny_lstm = (
        ["--arch", "lstm", *flags(encoder_layers=layers, decoder_layers=layers, encoder_bidirectional=True)]
        + flags(encoder_hidden_size=enc, decoder_hidden_size=dec, encoder_embed_dim=emb, decoder_embed_dim=emb)
        + flags(decoder_out_embed_dim=out, dropout=dropout)
        for enc, dec, emb, out in (sizes, tiny_sizes)
    )
    return _pair(family, ["--arch", arch], paper_lstm, small + flags(**tiny), tiny_lstm)


def _pair(family: str, ours: List[str], counterpart: List[str], tiny: List[str], tiny_counterpart: List[str]) -> Dict:
    return {"family": family, "ours": ours, "counterpart": counterpart, "tiny_ours": ours + tiny,
            "tiny_counterpart": tiny_counterpart}  # fmt: skip


_TINY_TRANSFORMER = flags(
    encoder_embed_dim=32, decoder_embed_dim=32, encoder_ffn_embed_dim=64, decoder_ffn_embed_dim=64
)
_TINY_FCONV = flags(encoder_embed_dim=32, decoder_embed_dim=32, decoder_out_embed_dim=32)
_WT_A = ["--arch", "weighted_transformer_a"]
_TRANSFORMER = ["--arch", "transformer", "--dropout", "0.1", "--attention-dropout", "0.1"]
_WT_TINY = (_TINY_TRANSFORMER, _TRANSFORMER + _TINY_TRANSFORMER)  # (ours' extra flags, the counterpart's)
_WMT_SIZES = str([8] * 9 + [16] * 4 + [32] * 2)
_WMT_LAYERS = "[(32, 3)] * 9 + [(64, 3)] * 4 + [(128, 1)] * 2"
_WMT, _IWSLT = ["--arch", "fconv_wmt_en_de"], ["--arch", "fconv_iwslt_de_en"]

#: Each family at its paper's base size against fairseq's built-in at the paper's size (``proxies.py``,
#: ``gpu_figures.py``): name -> family, ours' and the counterpart's arch arguments, and both at tiny widths,
#: depth kept (``tiny_*``, the test suite's sizes). The ``lstm`` counterparts take ours' depth, embedding sizes,
#: dropout and the width of each layer's output (a bidirectional encoder layer: two directions of half of it,
#: as DenseRNN's; Deep-Att's columns and the GRU's directions are each of the full width).
PAPER_PAIRS: Dict[str, Dict] = {
    "wt_a": _pair("weighted_transformer", _WT_A, _TRANSFORMER, *_WT_TINY),
    # configuration (A) learns kappa and alpha (the paper's); the project's fixed form beside it
    "wt_a_fixed": _pair("weighted_transformer", [*_WT_A, "--fixed-kappa", "--fixed-alpha"], _TRANSFORMER, *_WT_TINY),
    "densenmt_wmt": _pair(
        "densenmt",
        ["--arch", "densenmt_wmt_en_de_15"],
        _WMT,
        _TINY_FCONV + flags(attention_dim=16, encoder_hidden_sizes=_WMT_SIZES, decoder_hidden_sizes=_WMT_SIZES),
        _WMT + _TINY_FCONV + flags(encoder_layers=_WMT_LAYERS, decoder_layers=_WMT_LAYERS),
    ),
    "densenmt_iwslt": _pair(
        "densenmt",
        ["--arch", "densenmt_4l_2"],
        _IWSLT,
        _TINY_FCONV + flags(encoder_hidden_size=16, decoder_hidden_size=16, attention_dim=16),
        _IWSLT + _TINY_FCONV + flags(encoder_layers="[(32, 3)] * 4", decoder_layers="[(32, 3)] * 3"),
    ),
    "dense_rnn": _lstm_pair(
        "dense_lstm", "dense_lstm_6l", 6, 0.2, (128, 256, 512, 512), (8, 16, 32, 32), 32, decoder_out_embed_dim=32
    ),
    "deep_att": _lstm_pair(
        "fast_forward_lstm", "deep_att", 8, 0.1, (512, 512, 256, 512), (16,) * 4, encoder_fc_dim=16, attention_dim=16
    ),
    "gru": _lstm_pair(
        "gru_attention", "gru_attention", 1, 0.5, (512,) * 4, (16,) * 4, attention_dim=16, readout_dim=16
    ),
}


def paper_pairs(names: Optional[List[str]] = None) -> Dict[str, Dict]:
    """The entries of :data:`PAPER_PAIRS` named, in the order named (default: all, in the table's order);
    ValueError for an unknown name; a registered family without a pair exits with one line naming it."""
    missing = sorted(set(our_families()) - {p["family"] for p in PAPER_PAIRS.values()})
    if missing:
        raise SystemExit(f"error: family {', '.join(missing)} has no paper pair: add one to benchmarks/counterparts.py")
    unknown = sorted(set(names or []) - set(PAPER_PAIRS))
    if unknown:
        raise ValueError(f"unknown pair(s) {', '.join(unknown)} (pairs: {', '.join(PAPER_PAIRS)})")
    return {k: PAPER_PAIRS[k] for k in (names or PAPER_PAIRS)}
