"""What a shared model's ``config.json`` may say, checked before any model code runs.

A model directory comes from strangers, and fairseq turns option values into code
and file reads in places (``fconv`` and ``wav2vec2`` ``eval()`` layer specs,
``utils.eval_str_list`` evaluates strings, ``*_embed_path`` reads a file, an
unknown task name ends the program through argparse). :func:`check_config`
therefore accepts only:

- ``arch``: an architecture registered by fairseq-dense itself
  (:func:`dense_architectures`; their code contains no ``eval``);
- ``model``: options that architecture declares (its dataclass fields, or for an
  argparse-style model the flags of its ``add_args``), each with a value of the
  declared type: booleans, integers, finite numbers, one of the declared choices,
  lists of numbers. Free-text options (paths, JSON strings) must be ``null``;
- ``task``: the translation task (or one of fairseq-dense's translation tasks),
  its languages and the inference options in :data:`TASK_OPTIONS`, never ``arch``,
  ``data``, ``user_dir`` or a model option;
- ``dictionaries``: ``dict.<lang>.txt`` in the model directory, with their sizes;
- ``tokenizer`` (``moses`` or ``null``), ``bpe`` (``subword_nmt`` or ``null``),
  ``weights_dtype`` and a few informational strings.

Anything else is a one-line :class:`PretrainedModelError` naming the key.
"""

import argparse
import dataclasses
import enum
import inspect
import json
import math
import re
import typing
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

from fairseq_dense.hub.errors import PretrainedModelError, describe, safe_name
from fairseq_dense.hub.files import FILE_NAME_RE
from fairseq_dense.hub.text import MOSES_OPTIONS

FORMAT_NAME = "fairseq-dense"
#: 2: with the ``SHA256SUMS`` manifest and the checked schema (1: fairseq-dense 0.1.0 before it).
FORMAT_VERSION = 2
#: ``weights_dtype``: the torch dtype of every floating-point tensor of ``model.safetensors``.
WEIGHTS_DTYPES = ("float32", "float16")
#: Task options that change how a model reads or writes text, with their types.
TASK_OPTIONS = dict(left_pad_source=bool, left_pad_target=bool, truncate_source=bool)
TASK_OPTIONS.update(max_source_positions=int, max_target_positions=int)
REQUIRED_KEYS = ("format", "format_version", "arch", "model", "task", "dictionaries", "weights_dtype")
TOP_LEVEL_KEYS = {*REQUIRED_KEYS, "package_version", "fairseq_version", "model_name", "tokenizer", "bpe", "checkpoints"}
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


def dense_architectures() -> Dict[str, type]:
    """Every registered architecture whose model class lives in :mod:`fairseq_dense`.

    Returns:
        ``{arch name: model class}``, sorted by name. Families registered later
        (new sub-packages) appear automatically.
    """
    from fairseq.models import ARCH_MODEL_REGISTRY

    return {
        arch: cls for arch, cls in sorted(ARCH_MODEL_REGISTRY.items()) if cls.__module__.startswith("fairseq_dense.")
    }


def translation_tasks() -> Tuple[str, ...]:
    """The task names a shared model may name: ``translation`` and fairseq-dense's translation tasks."""
    from fairseq.tasks import TASK_REGISTRY
    from fairseq.tasks.translation import TranslationTask

    own = [
        n
        for n, c in TASK_REGISTRY.items()
        if c.__module__.startswith("fairseq_dense.") and issubclass(c, TranslationTask)
    ]
    return ("translation", *sorted(own))


@dataclasses.dataclass(frozen=True)
class OptionType:
    """The declared type of one model option.

    ``kind``: ``bool``, ``int``, ``float``, ``number`` (int or float), ``choice``,
    ``number_list``, ``int_list``, or ``null`` (free text or an undeclared type:
    only ``null`` is accepted).
    """

    kind: str
    nullable: bool = False
    choices: Tuple[Any, ...] = ()


