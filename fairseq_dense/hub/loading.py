"""Loading pickle-free model directories, locally or from a model hub: one pipeline.

:func:`load_model` reads top to bottom: open the directory once; read
``SHA256SUMS`` and ``config.json``, verify and check the config; read and
verify every file it names; parse the dictionaries, BPE codes and weights from
those bytes; build fairseq's configuration from the checked values (from
fairseq's dataclasses: no argument parser reads ``sys.argv``, no hydra state
is shared between threads); build the task from the parsed dictionaries and the
model as fairseq's inference loads build it; check and load the weights.
:func:`from_pretrained` resolves a name to a directory first and adds the
tokenizer and BPE of :mod:`fairseq_dense.hub.text`. Nothing on that path
unpickles, and nothing outside the model directory is read or written.
"""

import argparse
import contextlib
import dataclasses
import logging
import os
import re
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

from fairseq.hub_utils import GeneratorHubInterface

import fairseq_dense
from fairseq_dense.hub.errors import PretrainedModelError, one_line, shown
from fairseq_dense.hub.files import (
    BPE_CODES_NAME,
    CONFIG_NAME,
    HUB_ALLOW_PATTERNS,
    MANIFEST_NAME,
    MAX_CONFIG_BYTES,
    MAX_MANIFEST_BYTES,
    WEIGHTS_NAME,
    ModelDirectory,
    model_files,
    parse_manifest,
    verify,
)
from fairseq_dense.hub.schema import check_config, dense_architectures, parse_json
from fairseq_dense.hub.text import VerifiedSubwordNMTBPE, parse_bpe_codes, parse_dictionary
from fairseq_dense.hub.weights import load_weights, parse_weights

logger = logging.getLogger(__name__)

#: Keyword arguments of :func:`from_pretrained` that are not fairseq options.
_LOAD_KWARGS = ("revision", "cache_dir", "local_files_only", "token")


def hub_models() -> Dict[str, Union[str, Dict[str, str]]]:
    """Named published models: the union of ``hub_models()`` of every model class.

    Each value is a hub repository id or a local directory, or a dict with
    ``"path"`` (and optionally ``"revision"``).
    """
    named: Dict[str, Union[str, Dict[str, str]]] = {}
    for cls in dict.fromkeys(dense_architectures().values()):
        named.update(cls.hub_models() or {})
    return named


def resolve_model_dir(
    name_or_path: Union[str, Path],
    revision: Optional[str] = None,
    cache_dir: Optional[str] = None,
    local_files_only: bool = False,
    token: Optional[str] = None,
) -> Path:
    """Turn a model name, local directory or hub repository id into a local directory.

    Args:
        name_or_path: a name from :func:`hub_models`, a directory written by
            ``fairseq-dense-export``, or a hub repository id (``owner/name``).
        revision: branch, tag or commit hash to pin (hub only).
        cache_dir: huggingface_hub cache directory (default: its standard cache).
        local_files_only: never touch the network (``HF_HUB_OFFLINE=1`` does the same).
        token: hub token (default: huggingface_hub's usual environment/config lookup).
    """
    entry = hub_models().get(str(name_or_path))
    if entry is not None:
        if isinstance(entry, dict):
            revision = revision or entry.get("revision")
            entry = entry["path"]
        name_or_path = entry
    text = os.fspath(name_or_path) if isinstance(name_or_path, os.PathLike) else str(name_or_path)
    if not text or "\0" in text:
        raise PretrainedModelError(f"{shown(repr(text))}: not a model directory name")
    path = Path(text)
    try:
        if not path.is_dir() and text.startswith("~"):
            with contextlib.suppress(RuntimeError):  # ~user of no such user: the name as it is
                path = path.expanduser()
        if path.is_dir():
            return path
        if os.path.lexists(path):
            raise PretrainedModelError(f"{shown(path)}: is a file; expected a model directory of fairseq-dense-export")
    except OSError as err:  # a name longer than the file system allows, a loop of links
        raise PretrainedModelError(f"{shown(path)}: not a usable path ({os.strerror(err.errno or 0)})") from None
    if text.startswith((".", "/", "~")) or text.count("/") > 1 or os.sep != "/" and os.sep in text:
        raise PretrainedModelError(f"{shown(path)}: no such model directory")
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)?", text) or text.startswith("-"):
        raise PretrainedModelError(f"{shown(text)}: neither a model directory nor a hub repository id")
    return _download(text, revision, cache_dir, local_files_only, token)


