"""Loading pickle-free model directories, locally or from a model hub.

:func:`from_pretrained` rebuilds the task from the text dictionaries and the
model through fairseq's registries from ``config.json``, loads
``model.safetensors`` and returns fairseq's
:class:`~fairseq.hub_utils.GeneratorHubInterface`. Nothing on that path
unpickles: JSON, text dictionaries, text BPE codes and safetensors only.
"""
import json
import logging
import os
import re
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import fairseq_dense

logger = logging.getLogger(__name__)

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
PICKLE_NAME = "model.pt"
BPE_CODES_NAME = "bpecodes"
CARD_NAME = "README.md"
FORMAT_NAME = "fairseq-dense"
FORMAT_VERSION = 1
#: What is fetched from a hub repository: never ``*.pt`` or any other pickle.
HUB_ALLOW_PATTERNS = [CONFIG_NAME, WEIGHTS_NAME, "dict.*.txt", BPE_CODES_NAME, CARD_NAME]
#: Keyword arguments of :func:`from_pretrained` that are not fairseq options.
_LOAD_KWARGS = ("revision", "cache_dir", "local_files_only", "token")


class PretrainedModelError(ValueError):
    """A model directory, hub repository or checkpoint cannot be used.

    The message names the file at fault.
    """


def dense_architectures() -> Dict[str, type]:
    """Every registered architecture whose model class lives in :mod:`fairseq_dense`.

    Returns:
        ``{arch name: model class}``, sorted by name. Families registered later
        (new sub-packages) appear automatically.
    """
    from fairseq.models import ARCH_MODEL_REGISTRY

    return {
        arch: cls
        for arch, cls in sorted(ARCH_MODEL_REGISTRY.items())
        if cls.__module__.split(".")[0] == "fairseq_dense"
    }


def hub_models() -> Dict[str, Union[str, Dict[str, str]]]:
    """Named published models: the union of ``hub_models()`` of every model class.

    Each value is a hub repository id or a local directory, or a dict with
    ``"path"`` (and optionally ``"revision"``).
    """
    named: Dict[str, Union[str, Dict[str, str]]] = {}
    for cls in dict.fromkeys(dense_architectures().values()):
        named.update(cls.hub_models() or {})
    return named


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _download(repo_id: str, revision: Optional[str], cache_dir, local_files_only: bool, token) -> Path:
    """Fetch a hub repository's model files into huggingface_hub's standard cache."""
    import huggingface_hub
    from huggingface_hub import constants

    offline = bool(local_files_only or constants.HF_HUB_OFFLINE or _env_flag("HF_HUB_OFFLINE"))
    try:
        path = huggingface_hub.snapshot_download(
            repo_id,
            revision=revision,
            cache_dir=cache_dir,
            local_files_only=offline,
            allow_patterns=HUB_ALLOW_PATTERNS,
            token=token,
            library_name="fairseq-dense",
            library_version=fairseq_dense.__version__,
        )
    except Exception as err:  # huggingface_hub raises many error types; report one message
        where = f"cache {cache_dir or constants.HF_HUB_CACHE}"
        mode = " in offline mode (HF_HUB_OFFLINE / local_files_only)" if offline else ""
        raise PretrainedModelError(
            f"{repo_id} (revision {revision or 'main'}): not a local directory, and cannot get it from the hub{mode}, "
            f"{where}: {type(err).__name__}: {err}"
        ) from None
    return Path(path)


