"""Loading a model directory, local or from a model hub: :func:`load_model`, read top to bottom.

Each file is read once, relative to the directory opened once, verified and parsed from those bytes;
fairseq's configuration is built from its dataclasses (no argument parser reads ``sys.argv``, no hydra
state is shared between threads). Nothing unpickles; nothing outside the model directory is read or written.
"""

import argparse
import collections
import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import stat
import struct
import warnings
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import safetensors.torch
import torch
from fairseq.data import encoders
from fairseq.dataclass.configs import FairseqConfig
from fairseq.hub_utils import GeneratorHubInterface
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY, MODEL_DATACLASS_REGISTRY
from fairseq.tasks import TASK_DATACLASS_REGISTRY, TASK_REGISTRY
from omegaconf import OmegaConf, open_dict

import fairseq_dense
from fairseq_dense import logging_setup
from fairseq_dense.fairseq_internals import private
from fairseq_dense.hub import schema
from fairseq_dense.hub.schema import CONFIG_NAME, MANIFEST_NAME, WEIGHTS_NAME, PretrainedModelError, one_line, shown
from fairseq_dense.hub.text import MAX_BPE_WORD, VerifiedSubwordNMTBPE, parse_bpe_codes, parse_dictionary

logger = logging.getLogger(__name__)

#: What is fetched from a hub repository: never ``*.pt`` or any other pickle.
HUB_ALLOW_PATTERNS = [CONFIG_NAME, WEIGHTS_NAME, "dict.*.txt", schema.BPE_CODES_NAME, MANIFEST_NAME, schema.CARD_NAME]
MAX_MANIFEST_BYTES = 64 * 1024
MAX_CONFIG_BYTES = 1 << 20
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def hub_models() -> Dict[str, Union[str, Dict[str, str]]]:
    """Named published models of every model class: a hub id, a directory, or ``{"path", "revision"}``."""
    named: Dict[str, Union[str, Dict[str, str]]] = {}
    for cls in dict.fromkeys(schema.dense_architectures().values()):
        named.update(cls.hub_models() or {})
    return named