def _from_annotation(tp) -> OptionType:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        inner = _from_annotation(rest[0]) if len(rest) == 1 else OptionType("null")
        return dataclasses.replace(inner, nullable=True)
    if tp in (bool, int, float):
        return OptionType(tp.__name__)
    if inspect.isclass(tp) and issubclass(tp, enum.Enum):
        return OptionType("choice", choices=tuple(e.value for e in tp))
    if origin in (list, typing.List) and args and args[0] in (int, float):
        return OptionType("int_list" if args[0] is int else "number_list")
    return OptionType("null", nullable=True)


def _from_action(action: argparse.Action) -> OptionType:
    """An argparse flag's type; argparse-style archs fill unset options later, so ``null`` is allowed."""
    if action.nargs == 0:
        return OptionType("bool", nullable=True)
    if action.choices:
        return OptionType("choice", nullable=True, choices=tuple(action.choices))
    if action.type in (int, float):
        return OptionType(action.type.__name__, nullable=True)
    if action.type is None:  # fairseq leaves interpolated (numeric) options untyped
        return OptionType("number", nullable=True)
    if action.type is str:
        return OptionType("null", nullable=True)
    return OptionType("number_list", nullable=True)  # fairseq's eval_str_list parsers: give a list


def declared_model_options(arch: str) -> Dict[str, OptionType]:
    """The options architecture ``arch`` declares, with their types.

    Options are the fields of the model's dataclass config, or for argparse-style
    models the flags of its ``add_args``.
    """
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY, MODEL_DATACLASS_REGISTRY

    dc = MODEL_DATACLASS_REGISTRY.get(ARCH_MODEL_NAME_REGISTRY[arch])
    if dc is not None:
        hints = typing.get_type_hints(dc)
        return {
            f.name: _from_annotation(hints.get(f.name, f.type))
            for f in dataclasses.fields(dc)
            if not f.name.startswith("_")
        }
    parser = argparse.ArgumentParser(add_help=False)
    ARCH_MODEL_REGISTRY[arch].add_args(parser)
    return {a.dest: _from_action(a) for a in parser._actions if not a.dest.startswith("_")}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_INT < value < MAX_INT


def _is_number(value) -> bool:
    return _is_int(value) or isinstance(value, float) and math.isfinite(value)


def _is_list(value, item: Callable[[Any], bool]) -> bool:
    return isinstance(value, list) and len(value) <= MAX_LIST and all(item(v) for v in value)


_CHECKS = {
    "bool": (lambda v: isinstance(v, bool), "a boolean"),
    "int": (_is_int, "an integer"),
    "float": (_is_number, "a finite number"),
    "number": (_is_number, "a finite number"),
    "int_list": (lambda v: _is_list(v, _is_int), "a list of integers"),
    "number_list": (lambda v: _is_list(v, _is_number), "a list of finite numbers"),
    "null": (lambda v: False, "null (free-text options, such as paths, are not accepted from a shared model)"),
}


def value_error(value, otype: OptionType) -> Optional[str]:
    """Why ``value`` is not of type ``otype``, or ``None`` when it is."""
    if value is None:
        return None if otype.nullable else "must not be null"
    if otype.kind == "choice":
        return None if value in otype.choices and isinstance(value, str) else f"must be one of {list(otype.choices)}"
    check, expected = _CHECKS[otype.kind]
    return None if check(value) else f"must be {expected}, not {describe(value)}"


