"""Helpers shared by the reliability tests (DDP, resume, determinism, precision, bad input).

Every test iterates over :func:`tiny_archs`, so a family that registers a
``<model>_tiny`` architecture is covered without editing these tests. Training
runs in the pytest process (``fairseq_cli.train.main``) wherever possible:
importing fairseq costs about 5 s per process.
"""

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import random
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import torch

import fairseq_dense  # noqa: F401  (registers the families)

#: ``FAIRSEQ_DENSE_FULL_RELIABILITY=1`` runs the fuller (slower) matrix.
FULL = os.environ.get("FAIRSEQ_DENSE_FULL_RELIABILITY", "0") not in ("", "0")


def tiny_archs() -> List[str]:
    """Every registered ``*_tiny`` architecture whose model class lives in fairseq_dense."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    return sorted(
        name
        for name, cls in ARCH_MODEL_REGISTRY.items()
        if name.endswith("_tiny") and cls.__module__.startswith("fairseq_dense.")
    )


def model_dataclass(arch: str):
    from fairseq.models import ARCH_MODEL_REGISTRY

    return getattr(ARCH_MODEL_REGISTRY[arch], "__dataclass", None)


def zero_dropout_args(arch: str) -> List[str]:
    """``--<x>-dropout 0`` for every float dropout option of ``arch``'s model config."""
    dc = model_dataclass(arch)
    args = []
    if dc is not None:
        for f in dataclasses.fields(dc):
            if "dropout" in f.name and f.type in (float, "float"):
                args += ["--" + f.name.replace("_", "-"), "0"]
    return args or ["--dropout", "0"]


