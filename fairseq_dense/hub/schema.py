"""The model directory format: file names, ``SHA256SUMS``, what ``config.json`` may say, the one error.

fairseq turns some option values into code or file reads (``fconv``'s ``eval()``, ``*_embed_path``,
argparse ending the program on an unknown task), so :func:`check_config` is an allow-list of what each
key may hold. Messages never quote a file (:func:`describe`, :func:`safe_name`, :func:`shown`).
``SHA256SUMS`` detects files changed after the export; it is not a signature.
"""

import argparse
import collections
import dataclasses
import enum
import hashlib
import inspect
import json
import math
import re
import typing
from pathlib import Path
from typing import Any, Dict, Iterable, List, Tuple

from fairseq.models import ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY, MODEL_DATACLASS_REGISTRY
from fairseq.tasks import TASK_REGISTRY
from fairseq.tasks.translation import TranslationTask

import fairseq_dense

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
PICKLE_NAME = "model.pt"
BPE_CODES_NAME = "bpecodes"
CARD_NAME = "README.md"
MANIFEST_NAME = "SHA256SUMS"
FORMAT_NAME = "fairseq-dense"
#: 2: with ``SHA256SUMS`` and the checked schema (1: fairseq-dense 0.1.0 before it).
FORMAT_VERSION = 2
#: ``weights_dtype``: the torch dtype of every floating-point tensor of ``model.safetensors``.
WEIGHTS_DTYPES = ("float32", "float16")
#: Task options that change how a model reads or writes text.
TASK_OPTIONS = dict(left_pad_source=bool, left_pad_target=bool, truncate_source=bool)
TASK_OPTIONS.update(max_source_positions=int, max_target_positions=int)
LANG_KEYS = ("source_lang", "target_lang")
#: The steps a model config records (tokenizer options besides its languages).
MOSES_OPTIONS = ("moses_no_dash_splits", "moses_no_escape", "moses_normalize_punctuation", "moses_lowercase")
REQUIRED_KEYS = ("format", "format_version", "arch", "model", "task", "dictionaries", "weights_dtype")
TOP_LEVEL_KEYS = {*REQUIRED_KEYS, "package_version", "fairseq_version", "model_name", "tokenizer", "bpe", "checkpoints"}
FILE_NAME_RE = re.compile(r"[A-Za-z0-9_.+-]{1,128}")
#: Language codes name dictionary files and reach sacremoses: no leading ``-``, no path characters.
LANG_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
INFO_RE = re.compile(r"[A-Za-z0-9_.+ -]{0,64}")
#: subword-nmt separators: punctuation only, never a leading ``-`` (an option to its parser).
BPE_SEPARATOR_RE = re.compile(r"[!#%&*+./:;<=>?@^_|~][!#%&*+\-./:;<=>?@^_|~]{0,7}")
#: Integer (or integer-list) options that are sizes or positions: each value must be at least 1.
POSITIVE_OPTION_RE = re.compile(r".*(_positions|_dim|_size|_sizes|_heads|_columns)|(encoder|decoder)_layers")
MAX_INT = 2**31
MAX_LIST = 1024
MAX_DICTIONARY = 2**24
_MANIFEST_LINE_RE = re.compile(rb"([0-9a-f]{64})  ([A-Za-z0-9_.+-]{1,128})")


class PretrainedModelError(ValueError):
    """A model directory, hub repository or checkpoint cannot be used: one line naming the file and key."""

    def __init__(self, message: str):
        super().__init__(printable(message))


def printable(text: Any) -> str:
    """``text`` with every non-printable character (newline, tab, escape) written as an escape."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))


def shown(path: Any, limit: int = 200) -> str:
    """A path for a message or a log line: escaped, and cut in the middle when longer than ``limit``."""
    text = printable(path)
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-(limit // 2 - 3) :]}"


def one_line(text: Any, limit: int = 200) -> str:
    """``text`` as one line of at most ``limit`` characters (for messages of fairseq or torch)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def safe_name(name: Any) -> str:
    """``name`` when it is a plain name (letters, digits, ``_.+-``, at most 128), else ``<not a plain name>``."""
    return name if isinstance(name, str) and FILE_NAME_RE.fullmatch(name) else "<not a plain name>"