def _download(repo_id: str, revision: Optional[str], cache_dir, local_files_only: bool, token) -> Path:
    """Fetch a hub repository's model files into huggingface_hub's standard cache."""
    import huggingface_hub
    from huggingface_hub import constants

    offline = local_files_only or constants.HF_HUB_OFFLINE
    offline = offline or os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}
    try:
        return Path(
            huggingface_hub.snapshot_download(
                repo_id,
                revision=revision,
                cache_dir=cache_dir,
                local_files_only=offline,
                allow_patterns=HUB_ALLOW_PATTERNS,
                token=token,
                library_name="fairseq-dense",
                library_version=fairseq_dense.__version__,
            )
        )
    except (Exception, SystemExit) as err:  # huggingface_hub raises many error types; report one message
        mode = " in offline mode (HF_HUB_OFFLINE / local_files_only)" if offline else ""
        raise PretrainedModelError(
            f"{repo_id} (revision {revision or 'main'}): not a local directory, and cannot get it from the hub{mode}, "
            f"cache {shown(cache_dir or constants.HF_HUB_CACHE)}: {type(err).__name__}: {one_line(err, 200)}"
        ) from None


def read_files(directory: ModelDirectory) -> Tuple[Dict[str, Any], Dict[str, bytes]]:
    """The checked ``config.json`` and the verified bytes of every file it names, each read once.

    ``SHA256SUMS`` must list exactly those files; nothing else (``model.pt``,
    ``README.md``) is opened.
    """
    if not directory.exists(CONFIG_NAME):
        raise PretrainedModelError(
            f"{directory.where(CONFIG_NAME)}: missing; a model directory must hold {CONFIG_NAME}, {WEIGHTS_NAME}, "
            f"dict.<lang>.txt, {MANIFEST_NAME} (see fairseq-dense-export)"
        )
    if not directory.exists(MANIFEST_NAME):
        raise PretrainedModelError(
            f"{directory.where(MANIFEST_NAME)}: missing; fairseq-dense loads only directories whose checksums it can "
            "verify (exports before format version 2 have none): re-export the training checkpoint with "
            "fairseq-dense-export CHECKPOINT --out DIR"
        )
    sums = parse_manifest(directory.where(MANIFEST_NAME), directory.read(MANIFEST_NAME, MAX_MANIFEST_BYTES))
    where = directory.where(CONFIG_NAME)
    data = {CONFIG_NAME: directory.read(CONFIG_NAME, MAX_CONFIG_BYTES)}
    verify(where, CONFIG_NAME, sums, data[CONFIG_NAME])
    config = parse_json(where, data[CONFIG_NAME])
    try:
        check_config(config, where)
    except PretrainedModelError:
        raise
    except Exception as err:  # a shape of JSON the schema did not foresee is refused all the same
        raise PretrainedModelError(f"{where}: not a fairseq-dense model config ({type(err).__name__})") from None
    names = model_files(config)
    extra = sorted(set(sums) - set(names))
    if extra:
        raise PretrainedModelError(
            f"{directory.where(MANIFEST_NAME)}: lists {extra[0]}, which {CONFIG_NAME} does not load; "
            "the directory is altered"
        )
    for name in names[1:]:
        data[name] = directory.read(name)
        verify(directory.where(name), name, sums, data[name])
    return config, data


def _fairseq_error(where: str, what: str, err: BaseException) -> PretrainedModelError:
    """A failure inside fairseq as one line naming the file (only checked values reached fairseq)."""
    return PretrainedModelError(f"{where}: {what} ({type(err).__name__}: {one_line(err, 160)})")


