"""Loading pickle-free model directories, locally or from a model hub.

:func:`from_pretrained` rebuilds the task from the text dictionaries and the
model through fairseq's registries from ``config.json``, loads
``model.safetensors`` and returns fairseq's
:class:`~fairseq.hub_utils.GeneratorHubInterface`. Nothing on that path
unpickles: JSON, text dictionaries, text BPE codes and safetensors only.
"""

import contextlib
import io
import logging
import os
import re
import warnings
from pathlib import Path
from typing import Any, Dict, Optional, Union

import fairseq_dense
from fairseq_dense.hub.errors import PretrainedModelError, one_line
from fairseq_dense.hub.files import (  # noqa: F401  (re-exported)
    BPE_CODES_NAME,
    CARD_NAME,
    CONFIG_NAME,
    HUB_ALLOW_PATTERNS,
    PICKLE_NAME,
    WEIGHTS_NAME,
    check_bpe_codes,
    load_dictionaries,
    read_config,
    read_weights,
    required_files,
)
from fairseq_dense.hub.manifest import MANIFEST_NAME  # noqa: F401  (re-exported)
from fairseq_dense.hub.schema import (  # noqa: F401  (re-exported)
    FORMAT_NAME,
    FORMAT_VERSION,
    WEIGHTS_DTYPES,
    check_config,
    dense_architectures,
    parse_config,
)

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
    except (Exception, SystemExit) as err:  # huggingface_hub raises many error types; report one message
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


def _fairseq_error(path: Path, what: str, err: BaseException, stderr: str = "") -> PretrainedModelError:
    """A fairseq failure (exception, ``SystemExit`` of its argument parser) as one line naming the file."""
    detail = one_line(stderr.strip().splitlines()[-1] if stderr.strip() else str(err), 160)
    return PretrainedModelError(f"{path}: {what} ({type(err).__name__}: {detail})")


def build_fairseq_cfg(model_dir: Path, config: Dict[str, Any], overrides: Optional[Dict[str, Any]] = None):
    """The full fairseq configuration (generation defaults included) of a model directory.

    It is built the way ``fairseq-generate`` builds it: through fairseq's argument
    parser for the architecture, then converted to a ``DictConfig``. ``config``
    must have passed :func:`~fairseq_dense.hub.schema.check_config`; ``overrides``
    are the caller's own fairseq options.

    Raises:
        TypeError: an override that is not a fairseq option.
        PretrainedModelError: fairseq refuses the configuration (naming ``config.json``).
    """
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf, open_dict

    path = model_dir / CONFIG_NAME
    overrides = dict(overrides or {})
    # tokenizer=None / bpe=None: the caller feeds already tokenized / BPE-split text
    text_cfg = {key: overrides.pop(key) if key in overrides else config.get(key) for key in ("tokenizer", "bpe")}
    task = config["task"]
    argv = [
        str(model_dir),
        "--task",
        task.get("_name", "translation"),
        "--arch",
        config["arch"],
        "--source-lang",
        task["source_lang"],
        "--target-lang",
        task["target_lang"],
    ]
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            parser = options.get_generation_parser(interactive=True, default_task="translation")
            options.add_model_args(parser)
            args = options.parse_args_and_arch(parser, argv)
    except (Exception, SystemExit) as err:
        raise _fairseq_error(path, "fairseq's argument parser refuses the config", err, stderr.getvalue()) from None
    for key, value in list(task.items()) + list(config["model"].items()):
        if not key.startswith("_"):
            setattr(args, key, value)
    for key, value in overrides.items():
        if not hasattr(args, key):
            raise TypeError(f"from_pretrained() got an unknown fairseq option '{key}'")
        setattr(args, key, value)
    try:
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
    except (Exception, SystemExit) as err:
        raise _fairseq_error(path, "fairseq cannot configure the model", err) from None
    return cfg


