"""Loading pickle-free model directories, locally or from a model hub: one pipeline.

:func:`load_model_dir` reads top to bottom:

1. :func:`~fairseq_dense.hub.files.read_model_files`: the directory is resolved
   once; ``SHA256SUMS``, ``config.json`` and the files the config names are each
   read once and verified against it; the config is parsed and checked
   (:mod:`fairseq_dense.hub.schema`);
2. the dictionaries, BPE codes and weights are parsed from those bytes
   (:func:`~fairseq_dense.hub.files.parse_dictionary`,
   :func:`~fairseq_dense.hub.files.parse_bpe_codes`,
   :func:`~fairseq_dense.hub.weights.parse_weights`);
3. :func:`build_model`: fairseq's configuration from the checked values (the
   directory's path never reaches fairseq's argument parser or OmegaConf), the
   task from the parsed dictionaries, and the model as fairseq's inference loads
   build it (``task.build_model(cfg, from_checkpoint=True)``: no task's
   training-time recovery runs);
4. :func:`~fairseq_dense.hub.weights.load_weights`: every tensor checked, then loaded.

:func:`from_pretrained` adds the tokenizer and the BPE (built from the verified
codes, not from a path) and returns fairseq's
:class:`~fairseq.hub_utils.GeneratorHubInterface`. Nothing on that path
unpickles, and nothing outside the model directory is read or written.
"""

import contextlib
import dataclasses
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
    ModelFiles,
    parse_bpe_codes,
    parse_dictionary,
    read_model_files,
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
from fairseq_dense.hub.weights import load_weights, parse_weights

logger = logging.getLogger(__name__)

#: Keyword arguments of :func:`from_pretrained` that are not fairseq options.
_LOAD_KWARGS = ("revision", "cache_dir", "local_files_only", "token")
#: The data directory fairseq's argument parser insists on; never read (the task gets parsed dictionaries).
_NO_DATA = "unused"


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
            f"{where}: {type(err).__name__}: {one_line(err, 200)}"
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
    text = os.fspath(name_or_path) if isinstance(name_or_path, os.PathLike) else str(name_or_path)
    if not text or "\0" in text:
        raise PretrainedModelError(f"{text!r}: not a model directory name")
    path = Path(text)
    if not path.is_dir() and text.startswith("~"):
        with contextlib.suppress(RuntimeError):  # ~user of no such user: the name as it is
            path = path.expanduser()
    if path.is_dir():
        return path
    if os.path.lexists(path):
        raise PretrainedModelError(f"{path}: is a file; expected a model directory written by fairseq-dense-export")
    if text.startswith((".", "/", "~")) or text.count("/") > 1 or os.sep != "/" and os.sep in text:
        raise PretrainedModelError(f"{path}: no such model directory")
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)?", text) or text.startswith("-"):
        raise PretrainedModelError(f"{text}: neither a model directory nor a hub repository id")
    return _download(text, revision, cache_dir, local_files_only, token)


def _fairseq_error(path: Path, what: str, err: BaseException, stderr: str = "") -> PretrainedModelError:
    """A fairseq failure (exception, ``SystemExit`` of its argument parser) as one line naming the file.

    Only checked values reach fairseq, so its message quotes nothing but them.
    """
    detail = one_line(stderr.strip().splitlines()[-1] if stderr.strip() else str(err), 160)
    return PretrainedModelError(f"{path}: {what} ({type(err).__name__}: {detail})")


def build_fairseq_cfg(
    config: Dict[str, Any], overrides: Optional[Dict[str, Any]] = None, config_path: Path = Path(CONFIG_NAME)
):
    """The full fairseq configuration (generation defaults included) of a checked config.

    It is built the way ``fairseq-generate`` builds it, fairseq's argument parser
    for the architecture then a ``DictConfig``, from checked values only (task
    name, architecture, language codes): no path is on the command line, and
    the task's data directory is left unset (the task is given its dictionaries).
    The exact option values from ``config.json`` are then set on the result.
    ``tokenizer`` and ``bpe`` are left unset; :func:`from_pretrained` builds them.
    ``overrides`` are the caller's own fairseq options.

    Raises:
        TypeError: an override that is not a fairseq option.
        PretrainedModelError: fairseq refuses the configuration (naming ``config.json``).
    """
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf, open_dict

    overrides = dict(overrides or {})
    task = config["task"]
    argv = [_NO_DATA, "--task", task.get("_name", "translation"), "--arch", config["arch"]]
    argv += ["--source-lang", task["source_lang"], "--target-lang", task["target_lang"]]
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            parser = options.get_generation_parser(interactive=True, default_task="translation")
            options.add_model_args(parser)
            args = options.parse_args_and_arch(parser, argv)
    except (Exception, SystemExit) as err:
        raise _fairseq_error(
            config_path, "fairseq's argument parser refuses the config", err, stderr.getvalue()
        ) from None
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
            cfg.task.data = None
            cfg.tokenizer = None
            cfg.bpe = None
    except (Exception, SystemExit) as err:
        raise _fairseq_error(config_path, "fairseq cannot configure the model", err) from None
    return cfg


