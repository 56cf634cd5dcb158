"""Which models the harness runs, and how much matmul work each does per token.

The pairing of each family with its parameter-matched fairseq counterpart lives in the
package (:mod:`fairseq_dense.baselines`, also used by the quick-start's ``--baseline``);
its names are re-exported here for the harness.
"""

from typing import List, Optional, Tuple

from fairseq_dense.baselines import (  # noqa: F401  (the harness's names)
    BASELINE_TEMPLATES,
    BASELINES,
    build_in_process,
    count_params,
    fconv_args,
    flags,
    lstm_args,
    match_baseline,
    our_families,
    same_dropout,
    same_embeddings,
    transformer_args,
)


def parse_spec(spec: str) -> Tuple[str, List[str]]:
    """``ARCH:--flag=v,--flag2`` -> ``("ARCH", ["--flag", "v", "--flag2"])``."""
    name, _, extra = spec.partition(":")
    args = []
    for item in filter(None, extra.split(",")):
        flag, eq, value = item.partition("=")
        args += [flag] + ([value] if eq else [])
    return name, args


def resolve_models(specs: Optional[List[str]], size: str) -> List[Tuple[str, str, List[str]]]:
    """``--models`` entries -> ``(family, arch, extra args)``.

    An entry is a family (its ``<family>_<size>`` arch, else the other size), an arch, or
    ``ARCH:--flag=value,...`` (an ablation).

    Raises:
        ValueError: for a name that is neither a registered family nor one of its archs.
    """
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
    """Weights taking part in a matmul per *target* token (6 x this = training FLOPs per token).

    Encoder weights count ``src_per_tgt`` times, embedding and positional tables not at all
    (lookups), a tied output projection once.
    """

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