class _Checker:
    """Raises errors naming ``config.json`` and the key."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, key: str, reason: str):
        raise PretrainedModelError(f"{self.path}: key '{key}' {reason}")

    def mapping(self, key: str, value, allowed, required=()) -> Dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(key, f"must be an object, not {describe(value)}")
        for k in value:
            if k not in allowed:
                name = f"{key}.{safe_name(k)}" if key else safe_name(k)
                self.fail(name, "is not accepted in a fairseq-dense model config")
        for k in required:
            if k not in value:
                self.fail(f"{key}.{k}" if key else k, "is missing")
        return value

    def match(self, key: str, value, pattern: "re.Pattern", what: str) -> str:
        if not isinstance(value, str) or not pattern.fullmatch(value):
            self.fail(key, f"must be {what}, not {describe(value)}")
        return value

    def typed(self, key: str, value, otype: OptionType) -> None:
        reason = value_error(value, otype)
        if reason:
            self.fail(key, reason)

    def positive(self, key: str, value) -> None:
        """A size or position (or each item of a list of them), already type-checked, is at least 1."""
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, (int, float)) and not isinstance(v, bool) and v < 1 for v in values):
            self.fail(key, f"must be at least 1 (a size or position), not {describe(value)}")


def parse_json(where: str, data: bytes) -> Any:
    """Strict JSON from UTF-8 bytes: no NaN/Infinity, no key twice in an object (config, safetensors header)."""

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
    except (ValueError, RecursionError) as err:
        # json's messages give a position, never the text; ours name the constant or the problem
        detail = str(err).split(":")[0] if isinstance(err, json.JSONDecodeError) else str(err)
        at = f", line {err.lineno} column {err.colno}" if isinstance(err, json.JSONDecodeError) else ""
        raise PretrainedModelError(f"{where}: not valid JSON ({detail}{at})") from None


def check_config(config: Any, path: Path) -> None:
    """Check a parsed ``config.json`` against what fairseq-dense accepts (see the module docstring).

    Args:
        config: the parsed JSON.
        path: the file, for the messages.

    Raises:
        PretrainedModelError: one line naming the file and the key at fault.
    """
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY

    import fairseq_dense

    c = _Checker(path)
    if not isinstance(config, dict) or config.get("format") != FORMAT_NAME:
        raise PretrainedModelError(f'{path}: not a fairseq-dense model config (no "format": "{FORMAT_NAME}")')
    version = config.get("format_version")
    if not _is_int(version):
        c.fail("format_version", f"must be an integer, not {describe(version)}")
    if version > FORMAT_VERSION:
        raise PretrainedModelError(
            f"{path}: format version {version} is newer than this fairseq-dense "
            f"({fairseq_dense.__version__}) reads ({FORMAT_VERSION}); upgrade fairseq-dense"
        )
    if version < FORMAT_VERSION:
        raise PretrainedModelError(
            f"{path}: format version {version} has no checksums and is no longer loaded; re-export the "
            "training checkpoint with this fairseq-dense: fairseq-dense-export CHECKPOINT --out DIR"
        )
    c.mapping("", config, TOP_LEVEL_KEYS, REQUIRED_KEYS)
    for key in ("package_version", "fairseq_version", "model_name"):
        if key in config:
            c.match(key, config[key], INFO_RE, "a short version or name string")
    checkpoints = config.get("checkpoints", [])
    if not isinstance(checkpoints, list) or len(checkpoints) > MAX_LIST:
        c.fail("checkpoints", "must be a list of file names")
    for i, name in enumerate(checkpoints):
        c.match(f"checkpoints[{i}]", name, FILE_NAME_RE, "a file name")

    arch = config["arch"]
    if not isinstance(arch, str) or arch not in dense_architectures():
        if isinstance(arch, str) and arch in ARCH_MODEL_REGISTRY:  # a registry name: safe to spell out
            known = f"fairseq's architecture '{arch}', not one of fairseq-dense's"
        else:
            version = "another" if config.get("package_version") != fairseq_dense.__version__ else "this"
            known = f"{describe(arch)}, not a registered architecture; exported with {version} fairseq-dense version"
        raise PretrainedModelError(
            f"{path}: key 'arch': unknown architecture ({known}; this is fairseq-dense "
            f"{fairseq_dense.__version__}); only fairseq-dense's own architectures are loaded"
        )
    if "model_name" in config and config["model_name"] != ARCH_MODEL_NAME_REGISTRY[arch]:
        c.fail("model_name", f"must be '{ARCH_MODEL_NAME_REGISTRY[arch]}' (the model of '{arch}')")
    declared = declared_model_options(arch)
    model = c.mapping("model", config["model"], declared)
    for key, value in model.items():
        c.typed(f"model.{key}", value, declared[key])
        if POSITIVE_OPTION_RE.fullmatch(key):
            c.positive(f"model.{key}", value)

    _check_task(c, config["task"], declared)
    task = config["task"]
    dictionaries = c.mapping("dictionaries", config["dictionaries"], ("source", "target"), ("source", "target"))
    for side in ("source", "target"):
        entry = c.mapping(f"dictionaries.{side}", dictionaries[side], ("file", "size"), ("file", "size"))
        expected = f"dict.{task[f'{side}_lang']}.txt"
        if entry["file"] != expected:
            c.fail(
                f"dictionaries.{side}.file",
                f"must be '{expected}' (dict.<{side} lang>.txt), not {describe(entry['file'])}",
            )
        if not _is_int(entry["size"]) or not 4 <= entry["size"] <= MAX_DICTIONARY:
            c.fail(f"dictionaries.{side}.size", f"must be a dictionary size, not {describe(entry['size'])}")

    if config.get("tokenizer") is not None:
        tok = c.mapping(
            "tokenizer", config["tokenizer"], ("_name", "source_lang", "target_lang", *MOSES_OPTIONS), ("_name",)
        )
        if tok["_name"] != "moses":
            c.fail("tokenizer._name", f"must be 'moses' or the tokenizer null, not {describe(tok['_name'])}")
        for side in ("source_lang", "target_lang"):
            if side in tok:
                c.match(f"tokenizer.{side}", tok[side], LANG_RE, "a language code")
        for key in MOSES_OPTIONS:
            if key in tok:
                c.typed(f"tokenizer.{key}", tok[key], OptionType("bool"))
    if config.get("bpe") is not None:
        bpe = c.mapping("bpe", config["bpe"], ("_name", "bpe_separator"), ("_name",))
        if bpe["_name"] != "subword_nmt":
            c.fail("bpe._name", f"must be 'subword_nmt' or the bpe null, not {describe(bpe['_name'])}")
        if "bpe_separator" in bpe:
            c.match("bpe.bpe_separator", bpe["bpe_separator"], BPE_SEPARATOR_RE, "a short separator such as '@@'")
    if not isinstance(config["weights_dtype"], str) or config["weights_dtype"] not in WEIGHTS_DTYPES:
        c.fail("weights_dtype", f"must be one of {sorted(WEIGHTS_DTYPES)}, not {describe(config['weights_dtype'])}")


def _check_task(c: _Checker, task, declared: Dict[str, OptionType]) -> None:
    if not isinstance(task, dict):
        c.fail("task", f"must be an object, not {describe(task)}")
    for key in task:
        if key in declared and key not in TASK_OPTIONS:
            c.fail(f"task.{key}", "is a model option: the task cannot set it")
        if key in ("arch", "data", "user_dir"):
            c.fail(f"task.{key}", "cannot be set by a model config")
    c.mapping("task", task, ("_name", "source_lang", "target_lang", *TASK_OPTIONS), ("source_lang", "target_lang"))
    name = task.get("_name", "translation")
    allowed = translation_tasks()
    if name not in allowed:
        c.fail("task._name", f"must be one of {list(allowed)}, not {describe(name)}")
    for side in ("source_lang", "target_lang"):
        c.match(f"task.{side}", task[side], LANG_RE, "a language code (letters, digits, '_', '-'; not '-' first)")
    for key, tp in TASK_OPTIONS.items():
        if key in task:
            c.typed(f"task.{key}", task[key], OptionType(tp.__name__))
            if POSITIVE_OPTION_RE.fullmatch(key):
                c.positive(f"task.{key}", task[key])