def _load_weights(model, model_dir: Path, config: Dict[str, Any], cfg, weights) -> None:
    """Load ``weights`` (from :func:`read_weights`) into ``model``, checking names, dtypes and shapes first."""
    import torch

    path = model_dir / WEIGHTS_NAME
    state, aliases = weights
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state) - set(aliases))
    unexpected = sorted((set(state) | set(aliases)) - set(expected))
    if missing or unexpected:
        raise PretrainedModelError(
            f"{path}: does not match architecture '{config['arch']}' of {CONFIG_NAME} "
            f"(missing tensors: {missing[:5]}, unexpected tensors: {unexpected[:5]})"
        )
    float_dtype = getattr(torch, config["weights_dtype"])
    for alias, source in aliases.items():
        state[alias] = state[source]
    for name, tensor in state.items():
        want = float_dtype if torch.is_floating_point(expected[name]) else expected[name].dtype
        if tensor.dtype != want:
            stored, wanted = (str(d).replace("torch.", "") for d in (tensor.dtype, want))
            raise PretrainedModelError(
                f"{path}: tensor '{name}' is stored as {stored}, but {CONFIG_NAME} says weights_dtype "
                f"{config['weights_dtype']} (expected {wanted})"
            )
        if tuple(tensor.shape) != tuple(expected[name].shape):
            sizes = ", ".join(f"{d['file']}: {d['size']} symbols" for d in config["dictionaries"].values())
            raise PretrainedModelError(
                f"{path}: tensor '{name}' has shape {tuple(tensor.shape)}, but the model built from "
                f"{CONFIG_NAME} ({sizes}) expects {tuple(expected[name].shape)}"
            )
    try:
        model.load_state_dict(state, strict=True, model_cfg=cfg.model)
    except (Exception, SystemExit) as err:
        raise PretrainedModelError(
            f"{path}: the weights do not load into '{config['arch']}' ({one_line(err, 160)})"
        ) from None


def load_model_dir(model_dir: Union[str, Path], overrides: Optional[Dict[str, Any]] = None):
    """Build ``(cfg, task, model)`` from a model directory without unpickling anything.

    Every file is checked (:func:`read_config`) before fairseq or model code
    sees any of it.

    Args:
        model_dir: a directory written by ``fairseq-dense-export``.
        overrides: fairseq options to set (e.g. ``beam``, ``max_len_b``).

    Raises:
        PretrainedModelError: naming the file (and key) at fault.
        TypeError: an override that is not a fairseq option.
    """
    from fairseq import tasks

    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise PretrainedModelError(f"{model_dir}: no such model directory")
    config = read_config(model_dir)
    config_path = model_dir / CONFIG_NAME
    load_dictionaries(model_dir, config)
    if config.get("bpe"):
        check_bpe_codes(model_dir / BPE_CODES_NAME)
    weights = read_weights(model_dir / WEIGHTS_NAME)  # a corrupted file fails before fairseq runs
    cfg = build_fairseq_cfg(model_dir, config, overrides)
    try:
        task = tasks.setup_task(cfg.task)
        model = task.build_model(cfg.model)
    except (Exception, SystemExit) as err:
        raise _fairseq_error(config_path, f"the options do not build '{config['arch']}'", err) from None
    _load_weights(model, model_dir, config, cfg, weights)
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
        PretrainedModelError: every problem of the model directory (a missing,
            altered or malformed file, a config key fairseq-dense does not
            accept, mismatched dictionaries or weights); one line naming the file
            and key.
        TypeError: a keyword that is not a fairseq option.

    Example::

        >>> import fairseq_dense
        >>> de_en = fairseq_dense.from_pretrained("exports/gru-deu-eng")
        >>> de_en.translate("Wie geht es dir?", beam=5)
    """
    from fairseq.hub_utils import GeneratorHubInterface

    load = {k: kwargs.pop(k) for k in _LOAD_KWARGS if k in kwargs}
    model_dir = resolve_model_dir(str(name_or_path), **load)
    cfg, task, model = load_model_dir(model_dir, overrides=kwargs)
    try:  # builds the tokenizer and BPE from the checked config and bpecodes
        hub_interface = GeneratorHubInterface(cfg, task, [model])
    except (Exception, SystemExit) as err:
        raise _fairseq_error(model_dir / CONFIG_NAME, "fairseq cannot set up its tokenizer or BPE", err) from None
    logger.info("loaded %s (%s) from %s", model.__class__.__name__, cfg.model._name, model_dir)
    return hub_interface
