"""What decides a training's trajectory, and what a restart changed of it.

Every fairseq checkpoint records the options of the run that wrote it (its ``cfg``); the project's tasks add the
identity of the data files it trained on (:func:`task_data_identity`, under
:data:`~fairseq_dense.checkpoints.DATA_KEY`). A restart compares its own command and data with the checkpoint it resumes
(:func:`changes`): any difference in the options below means the run goes on, but no longer as an exact continuation of
the run that wrote the checkpoint.
"""

import os
import re
import zlib
from typing import Dict, List, Optional

#: option groups of which every option decides the trajectory (but mirrors of other groups' options)
WHOLE_GROUPS = ("model", "criterion", "optimizer", "lr_scheduler", "task")
#: and the options of other groups that do (stopping, saving, logging and worker options do not)
SOME_OPTIONS = {
    "common": ("seed", "cpu", "fp16", "bf16", "amp", "memory_efficient_fp16"),
    "optimization": ("lr", "update_freq", "clip_norm", "sentence_avg", "skip_remainder_batch"),
    "dataset": (
        "max_tokens", "batch_size", "required_batch_size_multiple", "train_subset", "valid_subset", "validate_interval",
        "validate_interval_updates", "validate_after_updates", "skip_invalid_size_inputs_valid_test", "curriculum",
        "dataset_impl",
    ),
    "distributed_training": ("distributed_world_size",),
}  # fmt: skip
#: bytes read from each end of a data file for its checksum
_ENDS = 1 << 20


def root_config(cfg):
    """The whole fairseq config that the task config ``cfg`` belongs to (None: ``cfg`` is not part of one)."""
    from omegaconf import OmegaConf

    if not OmegaConf.is_config(cfg):
        return None
    root = cfg._get_root()
    return root if "task" in root and "optimization" in root else None


def _flag(group: str, key: str) -> str:
    if key == "_name":
        return "--arch" if group == "model" else "--" + group.replace("_", "-")
    return "--" + key.replace("_", "-")


def trajectory_options(config: dict, skip=()) -> Dict[str, object]:
    """``{flag: value}`` of the options of a resolved fairseq ``config`` (a plain dict, as checkpoints hold it)
    that decide the trajectory; ``skip``: ``(group, key)`` pairs left out."""
    out = {}
    for group in (*WHOLE_GROUPS, *SOME_OPTIONS):
        values = config.get(group)
        if isinstance(values, dict):
            for key in SOME_OPTIONS.get(group, values):
                if key in values and (group, key) not in skip:
                    out[_flag(group, key)] = values[key]
    return out


def current_options(root) -> Dict[str, object]:
    """:func:`trajectory_options` of the running config ``root`` (:func:`root_config`), with the task's data path
    (compared by content instead) and the options of the whole groups that mirror another group's left out
    (``--lr`` is compared once, ``--max-update`` and ``--save-dir`` not at all)."""
    from omegaconf import OmegaConf

    other_groups = [root[g] for g in root if g not in WHOLE_GROUPS and OmegaConf.is_dict(root[g])]
    mirrored = {k for node in other_groups for k in node if k != "_name"}
    config, skip = {}, {("task", "data")}
    for group in (*WHOLE_GROUPS, *SOME_OPTIONS):
        node = root.get(group)
        if not OmegaConf.is_config(node):
            continue
        skip |= {(group, k) for k in node if group in WHOLE_GROUPS and k in mirrored}
        try:
            config[group] = OmegaConf.to_container(node, resolve=True, enum_to_str=True)
        except Exception:  # an interpolation into a group this config lacks
            continue
    return trajectory_options(config, skip)


def task_data_identity(cfg) -> Dict[str, List[int]]:
    """``{file: [size, CRC-32 of its first and last MiB]}`` of the dictionaries and the training and validation
    files (shards ``train1``, ... too) in each folder of a translation task config's data (``:``-separated)."""
    from fairseq_dense.resume import option

    root = root_config(cfg)
    valid = option(root.dataset, "valid_subset") if root is not None else None
    subsets = [option(cfg, "train_subset") or "train", *(valid or "valid").split(",")]
    folders = [f for f in (option(cfg, "data") or "").split(os.pathsep) if os.path.isdir(f)]
    pattern = re.compile(r"^(dict\.|(%s)\d*\.)" % "|".join(re.escape(s) for s in subsets if s))
    out = {}
    for i, folder in enumerate(folders):
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if not pattern.match(name) or not os.path.isfile(path):
                continue
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                head = f.read(_ENDS)
                f.seek(max(len(head), size - _ENDS))
                crc = zlib.crc32(f.read(), zlib.crc32(head))
            out[name if len(folders) == 1 else f"{i}/{name}"] = [size, crc]
    return out


def _show(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def changes(root, saved_config, data: Optional[dict], saved_data: Optional[dict]) -> List[str]:
    """What differs between the running config ``root`` with its ``data`` (:func:`task_data_identity`) and a
    checkpoint's ``cfg`` and data identity, e.g. ``["--lr 0.003 -> 0.001", "data files changed: train.de.bin"]``.
    Options or files one side does not record (a checkpoint of an older version) are not compared."""
    out = []
    if isinstance(saved_config, dict):
        now, then = current_options(root), trajectory_options(saved_config)
        out += [f"{k} {_show(then[k])} -> {_show(v)}" for k, v in now.items() if k in then and then[k] != v]
    if isinstance(saved_data, dict) and data is not None:
        changed = sorted(n for n in set(data) & set(saved_data) if list(data[n]) != list(saved_data[n]))
        new, gone = sorted(set(data) - set(saved_data)), sorted(set(saved_data) - set(data))
        out += [
            f"data files {what}: {', '.join(found)}"
            for what, found in zip(("changed", "new", "gone"), (changed, new, gone))
            if found
        ]
    return out