def resolve_model_dir(
    name_or_path: Union[str, Path],
    revision: Optional[str] = None,
    cache_dir: Optional[str] = None,
    local_files_only: bool = False,
    token: Optional[str] = None,
) -> Path:
    """A name from :func:`hub_models`, a local directory or a hub repository id (``owner/name``) as a directory:
    a repository is fetched by huggingface_hub into its cache (or ``cache_dir``) at ``revision``, offline with
    ``local_files_only`` or ``HF_HUB_OFFLINE=1``, with ``token`` (default: huggingface_hub's lookup)."""
    entry = hub_models().get(str(name_or_path))
    if isinstance(entry, dict):
        revision, entry = revision or entry.get("revision"), entry["path"]
    name_or_path = entry or name_or_path
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

    from fairseq_dense.hub import import_installed

    import_installed(("huggingface_hub",))  # not from the current directory, as the load's other imports
    import huggingface_hub
    from huggingface_hub import constants

    offline = local_files_only or constants.HF_HUB_OFFLINE
    offline = offline or os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}
    try:
        return Path(
            huggingface_hub.snapshot_download(
                text,
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
            f"{text} (revision {revision or 'main'}): not a local directory, and cannot get it from the hub{mode}, "
            f"cache {shown(cache_dir or constants.HF_HUB_CACHE)}: {type(err).__name__}: {one_line(err, 200)}"
        ) from None


class ModelDirectory:
    """A model directory opened once (a context manager); its files are read relative to it, following no link
    but a huggingface_hub snapshot's into its ``blobs`` folder (opened once too) and one to a plain name beside it."""

    def __init__(self, path: Union[str, Path]):
        self.path = Path(path)
        self._fd = self._blobs = None
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            if Path(os.path.realpath(self.path)).parent.name == "snapshots":  # a huggingface_hub cache
                with contextlib.suppress(FileNotFoundError):  # a folder that only looks like one
                    self._blobs = os.open("../../blobs", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=self._fd)
        except OSError as err:
            self.__exit__()
            reason = "no such model directory" if err.errno in (errno.ENOENT, errno.ENOTDIR) else _reason(err)
            raise PretrainedModelError(f"{shown(self.path)}: {reason}") from None

    def __enter__(self) -> "ModelDirectory":
        return self

    def __exit__(self, *exc) -> None:
        for fd in (self._fd, self._blobs):
            if fd is not None:
                os.close(fd)
        self._fd = self._blobs = None

    def where(self, name: str) -> str:
        return shown(self.path / name)

    def refusal(self, name: str) -> Optional[str]:
        """Why file ``name`` is not the directory's own regular file, ``"missing"``, or ``None``."""
        try:
            return _refusal(os.stat(name, dir_fd=self._fd, follow_symlinks=False), own=True)
        except OSError as err:
            return _reason(err)

    def _open(self, name: str, own: bool) -> int:
        try:
            return os.open(name, _OPEN, dir_fd=self._fd)
        except OSError as err:
            if err.errno != errno.ELOOP or own:
                raise
        head, _, blob = os.readlink(name, dir_fd=self._fd).rpartition("/")
        if schema.FILE_NAME_RE.fullmatch(blob) and (not head or head == "../../blobs" and self._blobs is not None):
            return os.open(blob, _OPEN, dir_fd=self._blobs if head else self._fd)  # a snapshot's blob, or beside it
        raise PretrainedModelError(f"{self.where(name)}: resolves outside the model directory")

    def read(self, name: str, limit: Optional[int] = None, own: bool = False) -> bytes:
        """File ``name``, a regular file of at most ``limit`` bytes (``own``: no link, one hard link, as push needs)."""
        try:
            with os.fdopen(self._open(name, own), "rb") as f:
                reason = _refusal(os.fstat(f.fileno()), own)
                if reason:
                    raise PretrainedModelError(f"{self.where(name)}: {reason}")
                data = f.read(-1 if limit is None else limit + 1)
        except OSError as err:
            reason = "a symbolic link" if own and err.errno == errno.ELOOP else _reason(err)
            raise PretrainedModelError(f"{self.where(name)}: {reason}") from None
        except MemoryError:
            raise PretrainedModelError(f"{self.where(name)}: too large to read into memory") from None
        if limit is not None and len(data) > limit:
            raise PretrainedModelError(f"{self.where(name)}: larger than {limit} bytes")
        return data


def _refusal(info: os.stat_result, own: bool) -> Optional[str]:
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link"
    if not stat.S_ISREG(info.st_mode):  # a FIFO or device would block or never end
        return "not a regular file"
    return f"{info.st_nlink} hard links" if own and info.st_nlink > 1 else None


def _reason(err: OSError) -> str:
    if err.errno == errno.ENOENT:
        return "missing"
    return f"cannot be read ({errno.errorcode.get(err.errno, err.errno)}: {os.strerror(err.errno or 0)})"


def read_files(directory: ModelDirectory, own: bool = False) -> Tuple[Dict[str, Any], Dict[str, bytes]]:
    """The checked ``config.json`` and the bytes of ``SHA256SUMS`` and of every file it names, each read once and
    of the hash it lists (a refusal gives that hash only); nothing else is opened. ``own``: no links (push)."""
    needed = {  # the two files every export has, and what the lack of each means
        CONFIG_NAME: f"a model directory must hold {CONFIG_NAME}, {WEIGHTS_NAME}, dict.<lang>.txt, {MANIFEST_NAME} "
        "(see fairseq-dense-export)",
        MANIFEST_NAME: "fairseq-dense loads only directories whose checksums it can verify (exports before format "
        "version 2 have none): re-export the training checkpoint with fairseq-dense-export CHECKPOINT --out DIR",
    }
    for name, why in needed.items():
        if directory.refusal(name) == "missing":
            raise PretrainedModelError(f"{directory.where(name)}: missing; {why}")
    data = {MANIFEST_NAME: directory.read(MANIFEST_NAME, MAX_MANIFEST_BYTES, own)}
    sums = schema.parse_manifest(directory.where(MANIFEST_NAME), data[MANIFEST_NAME])

    def read_verified(name: str, limit: Optional[int] = None) -> None:
        data[name] = directory.read(name, limit, own)
        if name not in sums:
            raise PretrainedModelError(
                f"{directory.where(name)}: not listed in {MANIFEST_NAME}; the directory is incomplete or altered"
            )
        if hashlib.sha256(data[name]).hexdigest() != sums[name]:
            raise PretrainedModelError(
                f"{directory.where(name)}: sha256 differs from {MANIFEST_NAME} ({sums[name][:16]}...): the file was "
                "changed or corrupted after export"
            )

    where = directory.where(CONFIG_NAME)
    read_verified(CONFIG_NAME, MAX_CONFIG_BYTES)
    config = schema.parse_json(where, data[CONFIG_NAME])
    try:
        schema.check_config(config, where)
    except PretrainedModelError:
        raise
    except Exception as err:  # a shape of JSON the schema did not foresee is refused all the same
        raise PretrainedModelError(f"{where}: not a fairseq-dense model config ({type(err).__name__})") from None
    names = schema.model_files(config)
    extra = sorted(set(sums) - set(names))
    if extra:
        raise PretrainedModelError(
            f"{directory.where(MANIFEST_NAME)}: lists {extra[0]}, which {CONFIG_NAME} does not load; "
            "the directory is altered"
        )
    for name in names[1:]:
        read_verified(name)
    return config, data


def build_model(config: Dict[str, Any], dictionaries, overrides: Optional[Dict[str, Any]] = None, where=CONFIG_NAME):
    """``(cfg, task, model)`` of a checked config and its parsed dictionaries as fairseq's inference loads build
    them (``from_checkpoint=True``: no training-time work), from fairseq's dataclasses: no argument parser (it
    reads ``sys.argv``, imports any ``--user-dir`` there), no hydra (global state). ``overrides`` set every
    group's option of that name (``TypeError`` if none has it, or for a value not of its type); argparse-style
    models get a flat ``Namespace``. torch's global random generator is left as it was."""
    arch, task_name = config["arch"], config["task"].get("_name", "translation")
    model_dc = MODEL_DATACLASS_REGISTRY.get(ARCH_MODEL_NAME_REGISTRY[arch])
    try:
        model = argparse.Namespace(**config["model"])
        ARCH_CONFIG_REGISTRY[arch](model)  # the architecture's values for options config.json does not give
        root = OmegaConf.structured(FairseqConfig)
        with open_dict(root):
            root.task = OmegaConf.structured(TASK_DATACLASS_REGISTRY[task_name])
            root.task.update({k: v for k, v in config["task"].items() if k != "_name"})
            root.model = OmegaConf.structured(model_dc) if model_dc else {}
            root.model.update({k: v for k, v in vars(model).items() if not model_dc or k in root.model})
        groups = [name for name in root if OmegaConf.is_dict(root[name])]
        for key, value in (overrides or {}).items():
            owners = [name for name in groups if key in root[name]]
            if not owners:
                raise TypeError(f"from_pretrained() got an unknown fairseq option '{key}'")
            for name in owners:
                try:
                    root[name][key] = value
                except Exception as err:  # OmegaConf's type check of the caller's value, not the directory's
                    raise TypeError(f"from_pretrained() keyword '{key}': {str(err).splitlines()[0]}") from None
        # allow_objects on this config only: fairseq's omegaconf_no_object_check patches OmegaConf for every thread
        cfg = OmegaConf.create(
            OmegaConf.to_container(root, resolve=True, enum_to_str=True), flags={"allow_objects": True}
        )
        with open_dict(cfg):
            cfg.task._name, cfg.model._name = task_name, arch
            if not model_dc:  # fairseq's flat Namespace, as its argument parser leaves it
                flat = {k: v for name in groups for k, v in cfg[name].items()}
                flat = argparse.Namespace(**{**flat, **cfg.model})  # the model's values over the task's
                private("fairseq.dataclass.utils", "_set_legacy_defaults")(flat, ARCH_MODEL_REGISTRY[arch])
                flat._name, flat.arch, flat.task = arch, arch, task_name
                cfg.model = flat
    except TypeError:
        raise
    except Exception as err:
        raise _fairseq_error(where, "fairseq cannot configure the model", err) from None
    OmegaConf.set_struct(cfg, True)
    try:
        with torch.random.fork_rng(devices=[]):  # initialising the parameters draws from torch's global generator
            task = TASK_REGISTRY[cfg.task._name](cfg.task, *dictionaries)
            model = task.build_model(cfg.model, from_checkpoint=True)
    except (Exception, SystemExit) as err:
        raise _fairseq_error(where, f"the options do not build '{arch}'", err) from None
    return cfg, task, model


def _fairseq_error(where: str, what: str, err: BaseException) -> PretrainedModelError:
    """A failure inside fairseq as one line naming the file (only checked values reached fairseq)."""
    return PretrainedModelError(f"{where}: {what} ({type(err).__name__}: {one_line(err, 160)})")


def parse_weights(where: str, data: bytes) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """The tensors of ``model.safetensors`` and its tied-weight aliases ``{alias: stored name}``; the header
    is read as strict JSON first (safetensors itself keeps the last of two entries of one tensor name)."""
    (size,) = struct.unpack("<Q", data[:8]) if len(data) >= 8 else (0,)
    try:
        header = schema.parse_json(where, data[8 : 8 + size])
    except PretrainedModelError as err:
        detail = "its header names a tensor twice" if "duplicate key" in str(err) else "its header is not JSON"
        raise PretrainedModelError(f"{where}: corrupted or not a safetensors file ({detail})") from None
    try:
        aliases = json.loads((header.get("__metadata__") or {}).get("tied_weights", "{}"))
        state = safetensors.torch.load(data)
    except BaseException as err:  # a MemoryError too; pyo3's PanicException is not an Exception
        if not isinstance(err, Exception) and type(err).__name__ != "PanicException":
            raise
        raise PretrainedModelError(f"{where}: corrupted or not a safetensors file ({type(err).__name__})") from None
    if not isinstance(aliases, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v in state and k not in state for k, v in aliases.items()
    ):
        raise PretrainedModelError(f"{where}: metadata 'tied_weights' is not a map of stored tensor names")
    return state, aliases


def tied_names(model) -> Dict[str, str]:
    """``{name: first name}`` for every state-dict entry that shares its tensor with an earlier one."""
    seen: Dict[Any, str] = {}
    ties: Dict[str, str] = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride())
        if key in seen and tensor.numel():
            ties[name] = seen[key]
        else:
            seen.setdefault(key, name)
    return ties


