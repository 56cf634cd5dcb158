"""The model card (``README.md``) of an exported model directory.

The YAML metadata block (licence, languages, library, tags, datasets and a
``model-index`` with the sacreBLEU score) is written with huggingface_hub's
``ModelCardData``, so model hubs read it.
"""

import dataclasses
import json
import re
from typing import Any, Dict, List, Optional

from fairseq_dense.hub.files import BPE_CODES_NAME, CONFIG_NAME, MANIFEST_NAME, PICKLE_NAME, WEIGHTS_NAME
from fairseq_dense.hub.text import MOSES_OPTIONS


@dataclasses.dataclass
class ModelCardInfo:
    """What the model card says beyond what the checkpoint knows."""

    model_name: Optional[str] = None
    license: str = "other"
    dataset: Optional[str] = None
    training_data: Optional[str] = None
    bleu: Optional[float] = None
    bleu_signature: Optional[str] = None
    test_set: Optional[str] = None
    intended_use: Optional[str] = None
    paper: Optional[str] = None
    languages: Optional[List[str]] = None


def paper_of(model_class) -> Optional[str]:
    """The first link in the model class docstring (the families cite their paper there)."""
    m = re.search(r"https?://[^\s,;)>\]]+", model_class.__doc__ or "")
    return m.group(0).rstrip(".") if m else None


def model_card(
    config: Dict[str, Any], n_params: int, info: ModelCardInfo, paper: Optional[str], has_pickle: bool
) -> str:
    """The ``README.md`` model card: hub metadata block (YAML) plus a description."""
    from huggingface_hub import EvalResult, ModelCardData

    paper = info.paper or paper
    task = config["task"]
    src, tgt = task["source_lang"], task["target_lang"]
    name = info.model_name or f"{config['arch']}-{src}-{tgt}"
    evals = None
    if info.bleu is not None:
        evals = [
            EvalResult(
                task_type="translation",
                task_name=f"Translation {src}-{tgt}",
                dataset_type=info.dataset or "custom",
                dataset_name=info.test_set or info.dataset or "custom",
                metric_type="bleu",
                metric_name="sacreBLEU",
                metric_value=float(info.bleu),
                verified=False,
                metric_config=info.bleu_signature,
            )
        ]
    data = ModelCardData(
        language=info.languages or [src, tgt],
        license=info.license,
        library_name="fairseq",
        pipeline_tag="translation",
        tags=["translation", "fairseq", "fairseq-dense", config["model_name"]],
        datasets=[info.dataset] if info.dataset else None,
        model_name=name,
        eval_results=evals,
    )
    bleu = "not given"
    if info.bleu is not None:
        bleu = f"{info.bleu:.2f} on {info.test_set or info.dataset or 'the test set'}"
        bleu += f" (signature `{info.bleu_signature}`)" if info.bleu_signature else ""
    rows = [
        ("Architecture", f"`{config['arch']}` (fairseq-dense model `{config['model_name']}`)"),
        ("Paper", paper or "see the fairseq-dense documentation"),
        ("Parameters", f"{n_params:,}"),
        ("Languages", f"{src} → {tgt}"),
        ("Training data", info.training_data or info.dataset or "not given"),
        ("sacreBLEU", bleu),
        (
            "Weights",
            f"`model.safetensors` ({config['weights_dtype']}), averaged over {len(config['checkpoints'])} "
            f"checkpoint(s): {', '.join(config['checkpoints'])}",
        ),
        (
            "Pre-/post-processing",
            f"tokenizer: {_tokenizer_text(config['tokenizer'])}, BPE: {(config['bpe'] or {}).get('_name', 'none')}",
        ),
        ("Licence", info.license),
        ("Exported with", f"fairseq-dense {config['package_version']}, fairseq {config['fairseq_version']}"),
    ]
    pickle_note = (
        f"- `{PICKLE_NAME}`: **pickle-based** fairseq checkpoint for `fairseq-generate --path` / "
        "`fairseq-interactive --path` (with `--user-dir`). Unpickling can run code: load it only if you "
        "trust its author. `from_pretrained` never reads (or downloads) it.\n"
        if has_pickle
        else ""
    )
    return (
        f"---\n{data.to_yaml()}\n---\n\n# {name}\n\n"
        f"A {config['model_name']} translation model ({src} → {tgt}) for fairseq, exported by fairseq-dense.\n\n"
        "| | |\n|---|---|\n"
        + "".join(f"| {k} | {v} |\n" for k, v in rows)
        + "\n## Intended use\n\n"
        + (
            info.intended_use
            or (
                f"Research on and demonstration of {src} → {tgt} machine translation. Not evaluated for "
                "production use, other domains or languages; outputs can be wrong or fluent but unfaithful."
            )
        )
        + "\n\n## How to use\n\n```python\nimport fairseq_dense\n\n"
        f'model = fairseq_dense.from_pretrained("<this repository id or directory>")\n'
        'print(model.translate("...", beam=5))\n```\n\n'
        'or `torch.hub.load("<fairseq-dense repository>", "from_pretrained", "<this repository>")`.\n\n'
        "## Files\n\n"
        f"- `{CONFIG_NAME}`: architecture, every model option, task, tokenizer and BPE settings\n"
        f"- `{WEIGHTS_NAME}`: weights (safetensors: no code runs when loading)\n"
        + "".join(
            f"- `{d['file']}`: {side} dictionary ({d['size']} symbols)\n" for side, d in config["dictionaries"].items()
        )
        + (f"- `{BPE_CODES_NAME}`: subword-nmt BPE codes\n" if config["bpe"] else "")
        + f"- `{MANIFEST_NAME}`: sha256 of the files above, verified when loading (`sha256sum -c`)\n"
        + pickle_note
        + "\n## Model options\n\n```json\n"
        + json.dumps(config["model"], indent=2, sort_keys=True)
        + "\n```\n"
    )


def _tokenizer_text(tokenizer) -> str:
    """``moses`` and the options set, e.g. ``moses (moses_no_escape, moses_no_dash_splits)``."""
    if not tokenizer:
        return "none"
    flags = [key for key in MOSES_OPTIONS if tokenizer.get(key)]
    return tokenizer["_name"] + (f" ({', '.join(flags)})" if flags else "")