def describe(value: Any) -> str:
    """What kind of value was found, without quoting text: numbers and booleans as such, others by kind."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value) if abs(value) < 10**12 else "a very large integer"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "a non-finite number"
    if isinstance(value, str):
        return f"a string of {len(value)} characters"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    return "an object" if isinstance(value, dict) else f"a {type(value).__name__}"


def write_manifest(model_dir: Path, names: Iterable[str]) -> None:
    sums = {n: hashlib.sha256((model_dir / n).read_bytes()).hexdigest() for n in sorted(set(names))}
    (model_dir / MANIFEST_NAME).write_bytes(b"".join(f"{digest}  {n}\n".encode() for n, digest in sums.items()))


def parse_manifest(where: str, data: bytes) -> Dict[str, str]:
    """``{file name: sha256}`` from the bytes of ``SHA256SUMS``: exactly ``<hex>  <name>\\n`` lines."""
    lines = data.split(b"\n")
    if lines.pop() != b"":
        raise PretrainedModelError(f"{where}: does not end with a newline; not a sha256sum file")
    sums: Dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        match = _MANIFEST_LINE_RE.fullmatch(line)
        if not match:
            raise PretrainedModelError(f"{where}: line {number} is not '<sha256>  <file name>'")
        digest, name = (group.decode("ascii") for group in match.groups())
        if name in sums:
            raise PretrainedModelError(f"{where}: line {number} lists {name} twice")
        sums[name] = digest
    if not sums:
        raise PretrainedModelError(f"{where}: lists no file; not a fairseq-dense manifest")
    return sums


def model_files(config: Dict[str, Any]) -> List[str]:
    """The files a checked ``config.json`` loads from: itself, the weights, the dictionaries, the BPE codes."""
    names = [CONFIG_NAME, WEIGHTS_NAME] + [config["dictionaries"][side]["file"] for side in ("source", "target")]
    return names + ([BPE_CODES_NAME] if config.get("bpe") else [])


def parse_json(where: str, data: bytes) -> Any:
    """Strict JSON from UTF-8 bytes: no NaN/Infinity, no key twice in an object."""

    def no_constants(name):
        raise ValueError(f"{name} is not allowed")

    def no_duplicates(pairs):
        if len({k for k, _ in pairs}) != len(pairs):
            raise ValueError("duplicate key in an object")
        return dict(pairs)

    try:
        return json.loads(data.decode("utf-8"), parse_constant=no_constants, object_pairs_hook=no_duplicates)
    except UnicodeDecodeError as err:
        raise PretrainedModelError(f"{where}: not valid JSON (not UTF-8 at byte {err.start})") from None
    except (ValueError, RecursionError) as err:  # json's messages give a position, never the text
        detail = str(err).split(":")[0] if isinstance(err, json.JSONDecodeError) else str(err)
        at = f", line {err.lineno} column {err.colno}" if isinstance(err, json.JSONDecodeError) else ""
        raise PretrainedModelError(f"{where}: not valid JSON ({detail}{at})") from None


def dense_architectures() -> Dict[str, type]:
    """``{arch name: model class}`` of every registered architecture whose model lives in :mod:`fairseq_dense`."""
    return {
        arch: cls for arch, cls in sorted(ARCH_MODEL_REGISTRY.items()) if cls.__module__.startswith("fairseq_dense.")
    }


def translation_tasks() -> Tuple[str, ...]:
    """The task names a shared model may name: ``translation`` and fairseq-dense's translation tasks."""
    own = [
        n
        for n, c in TASK_REGISTRY.items()
        if c.__module__.startswith("fairseq_dense.") and issubclass(c, TranslationTask)
    ]
    return ("translation", *sorted(own))


#: The declared type of one option: ``kind`` is a key of :data:`_CHECKS` or ``choice``.
OptionType = collections.namedtuple("OptionType", "kind nullable choices", defaults=(False, ()))


def _from_annotation(tp) -> OptionType:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        inner = _from_annotation(rest[0]) if len(rest) == 1 else OptionType("null")
        return inner._replace(nullable=True)
    if tp in (bool, int, float):
        return OptionType(tp.__name__)
    if inspect.isclass(tp) and issubclass(tp, enum.Enum):
        return OptionType("choice", choices=tuple(e.value for e in tp))
    if origin in (list, typing.List) and args and args[0] in (int, float):
        return OptionType("int_list" if args[0] is int else "number_list")
    return OptionType("null", nullable=True)


def _from_action(action: argparse.Action) -> OptionType:
    """An argparse flag's type; argparse-style archs fill unset options later, so ``null`` is allowed."""
    if action.choices:
        return OptionType("choice", nullable=True, choices=tuple(action.choices))
    # untyped: fairseq's interpolated (numeric) options; any other type: its eval_str_list parsers, given a list
    kind = {int: "int", float: "float", None: "float", str: "null"}.get(action.type, "number_list")
    return OptionType("bool" if action.nargs == 0 else kind, nullable=True)