def load_weights(model, where: str, config: Dict[str, Any], weights, model_cfg) -> None:
    """Load ``weights`` (of :func:`parse_weights`) into ``model`` once the names are exactly the model's, each
    alias a tie the architecture makes, every tie stored once, the dtypes ``weights_dtype``'s, every value
    finite (shapes: the model's own ``load_state_dict``)."""
    state, aliases = dict(weights[0]), weights[1]
    arch = config["arch"]
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state) - set(aliases))
    unexpected = sorted((set(state) | set(aliases)) - set(expected))
    if missing or unexpected:
        raise PretrainedModelError(
            f"{where}: does not match architecture '{arch}' of config.json "
            f"(missing tensors: {missing[:5]}, unexpected tensors: {[schema.safe_name(n) for n in unexpected[:5]]})"
        )
    ties = tied_names(model)
    for alias, source in sorted(aliases.items()):
        if ties.get(alias, alias) != ties.get(source, source):
            raise PretrainedModelError(
                f"{where}: metadata 'tied_weights' makes tensor '{alias}' a copy of '{source}', which architecture "
                f"'{arch}' does not tie"
            )
    stored: Dict[str, str] = {}
    for name in sorted(state):
        other = stored.setdefault(ties.get(name, name), name)
        if other != name:
            raise PretrainedModelError(
                f"{where}: stores tensors '{other}' and '{name}' separately, but architecture '{arch}' ties them"
            )
    float_dtype = getattr(torch, config["weights_dtype"])
    for name, tensor in state.items():
        want = float_dtype if torch.is_floating_point(expected[name]) else expected[name].dtype
        if tensor.dtype != want:
            stored_as, wanted = (str(d).replace("torch.", "") for d in (tensor.dtype, want))
            raise PretrainedModelError(
                f"{where}: tensor '{name}' is stored as {stored_as}, but config.json says weights_dtype "
                f"{config['weights_dtype']} (expected {wanted})"
            )
        if torch.is_floating_point(tensor) and not bool(torch.isfinite(tensor).all()):
            raise PretrainedModelError(f"{where}: tensor '{name}' holds non-finite values (NaN or infinity)")
    for alias, source in aliases.items():
        state[alias] = state[source]
    try:
        model.load_state_dict(state, strict=True, model_cfg=model_cfg)
    except (Exception, SystemExit) as err:
        raise PretrainedModelError(f"{where}: the weights do not load into '{arch}' ({one_line(err, 300)})") from None