def resolve_model_dir(
    name_or_path: str,
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

    Returns:
        The local model directory.
    """
    entry = hub_models().get(str(name_or_path))
    if entry is not None:
        if isinstance(entry, dict):
            revision = revision or entry.get("revision")
            entry = entry["path"]
        name_or_path = entry
    path = Path(str(name_or_path)).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise PretrainedModelError(f"{path}: is a file; expected a model directory written by fairseq-dense-export")
    text = str(name_or_path)
    if text.startswith((".", "/", "~")) or text.count("/") > 1 or os.sep != "/" and os.sep in text:
        raise PretrainedModelError(f"{path}: no such model directory")
    if not re.fullmatch(r"[\w.\-]+(/[\w.\-]+)?", text):
        raise PretrainedModelError(f"{text}: neither a model directory nor a hub repository id")
    return _download(text, revision, cache_dir, local_files_only, token)


def _missing(path: Path, required: List[str]) -> PretrainedModelError:
    return PretrainedModelError(
        f"{path}: missing; a model directory must hold {', '.join(required)} (see fairseq-dense-export)"
    )


def read_config(model_dir: Union[str, Path]) -> Dict[str, Any]:
    """Read and check ``config.json`` and that every file it names is present.

    Raises:
        PretrainedModelError: naming the missing or malformed file.
    """
    model_dir = Path(model_dir)
    path = model_dir / CONFIG_NAME
    if not path.is_file():
        raise _missing(path, [CONFIG_NAME, WEIGHTS_NAME, "dict.<lang>.txt"])
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PretrainedModelError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT_NAME:
        raise PretrainedModelError(f'{path}: not a fairseq-dense model config (no "format": "{FORMAT_NAME}")')
    if int(config.get("format_version", 0)) > FORMAT_VERSION:
        raise PretrainedModelError(
            f"{path}: format version {config['format_version']} is newer than this fairseq-dense "
            f"({fairseq_dense.__version__}) reads ({FORMAT_VERSION}); upgrade fairseq-dense"
        )
    for key in ("arch", "model", "task", "dictionaries"):
        if key not in config:
            raise PretrainedModelError(f'{path}: no "{key}" entry')
    required = [CONFIG_NAME, WEIGHTS_NAME]
    for side in ("source", "target"):
        name = str(config["dictionaries"].get(side, {}).get("file"))
        lang = config["task"].get(f"{side}_lang")
        if not re.fullmatch(r"dict\.[^/\\]+\.txt", name) or name != f"dict.{lang}.txt":
            raise PretrainedModelError(f"{path}: {side} dictionary file name '{name}' is not dict.<{side} lang>.txt")
        required.append(name)
    if config.get("bpe"):
        required.append(BPE_CODES_NAME)
    for name in required:
        if not (model_dir / name).is_file():
            raise _missing(model_dir / name, required)
    return config


def _check_architecture(config: Dict[str, Any], path: Path) -> None:
    """The architecture and every option must be known to the installed plugins."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY, MODEL_DATACLASS_REGISTRY

    arch = config["arch"]
    if arch not in ARCH_MODEL_REGISTRY:
        raise PretrainedModelError(
            f"{path}: unknown architecture '{arch}' (exported with fairseq-dense "
            f"{config.get('package_version', '?')}, this is fairseq-dense {fairseq_dense.__version__}); "
            "upgrade fairseq-dense or import the plugin that registers it"
        )
    dc = MODEL_DATACLASS_REGISTRY.get(ARCH_MODEL_NAME_REGISTRY[arch])
    if dc is not None:
        unknown = sorted(set(config["model"]) - set(dc.__dataclass_fields__))
        if unknown:
            raise PretrainedModelError(
                f"{path}: option(s) {', '.join(unknown)} of '{arch}' are unknown to fairseq-dense "
                f"{fairseq_dense.__version__} (exported with {config.get('package_version', '?')}); "
                "upgrade fairseq-dense"
            )


def _load_dictionaries(model_dir: Path, config: Dict[str, Any]) -> None:
    """Each dictionary parses and has the size recorded in ``config.json``."""
    from fairseq.data import Dictionary

    for side, entry in config["dictionaries"].items():
        path = model_dir / entry["file"]
        try:
            size = len(Dictionary.load(str(path)))
        except Exception as err:
            raise PretrainedModelError(f"{path}: not a fairseq dictionary ({err})") from None
        if size != int(entry["size"]):
            raise PretrainedModelError(
                f"{path}: {size} symbols, but {CONFIG_NAME} and {WEIGHTS_NAME} expect {entry['size']} "
                f"for the {side} side (the file does not belong to this model)"
            )


def build_fairseq_cfg(model_dir: Path, config: Dict[str, Any], overrides: Optional[Dict[str, Any]] = None):
    """The full fairseq configuration (generation defaults included) of a model directory.

    It is built the way ``fairseq-generate`` builds it: through fairseq's argument
    parser for the architecture, then converted to a ``DictConfig``.
    """
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf, open_dict

    overrides = dict(overrides or {})
    # tokenizer=None / bpe=None: the caller feeds already tokenized / BPE-split text
    text_cfg = {key: overrides.pop(key) if key in overrides else config.get(key) for key in ("tokenizer", "bpe")}
    task = config["task"]
    argv = [str(model_dir), "--task", task.get("_name", "translation"), "--arch", config["arch"],
            "--source-lang", task["source_lang"], "--target-lang", task["target_lang"]]
    parser = options.get_generation_parser(interactive=True, default_task="translation")
    options.add_model_args(parser)
    args = options.parse_args_and_arch(parser, argv)
    for key, value in list(task.items()) + list(config["model"].items()):
        if not key.startswith("_"):
            setattr(args, key, value)
    for key, value in overrides.items():
        if not hasattr(args, key):
            raise TypeError(f"from_pretrained() got an unknown fairseq option '{key}'")
        setattr(args, key, value)
    with warnings.catch_warnings():  # hydra's deprecation notices, raised inside fairseq
        warnings.simplefilter("ignore")
        cfg = convert_namespace_to_omegaconf(args)
    with open_dict(cfg):
        if OmegaConf.is_config(cfg.model):  # exact values, not through hydra override strings
            with open_dict(cfg.model):
                for key, value in config["model"].items():
                    cfg.model[key] = overrides.get(key, value)
        tokenizer, bpe = text_cfg["tokenizer"], text_cfg["bpe"]
        cfg.tokenizer = OmegaConf.create(tokenizer) if tokenizer else None
        if bpe:
            bpe = dict(bpe, bpe_codes=str(model_dir / BPE_CODES_NAME))
        cfg.bpe = OmegaConf.create(bpe) if bpe else None
    return cfg


def _load_weights(model, model_dir: Path, config: Dict[str, Any], cfg) -> None:
    """Load ``model.safetensors`` into ``model``, checking names and shapes first."""
    from safetensors import safe_open

    path = model_dir / WEIGHTS_NAME
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            state = {name: f.get_tensor(name) for name in f.keys()}
        aliases = json.loads(metadata.get("tied_weights", "{}"))
    except Exception as err:
        raise PretrainedModelError(f"{path}: corrupted or not a safetensors file ({err})") from None
    for alias, source in aliases.items():
        if source in state:
            state[alias] = state[source]
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise PretrainedModelError(
            f"{path}: does not match architecture '{config['arch']}' of {CONFIG_NAME} "
            f"(missing tensors: {missing[:5]}, unexpected tensors: {unexpected[:5]})"
        )
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            sizes = ", ".join(f"{d['file']}: {d['size']} symbols" for d in config["dictionaries"].values())
            raise PretrainedModelError(
                f"{path}: tensor '{name}' has shape {tuple(tensor.shape)}, but the model built from "
                f"{CONFIG_NAME} ({sizes}) expects {tuple(expected[name].shape)}"
            )
    model.load_state_dict(state, strict=True, model_cfg=cfg.model)


def load_model_dir(model_dir: Union[str, Path], overrides: Optional[Dict[str, Any]] = None):
    """Build ``(cfg, task, model)`` from a model directory without unpickling anything.

    Args:
        model_dir: a directory written by ``fairseq-dense-export``.
        overrides: fairseq options to set (e.g. ``beam``, ``max_len_b``).

    Raises:
        PretrainedModelError: naming the file at fault.
    """
    from fairseq import tasks

    model_dir = Path(model_dir)
    config = read_config(model_dir)
    config_path = model_dir / CONFIG_NAME
    _check_architecture(config, config_path)
    _load_dictionaries(model_dir, config)
    cfg = build_fairseq_cfg(model_dir, config, overrides)
    task = tasks.setup_task(cfg.task)
    try:
        model = task.build_model(cfg.model)
    except ValueError as err:
        raise PretrainedModelError(f"{config_path}: the options do not build '{config['arch']}': {err}") from None
    _load_weights(model, model_dir, config, cfg)
    model.eval()
    return cfg, task, model


def from_pretrained(name_or_path: Union[str, Path], **kwargs):
    """Load an exported model as fairseq's ``GeneratorHubInterface``.

    Args:
        name_or_path: a directory written by ``fairseq-dense-export``, a hub
            repository id (``owner/name``, downloaded with huggingface_hub into
            its standard cache), or a name from a model class's ``hub_models()``.
        **kwargs: ``revision`` (branch, tag or commit to pin), ``cache_dir``,
            ``local_files_only`` (also honoured: ``HF_HUB_OFFLINE=1``), ``token``;
            ``tokenizer=None`` / ``bpe=None`` for input that is already tokenized /
            BPE-split; every other keyword is a fairseq option (``beam=5``,
            ``lenpen=0.6``, or a model option such as ``dropout``).

    Returns:
        :class:`fairseq.hub_utils.GeneratorHubInterface`: ``.translate()``,
        ``.sample()``, ``.generate()`` with beam options.

    Raises:
        PretrainedModelError: a missing or malformed file, an unknown
            architecture, mismatched dictionaries; the message names the file.

    Example::

        >>> import fairseq_dense
        >>> de_en = fairseq_dense.from_pretrained("exports/gru-deu-eng")
        >>> de_en.translate("Wie geht es dir?", beam=5)
    """
    from fairseq.hub_utils import GeneratorHubInterface

    load = {k: kwargs.pop(k) for k in _LOAD_KWARGS if k in kwargs}
    model_dir = resolve_model_dir(str(name_or_path), **load)
    cfg, task, model = load_model_dir(model_dir, overrides=kwargs)
    logger.info("loaded %s (%s) from %s", model.__class__.__name__, cfg.model._name, model_dir)
    return GeneratorHubInterface(cfg, task, [model])

