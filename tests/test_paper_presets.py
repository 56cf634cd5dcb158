"""Every architecture named after a paper's configuration builds exactly that configuration.

Each named architecture's docstring says what it is. A paper preset carries a
machine-readable claim in a paragraph of its own::

    Paper: Ahmed et al. 2017, Table 2, Weighted Transformer (C): layers=2+2, d_model=512,
    ffn=2048, heads=8, branches=8, dropout=0.1, learned_branch_weights=True

optionally followed by a ``Project choices: key=value, ...`` paragraph for what the
paper leaves open (checked the same way); the project's own sizes (CPU-sized,
test-sized) say ``Project: ...`` instead. The test builds every paper preset from
its name alone (on the meta device, with a 16-symbol vocabulary, so the largest
paper sizes cost nothing) and measures each claimed value from the built model:
layers are counted, widths read from weight shapes, dense / fast-forward
connections from the input widths of the layers, learned branch weights from the
parameters that exist. A change of a default can therefore not silently alter a
paper preset. The claim keys each family measures are the keys of ``MEASURES``.
"""

import inspect
import re
from functools import lru_cache
from itertools import groupby
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

import pytest
import torch
from fairseq import options, tasks
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY
from fairseq.modules import FairseqDropout

import fairseq_dense  # noqa: F401
from tests.helpers import dummy_dictionary

PLUGIN_ARCHS = sorted(name for name, cls in ARCH_MODEL_REGISTRY.items() if cls.__module__.startswith("fairseq_dense."))
PAIR = re.compile(r"(\w+)=([^,\s]+)")


def family(arch: str) -> str:
    """The model package of ``arch`` (``weighted_transformer``, ``densenmt``, ...)."""
    return ARCH_MODEL_REGISTRY[arch].__module__.split(".")[2]


def paragraph(doc: str, marker: str) -> Optional[Tuple[str, Dict[str, str]]]:
    """``(citation, {key: value})`` of the docstring paragraph ``<marker> <citation>: k=v, k=v ...``.

    The claims are the ``key=value`` pairs after the citation's last colon, up to a
    parenthesised note (if any); None when no paragraph starts with ``marker``.
    """
    for para in re.split(r"\n\s*\n", inspect.cleandoc(doc or "")):
        text = " ".join(para.split())
        if text.startswith(marker):
            body = text[len(marker) :].split(" (", 1)[0] if marker != "Paper:" else text[len(marker) :]
            m = re.match(r"(.*):\s*(\w+=.*)$", body) or re.match(r"()\s*(\w+=.*)$", body)
            if not m:
                return body.strip(), {}
            assert re.fullmatch(r"\w+=[^,\s]+(,\s*\w+=[^,\s]+)*", m.group(2).strip()), f"not key=value pairs: {body}"
            return m.group(1).strip(), dict(PAIR.findall(m.group(2)))
    return None


#: the architecture fairseq registers under each dataclass model's own name has no docstring
#: of its own: it is the dataclass defaults, which are this preset (each config.py says so)
DEFAULTS_PRESET = {
    "dense_lstm": "dense_lstm_baseline_4l",
    "densenmt": "densenmt_4l_2",
    "fast_forward_lstm": "deep_att",
    "gru_attention": "gru_attention_iwslt_de_en",
}


def doc_of(arch: str) -> str:
    """The docstring that describes ``arch``."""
    return ARCH_CONFIG_REGISTRY[DEFAULTS_PRESET.get(arch, arch)].__doc__ or ""


PAPER_ARCHS = [a for a in PLUGIN_ARCHS if paragraph(doc_of(a), "Paper:")]


