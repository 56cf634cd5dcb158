"""Export a fairseq checkpoint to a self-contained, pickle-free model directory.

The directory layout is described in :mod:`fairseq_dense.hub`. Reading the
training checkpoint uses torch's ``weights_only`` loader (never arbitrary
unpickling) and reads its configuration as plain values; the config to write is
checked with the loader's rules (:func:`fairseq_dense.hub.schema.check_config`)
before any model is built. The directory is written to a temporary sibling with
its ``SHA256SUMS``, verified by loading it back with
:func:`fairseq_dense.hub.loading.load_model`, and only then moved into place, so
nothing half-written is left behind; ``force`` swaps it with the old export in one
step (:func:`swap_paths`), and the next export removes what a killed one left. The text preparation of the training data
(Moses options, punctuation normalisation, lower-casing) is recorded in the
config: from ``fairseq-dense-prepare``'s record beside the dictionaries
(``text_preparation.json``) and the options given.
"""

import ctypes
import enum
import errno
import glob
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

import fairseq_dense
from fairseq_dense import checkpoints
from fairseq_dense.hub.errors import PretrainedModelError, describe, one_line, safe_name, shown
from fairseq_dense.hub.files import (
    BPE_CODES_NAME,
    CARD_NAME,
    CONFIG_NAME,
    PICKLE_NAME,
    WEIGHTS_NAME,
    model_files,
    write_manifest,
)
from fairseq_dense.hub.loading import build_model, load_model
from fairseq_dense.hub.model_card import ModelCardInfo, model_card, paper_of
from fairseq_dense.hub.schema import (
    FORMAT_NAME,
    FORMAT_VERSION,
    LANG_RE,
    TASK_OPTIONS,
    check_config,
    declared_model_options,
    dense_architectures,
    translation_tasks,
)
from fairseq_dense.hub.text import MOSES_OPTIONS, parse_bpe_codes, parse_dictionary, read_record
from fairseq_dense.hub.weights import tied_names

logger = logging.getLogger(__name__)


def select_checkpoints(
    paths: Sequence[Union[str, Path]], average_last: Optional[int] = None, update_based: bool = False
) -> List[Path]:
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
    try:
        return [Path(p) for p in checkpoints.last_checkpoints(str(paths[0]), average_last, update_based)]
    except checkpoints.CheckpointError as err:
        raise PretrainedModelError(f"--average-last {average_last} needs {average_last} checkpoints: {err}") from None


def read_checkpoint(path: Path) -> Dict[str, Any]:
    """Load a fairseq checkpoint with torch's safe ``weights_only`` loader.

    The configuration is read as plain values (no OmegaConf interpolation, no
    hydra composition): the model and task options go through the same checks as
    a loaded ``config.json`` before anything is built from them.

    Returns:
        The raw state plus ``"plain_cfg"``: ``{"model": {...}, "task": {...}}``,
        each a flat dict of option values.
    """
    try:
        state = checkpoints.read_state(str(path))
    except checkpoints.CheckpointError as err:
        raise PretrainedModelError(one_line(err, 300)) from None
    for name, value in state["model"].items():
        if not isinstance(name, str) or not isinstance(value, torch.Tensor):
            raise PretrainedModelError(f"{path}: 'model' entry '{safe_name(name)}' is not a named tensor")
    if state.get("args") is not None:  # checkpoints of fairseq < 0.10: one flat Namespace
        flat = _plain(state["args"], path, "args")
        plain = {"model": dict(flat, _name=flat.get("arch")), "task": dict(flat, _name=flat.get("task"))}
    elif state.get("cfg") is not None:
        cfg = _plain(state["cfg"], path, "cfg")
        plain = {key: _plain(cfg.get(key), path, f"cfg.{key}") for key in ("model", "task")}
        if not plain["model"].get("_name"):
            plain["model"]["_name"] = plain["model"].get("arch")
    else:
        raise PretrainedModelError(f"{path}: the checkpoint holds no configuration ('cfg' or 'args')")
    state["plain_cfg"] = plain
    return state


def _plain(node, path: Path, key: str) -> Dict[str, Any]:
    """A configuration node (dict, or the ``argparse.Namespace`` of argparse-style models) as a dict."""
    import argparse

    if isinstance(node, argparse.Namespace):
        node = vars(node)
    if not isinstance(node, dict):
        raise PretrainedModelError(f"{path}: checkpoint configuration '{key}' is not a mapping")
    return dict(node)


