"""Export a fairseq checkpoint to a self-contained, pickle-free model directory.

The directory layout is described in :mod:`fairseq_dense.hub`. Reading the
training checkpoint uses torch's ``weights_only`` loader (never arbitrary
unpickling); the directory is written to a temporary sibling, verified by
loading it back with :func:`fairseq_dense.hub.load_model_dir`, and only then moved
into place, so nothing half-written is left behind.
"""
import enum
import json
import logging
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

import fairseq_dense
from fairseq_dense.hub import loading
from fairseq_dense.hub.loading import PretrainedModelError
from fairseq_dense.hub.model_card import ModelCardInfo, model_card, paper_of

logger = logging.getLogger(__name__)

#: Task options that change how a model reads or writes text; all others are training-only.
TASK_OPTIONS = ("left_pad_source", "left_pad_target", "max_source_positions", "max_target_positions",
                "truncate_source")
_EPOCH_RE = re.compile(r"checkpoint(\d+)\.pt$")
_UPDATE_RE = re.compile(r"checkpoint_\d+_(\d+)\.pt$")


def select_checkpoints(paths: Sequence[Union[str, Path]], average_last: Optional[int] = None,
                       update_based: bool = False) -> List[Path]:
    """The checkpoint files to export (several are averaged).

    Args:
        paths: checkpoint files, or with ``average_last`` one checkpoint directory.
        average_last: average the last N epoch checkpoints (``checkpointE.pt``) of the directory.
        update_based: with ``average_last``, use update checkpoints (``checkpoint_E_U.pt``).
    """
    paths = [Path(p) for p in paths]
    if average_last is None:
        for p in paths:
            if not p.is_file():
                raise PretrainedModelError(f"{p}: no such checkpoint file")
        return paths
    if len(paths) != 1 or not paths[0].is_dir():
        raise PretrainedModelError(f"--average-last needs one checkpoint directory, got {[str(p) for p in paths]}")
    pattern = _UPDATE_RE if update_based else _EPOCH_RE
    found = sorted(
        (int(m.group(1)), p) for p in paths[0].iterdir() for m in [pattern.search(p.name)] if m
    )
    if len(found) < average_last:
        raise PretrainedModelError(
            f"{paths[0]}: --average-last {average_last} needs {average_last} "
            f"{'checkpoint_E_U.pt' if update_based else 'checkpointE.pt'} files, found {len(found)}"
        )
    return [p for _, p in found[-average_last:]]


def read_checkpoint(path: Path) -> Dict[str, Any]:
    """Load a fairseq checkpoint with torch's safe ``weights_only`` loader.

    Returns:
        The raw state plus ``"cfg_obj"``, the configuration as fairseq's ``DictConfig``.
    """
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    try:
        with open(path, "rb") as f:
            state = torch.load(f, map_location="cpu", weights_only=True)
    except Exception as err:
        raise PretrainedModelError(
            f"{path}: cannot be read safely as a fairseq checkpoint ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else ''})"
        ) from None
    if not isinstance(state, dict) or "model" not in state:
        raise PretrainedModelError(f"{path}: not a fairseq checkpoint (no 'model' entry)")
    if state.get("args") is not None:  # checkpoints of fairseq < 0.10
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cfg = convert_namespace_to_omegaconf(state["args"])
    elif state.get("cfg") is not None:
        cfg = OmegaConf.create(state["cfg"], flags={"allow_objects": True})
    else:
        raise PretrainedModelError(f"{path}: the checkpoint holds no configuration ('cfg' or 'args')")
    state["cfg_obj"] = cfg
    return state


def average_states(states: List[Dict[str, torch.Tensor]], paths: List[Path]) -> Dict[str, torch.Tensor]:
    """Element-wise mean of floating-point tensors; other tensors come from the last state."""
    if len(states) == 1:
        return dict(states[0])
    keys = list(states[-1])
    for state, path in zip(states, paths):
        if set(state) != set(keys):
            raise PretrainedModelError(f"{path}: its parameters differ from {paths[-1]}; cannot average them")
    out = {}
    for k in keys:
        last = states[-1][k]
        if torch.is_floating_point(last):
            out[k] = (sum(s[k].double() for s in states) / len(states)).to(last.dtype)
        else:
            out[k] = last.clone()
    return out


def _jsonable(value):
    if isinstance(value, enum.Enum):
        return value.value if isinstance(value.value, (str, int, float, bool)) else str(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    from omegaconf import OmegaConf

    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True, enum_to_str=True)
    raise PretrainedModelError(f"model option of type {type(value).__name__} cannot be written to JSON: {value!r}")