# ------------------------------------------------------------------ building


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A data folder with the two 16-symbol dictionaries ``translation`` reads."""
    path = tmp_path_factory.mktemp("dicts")
    for lang in ("src", "tgt"):
        dummy_dictionary(12).save(str(path / f"dict.{lang}.txt"))
    return path


def build(data_dir, arch: str, *flags: str):
    """``arch`` built from its preset and ``flags`` alone, on the meta device.

    Built from the ``argparse.Namespace``, where only the architecture function fills the
    options not given; tests/test_arch_registry.py proves that fairseq-train's dataclass
    path builds the same model for every architecture.
    """
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser, [str(data_dir), "--arch", arch, "--source-lang", "src", "--target-lang", "tgt", *flags]
    )
    with torch.device("meta"):
        return tasks.setup_task(args).build_model(args)


# ------------------------------------------------------------------ measuring


def shapes(model) -> Dict[str, Tuple[int, ...]]:
    """Every parameter's shape by name."""
    return {n: tuple(p.shape) for n, p in model.named_parameters()}


def indices(names: Iterable[str], prefix: str) -> List[int]:
    """The sorted distinct ``i`` of the names ``<prefix>.<i>.*``."""
    pat = re.compile(re.escape(prefix) + r"\.(\d+)\.")
    return sorted({int(m.group(1)) for n in names if (m := pat.match(n))})


def one(values: Iterable, what: str):
    """The single value of ``values`` (every layer agrees), else the sorted set as text."""
    found = sorted(set(values), key=str)
    assert found, f"nothing measured for {what}"
    return found[0] if len(found) == 1 else "/".join(map(str, found))


def runs(values: List[int]) -> str:
    """``[128]*9 + [256]*4`` -> ``9x128+4x256``; a uniform list -> ``128``."""
    groups = [(v, len(list(g))) for v, g in groupby(values)]
    return str(values[0]) if len(groups) == 1 else "+".join(f"{n}x{v}" for v, n in groups)


def dropout_rates(model, pattern: str) -> float:
    """The rate of the ``FairseqDropout`` modules whose name matches ``pattern`` (all equal)."""
    return one(
        (m.p for n, m in model.named_modules() if isinstance(m, FairseqDropout) and re.search(pattern, n)),
        f"dropout {pattern}",
    )


def pair(encoder, decoder):
    """One value when both sides agree, else ``encoder/decoder``."""
    return encoder if encoder == decoder else f"{encoder}/{decoder}"


def measure_weighted_transformer(model) -> Dict[str, object]:
    """Layers counted, widths and branches from the branch FFN weights ``(M, d_model, d_ff / M)``."""
    s = shapes(model)
    blocks = [m for m in model.modules() if hasattr(m, "num_branches")]
    fc1 = [v for n, v in s.items() if n.endswith("fc1_weight")]  # (M, d_model, d_ff / M) per block
    weights = [(n, p) for n, p in model.named_parameters() if n.endswith((".kappa", ".alpha"))]
    if not weights:
        learned = False
    elif len(weights) == 2 * len(blocks) and all(getattr(p, "on_simplex", False) for _, p in weights):
        learned = True
    else:
        learned = f"{len(weights)} of {2 * len(blocks)} kappa/alpha vectors, on the simplex or not"
    return {
        "layers": f"{len(indices(s, 'encoder.layers'))}+{len(indices(s, 'decoder.layers'))}",
        "d_model": pair(s["encoder.embed_tokens.weight"][1], s["decoder.embed_tokens.weight"][1]),
        "branches": one((v[0] for v in fc1), "branches"),
        "ffn": one((v[0] * v[2] for v in fc1), "ffn"),
        "heads": one((m.num_heads for m in model.modules() if hasattr(m, "num_heads")), "heads"),
        # residual dropout: the model's, each layer's and each branched block's (not attention dropout)
        "dropout": dropout_rates(model, r"^(encoder|decoder)(\.layers\.\d+(\.\w*branched)?)?\.dropout_module$"),
        "learned_branch_weights": learned,
    }