def declared_model_options(arch: str) -> Dict[str, OptionType]:
    """The options architecture ``arch`` declares (dataclass fields, or ``add_args`` flags), with their types."""
    dc = MODEL_DATACLASS_REGISTRY.get(ARCH_MODEL_NAME_REGISTRY[arch])
    if dc is not None:
        hints = typing.get_type_hints(dc)
        fields = [f for f in dataclasses.fields(dc) if not f.name.startswith("_")]
        return {f.name: _from_annotation(hints.get(f.name, f.type)) for f in fields}
    parser = argparse.ArgumentParser(add_help=False)
    ARCH_MODEL_REGISTRY[arch].add_args(parser)
    return {a.dest: _from_action(a) for a in parser._actions if not a.dest.startswith("_")}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_INT < value < MAX_INT


def _is_number(value) -> bool:
    return _is_int(value) or isinstance(value, float) and math.isfinite(value)


def _list_of(check):
    return lambda v: isinstance(v, list) and len(v) <= MAX_LIST and all(map(check, v))


_CHECKS = {
    "bool": (lambda v: isinstance(v, bool), "a boolean"),
    "int": (_is_int, "an integer"),
    "float": (_is_number, "a finite number"),
    "int_list": (_list_of(_is_int), "a list of integers"),
    "number_list": (_list_of(_is_number), "a list of finite numbers"),
    "null": (lambda v: False, "null (free-text options, such as paths, are not accepted from a shared model)"),
}


def _fail(where, key: str, reason: str):
    raise PretrainedModelError(f"{where}: key '{key}' {reason}")


def _mapping(where, key: str, value, allowed, required=()) -> Dict[str, Any]:
    if not isinstance(value, dict):
        _fail(where, key, f"must be an object, not {describe(value)}")
    prefix = f"{key}." if key else ""
    for k in value:
        if k not in allowed:
            _fail(where, prefix + safe_name(k), "is not accepted in a fairseq-dense model config")
    for k in required:
        if k not in value:
            _fail(where, prefix + k, "is missing")
    return value