def model_options(model_cfg, arch: str) -> Dict[str, Any]:
    """Every option of the architecture's model, as JSON values.

    Options are the fields of the model's dataclass config, or for argparse-style
    models the flags of its ``add_args``.
    """
    import argparse

    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY, MODEL_DATACLASS_REGISTRY

    dc = MODEL_DATACLASS_REGISTRY.get(ARCH_MODEL_NAME_REGISTRY[arch])
    if dc is not None:
        names = [n for n in dc.__dataclass_fields__ if not n.startswith("_")]
    else:
        parser = argparse.ArgumentParser(add_help=False)
        ARCH_MODEL_REGISTRY[arch].add_args(parser)
        names = [a.dest for a in parser._actions]
    sentinel = object()
    options = {}
    for name in names:
        value = getattr(model_cfg, name, sentinel)
        if value is not sentinel:
            options[name] = _jsonable(value)
    return options


def _dictionary_dir(data: Optional[Union[str, Path]], cfg) -> Path:
    if data is None:
        data = str(cfg.task.data).split(os.pathsep)[0]
    return Path(data)


def _task_options(cfg, src: Optional[str], tgt: Optional[str], data_dir: Path) -> Dict[str, Any]:
    from fairseq.data import data_utils
    from fairseq.tasks import TASK_REGISTRY
    from fairseq.tasks.translation import TranslationTask

    name = cfg.task._name
    if name not in TASK_REGISTRY or not issubclass(TASK_REGISTRY[name], TranslationTask):
        raise PretrainedModelError(f"task '{name}' of the checkpoint: only translation tasks can be exported")
    src = src or cfg.task.source_lang
    tgt = tgt or cfg.task.target_lang
    if src is None or tgt is None:
        src, tgt = data_utils.infer_language_pair(str(data_dir))
    if src is None or tgt is None:
        raise PretrainedModelError(f"{data_dir}: cannot infer the language pair; pass --source-lang/--target-lang")
    options = {"_name": name, "source_lang": src, "target_lang": tgt}
    for key in TASK_OPTIONS:
        if key in cfg.task:
            options[key] = _jsonable(cfg.task[key])
    return options


def export_checkpoint(
    checkpoints: Sequence[Union[str, Path]],
    out_dir: Union[str, Path],
    data: Optional[Union[str, Path]] = None,
    source_lang: Optional[str] = None,
    target_lang: Optional[str] = None,
    bpe_codes: Optional[Union[str, Path]] = None,
    tokenizer: Optional[str] = "moses",
    moses_source_lang: Optional[str] = None,
    moses_target_lang: Optional[str] = None,
    fp16: bool = False,
    average_last: Optional[int] = None,
    update_based: bool = False,
    write_pickle: bool = False,
    card: Optional[ModelCardInfo] = None,
    force: bool = False,
) -> Path:
    """Write a self-contained model directory from fairseq checkpoint(s).

    Args:
        checkpoints: checkpoint file(s); several are averaged. With ``average_last``
            one checkpoint directory.
        out_dir: the model directory to create.
        data: directory holding ``dict.<lang>.txt`` (default: the checkpoint's data dir).
        source_lang, target_lang: default: the checkpoint's (or inferred from ``data``).
        bpe_codes: subword-nmt codes file; the model then applies BPE to its input.
        tokenizer: ``"moses"`` or ``None``.
        moses_source_lang, moses_target_lang: sacremoses languages (default: the task's).
        fp16: store the weights as float16 (half the size; loading casts to float32).
        average_last: average the last N checkpoints of the directory.
        update_based: with ``average_last``, average update checkpoints.
        write_pickle: also write ``model.pt`` (pickle-based, for ``fairseq-generate --path``).
        card: model card fields.
        force: replace an existing ``out_dir``.

    Returns:
        ``out_dir``.

    Raises:
        PretrainedModelError: naming the file or option at fault.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()) and not force:
        raise PretrainedModelError(f"{out_dir}: exists and is not empty (use --force to replace it)")
    paths = select_checkpoints(checkpoints, average_last, update_based)
    states = [read_checkpoint(p) for p in paths]
    for state in states:  # optimizer state is neither exported nor needed: free it early
        state.pop("last_optimizer_state", None)
    last = states[-1]
    cfg = last["cfg_obj"]
    arch = getattr(cfg.model, "_name", None) or getattr(cfg.model, "arch", None)
    from fairseq.models import ARCH_MODEL_REGISTRY

    if arch not in ARCH_MODEL_REGISTRY:
        raise PretrainedModelError(f"{paths[-1]}: unknown architecture '{arch}' (import the plugin that registers it)")
    for state, path in zip(states, paths):
        other = getattr(state["cfg_obj"].model, "_name", None)
        if other != arch:
            raise PretrainedModelError(f"{path}: architecture '{other}' differs from '{arch}' of {paths[-1]}")
    data_dir = _dictionary_dir(data, cfg)
    task = _task_options(cfg, source_lang, target_lang, data_dir)
    dict_files = {}
    for side, lang in (("source", task["source_lang"]), ("target", task["target_lang"])):
        dict_files[side] = data_dir / f"dict.{lang}.txt"
        if not dict_files[side].is_file():
            raise PretrainedModelError(f"{dict_files[side]}: missing (pass --data, the binarized data directory)")
    if bpe_codes is not None and not Path(bpe_codes).is_file():
        raise PretrainedModelError(f"{bpe_codes}: no such BPE codes file")
    if tokenizer not in (None, "moses"):
        raise PretrainedModelError(f"--tokenizer {tokenizer}: only 'moses' or 'none' are supported")

    from fairseq.data import Dictionary

    config = {
        "format": loading.FORMAT_NAME,
        "format_version": loading.FORMAT_VERSION,
        "package_version": fairseq_dense.__version__,
        "fairseq_version": _fairseq_version(),
        "arch": arch,
        "model_name": _model_name(arch),
        "model": model_options(cfg.model, arch),
        "task": task,
        "dictionaries": {
            side: {"file": path.name, "size": len(Dictionary.load(str(path)))} for side, path in dict_files.items()
        },
        "tokenizer": None if tokenizer is None else {
            "_name": "moses",
            "source_lang": moses_source_lang or task["source_lang"],
            "target_lang": moses_target_lang or task["target_lang"],
        },
        "bpe": None if bpe_codes is None else {"_name": "subword_nmt", "bpe_separator": "@@"},
        "weights_dtype": "float16" if fp16 else "float32",
        "checkpoints": [p.name for p in paths],
    }
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        for side, path in dict_files.items():
            shutil.copyfile(path, tmp / config["dictionaries"][side]["file"])
        if bpe_codes is not None:
            shutil.copyfile(bpe_codes, tmp / loading.BPE_CODES_NAME)
        (tmp / loading.CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        weights, n_params = _write_weights(tmp, config, states, paths, fp16)
        loading.load_model_dir(tmp)  # verification: the directory loads on its own
        text = model_card(config, n_params, card or ModelCardInfo(), paper_of(ARCH_MODEL_REGISTRY[arch]),
                          write_pickle)
        (tmp / loading.CARD_NAME).write_text(text, encoding="utf-8")
        if write_pickle:
            _write_pickle(tmp / loading.PICKLE_NAME, last, weights)
        _make_readable(tmp)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("exported %s (%d checkpoint(s)) to %s", arch, len(paths), out_dir)
    return out_dir


def _make_readable(directory: Path) -> None:
    """``mkdtemp`` creates a private directory: give it the usual permissions (umask)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(directory, 0o777 & ~umask)
    for path in directory.iterdir():
        os.chmod(path, 0o666 & ~umask)