def _conv_side(s, side: str):
    """``(input widths, hidden sizes, kernel widths)`` of a DenseNMT side's convolutions."""
    ins, hidden, kernels = [], [], []
    for i in indices(s, f"{side}.convs"):
        w = max((v for n, v in s.items() if n.startswith(f"{side}.convs.{i}.") and len(v) == 3), key=lambda v: v[1])
        out, k = max(w[0], w[2]), min(w[0], w[2])  # (kernel, in, out) or (out, in, kernel)
        ins.append(w[1])
        hidden.append(out // 2)  # GLU halves the output channels
        kernels.append(k)
    return ins, hidden, kernels


def _dense(ins: List[int], hidden: List[int], embed: int, extra: int = 0) -> str:
    """``dense`` when layer 2 reads layer 1's input plus its output (plus ``extra``), else ``residual``."""
    if len(ins) > 1 and ins[1] == ins[0] + hidden[0] + extra and ins[0] == embed:
        return "dense"
    return "residual" if len(set(ins)) == 1 else f"neither (input widths {ins})"


def measure_densenmt(model) -> Dict[str, object]:
    """Layers, growth and kernels from the convolution weights; dense/residual and summary layers
    from their input widths; the attention kind from the projections that exist."""
    s = shapes(model)
    embed = s["encoder.embed_tokens.weight"][1]
    e_in, e_hidden, e_k = _conv_side(s, "encoder")
    d_in, d_hidden, d_k = _conv_side(s, "decoder")
    query = [v for n, v in s.items() if n.startswith("decoder.query_projs.0.") and len(v) == 2]
    attention_dim = max(v[0] for v in query)
    encoder = _dense(e_in, e_hidden, embed)
    # in a dense encoder, a summary layer maps the concatenation back to the embedding size
    resets = [i for i in range(1, len(e_in)) if e_in[i] == embed] if encoder == "dense" else []
    if any(n.startswith("decoder.attention.key_projs.") for n in s):
        attention = "dense2"  # one attention per encoder layer
    elif any(n.startswith("encoder.fc2.") for n in s):
        attention = "multistep"  # the encoder's top mapped back to the embedding size, one memory
    else:
        attention = "dense1"  # one memory: the encoder layers side by side
    # the softmax matrix (vocabulary x out_embed), the largest 2-D weight of fc3 (weight norm adds a (V, 1))
    softmax = max((v for n, v in s.items() if n.startswith("decoder.fc3.") and len(v) == 2), key=lambda v: v[0] * v[1])
    return {
        "layers": f"{len(e_in)}+{len(d_in)}",
        "embed": pair(embed, s["decoder.embed_tokens.weight"][1]),
        "out_embed": softmax[1],
        "hidden": pair(runs(e_hidden), runs(d_hidden)),
        "encoder_hidden": runs(e_hidden),
        "decoder_hidden": runs(d_hidden),
        "kernel": pair(runs(e_k), runs(d_k)),
        "encoder": encoder,
        "decoder": _dense(d_in, d_hidden, embed, attention_dim),
        "attention": attention,
        "sumlen": resets[0] + 1 if resets else "none",
        "summary_layers": pair(len(indices(s, "encoder.summaries")), len(indices(s, "decoder.summaries"))),
        "attention_dim": attention_dim,
        "dropout": dropout_rates(model, r"dropout_module$"),
    }


def measure_dense_lstm(model) -> Dict[str, object]:
    """Layers counted, widths from the LSTM weights, DC from layer 2's input width, DA from the
    number of attentions."""
    s = shapes(model)
    enc = indices(s, "encoder.layers")
    dec = indices(s, "decoder.layers")

    def enc_layer(i):  # (input width, output width over both directions, directions)
        dirs = [v for n, v in s.items() if n.startswith(f"encoder.layers.{i}.") and n.endswith("weight_hh_l0")]
        ih = [v for n, v in s.items() if n.startswith(f"encoder.layers.{i}.") and n.endswith("weight_ih_l0")]
        return ih[0][1], sum(v[1] for v in dirs), len(dirs)

    layers = [enc_layer(i) for i in enc]
    enc_hidden = one((h for _, h, _ in layers), "encoder hidden")
    dec_hh = [v for n, v in s.items() if n.startswith("decoder.layers.") and n.endswith("weight_hh_l0")]
    dec_hidden = one((v[1] for v in dec_hh), "decoder hidden")
    dense = len(layers) > 1 and layers[1][0] != enc_hidden  # a plain stack's layer 2 reads layer 1's output only
    return {
        "layers": f"{len(enc)}+{len(dec)}",
        "hidden": pair(enc_hidden, dec_hidden),
        "embed": pair(s["encoder.embed_tokens.weight"][1], s["decoder.embed_tokens.weight"][1]),
        "bidirectional": one((d for _, _, d in layers), "directions") == 2,
        "dense_connections": dense,
        "dense_attention": len(indices(s, "decoder.attentions")) == len(enc) > 1,
        "dropout": dropout_rates(model, r"^(encoder|decoder)\.dropout$"),
        "softmax_dropout": dropout_rates(model, r"softmax_dropout$"),
    }


def measure_fast_forward_lstm(model) -> Dict[str, object]:
    """Recurrent layers counted per column, FF from the input widths, directions from the layers."""
    s = shapes(model)
    cells = lambda side: [m for m in getattr(model, side).modules() if hasattr(m, "weight_hh")]  # noqa: E731
    enc, dec = cells("encoder"), cells("decoder")
    columns = indices(s, "encoder.columns")
    per_column = len(enc) // len(columns)
    hidden = one((m.weight_hh.shape[1] for m in enc + dec), "LSTM width")
    # fast-forward connections: a layer above the first reads half of the f below and h (3 x width), a
    # plain stack h only; and the interface reads [f; h] of each column's top layer (5 x width), not h
    fc = [v for n, v in s.items() if n == "encoder.fc.weight"]
    interface = fc[0][1] if fc else s["decoder.context_proj.weight"][1]
    upper = [m.ff.weight.shape[1] > hidden for m in enc[1:per_column] + dec[1:]]
    ff = one(upper + [interface // len(columns) > hidden], "fast-forward")
    first = [enc[c * per_column].reverse for c in range(len(columns))]
    alternate = all(enc[i].reverse != enc[i + 1].reverse for i in range(per_column - 1))
    if not any(m.reverse for m in enc):
        direction = "uni"
    elif alternate and len(set(first)) == len(first):
        direction = "interleaved"
    else:
        direction = f"other ({[m.reverse for m in enc]})"
    return {
        "layers": f"{per_column}+{len(dec)}",
        "columns": len(columns),
        "hidden": hidden,
        "embed": pair(s["encoder.embed_tokens.weight"][1], s["decoder.embed_tokens.weight"][1]),
        "fast_forward": ff,
        "encoder": direction,
        "interface": "deep_att" if any(n.startswith("decoder.attention.") for n in s) else "deep_ed",
        "fc_dim": fc[0][0] if fc else "none",
        "dropout": dropout_rates(model, r"dropout$"),
    }


def measure_gru_attention(model) -> Dict[str, object]:
    """Widths from the GRU, attention and readout weights."""
    s = shapes(model)
    return {
        "embed": pair(s["encoder.embed_tokens.weight"][1], s["decoder.embed_tokens.weight"][1]),
        "hidden": pair(s["encoder.gru.weight_hh_l0"][1], s["decoder.cell.weight_hh"][1]),
        "bidirectional": "encoder.gru.weight_hh_l0_reverse" in s,
        "attention_dim": s["decoder.attention.key_proj.weight"][0],
        "readout": s["decoder.readout.weight"][0],
        "dropout": dropout_rates(model, r"^decoder\.dropout$"),
    }


MEASURES = {
    "weighted_transformer": measure_weighted_transformer,
    "densenmt": measure_densenmt,
    "dense_lstm": measure_dense_lstm,
    "fast_forward_lstm": measure_fast_forward_lstm,
    "gru_attention": measure_gru_attention,
}


def agrees(claimed: str, measured) -> bool:
    """Whether a claimed value (text) is the measured one (numbers compared as numbers)."""
    if isinstance(measured, bool):
        return claimed in ("True", "False") and (claimed == "True") == measured
    if isinstance(measured, (int, float)):
        try:
            return abs(float(claimed) - float(measured)) < 1e-9
        except ValueError:
            return False
    return claimed == str(measured)


def mismatches(arch: str, model, claims: Dict[str, str]) -> List[str]:
    """What of ``claims`` the built ``model`` of ``arch`` does not have (empty: it is what it claims)."""
    measured = MEASURES[family(arch)](model)
    unknown = sorted(set(claims) - set(measured))
    assert not unknown, f"{arch}: claim keys {unknown} are not measured for {family(arch)} (known: {sorted(measured)})"
    return [f"{k}: claimed {v}, built {measured[k]}" for k, v in claims.items() if not agrees(v, measured[k])]


# ------------------------------------------------------------------ tests


def test_every_family_has_paper_presets():
    assert {family(a) for a in PAPER_ARCHS} == set(MEASURES)


@pytest.mark.parametrize("arch", PLUGIN_ARCHS)
def test_every_preset_says_whether_it_is_a_papers(arch):
    """A paper claim, or a plain statement that the preset is the project's own."""
    doc = doc_of(arch)
    paper, project = paragraph(doc, "Paper:"), paragraph(doc, "Project:")
    assert bool(paper) != bool(project), f"{arch}: its docstring needs one 'Paper: ...' or one 'Project: ...' paragraph"
    if paper:
        citation, claims = paper
        assert re.search(r"(Tables?|Sec\.) ?\d", citation) and claims, (
            f"{arch}: 'Paper:' needs a citation naming its table or section, then key=value claims"
        )


@lru_cache(maxsize=None)
def claims_of(arch: str) -> Dict[str, str]:
    """The ``Paper:`` claims of ``arch`` and its ``Project choices:``."""
    doc = doc_of(arch)
    choices = paragraph(doc, "Project choices:")
    return {**paragraph(doc, "Paper:")[1], **(choices[1] if choices else {})}


@pytest.mark.parametrize("arch", PAPER_ARCHS)
def test_paper_preset_builds_its_claim(arch, data_dir):
    """The model built from the preset alone has every value its docstring claims."""
    wrong = mismatches(arch, build(data_dir, arch), claims_of(arch))
    assert not wrong, f"{arch} is not the configuration its docstring claims: {wrong}"


@pytest.mark.parametrize(
    "arch,flags,key",
    [
        ("weighted_transformer_c", ("--fixed-kappa", "--fixed-alpha"), "learned_branch_weights"),
        ("weighted_transformer_b", ("--encoder-branches", "8", "--decoder-branches", "8"), "branches"),
        ("densenmt_8l_2", ("--sumlen", "4"), "sumlen"),
        ("densenmt_4l_1", ("--attention", "dense2"), "attention"),
        ("dense_lstm_10l", ("--decoder-layers", "9"), "layers"),
        ("deep_att", ("--no-interleave",), "encoder"),
        ("deep_att_2x2", ("--no-fast-forward",), "fast_forward"),
        ("gru_attention_iwslt_de_en", ("--readout-dim", "256"), "readout"),
    ],
)
def test_a_model_that_differs_from_its_claim_is_caught(arch, flags, key, data_dir):
    """The check can fail: one option changed from the preset is reported under its claim key."""
    wrong = mismatches(arch, build(data_dir, arch, *flags), claims_of(arch))
    assert [w.split(":")[0] for w in wrong] == [key], wrong


def test_the_wmt_recipe_schedules_every_weighted_transformer_paper_preset_as_the_paper_does():
    """examples/weighted_transformer/train-wmt14.sh derives the branch weights' rate from each
    preset's d_model and N, warms them up for 400 updates and freezes them for the last 10k (Sec. 4.1)."""
    script = (Path(__file__).resolve().parents[1] / "examples" / "weighted_transformer" / "train-wmt14.sh").read_text()
    cases = re.findall(r"^\s*([\w|]+)\) D=(\d+); N=(\d+);", script, flags=re.M)
    sizes = {arch: (d, n) for names, d, n in cases for arch in names.split("|")}
    papers = [a for a in PAPER_ARCHS if family(a) == "weighted_transformer"]
    assert papers and set(papers) <= set(sizes), f"presets the recipe does not know: {set(papers) - set(sizes)}"
    for arch in papers:
        d, n = sizes[arch]
        assert (claims_of(arch)["d_model"], claims_of(arch)["layers"]) == (d, f"{n}+{n}"), arch
    assert "branch=$BRANCH_LR" in script and "--group-freeze-last branch=10000" in script
    assert "--group-warmup-updates default=4000,branch=400" in script
