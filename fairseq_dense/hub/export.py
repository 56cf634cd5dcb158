"""Export fairseq checkpoints to a self-contained, pickle-free model directory, with its model card.

The directory is written beside ``--out`` under a lock on it, loaded back with the loader, then moved (or
swapped) into place; the same checkpoint gives the same bytes (docs/hub.md, "Export").
"""

import argparse
import contextlib
import ctypes
import dataclasses
import errno
import functools
import glob
import json
import logging
import os
import re
import secrets
import shutil
import struct
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import fairseq
import torch
from fairseq.data import data_utils
from fairseq.models import ARCH_MODEL_NAME_REGISTRY
from safetensors.torch import save

import fairseq_dense
from fairseq_dense.checkpoints import CheckpointError, average_models, last_checkpoints, read_state
from fairseq_dense.hub import schema
from fairseq_dense.hub.loading import build_model, load_model, tied_names
from fairseq_dense.hub.schema import PretrainedModelError, describe, one_line, safe_name, shown
from fairseq_dense.hub.text import parse_bpe_codes, parse_dictionary, read_record
from fairseq_dense.save_lock import held_folder

logger = logging.getLogger(__name__)

#: in the names of an export's temporary folders (``.<out>.export-*`` beside ``--out``)
EXPORT_TMP_MARK = ".export-"


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


def read_checkpoint(path: Path) -> Dict[str, Any]:
    """A fairseq checkpoint (torch's ``weights_only`` loader) plus ``"plain_cfg"``: ``{"model": {...},
    "task": {...}}``, flat dicts of option values (no OmegaConf interpolation, no hydra composition)."""
    state = read_state(str(path))
    state.pop("last_optimizer_state", None)  # neither exported nor needed: freed early
    for name, value in state["model"].items():
        if not isinstance(name, str) or not isinstance(value, torch.Tensor):
            raise PretrainedModelError(f"{path}: 'model' entry '{safe_name(name)}' is not a named tensor")

    def plain(node, key: str) -> Dict[str, Any]:
        node = vars(node) if isinstance(node, argparse.Namespace) else node  # argparse-style models
        if not isinstance(node, dict):
            raise PretrainedModelError(f"{path}: checkpoint configuration '{key}' is not a mapping")
        return dict(node)

    if state.get("args") is not None:  # checkpoints of fairseq < 0.10: one flat Namespace
        flat = plain(state["args"], "args")
        state["plain_cfg"] = {"model": dict(flat, _name=flat.get("arch")), "task": dict(flat, _name=flat.get("task"))}
    elif state.get("cfg") is not None:
        cfg = plain(state["cfg"], "cfg")
        state["plain_cfg"] = model_task = {key: plain(cfg.get(key), f"cfg.{key}") for key in ("model", "task")}
        model_task["model"]["_name"] = model_task["model"].get("_name") or model_task["model"].get("arch")
    else:
        raise PretrainedModelError(f"{path}: the checkpoint holds no configuration ('cfg' or 'args')")
    return state


def _jsonable(value):
    """Tuples as lists; anything else as it is (``check_config`` judges it; fairseq saves enums as text)."""
    return [_jsonable(v) for v in value] if isinstance(value, (list, tuple)) else value


def model_options(model_cfg: Dict[str, Any], arch: str) -> Dict[str, Any]:
    """Every option the architecture declares that the checkpoint sets, as JSON values."""
    return {name: _jsonable(model_cfg[name]) for name in schema.declared_model_options(arch) if name in model_cfg}