def build_model(
    config: Dict[str, Any], dictionaries, overrides: Optional[Dict[str, Any]] = None, config_path=Path(CONFIG_NAME)
):
    """``(cfg, task, model)`` from a checked config and its parsed ``(source, target)`` dictionaries.

    The task is the registered class of ``task._name`` given the dictionaries
    (what its ``setup_task`` does after reading them from a data directory), and
    the model is built as fairseq's inference loads build it:
    ``task.build_model(cfg.model, from_checkpoint=True)``, so no task runs its
    training-time recovery of a ``checkpoints/`` folder.

    Raises:
        PretrainedModelError: fairseq or the model refuses the options (naming ``config.json``).
    """
    from fairseq.dataclass.utils import merge_with_parent
    from fairseq.tasks import TASK_DATACLASS_REGISTRY, TASK_REGISTRY

    cfg = build_fairseq_cfg(config, overrides, config_path)
    try:
        name = cfg.task._name
        task_cfg = merge_with_parent(TASK_DATACLASS_REGISTRY[name](), cfg.task, remove_missing=True)
        task = TASK_REGISTRY[name](task_cfg, *dictionaries)
        model = task.build_model(cfg.model, from_checkpoint=True)
    except (Exception, SystemExit) as err:
        raise _fairseq_error(config_path, f"the options do not build '{config['arch']}'", err) from None
    return cfg, task, model


@dataclasses.dataclass
class LoadedModel:
    """What :func:`load_directory` returns: fairseq's config, the task, the model, the checked files and codes."""

    cfg: Any
    task: Any
    model: Any
    files: ModelFiles
    bpe_codes: Optional[str]


def load_directory(model_dir: Union[str, Path], overrides: Optional[Dict[str, Any]] = None) -> LoadedModel:
    """The load pipeline: read and verify, parse, build, load weights (see the module docstring)."""
    files = read_model_files(Path(model_dir))
    config = files.config
    dictionaries = []
    for side in ("source", "target"):
        entry = config["dictionaries"][side]
        dictionaries.append(parse_dictionary(files.path(entry["file"]), files.data[entry["file"]], entry["size"], side))
    codes = parse_bpe_codes(files.path(BPE_CODES_NAME), files.data[BPE_CODES_NAME]) if config.get("bpe") else None
    weights = parse_weights(files.path(WEIGHTS_NAME), files.data.pop(WEIGHTS_NAME))
    cfg, task, model = build_model(config, dictionaries, overrides, files.path(CONFIG_NAME))
    load_weights(model, files.path(WEIGHTS_NAME), config, weights, cfg.model)
    model.eval()
    return LoadedModel(cfg, task, model, files, codes)


def load_model_dir(model_dir: Union[str, Path], overrides: Optional[Dict[str, Any]] = None):
    """Build ``(cfg, task, model)`` from a model directory without unpickling anything.

    Every file is read once and checked (:func:`~fairseq_dense.hub.files.read_model_files`)
    before fairseq or model code sees any of it; nothing else is opened.

    Args:
        model_dir: a directory written by ``fairseq-dense-export``.
        overrides: fairseq options to set (e.g. ``beam``, ``max_len_b``).

    Raises:
        PretrainedModelError: naming the file (and key, line or tensor) at fault.
        TypeError: an override that is not a fairseq option.
    """
    loaded = load_directory(model_dir, overrides)
    return loaded.cfg, loaded.task, loaded.model


def read_config(model_dir: Union[str, Path]) -> Dict[str, Any]:
    """The checked ``config.json`` of a model directory, every file it names verified (nothing built)."""
    return read_model_files(Path(model_dir)).config


def _subword_nmt(codes: str, separator: str):
    """fairseq's subword-nmt BPE, built from the verified codes text (not from a path through argparse)."""
    from fairseq.data.encoders.subword_nmt_bpe import SubwordNMTBPE

    class VerifiedSubwordNMTBPE(SubwordNMTBPE):
        """fairseq's ``subword_nmt`` BPE (same encode/decode) reading its codes from checked text."""

        def __init__(self, codes_text: str, bpe_separator: str):
            from subword_nmt import apply_bpe

            self.bpe = apply_bpe.BPE(io.StringIO(codes_text), -1, bpe_separator, None, None)
            self.bpe_symbol = bpe_separator + " "

    return VerifiedSubwordNMTBPE(codes, separator)


def from_pretrained(name_or_path: Union[str, Path], **kwargs):
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
    from fairseq.data import encoders
    from fairseq.hub_utils import GeneratorHubInterface
    from omegaconf import OmegaConf, open_dict

    load = {k: kwargs.pop(k) for k in _LOAD_KWARGS if k in kwargs}
    text = {k: kwargs.pop(k) for k in ("tokenizer", "bpe") if k in kwargs}
    if any(v is not None for v in text.values()):
        raise TypeError("from_pretrained(): tokenizer= and bpe= may only be None (the model's own otherwise)")
    model_dir = resolve_model_dir(name_or_path, **load)
    loaded = load_directory(model_dir, overrides=kwargs)
    cfg, config = loaded.cfg, loaded.files.config
    tokenizer = None if "tokenizer" in text else config.get("tokenizer")
    bpe = None if "bpe" in text else config.get("bpe")
    try:
        hub_interface = GeneratorHubInterface(cfg, loaded.task, [loaded.model])
        with open_dict(cfg):
            cfg.tokenizer = OmegaConf.create(tokenizer) if tokenizer else None  # checked language codes only
            hub_interface.tokenizer = encoders.build_tokenizer(cfg.tokenizer)
            if bpe:
                separator = bpe.get("bpe_separator", "@@")
                hub_interface.bpe = _subword_nmt(loaded.bpe_codes, separator)
                cfg.bpe = OmegaConf.create({"_name": "subword_nmt", "bpe_separator": separator})
    except (Exception, SystemExit) as err:
        raise _fairseq_error(model_dir / CONFIG_NAME, "fairseq cannot set up its tokenizer or BPE", err) from None
    logger.info("loaded %s (%s) from %s", loaded.model.__class__.__name__, cfg.model._name, model_dir)
    return hub_interface