#: What :func:`load_model` returns: fairseq's config, the task, the model, the checked config, the BPE codes text.
LoadedModel = collections.namedtuple("LoadedModel", "cfg task model config bpe_codes")


def load_model(model_dir: Union[str, Path], overrides: Optional[Dict[str, Any]] = None, files=None) -> LoadedModel:
    """Load a directory of ``fairseq-dense-export`` with fairseq options ``overrides`` (``beam``, ``dropout``), or
    its ``files`` already read (:func:`read_files`' config and verified bytes; the weights' bytes leave them once
    parsed). torch's global random generator is left as it was.

    Raises:
        PretrainedModelError: naming the file (and key, line or tensor) at fault.
        TypeError: an override that is not a fairseq option, or not of its type.
    """
    if files is None:
        with ModelDirectory(model_dir) as directory:
            files = read_files(directory)
    config, data = files
    where = {name: shown(Path(model_dir) / name) for name in data}
    dictionaries = []
    for side in ("source", "target"):
        name, size = config["dictionaries"][side]["file"], config["dictionaries"][side]["size"]
        dictionaries.append(parse_dictionary(where[name], data[name], size, side))
    codes = parse_bpe_codes(where[schema.BPE_CODES_NAME], data[schema.BPE_CODES_NAME]) if config.get("bpe") else None
    weights = parse_weights(where[WEIGHTS_NAME], data.pop(WEIGHTS_NAME))
    cfg, task, model = build_model(config, dictionaries, overrides, where[CONFIG_NAME])
    load_weights(model, where[WEIGHTS_NAME], config, weights, cfg.model)
    model.eval()
    return LoadedModel(cfg, task, model, config, codes)