def one_line_errors(func):
    """``func`` with a file system failure or an unusable checkpoint as one line naming the file."""

    @functools.wraps(func)
    def checked(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except CheckpointError as err:
            raise PretrainedModelError(one_line(err, 300)) from None
        except OSError as err:
            where = shown(err.filename) + ": " if err.filename else ""
            raise PretrainedModelError(f"{where}{err.strerror or one_line(err)} (exporting)") from None

    return checked


@one_line_errors
def export_checkpoint(
    checkpoints: Union[str, Path, Sequence[Union[str, Path]]],
    out_dir: Union[str, Path],
    data: Optional[Union[str, Path]] = None,
    source_lang: Optional[str] = None,
    target_lang: Optional[str] = None,
    bpe_codes: Optional[Union[str, Path]] = None,
    tokenizer: Optional[str] = "moses",
    moses_source_lang: Optional[str] = None,
    moses_target_lang: Optional[str] = None,
    moses_no_escape: bool = False,
    moses_no_dash_splits: bool = False,
    moses_normalize_punctuation: bool = False,
    moses_lowercase: bool = False,
    fp16: bool = False,
    average_last: Optional[int] = None,
    update_based: bool = False,
    write_pickle: bool = False,
    card: Optional[ModelCardInfo] = None,
    force: bool = False,
) -> Path:
    """Write a self-contained model directory from fairseq checkpoint(s); returns ``out_dir``.

    The options are ``fairseq-dense-export``'s (docs/hub.md): ``checkpoints``: a path or a list, averaged;
    ``average_last``: the last N of one checkpoint directory (``update_based``: ``checkpoint_E_U.pt``);
    ``moses_*``: the tokenizer's languages and the steps the training data went through (``data``'s record
    of ``fairseq-dense-prepare`` sets them too); ``write_pickle``: also ``model.pt``.

    Raises:
        PretrainedModelError: naming the file or option at fault.
    """
    out_dir = Path(out_dir)
    if out_dir.is_symlink():  # replacing it would swap the link, not the folder it names
        raise PretrainedModelError(f"{shown(out_dir)}: is a symbolic link; give the folder it points to")

    def refuse_filled_out():  # before the work, and again under the lock: another export may have filled it
        if out_dir.exists() and any(out_dir.iterdir()) and not force:  # a file: NotADirectoryError, one line
            raise PretrainedModelError(f"{out_dir}: exists and is not empty (use --force to replace it)")

    refuse_filled_out()
    paths = [Path(p) for p in ([checkpoints] if isinstance(checkpoints, (str, os.PathLike)) else checkpoints)]
    if average_last is not None:
        if average_last < 1:  # a slice of the newest checkpoints: 0 selects none, -1 all but the oldest
            raise PretrainedModelError(f"--average-last {average_last}: must be a positive number")
        if len(paths) != 1 or not paths[0].is_dir():
            raise PretrainedModelError(f"--average-last needs one checkpoint directory, got {[str(p) for p in paths]}")
        try:
            paths = [Path(p) for p in last_checkpoints(str(paths[0]), average_last, update_based)]
        except CheckpointError as err:
            raise PretrainedModelError(
                f"--average-last {average_last} needs {average_last} checkpoints: {err}"
            ) from None
    if folder := next((p for p in paths if p.is_dir()), None):  # read as a file: 'no such checkpoint file'
        raise PretrainedModelError(f"{folder}: a folder; give checkpoint files, or the folder with --average-last N")
    states = [read_checkpoint(p) for p in paths]
    plain = states[-1]["plain_cfg"]  # the last checkpoint's configuration is the one exported
    arch = plain["model"].get("_name")
    if not isinstance(arch, str) or arch not in schema.dense_architectures():
        raise PretrainedModelError(
            f"{paths[-1]}: architecture '{safe_name(arch)}' is not one of fairseq-dense's; only those are exported"
        )
    for state, path in zip(states, paths):  # archs of the same parameter shapes would average without an error
        if (other := state["plain_cfg"]["model"].get("_name")) != arch:
            raise PretrainedModelError(
                f"{path}: architecture '{safe_name(other)}' differs from '{arch}' of {paths[-1]}"
            )
    if data is None:
        data = plain["task"].get("data")
        if not isinstance(data, str) or not data:
            raise PretrainedModelError(f"{paths[-1]}: the checkpoint names no data directory; pass --data")
        data = data.split(os.pathsep)[0]
    data_dir = Path(data)
    task_cfg = plain["task"]
    if task_cfg.get("_name") not in schema.translation_tasks():
        raise PretrainedModelError(
            f"{paths[-1]}: task '{safe_name(task_cfg.get('_name'))}' of the checkpoint: only "
            f"{', '.join(schema.translation_tasks())} can be exported"
        )
    src, tgt = source_lang or task_cfg.get("source_lang"), target_lang or task_cfg.get("target_lang")
    if src is None or tgt is None:
        src, tgt = data_utils.infer_language_pair(str(data_dir))
    if src is None or tgt is None:
        raise PretrainedModelError(f"{data_dir}: cannot infer the language pair; pass --source-lang/--target-lang")
    for key, lang in (("source_lang", src), ("target_lang", tgt)):  # checked before they name files
        if not isinstance(lang, str) or not schema.LANG_RE.fullmatch(lang):
            raise PretrainedModelError(f"{paths[-1]}: key 'task.{key}' must be a language code, not {describe(lang)}")
    task = {"_name": task_cfg["_name"], "source_lang": src, "target_lang": tgt}
    task.update((key, _jsonable(task_cfg[key])) for key in schema.TASK_OPTIONS if key in task_cfg)
    dict_files, dictionaries = {}, {}
    for side in ("source", "target"):
        dict_files[side] = data_dir / f"dict.{task[side + '_lang']}.txt"
        if not dict_files[side].is_file():
            raise PretrainedModelError(f"{dict_files[side]}: missing (pass --data, the binarized data directory)")
        dictionaries[side] = parse_dictionary(str(dict_files[side]), dict_files[side].read_bytes())  # the loader's
    if bpe_codes is not None:
        parse_bpe_codes(str(bpe_codes), Path(bpe_codes).read_bytes())
    if tokenizer not in (None, "moses"):
        raise PretrainedModelError(f"--tokenizer {tokenizer}: only 'moses' or 'none' are supported")
    record = read_record(data_dir)  # what fairseq-dense-prepare did to the text
    langs = (("moses_source_lang", moses_source_lang), ("moses_target_lang", moses_target_lang))
    given = (moses_no_dash_splits, moses_no_escape, moses_normalize_punctuation, moses_lowercase)
    set_flags = ", ".join("--" + k.replace("_", "-") for k, v in (*langs, *zip(schema.MOSES_OPTIONS, given)) if v)
    if tokenizer is None and set_flags:
        raise PretrainedModelError(f"{set_flags}: Moses options need --tokenizer moses, not none")
    moses = {
        "_name": "moses",
        "source_lang": moses_source_lang or record.get("source_lang") or task["source_lang"],
        "target_lang": moses_target_lang or record.get("target_lang") or task["target_lang"],
        **{k: True for k, flag in zip(schema.MOSES_OPTIONS, given) if flag or record.get(k, False)},
    }
    config = {
        "format": schema.FORMAT_NAME,
        "format_version": schema.FORMAT_VERSION,
        "package_version": fairseq_dense.__version__,
        "fairseq_version": getattr(fairseq, "__version__", "unknown"),
        "arch": arch,
        "model_name": ARCH_MODEL_NAME_REGISTRY[arch],
        "model": model_options(plain["model"], arch),
        "task": task,
        "dictionaries": {side: {"file": p.name, "size": len(dictionaries[side])} for side, p in dict_files.items()},
        "tokenizer": moses if tokenizer else None,
        "bpe": None if bpe_codes is None else {"_name": "subword_nmt", "bpe_separator": "@@"},
        "weights_dtype": "float16" if fp16 else "float32",
        "checkpoints": [p.name for p in paths],
    }
    schema.check_config(config, paths[-1])  # the same rules as loading, before any model code runs
    created = [folder for folder in out_dir.parents if not folder.exists()]  # the deepest first
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    lock = out_dir.parent / f".{out_dir.name}{EXPORT_TMP_MARK}lock"
    busy = f"{shown(out_dir)}: another export to it is running"
    try:
        with held_folder(str(lock), lambda holder: PretrainedModelError(f"{busy} ({holder}); wait for it")):
            refuse_filled_out()
            _write_locked(out_dir, config, dict_files, dictionaries, bpe_codes, states, paths, card, write_pickle)
    except BaseException:
        for folder in created:  # made for this export: removed when still empty
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    logger.info("exported %s (%d checkpoint(s)) to %s", arch, len(paths), shown(out_dir))
    return out_dir


def _write_locked(out_dir, config, dict_files, dictionaries, bpe_codes, states, paths, card, write_pickle):
    """Write, verify and move the export into place, holding the lock of ``out_dir``."""
    ours = re.compile(rf"\.{re.escape(out_dir.name + EXPORT_TMP_MARK)}([0-9a-f]+|old-[0-9]+)")
    for leftover in out_dir.parent.glob(f".{glob.escape(out_dir.name)}{EXPORT_TMP_MARK}*"):
        if ours.fullmatch(leftover.name):  # every live export holds the lock: this one's was killed
            shutil.rmtree(leftover)
    while True:  # a new folder with the umask's permissions (mkdtemp's are 0o700)
        tmp = out_dir.parent / f".{out_dir.name}{EXPORT_TMP_MARK}{secrets.token_hex(4)}"
        with contextlib.suppress(FileExistsError):
            tmp.mkdir()
            break
    try:
        for side, path in dict_files.items():
            shutil.copyfile(path, tmp / config["dictionaries"][side]["file"])
        if bpe_codes is not None:
            shutil.copyfile(bpe_codes, tmp / schema.BPE_CODES_NAME)
        (tmp / schema.CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        model, weights = _write_weights(tmp, config, (dictionaries["source"], dictionaries["target"]), states, paths)
        schema.write_manifest(tmp, schema.model_files(config))
        load_model(tmp)  # verification: the directory loads on its own, checksums and all
        n_params = sum(p.numel() for p in model.parameters())
        (tmp / schema.CARD_NAME).write_text(
            model_card(config, n_params, card or ModelCardInfo(), write_pickle), "utf-8"
        )
        if write_pickle:  # a plain fairseq checkpoint for fairseq-generate --path: no optimizer state
            state = {k: v for k, v in states[-1].items() if k not in ("plain_cfg", "criterion")}
            torch.save({**state, "model": weights}, tmp / schema.PICKLE_NAME)
        if out_dir.exists():
            swap_paths(tmp, out_dir)  # the old export is now at tmp, removed below
        else:
            os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # the new export: nothing half-written stays
        raise
    if tmp.exists():  # the old export, swapped out
        try:
            shutil.rmtree(tmp)
        except OSError as err:  # the next export removes it
            logger.warning("the export it replaced stays at %s: %s", shown(tmp), err.strerror or err)


def swap_paths(a: Path, b: Path) -> None:
    """Exchange ``a`` and ``b`` in one step (Linux's ``renameat2(RENAME_EXCHANGE)``); elsewhere ``b`` is moved
    aside under the temporary mark (the next export removes it after a kill) and is missing for a moment."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is not None:
        at_fdcwd, rename_exchange = -100, 2
        if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err), str(b))
    aside = b.parent / f".{b.name}{EXPORT_TMP_MARK}old-{os.getpid()}"
    os.replace(b, aside)
    os.replace(a, b)
    os.replace(aside, a)


def _write_weights(tmp: Path, config, dictionaries, states, paths):
    """Save the (averaged) weights through a model built as the loader builds it (fairseq's state-dict upgrades,
    names and shapes checked against the dictionaries); tied weights stored once. Returns it and its state."""
    averaged = average_models([s["model"] for s in states], [str(p) for p in paths])
    cfg, _, model = build_model(config, dictionaries, where=shown(paths[-1]))
    try:
        model.load_state_dict(averaged, strict=True, model_cfg=cfg.model)
    except (Exception, SystemExit) as err:
        raise PretrainedModelError(
            f"{paths[-1]}: weights do not fit architecture '{config['arch']}' with the dictionaries of --data "
            f"({one_line(err, 300)})"
        ) from None
    full = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for name, tensor in list(full.items()):
        if torch.is_floating_point(tensor) and not bool(torch.isfinite(tensor).all()):
            raise PretrainedModelError(f"{paths[-1]}: tensor '{name}' holds non-finite values (NaN or infinity)")
        if torch.is_floating_point(tensor) and config["weights_dtype"] == "float16":
            full[name] = tensor.half()  # values over 65504 (65520 after rounding) become infinite
            if not bool(torch.isfinite(full[name]).all()):
                raise PretrainedModelError(f"{paths[-1]}: tensor '{name}' overflows float16: export without --fp16")
    aliases = tied_names(model)
    metadata = {"format": "pt", "tied_weights": json.dumps(aliases), "arch": config["arch"]}
    metadata["fairseq_dense_version"] = fairseq_dense.__version__
    data = save({k: v.contiguous() for k, v in full.items() if k not in aliases}, metadata)
    (size,) = struct.unpack("<Q", data[:8])  # safetensors writes its metadata map in a random order: sort it
    header = json.loads(data[8 : 8 + size])
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # safetensors' alignment of the data
    (tmp / schema.WEIGHTS_NAME).write_bytes(struct.pack("<Q", len(text)) + text + data[8 + size :])
    return model, full


def model_card(config: Dict[str, Any], n_params: int, info: ModelCardInfo, has_pickle: bool) -> str:
    """The ``README.md`` model card: the metadata block hubs read (huggingface_hub's ``ModelCardData``), the text."""
    from huggingface_hub import EvalResult, ModelCardData

    cited = schema.dense_architectures()[config["arch"]].__doc__ or ""
    link = re.search(r"https?://[^\s,;)>\]]+", cited)  # the paper the model class cites
    paper = info.paper or (link.group(0).rstrip(".") if link else None)
    src, tgt = config["task"]["source_lang"], config["task"]["target_lang"]
    name = info.model_name or f"{config['arch']}-{src}-{tgt}"
    test_set = info.test_set or info.dataset
    evals = bleu = None
    if info.bleu is not None:
        evals = [
            EvalResult(
                task_type="translation",
                task_name=f"Translation {src}-{tgt}",
                dataset_type=info.dataset or "custom",
                dataset_name=test_set or "custom",
                metric_type="bleu",
                metric_name="sacreBLEU",
                metric_value=float(info.bleu),
                verified=False,
                metric_config=info.bleu_signature,
            )
        ]
        bleu = f"{info.bleu:.2f} on {test_set or 'the test set'}"
        bleu += f" (signature `{info.bleu_signature}`)" if info.bleu_signature else ""
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
    tok = config["tokenizer"]
    steps = [key for key in schema.MOSES_OPTIONS if tok and tok.get(key)]
    tok_text = (tok["_name"] + (f" ({', '.join(steps)})" if steps else "")) if tok else "none"
    rows = {
        "Architecture": f"`{config['arch']}` (fairseq-dense model `{config['model_name']}`)",
        "Paper": paper or "see the fairseq-dense documentation",
        "Parameters": f"{n_params:,}",
        "Languages": f"{src} → {tgt}",
        "Training data": info.training_data or info.dataset or "not given",
        "sacreBLEU": bleu or "not given",
        "Weights": f"`model.safetensors` ({config['weights_dtype']}), averaged over {len(config['checkpoints'])} "
        f"checkpoint(s): {', '.join(config['checkpoints'])}",
        "Pre-/post-processing": f"tokenizer: {tok_text}, BPE: {(config['bpe'] or {}).get('_name', 'none')}",
        "Licence": info.license,
        "Exported with": f"fairseq-dense {config['package_version']}, fairseq {config['fairseq_version']}",
    }
    # a | (sacreBLEU's signatures hold several) or a line break splits a table row, even inside a code span
    rows = {k: " ".join(v.replace("|", "\\|").split("\n")) for k, v in rows.items()}
    files = [
        f"`{schema.CONFIG_NAME}`: architecture, every model option, task, tokenizer and BPE settings",
        f"`{schema.WEIGHTS_NAME}`: weights (safetensors: no code runs when loading)",
        *(f"`{d['file']}`: {side} dictionary ({d['size']} symbols)" for side, d in config["dictionaries"].items()),
        *([f"`{schema.BPE_CODES_NAME}`: subword-nmt BPE codes"] if config["bpe"] else []),
        f"`{schema.MANIFEST_NAME}`: sha256 of the files above, verified when loading (`sha256sum -c`)",
    ]
    if has_pickle:
        files.append(
            f"`{schema.PICKLE_NAME}`: **pickle-based** fairseq checkpoint for `fairseq-generate --path` / "
            "`fairseq-interactive --path` (with `--user-dir`). Unpickling can run code: load it only if you "
            "trust its author. `from_pretrained` never reads (or downloads) it."
        )
    use = info.intended_use or (
        f"Research on and demonstration of {src} → {tgt} machine translation. Not evaluated for "
        "production use, other domains or languages; outputs can be wrong or fluent but unfaithful."
    )
    return (
        f"---\n{data.to_yaml()}\n---\n\n# {name}\n\n"
        f"A {config['model_name']} translation model ({src} → {tgt}) for fairseq, exported by fairseq-dense.\n\n"
        "| | |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows.items()) + f"\n## Intended use\n\n{use}"
        "\n\n## How to use\n\n```python\nimport fairseq_dense\n\n"
        'model = fairseq_dense.from_pretrained("<this repository id or directory>")\n'
        'print(model.translate("...", beam=5))\n```\n\n'
        'or `torch.hub.load("<fairseq-dense repository>", "from_pretrained", "<this repository>")`.\n\n'
        "## Files\n\n" + "".join(f"- {line}\n" for line in files) + "\n## Model options\n\n```json\n"
        f"{json.dumps(config['model'], indent=2, sort_keys=True)}\n```\n"
    )