def write_corpus(
    directory: Path,
    n_train: int,
    n_valid: int = 8,
    n_test: int = 8,
    vocab: int = 8,
    seed: int = 0,
    min_len: int = 2,
    max_len: int = 6,
    group: int = 0,
) -> Path:
    """A tiny copy-like corpus (the target is the upper-cased source).

    With ``group=g``, training sentences come in runs of ``g`` of the same length
    (lengths ``min_len``, ``min_len + 2``, ...): with ``--batch-size g`` every batch
    is one length group, whatever order fairseq gives to equal-length sentences.
    """
    rng = random.Random(seed)
    letters = [chr(ord("a") + i) for i in range(vocab)]
    directory.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("valid", n_valid), ("test", n_test)):
        if group and split == "train":
            lengths = [min_len + 2 * (i // group) for i in range(n)]
        else:
            lengths = [rng.randint(min_len, max_len) for _ in range(n)]
        lines = [" ".join(rng.choice(letters) for _ in range(k)) for k in lengths]
        (directory / f"{split}.src").write_text("".join(line + "\n" for line in lines))
        (directory / f"{split}.tgt").write_text("".join(line.upper() + "\n" for line in lines))
    return directory


def preprocess_inprocess(raw: Path, dest: Path, srcdict: Optional[Path] = None) -> Path:
    """``fairseq-preprocess`` (joined dictionary, or ``srcdict``'s) in this process."""
    from fairseq import options
    from fairseq_cli import preprocess

    parser = options.get_preprocessing_parser()
    args = parser.parse_args(
        [
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
            "--trainpref",
            str(raw / "train"),
            "--validpref",
            str(raw / "valid"),
            "--testpref",
            str(raw / "test"),
            "--destdir",
            str(dest),
            "--workers",
            "1",
            "--joined-dictionary",
            *(["--srcdict", str(srcdict)] if srcdict else []),
        ]
    )
    preprocess.main(args)
    return dest


def tiny_corpus(root: Path, n_train: int, group: int = 0) -> Path:
    """Raw + binarised tiny corpus under ``root``; returns the data-bin folder."""
    raw = write_corpus(root / "raw", n_train=n_train, group=group)
    return preprocess_inprocess(raw, root / "bin")


#: ``reduce_lr_on_plateau`` that halves the LR after every epoch but the first (with
#: ``--lr-threshold 0.99`` no later validation counts as better)
HALVING_PLATEAU = ["--lr-scheduler", "reduce_lr_on_plateau", "--lr-shrink", "0.5", "--lr-patience", "0"]
HALVING_PLATEAU += ["--lr-threshold", "0.99"]


def default_task() -> str:
    """The fairseq-dense training task the reliability tests use for every architecture.

    ``translation_exact_resume_simplex`` (exact resume + simplex projection of ``on_simplex``
    parameters, a no-op for models without them).
    """
    return "translation_exact_resume_simplex"


def base_train_args(bin_dir: Path, save_dir: Path, arch: str, max_update: int, *extra: str) -> List[str]:
    """A tiny CPU ``fairseq-train`` command line for ``arch`` (``--task`` from :func:`default_task`)."""
    task = [] if "--task" in extra else ["--task", default_task()]
    return [
        *task,
        str(bin_dir),
        "--arch",
        arch,
        "--cpu",
        "--seed",
        "3",
        "--num-workers",
        "0",
        "--criterion",
        "label_smoothed_cross_entropy_with_stats",
        "--label-smoothing",
        "0.1",
        "--max-update",
        str(max_update),
        "--save-dir",
        str(save_dir),
        "--no-epoch-checkpoints",
        "--log-format",
        "json",
        "--log-interval",
        "1",
        *extra,
    ]


class SimulatedCrash(KeyboardInterrupt):
    """Raised by :func:`recorded_losses` to kill a training run at a chosen update."""


@contextlib.contextmanager
def recorded_losses(crash_at: Optional[int] = None) -> Iterator[Dict[int, float]]:
    """Record the unrounded training loss of every update (the log rounds to 3 decimals).

    Reads fairseq's ``train_inner`` loss meter after each ``Trainer.train_step``;
    test instrumentation only, restored on exit.

    Args:
        crash_at: raise :class:`SimulatedCrash` when update ``crash_at + 1`` is
            about to start (as if the process were killed after update ``crash_at``).
    """
    from fairseq import metrics
    from fairseq.trainer import Trainer

    losses: Dict[int, float] = {}
    original = Trainer.train_step

    def train_step(self, samples, raise_oom=False):
        if crash_at is not None and self.get_num_updates() >= crash_at:
            raise SimulatedCrash(f"simulated crash after update {crash_at}")
        out = original(self, samples, raise_oom)
        meter = metrics.get_meter("train_inner", "loss")
        if meter is not None and meter.val is not None:
            losses[self.get_num_updates()] = float(meter.val)
        return out

    Trainer.train_step = train_step
    try:
        yield losses
    finally:
        Trainer.train_step = original


def train_inprocess(args: Sequence[str], crash_at: Optional[int] = None) -> Dict[int, float]:
    """Run ``fairseq-train args`` in this process as a fresh process would; return losses by update.

    With ``crash_at``, the run is killed after that update (:class:`SimulatedCrash`
    is caught) and the losses up to it are returned.
    """
    from fairseq import checkpoint_utils
    from fairseq_cli import train

    from fairseq_dense import save_lock
    from fairseq_dense.cli.train_ddp import run_train

    # fairseq keeps the best validation loss on function attributes; a new process starts without
    for fn in (checkpoint_utils.save_checkpoint, train.should_stop_early):
        for attr in ("best", "num_runs"):
            if hasattr(fn, attr):
                delattr(fn, attr)
    try:
        with recorded_losses(crash_at) as losses:
            try:
                run_train(list(args))
            except SimulatedCrash:
                if crash_at is None:
                    raise
    finally:  # a process's save-folder locks end with it
        for fd in save_lock._HELD.values():
            os.close(fd)
        save_lock._HELD.clear()
    return losses


class Shared:
    """Corpora and training runs built once per test run, in a folder every test process shares.

    ``pytest -n`` runs each test file in one worker process; two files that need the same
    run (same corpus, same command line) get one training: the first to ask trains it under
    a file lock, the others wait for it and read the result. Nothing is shared between
    test runs (the folder is the run's own temporary folder).
    """

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def _once(self, key: str) -> Iterator[Tuple[Path, bool]]:
        """``(folder, built)`` for ``key``, held under its lock; ``built`` once a holder finished."""
        folder = self.root / hashlib.sha1(key.encode()).hexdigest()[:16]
        with open(f"{folder}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield folder, (folder / "done").exists()

    def corpus(self, n_train: int, group: int = 0) -> Path:
        """:func:`tiny_corpus` ``(n_train, group)``: its data-bin folder."""
        with self._once(f"corpus {n_train} {group}") as (folder, built):
            if not built:
                tiny_corpus(folder, n_train, group)
                (folder / "done").touch()
        return folder / "bin"

    def train(self, bin_dir: Path, arch: str, max_update: int, *extra: str) -> Tuple[Path, Dict[int, float]]:
        """``(save_dir, losses)`` of :func:`train_inprocess` with :func:`base_train_args` ``(bin_dir, save_dir,
        arch, max_update, *extra)``, trained on first use. Callers read the save folder and never write it."""
        with self._once(json.dumps([str(bin_dir), arch, max_update, *extra])) as (folder, built):
            save = folder / "save"
            if not built:
                losses = train_inprocess(base_train_args(bin_dir, save, arch, max_update, *extra))
                (folder / "losses.json").write_text(json.dumps(losses))
                (folder / "done").touch()
            return save, {int(u): loss for u, loss in json.loads((folder / "losses.json").read_text()).items()}


def build_tiny_model(arch: str, dictionary, *options_: str):
    """``arch`` built from its registered defaults (and command-line ``options_``) for a task with
    ``dictionary`` on both sides."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.models import ARCH_MODEL_REGISTRY

    from tests.helpers import DummyTask

    parser = options.get_training_parser()
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, ["data", "--arch", arch, *options_]))
    return ARCH_MODEL_REGISTRY[arch].build_model(cfg.model, DummyTask(dictionary))


def parameter_groups(arch: str) -> List[str]:
    """The ``param.param_group`` tags ``arch`` declares (for ``--lr-scheduler grouped``)."""
    from tests.helpers import dummy_dictionary

    model = build_tiny_model(arch, dummy_dictionary(8))
    return sorted({getattr(p, "param_group") for p in model.parameters() if hasattr(p, "param_group")})


def load_checkpoint(path: Path) -> dict:
    from fairseq_dense.checkpoints import safe_loading

    with safe_loading():  # the argparse.Namespace of --optimizer sgd's options
        return torch.load(str(path), map_location="cpu", weights_only=True)


def deterministic_parts(ckpt: dict) -> dict:
    """The parts of a checkpoint that must not depend on wall-clock time."""
    hist = ckpt["optimizer_history"][-1]
    return {
        "model": ckpt["model"],
        "optimizer": ckpt["last_optimizer_state"],
        "lr_scheduler": hist["lr_scheduler_state"],
        "num_updates": hist["num_updates"],
        "train_iterator": ckpt["extra_state"]["train_iterator"],
        "val_loss": ckpt["extra_state"]["val_loss"],
    }


def flip_tensor_byte(path: Path) -> None:
    """Flip one byte of the first tensor's data in the checkpoint ``path``: it still loads, but its archive fails
    its CRC check (as a bit flipped on a disk or in a copy)."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        member = next(i for i in archive.infolist() if "/data/" in i.filename)
    with open(path, "r+b") as f:
        f.seek(member.header_offset + 26)  # the local header's name and extra field lengths
        name_len, extra_len = (int.from_bytes(f.read(2), "little") for _ in range(2))
        f.seek(member.header_offset + 30 + name_len + extra_len + 3)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0x10]))


def max_abs_diff(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), set(a) ^ set(b)
    return max((a[k].float() - b[k].float()).abs().max().item() if a[k].numel() else 0.0 for k in a)


def assert_tensors_identical(a, b, where: str = "") -> None:
    """Nested dicts/lists of tensors and plain values are bitwise identical."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"{where}: {set(a) ^ set(b)}"
        for k in a:
            assert_tensors_identical(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_tensors_identical(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"