class TranslationHubInterface(GeneratorHubInterface):
    """fairseq's ``GeneratorHubInterface``, refusing in one line an input longer than the model reads: over
    :data:`~fairseq_dense.hub.text.MAX_BPE_WORD` characters per source position before the tokenizer sees it,
    over its positions in tokens after BPE. Without ``sampling``, torch's global random generator is kept."""

    def encode(self, sentence: str):
        limit = self.max_positions[0] if isinstance(self.max_positions, tuple) else self.max_positions
        if limit is not None and len(sentence) > MAX_BPE_WORD * limit:
            raise ValueError(
                f"input of {len(sentence)} characters: this model reads at most {limit} tokens (its "
                f"max_source_positions), so at most {MAX_BPE_WORD * limit} characters are tokenized"
            )
        tokens = super().encode(sentence)
        if limit is not None and tokens.numel() > limit:
            raise ValueError(
                f"input of {tokens.numel()} tokens (after tokenizer and BPE, with end of sentence): this model reads "
                f"at most {limit} (its max_source_positions)"
            )
        return tokens

    def generate(self, *args, **kwargs):
        # fairseq's batch iterator draws a seed from the global generator; sampling draws from it, as in fairseq
        sampling = kwargs.get("sampling", self.cfg.generation.sampling)
        with warnings.catch_warnings(), contextlib.nullcontext() if sampling else torch.random.fork_rng(devices=[]):
            # fairseq's batch iterator asks for pinned memory on every device: torch warns without a GPU
            logging_setup.hide_noise()  # the one list of such warnings, in this scope only
            return super().generate(*args, **kwargs)


def from_pretrained(name_or_path: Union[str, Path], **kwargs) -> TranslationHubInterface:
    """Load an exported model as fairseq's ``GeneratorHubInterface`` (:class:`TranslationHubInterface`).

    Args:
        name_or_path: a directory of ``fairseq-dense-export``, a hub repository id (``owner/name``), or a
            name from a model class's ``hub_models()``.
        **kwargs: ``revision``, ``cache_dir``, ``local_files_only``, ``token`` (:func:`resolve_model_dir`);
            ``tokenizer=None`` / ``bpe=None`` for input already tokenized / BPE-split; any other keyword is
            a fairseq option (``beam=5``, ``lenpen=0.6``, a model option such as ``dropout``).

    Raises:
        PretrainedModelError: every problem of the model directory, in one line naming the file and key.
        TypeError: a keyword that is not a fairseq option, or not of its type.
    """
    load = {k: kwargs.pop(k) for k in ("revision", "cache_dir", "local_files_only", "token") if k in kwargs}
    text = {k: kwargs.pop(k) for k in ("tokenizer", "bpe") if k in kwargs}
    if any(v is not None for v in text.values()):
        raise TypeError("from_pretrained(): tokenizer= and bpe= may only be None (the model's own otherwise)")
    model_dir = resolve_model_dir(name_or_path, **load)
    cfg, task, model, config, codes = load_model(model_dir, overrides=kwargs)
    tokenizer = None if "tokenizer" in text else config.get("tokenizer")
    bpe = None if "bpe" in text else config.get("bpe")
    try:
        hub_interface = TranslationHubInterface(cfg, task, [model])
        with open_dict(cfg):
            if tokenizer:  # fairseq's moses plus the recorded steps of the training data's preparation
                cfg.tokenizer = OmegaConf.create({**tokenizer, "_name": "dense_moses"})
                hub_interface.tokenizer = encoders.build_tokenizer(cfg.tokenizer)
            if bpe:
                separator = bpe.get("bpe_separator", "@@")
                hub_interface.bpe = VerifiedSubwordNMTBPE(codes, separator)
                cfg.bpe = OmegaConf.create({"_name": "subword_nmt", "bpe_separator": separator})
    except (Exception, SystemExit) as err:
        raise _fairseq_error(shown(model_dir / CONFIG_NAME), "fairseq cannot set up tokenizer or BPE", err) from None
    logger.info("loaded %s (%s) from %s", model.__class__.__name__, config["arch"], shown(model_dir))
    return hub_interface