def _match(where, key: str, value, pattern: "re.Pattern", what: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        _fail(where, key, f"must be {what}, not {describe(value)}")
    return value


def _typed(where, key: str, value, otype: OptionType) -> None:
    """``value`` is of type ``otype``; a size or position (or each item of a list of them) is at least 1."""
    if value is None:
        reason = None if otype.nullable else "must not be null"
    elif otype.kind == "choice":
        reason = None if isinstance(value, str) and value in otype.choices else f"must be one of {list(otype.choices)}"
    else:
        check, expected = _CHECKS[otype.kind]
        reason = None if check(value) else f"must be {expected}, not {describe(value)}"
    if reason:
        _fail(where, key, reason)
    values = value if isinstance(value, list) else [value]
    small = any(isinstance(v, (int, float)) and not isinstance(v, bool) and v < 1 for v in values)
    if POSITIVE_OPTION_RE.fullmatch(key.rpartition(".")[2]) and small:
        _fail(where, key, f"must be at least 1 (a size or position), not {describe(value)}")


def check_config(config: Any, where: Any) -> None:
    """Check a parsed ``config.json`` (see the module docstring); ``where`` names the file in messages."""
    if not isinstance(config, dict) or config.get("format") != FORMAT_NAME:
        raise PretrainedModelError(f'{where}: not a fairseq-dense model config (no "format": "{FORMAT_NAME}")')
    version = config.get("format_version")
    if not _is_int(version):
        _fail(where, "format_version", f"must be an integer, not {describe(version)}")
    if version > FORMAT_VERSION:
        raise PretrainedModelError(
            f"{where}: format version {version} is newer than this fairseq-dense "
            f"({fairseq_dense.__version__}) reads ({FORMAT_VERSION}); upgrade fairseq-dense"
        )
    if version < FORMAT_VERSION:
        raise PretrainedModelError(
            f"{where}: format version {version} has no checksums and is no longer loaded; re-export the "
            "training checkpoint with this fairseq-dense: fairseq-dense-export CHECKPOINT --out DIR"
        )
    _mapping(where, "", config, TOP_LEVEL_KEYS, REQUIRED_KEYS)
    for key in ("package_version", "fairseq_version", "model_name"):
        if key in config:
            _match(where, key, config[key], INFO_RE, "a short version or name string")
    checkpoints = config.get("checkpoints", [])
    if not isinstance(checkpoints, list) or len(checkpoints) > MAX_LIST:
        _fail(where, "checkpoints", "must be a list of file names")
    for i, name in enumerate(checkpoints):
        _match(where, f"checkpoints[{i}]", name, FILE_NAME_RE, "a file name")

    arch = config["arch"]
    if not isinstance(arch, str) or arch not in dense_architectures():
        if isinstance(arch, str) and arch in ARCH_MODEL_REGISTRY:  # a registry name: safe to spell out
            known = f"fairseq's architecture '{arch}', not one of fairseq-dense's"
        else:
            version = "another" if config.get("package_version") != fairseq_dense.__version__ else "this"
            known = f"{describe(arch)}, not a registered architecture; exported with {version} fairseq-dense version"
        raise PretrainedModelError(
            f"{where}: key 'arch': unknown architecture ({known}; this is fairseq-dense "
            f"{fairseq_dense.__version__}); only fairseq-dense's own architectures are loaded"
        )
    if "model_name" in config and config["model_name"] != ARCH_MODEL_NAME_REGISTRY[arch]:
        _fail(where, "model_name", f"must be '{ARCH_MODEL_NAME_REGISTRY[arch]}' (the model of '{arch}')")
    declared = declared_model_options(arch)
    for key, value in _mapping(where, "model", config["model"], declared).items():
        _typed(where, f"model.{key}", value, declared[key])

    task = config["task"]
    for key in task if isinstance(task, dict) else ():  # before the allow-list: these say why
        if key in declared and key not in TASK_OPTIONS:
            _fail(where, f"task.{key}", "is a model option: the task cannot set it")
        if key in ("arch", "data", "user_dir"):
            _fail(where, f"task.{key}", "cannot be set by a model config")
    _mapping(where, "task", task, ("_name", *LANG_KEYS, *TASK_OPTIONS), LANG_KEYS)
    if task.get("_name", "translation") not in translation_tasks():
        _fail(where, "task._name", f"must be one of {list(translation_tasks())}, not {describe(task['_name'])}")
    for side in LANG_KEYS:
        _match(where, f"task.{side}", task[side], LANG_RE, "a language code (letters, digits, '_', '-'; not '-' first)")
    for key, tp in TASK_OPTIONS.items():
        if key in task:
            _typed(where, f"task.{key}", task[key], OptionType(tp.__name__))

    dictionaries = _mapping(where, "dictionaries", config["dictionaries"], ("source", "target"), ("source", "target"))
    for side in ("source", "target"):
        entry = _mapping(where, f"dictionaries.{side}", dictionaries[side], ("file", "size"), ("file", "size"))
        expected = f"dict.{task[f'{side}_lang']}.txt"
        if entry["file"] != expected:
            reason = f"must be '{expected}' (dict.<{side} lang>.txt), not {describe(entry['file'])}"
            _fail(where, f"dictionaries.{side}.file", reason)
        if not _is_int(entry["size"]) or not 4 <= entry["size"] <= MAX_DICTIONARY:
            _fail(where, f"dictionaries.{side}.size", f"must be a dictionary size, not {describe(entry['size'])}")

    if config.get("tokenizer") is not None:
        tok = _mapping(where, "tokenizer", config["tokenizer"], ("_name", *LANG_KEYS, *MOSES_OPTIONS), ("_name",))
        if tok["_name"] != "moses":
            _fail(where, "tokenizer._name", f"must be 'moses' or the tokenizer null, not {describe(tok['_name'])}")
        for key, value in tok.items():
            if key in LANG_KEYS:
                _match(where, f"tokenizer.{key}", value, LANG_RE, "a language code")
            elif key != "_name":
                _typed(where, f"tokenizer.{key}", value, OptionType("bool"))
    if config.get("bpe") is not None:
        bpe = _mapping(where, "bpe", config["bpe"], ("_name", "bpe_separator"), ("_name",))
        if bpe["_name"] != "subword_nmt":
            _fail(where, "bpe._name", f"must be 'subword_nmt' or the bpe null, not {describe(bpe['_name'])}")
        if "bpe_separator" in bpe:
            _match(where, "bpe.bpe_separator", bpe["bpe_separator"], BPE_SEPARATOR_RE, "a short separator such as '@@'")
    if config["weights_dtype"] not in WEIGHTS_DTYPES:  # a list or an object is never equal to a name
        _fail(where, "weights_dtype", f"must be one of {list(WEIGHTS_DTYPES)}, not {describe(config['weights_dtype'])}")