def fairseq_config(config: Dict[str, Any], overrides: Optional[Dict[str, Any]] = None, where: str = CONFIG_NAME):
    """fairseq's whole configuration (generation defaults included) for a checked config.

    Built from fairseq's dataclasses, as ``fairseq-generate`` would compose it,
    without its argument parser (which reads ``sys.argv`` and imports any
    ``--user-dir`` there) or hydra (whose state is global to the process).
    Groups get their defaults, the task and the model the exact values of
    ``config.json`` (the architecture's own function fills options it does not
    give), ``overrides`` (the caller's fairseq options) every group with an option of
    that name. An argparse-style model gets fairseq's flat ``Namespace``.

    Raises:
        TypeError: an override that is not a fairseq option.
        PretrainedModelError: fairseq refuses the configuration (naming ``config.json``).
    """
    from fairseq.dataclass.configs import FairseqConfig
    from fairseq.dataclass.utils import _set_legacy_defaults
    from fairseq.models import (
        ARCH_CONFIG_REGISTRY,
        ARCH_MODEL_NAME_REGISTRY,
        ARCH_MODEL_REGISTRY,
        MODEL_DATACLASS_REGISTRY,
    )
    from fairseq.tasks import TASK_DATACLASS_REGISTRY
    from omegaconf import OmegaConf, open_dict

    arch, task, overrides = config["arch"], config["task"].get("_name", "translation"), dict(overrides or {})
    model_dc = MODEL_DATACLASS_REGISTRY.get(ARCH_MODEL_NAME_REGISTRY[arch])
    try:
        model = argparse.Namespace(**config["model"])
        ARCH_CONFIG_REGISTRY[arch](model)  # the architecture's values for options config.json does not give
        root = OmegaConf.structured(FairseqConfig)
        with open_dict(root):
            root.task = OmegaConf.structured(TASK_DATACLASS_REGISTRY[task])
            root.task.update({k: v for k, v in config["task"].items() if k != "_name"})
            root.model = OmegaConf.structured(model_dc) if model_dc else {}
            root.model.update({k: v for k, v in vars(model).items() if not model_dc or k in root.model})
        groups = [name for name in root if OmegaConf.is_dict(root[name])]
        for key, value in overrides.items():
            owners = [name for name in groups if key in root[name]]
            if not owners:
                raise TypeError(f"from_pretrained() got an unknown fairseq option '{key}'")
            for name in owners:
                root[name][key] = value
        # allow_objects on this config only: fairseq's omegaconf_no_object_check patches OmegaConf for every thread
        cfg = OmegaConf.create(
            OmegaConf.to_container(root, resolve=True, enum_to_str=True), flags={"allow_objects": True}
        )
        with open_dict(cfg):
            cfg.task._name = task
            cfg.model._name = arch
            if not model_dc:  # fairseq's flat Namespace, as its argument parser leaves it
                flat = {k: v for name in groups for k, v in cfg[name].items()}
                flat = argparse.Namespace(**{**flat, **cfg.model})  # the model's values over the task's
                _set_legacy_defaults(flat, ARCH_MODEL_REGISTRY[arch])
                flat._name, flat.arch, flat.task = arch, arch, task
                cfg.model = flat
    except TypeError:
        raise
    except Exception as err:
        raise _fairseq_error(where, "fairseq cannot configure the model", err) from None
    OmegaConf.set_struct(cfg, True)
    return cfg


def build_model(config: Dict[str, Any], dictionaries, overrides: Optional[Dict[str, Any]] = None, where=CONFIG_NAME):
    """``(cfg, task, model)`` from a checked config and its parsed ``(source, target)`` dictionaries.

    The task is the registered class of ``task._name`` given the dictionaries
    (what its ``setup_task`` does after reading them from a data directory), and
    the model is built as fairseq's inference loads build it:
    ``task.build_model(cfg.model, from_checkpoint=True)``.

    Raises:
        PretrainedModelError: fairseq or the model refuses the options (naming ``config.json``).
    """
    from fairseq.tasks import TASK_REGISTRY

    cfg = fairseq_config(config, overrides, where)
    try:
        task = TASK_REGISTRY[cfg.task._name](cfg.task, *dictionaries)
        model = task.build_model(cfg.model, from_checkpoint=True)
    except (Exception, SystemExit) as err:
        raise _fairseq_error(where, f"the options do not build '{config['arch']}'", err) from None
    return cfg, task, model


@dataclasses.dataclass
class LoadedModel:
    """What :func:`load_model` returns: fairseq's config, the task, the model, the checked config and BPE codes."""

    cfg: Any
    task: Any
    model: Any
    config: Dict[str, Any]
    bpe_codes: Optional[str]


def load_model(model_dir: Union[str, Path], overrides: Optional[Dict[str, Any]] = None) -> LoadedModel:
    """The load pipeline (see the module docstring), from a directory written by ``fairseq-dense-export``.

    Args:
        model_dir: the model directory.
        overrides: fairseq options to set (e.g. ``beam``, ``max_len_b``, ``dropout``).

    Raises:
        PretrainedModelError: naming the file (and key, line or tensor) at fault.
        TypeError: an override that is not a fairseq option.
    """
    with ModelDirectory(model_dir) as directory:
        config, data = read_files(directory)
    where = {name: shown(Path(model_dir) / name) for name in data}
    dictionaries = []
    for side in ("source", "target"):
        name, size = config["dictionaries"][side]["file"], config["dictionaries"][side]["size"]
        dictionaries.append(parse_dictionary(where[name], data[name], size, side))
    codes = parse_bpe_codes(where[BPE_CODES_NAME], data[BPE_CODES_NAME]) if config.get("bpe") else None
    weights = parse_weights(where[WEIGHTS_NAME], data.pop(WEIGHTS_NAME))
    cfg, task, model = build_model(config, dictionaries, overrides, where[CONFIG_NAME])
    load_weights(model, where[WEIGHTS_NAME], config, weights, cfg.model)
    model.eval()
    return LoadedModel(cfg, task, model, config, codes)


