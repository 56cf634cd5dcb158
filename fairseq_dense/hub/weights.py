"""``model.safetensors``: parsed from its verified bytes, checked against the built model, loaded.

Checks, in order, each a one-line :class:`PretrainedModelError` naming the file
and the tensor: the file parses (safetensors, no pickle); its ``tied_weights``
metadata maps aliases to stored tensors; the tensor names are exactly the
model's; each alias ties two tensors the architecture itself ties (and every
tie of the architecture is stored once); every floating-point tensor has the
config's ``weights_dtype`` and every tensor the model's shape; no value is NaN
or infinite.
"""

import json
import struct
from typing import Any, Dict, Tuple

from fairseq_dense.hub.errors import PretrainedModelError, safe_name
from fairseq_dense.hub.schema import parse_json

Weights = Tuple[Dict[str, Any], Dict[str, str]]


def parse_weights(where: str, data: bytes) -> Weights:
    """The tensors of ``model.safetensors`` (its bytes) and its tied-weight aliases ``{alias: stored name}``.

    The header is read as strict JSON first: safetensors itself keeps the last of
    two entries of one tensor name.
    """
    from safetensors.torch import load

    (size,) = struct.unpack("<Q", data[:8]) if len(data) >= 8 else (0,)
    try:
        header = parse_json(where, data[8 : 8 + size])
    except PretrainedModelError as err:
        detail = "its header names a tensor twice" if "duplicate key" in str(err) else "its header is not JSON"
        raise PretrainedModelError(f"{where}: corrupted or not a safetensors file ({detail})") from None
    try:
        metadata = header.get("__metadata__") or {}
        aliases = json.loads(metadata.get("tied_weights", "{}"))
        state = load(data)
    except Exception as err:  # a MemoryError too: a file larger than this machine holds
        raise PretrainedModelError(f"{where}: corrupted or not a safetensors file ({type(err).__name__})") from None
    except BaseException as err:  # pyo3's PanicException is not an Exception
        if type(err).__name__ != "PanicException":
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


def _check_ties(where: str, arch: str, state: Dict[str, Any], aliases: Dict[str, str], ties: Dict[str, str]):
    """Each alias joins two tensors the architecture ties; each tie of the architecture is stored once."""

    def group(name: str) -> str:  # the first name of a name's tie group
        return ties.get(name, name)

    for alias, source in sorted(aliases.items()):
        if group(alias) != group(source):
            raise PretrainedModelError(
                f"{where}: metadata 'tied_weights' makes tensor '{alias}' a copy of '{source}', which architecture "
                f"'{arch}' does not tie"
            )
    stored: Dict[str, str] = {}
    for name in sorted(state):
        other = stored.setdefault(group(name), name)
        if other != name:
            raise PretrainedModelError(
                f"{where}: stores tensors '{other}' and '{name}' separately, but architecture '{arch}' ties them"
            )


def load_weights(model, where: str, config: Dict[str, Any], weights: Weights, model_cfg) -> None:
    """Load ``weights`` (from :func:`parse_weights`) into ``model`` after checking every tensor.

    Raises:
        PretrainedModelError: naming the file and the tensor at fault.
    """
    import torch

    state, aliases = dict(weights[0]), weights[1]
    arch = config["arch"]
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state) - set(aliases))
    unexpected = sorted((set(state) | set(aliases)) - set(expected))
    if missing or unexpected:
        raise PretrainedModelError(
            f"{where}: does not match architecture '{arch}' of config.json "
            f"(missing tensors: {missing[:5]}, unexpected tensors: {[safe_name(n) for n in unexpected[:5]]})"
        )
    _check_ties(where, arch, state, aliases, tied_names(model))
    float_dtype = getattr(torch, config["weights_dtype"])
    for name, tensor in state.items():
        want = float_dtype if torch.is_floating_point(expected[name]) else expected[name].dtype
        if tensor.dtype != want:
            stored, wanted = (str(d).replace("torch.", "") for d in (tensor.dtype, want))
            raise PretrainedModelError(
                f"{where}: tensor '{name}' is stored as {stored}, but config.json says weights_dtype "
                f"{config['weights_dtype']} (expected {wanted})"
            )
        if tuple(tensor.shape) != tuple(expected[name].shape):
            sizes = ", ".join(f"{d['file']}: {d['size']} symbols" for d in config["dictionaries"].values())
            raise PretrainedModelError(
                f"{where}: tensor '{name}' has shape {tuple(tensor.shape)}, but the model built from "
                f"config.json ({sizes}) expects {tuple(expected[name].shape)}"
            )
        if torch.is_floating_point(tensor) and not bool(torch.isfinite(tensor).all()):
            raise PretrainedModelError(f"{where}: tensor '{name}' holds non-finite values (NaN or infinity)")
    for alias, source in aliases.items():
        state[alias] = state[source]
    try:
        model.load_state_dict(state, strict=True, model_cfg=model_cfg)
    except (Exception, SystemExit) as err:
        raise PretrainedModelError(f"{where}: the weights do not load into '{arch}' ({type(err).__name__})") from None