def _fairseq_version() -> str:
    import fairseq

    return getattr(fairseq, "__version__", "unknown")


def _model_name(arch: str) -> str:
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    return ARCH_MODEL_NAME_REGISTRY[arch]


def _write_weights(tmp: Path, config, states, paths, fp16: bool) -> Tuple[Dict[str, torch.Tensor], int]:
    """Load the (averaged) weights into a freshly built model and save its state dict.

    Going through the model applies fairseq's state-dict upgrades and proves that
    names and shapes match the dictionaries. Tied weights are stored once and
    listed in the safetensors metadata. Returns the full state dict as written and
    the number of (distinct) parameters.
    """
    from fairseq import tasks
    from safetensors.torch import save_file

    averaged = average_states([s["model"] for s in states], paths)
    cfg = loading.build_fairseq_cfg(tmp, config)
    model = tasks.setup_task(cfg.task).build_model(cfg.model)
    expected = model.state_dict()
    for name, tensor in averaged.items():
        if name in expected and tuple(tensor.shape) != tuple(expected[name].shape):
            sizes = ", ".join("{file}: {size} symbols".format(**d) for d in config["dictionaries"].values())
            raise PretrainedModelError(
                f"{paths[-1]}: tensor '{name}' has shape {tuple(tensor.shape)}, but the model built from the "
                f"dictionaries ({sizes}) expects {tuple(expected[name].shape)} (wrong --data?)"
            )
    try:
        model.load_state_dict(averaged, strict=True, model_cfg=cfg.model)
    except RuntimeError as err:
        raise PretrainedModelError(f"{paths[-1]}: weights do not fit architecture '{config['arch']}' ({err})") from None
    full = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if fp16:
        full = {k: v.half() if torch.is_floating_point(v) else v for k, v in full.items()}
    seen: Dict[Any, str] = {}
    aliases: Dict[str, str] = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride())
        if key in seen:
            aliases[name] = seen[key]
        else:
            seen[key] = name
    tensors = {k: v.contiguous() for k, v in full.items() if k not in aliases}
    save_file(tensors, str(tmp / loading.WEIGHTS_NAME), metadata={
        "format": "pt", "tied_weights": json.dumps(aliases), "arch": config["arch"],
        "fairseq_dense_version": fairseq_dense.__version__,
    })
    return full, sum(p.numel() for p in model.parameters())


def _write_pickle(path: Path, last: Dict[str, Any], weights: Dict[str, torch.Tensor]) -> None:
    """A plain fairseq checkpoint (pickle) for ``fairseq-generate --path``: no optimizer state."""
    state = {k: v for k, v in last.items() if k not in ("cfg_obj", "criterion")}
    state["model"] = weights
    torch.save(state, path)