class TranslationHubInterface(GeneratorHubInterface):
    """fairseq's ``GeneratorHubInterface``, refusing in one line an input longer than the model reads."""

    def encode(self, sentence: str):
        tokens = super().encode(sentence)
        limit = self.max_positions[0] if isinstance(self.max_positions, tuple) else self.max_positions
        if limit is not None and tokens.numel() > limit:
            raise ValueError(
                f"input of {tokens.numel()} tokens (after tokenizer and BPE, with end of sentence): this model reads "
                f"at most {limit} (its max_source_positions)"
            )
        return tokens


def from_pretrained(name_or_path: Union[str, Path], **kwargs) -> TranslationHubInterface:
    """Load an exported model as fairseq's ``GeneratorHubInterface``.

    Args:
        name_or_path: a directory written by ``fairseq-dense-export`` (any name
            the filesystem allows), a hub repository id (``owner/name``,
            downloaded with huggingface_hub into its standard cache), or a name
            from a model class's ``hub_models()``.
        **kwargs: ``revision`` (branch, tag or commit to pin), ``cache_dir``,
            ``local_files_only`` (also honoured: ``HF_HUB_OFFLINE=1``), ``token``;
            ``tokenizer=None`` / ``bpe=None`` for input that is already tokenized /
            BPE-split; every other keyword is a fairseq option (``beam=5``,
            ``lenpen=0.6``, or a model option such as ``dropout``).

    Returns:
        :class:`TranslationHubInterface` (fairseq's ``GeneratorHubInterface``):
        ``.translate()``, ``.sample()``, ``.generate()`` with beam options. Its
        tokenizer applies the text preparation the export recorded.

    Raises:
        PretrainedModelError: every problem of the model directory, in one line
            naming the file and key.
        TypeError: a keyword that is not a fairseq option.

    Example::

        >>> import fairseq_dense
        >>> de_en = fairseq_dense.from_pretrained("exports/gru-deu-eng")
        >>> de_en.translate("Wie geht es dir?", beam=5)
    """
    from fairseq.data import encoders
    from omegaconf import OmegaConf, open_dict

    load = {k: kwargs.pop(k) for k in _LOAD_KWARGS if k in kwargs}
    text = {k: kwargs.pop(k) for k in ("tokenizer", "bpe") if k in kwargs}
    if any(v is not None for v in text.values()):
        raise TypeError("from_pretrained(): tokenizer= and bpe= may only be None (the model's own otherwise)")
    model_dir = resolve_model_dir(name_or_path, **load)
    loaded = load_model(model_dir, overrides=kwargs)
    cfg, config = loaded.cfg, loaded.config
    tokenizer = None if "tokenizer" in text else config.get("tokenizer")
    bpe = None if "bpe" in text else config.get("bpe")
    try:
        hub_interface = TranslationHubInterface(cfg, loaded.task, [loaded.model])
        with open_dict(cfg):
            if tokenizer:  # fairseq's moses plus the recorded steps of the training data's preparation
                cfg.tokenizer = OmegaConf.create({**tokenizer, "_name": "dense_moses"})
                hub_interface.tokenizer = encoders.build_tokenizer(cfg.tokenizer)
            if bpe:
                separator = bpe.get("bpe_separator", "@@")
                hub_interface.bpe = VerifiedSubwordNMTBPE(loaded.bpe_codes, separator)
                cfg.bpe = OmegaConf.create({"_name": "subword_nmt", "bpe_separator": separator})
    except (Exception, SystemExit) as err:
        where = shown(model_dir / CONFIG_NAME)
        raise _fairseq_error(where, "fairseq cannot set up its tokenizer or BPE", err) from None
    logger.info("loaded %s (%s) from %s", loaded.model.__class__.__name__, config["arch"], shown(model_dir))
    return hub_interface