def _jsonable(value):
    """Enums as their value, tuples as lists; anything else unchanged (:func:`check_config` judges it)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def model_options(model_cfg: Dict[str, Any], arch: str) -> Dict[str, Any]:
    """Every option the architecture declares that the checkpoint sets, as JSON values.

    Options are the fields of the model's dataclass config, or for argparse-style
    models the flags of its ``add_args`` (:func:`~fairseq_dense.hub.schema.declared_model_options`).
    """
    return {name: _jsonable(model_cfg[name]) for name in declared_model_options(arch) if name in model_cfg}


def _dictionary_dir(data: Optional[Union[str, Path]], task_cfg: Dict[str, Any], path: Path) -> Path:
    if data is None:
        data = task_cfg.get("data")
        if not isinstance(data, str) or not data:
            raise PretrainedModelError(f"{path}: the checkpoint names no data directory; pass --data")
        data = data.split(os.pathsep)[0]
    return Path(data)


def _task_options(
    task_cfg: Dict[str, Any], src: Optional[str], tgt: Optional[str], data_dir: Path, path: Path
) -> Dict[str, Any]:
    from fairseq.data import data_utils

    name = task_cfg.get("_name")
    if name not in translation_tasks():
        raise PretrainedModelError(
            f"{path}: task '{safe_name(name)}' of the checkpoint: only {', '.join(translation_tasks())} can be exported"
        )
    src = src or task_cfg.get("source_lang")
    tgt = tgt or task_cfg.get("target_lang")
    if src is None or tgt is None:
        src, tgt = data_utils.infer_language_pair(str(data_dir))
    if src is None or tgt is None:
        raise PretrainedModelError(f"{data_dir}: cannot infer the language pair; pass --source-lang/--target-lang")
    for key, lang in (("source_lang", src), ("target_lang", tgt)):  # before they name files
        if not isinstance(lang, str) or not LANG_RE.fullmatch(lang):
            raise PretrainedModelError(f"{path}: key 'task.{key}' must be a language code, not {describe(lang)}")
    options = {"_name": name, "source_lang": src, "target_lang": tgt}
    for key in TASK_OPTIONS:
        if key in task_cfg:
            options[key] = _jsonable(task_cfg[key])
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
        moses_no_escape, moses_no_dash_splits: fairseq's Moses options of the same names,
            as the training data was tokenized (recorded only when set; loading applies them).
        moses_normalize_punctuation, moses_lowercase: the training data was
            punctuation-normalised before / lower-cased after tokenising (recorded
            only when set; loading applies them). ``data``'s record of
            ``fairseq-dense-prepare`` sets these four and the Moses languages too.
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
    if out_dir.is_symlink():  # replacing it would swap the link, not the folder it names
        raise PretrainedModelError(f"{shown(out_dir)}: is a symbolic link; give the folder it points to")
    if out_dir.exists() and not out_dir.is_dir():
        raise PretrainedModelError(f"{shown(out_dir)}: exists and is not a folder")
    if out_dir.exists() and any(out_dir.iterdir()) and not force:
        raise PretrainedModelError(f"{out_dir}: exists and is not empty (use --force to replace it)")
    paths = select_checkpoints(checkpoints, average_last, update_based)
    states = [read_checkpoint(p) for p in paths]
    for state in states:  # optimizer state is neither exported nor needed: free it early
        state.pop("last_optimizer_state", None)
    last = states[-1]
    plain = last["plain_cfg"]
    arch = plain["model"].get("_name")
    if not isinstance(arch, str) or arch not in dense_architectures():
        raise PretrainedModelError(
            f"{paths[-1]}: architecture '{safe_name(arch)}' is not one of fairseq-dense's; only those are exported"
        )
    for state, path in zip(states, paths):
        other = state["plain_cfg"]["model"].get("_name")
        if other != arch:
            raise PretrainedModelError(
                f"{path}: architecture '{safe_name(other)}' differs from '{arch}' of {paths[-1]}"
            )
    data_dir = _dictionary_dir(data, plain["task"], paths[-1])
    task = _task_options(plain["task"], source_lang, target_lang, data_dir, paths[-1])
    dict_files, dictionaries = {}, {}
    for side, lang in (("source", task["source_lang"]), ("target", task["target_lang"])):
        dict_files[side] = data_dir / f"dict.{lang}.txt"
        if not dict_files[side].is_file():
            raise PretrainedModelError(f"{dict_files[side]}: missing (pass --data, the binarized data directory)")
        dictionaries[side] = parse_dictionary(str(dict_files[side]), dict_files[side].read_bytes())  # the loader's
    if bpe_codes is not None:
        if not Path(bpe_codes).is_file():
            raise PretrainedModelError(f"{bpe_codes}: no such BPE codes file")
        parse_bpe_codes(str(bpe_codes), Path(bpe_codes).read_bytes())
    if tokenizer not in (None, "moses"):
        raise PretrainedModelError(f"--tokenizer {tokenizer}: only 'moses' or 'none' are supported")
    record = read_record(data_dir)  # what fairseq-dense-prepare did to the text
    given = (moses_no_dash_splits, moses_no_escape, moses_normalize_punctuation, moses_lowercase)
    moses_flags = {key: flag or record.get(key, False) for key, flag in zip(MOSES_OPTIONS, given)}
    if tokenizer is None and any(given):
        set_flags = ", ".join("--" + k.replace("_", "-") for k, v in zip(MOSES_OPTIONS, given) if v)
        raise PretrainedModelError(f"{set_flags}: Moses options need --tokenizer moses, not none")

    config = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "package_version": fairseq_dense.__version__,
        "fairseq_version": _fairseq_version(),
        "arch": arch,
        "model_name": _model_name(arch),
        "model": model_options(plain["model"], arch),
        "task": task,
        "dictionaries": {
            side: {"file": path.name, "size": len(dictionaries[side])} for side, path in dict_files.items()
        },
        "tokenizer": None
        if tokenizer is None
        else {
            "_name": "moses",
            "source_lang": moses_source_lang or record.get("source_lang") or task["source_lang"],
            "target_lang": moses_target_lang or record.get("target_lang") or task["target_lang"],
            **{k: True for k, v in moses_flags.items() if v},
        },
        "bpe": None if bpe_codes is None else {"_name": "subword_nmt", "bpe_separator": "@@"},
        "weights_dtype": "float16" if fp16 else "float32",
        "checkpoints": [p.name for p in paths],
    }
    check_config(config, paths[-1])  # the same rules as loading, before any model code runs
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    for leftover in out_dir.parent.glob(f".{glob.escape(out_dir.name)}{EXPORT_TMP_MARK}*"):
        shutil.rmtree(leftover, ignore_errors=True)  # of an export killed before it finished
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}{EXPORT_TMP_MARK}", dir=out_dir.parent))
    try:
        for side, path in dict_files.items():
            shutil.copyfile(path, tmp / config["dictionaries"][side]["file"])
        if bpe_codes is not None:
            shutil.copyfile(bpe_codes, tmp / BPE_CODES_NAME)
        (tmp / CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        pair = (dictionaries["source"], dictionaries["target"])
        weights, n_params = _write_weights(tmp, config, pair, states, paths, fp16)
        write_manifest(tmp, model_files(config))
        load_model(tmp)  # verification: the directory loads on its own, checksums and all
        text = model_card(
            config, n_params, card or ModelCardInfo(), paper_of(dense_architectures()[arch]), write_pickle
        )
        (tmp / CARD_NAME).write_text(text, encoding="utf-8")
        if write_pickle:
            _write_pickle(tmp / PICKLE_NAME, last, weights)
        _make_readable(tmp)
        if out_dir.exists():
            swap_paths(tmp, out_dir)  # the old export is now at tmp, removed below
        else:
            os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("exported %s (%d checkpoint(s)) to %s", arch, len(paths), shown(out_dir))
    return out_dir


#: in the names of an export's temporary folders (``.<out>.export-*`` beside ``--out``)
EXPORT_TMP_MARK = ".export-"


def swap_paths(a: Path, b: Path) -> None:
    """Exchange ``a`` and ``b`` so that ``b`` is at every moment the old or the new one.

    Linux's ``renameat2(RENAME_EXCHANGE)`` swaps them in one step. Where the system or
    the file system does not offer it, ``b`` is moved aside and ``a`` renamed in (for
    a moment ``b`` is missing; the moved-aside folder carries the temporary mark, so
    the next export removes it if a kill came in between), then the old one goes to ``a``.
    """
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


def _write_weights(tmp: Path, config, dictionaries, states, paths, fp16: bool) -> Tuple[Dict[str, torch.Tensor], int]:
    """Load the (averaged) weights into a freshly built model and save its state dict.

    The model is built as the loader builds it (:func:`fairseq_dense.hub.loading.build_model`:
    from the checked config and the parsed dictionaries, no task recovery).
    Going through the model applies fairseq's state-dict upgrades and proves that
    names and shapes match the dictionaries. Tied weights are stored once and
    listed in the safetensors metadata. Returns the full state dict as written and
    the number of (distinct) parameters.
    """
    from safetensors.torch import save_file

    try:
        averaged = checkpoints.average_models([s["model"] for s in states], [str(p) for p in paths])
    except checkpoints.CheckpointError as err:
        raise PretrainedModelError(one_line(err, 300)) from None
    cfg, _, model = build_model(config, dictionaries, where=shown(paths[-1]))
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
    except (Exception, SystemExit) as err:
        raise PretrainedModelError(
            f"{paths[-1]}: weights do not fit architecture '{config['arch']}' ({one_line(err, 160)})"
        ) from None
    full = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if fp16:
        full = {k: v.half() if torch.is_floating_point(v) else v for k, v in full.items()}
    for name, tensor in full.items():
        if torch.is_floating_point(tensor) and not bool(torch.isfinite(tensor).all()):
            raise PretrainedModelError(f"{paths[-1]}: tensor '{name}' holds non-finite values (NaN or infinity)")
    aliases = tied_names(model)
    tensors = {k: v.contiguous() for k, v in full.items() if k not in aliases}
    save_file(
        tensors,
        str(tmp / WEIGHTS_NAME),
        metadata={
            "format": "pt",
            "tied_weights": json.dumps(aliases),
            "arch": config["arch"],
            "fairseq_dense_version": fairseq_dense.__version__,
        },
    )
    return full, sum(p.numel() for p in model.parameters())


def _write_pickle(path: Path, last: Dict[str, Any], weights: Dict[str, torch.Tensor]) -> None:
    """A plain fairseq checkpoint (pickle) for ``fairseq-generate --path``: no optimizer state."""
    state = {k: v for k, v in last.items() if k not in ("plain_cfg", "criterion")}
    state["model"] = weights
    torch.save(state, path)
