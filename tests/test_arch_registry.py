"""Every registered architecture builds on both of fairseq's configuration paths.

fairseq builds a model from a dataclass config (``fairseq-train``: the parsed
options converted by ``convert_namespace_to_omegaconf``) and, in its own scripts,
older tooling and many research codebases, straight from the ``argparse.Namespace``
of ``options.parse_args_and_arch`` (``task.build_model(args)``). On the second path
only the named architecture function fills the options not given on the command
line, so each one must set every option its model reads. Both paths must give the
same model: same parameter names and shapes.

The models are built on the ``meta`` device (no memory is allocated and nothing is
initialised), so the largest paper sizes cost no more than the tiny ones.
"""

from typing import Dict, Tuple

import pytest
import torch
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.models import ARCH_MODEL_REGISTRY

import fairseq_dense  # noqa: F401
from tests.helpers import dummy_dictionary

PLUGIN_ARCHS = sorted(name for name, cls in ARCH_MODEL_REGISTRY.items() if cls.__module__.startswith("fairseq_dense."))


def test_every_family_is_in_the_registry():
    families = {ARCH_MODEL_REGISTRY[a].__module__.split(".")[2] for a in PLUGIN_ARCHS}
    assert families == {"dense_lstm", "densenmt", "fast_forward_lstm", "gru_attention", "weighted_transformer"}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A data folder with the two dictionaries ``translation`` reads (16 symbols each)."""
    path = tmp_path_factory.mktemp("dicts")
    for lang in ("src", "tgt"):
        dummy_dictionary(12).save(str(path / f"dict.{lang}.txt"))
    return path


def _shapes(model) -> Dict[str, Tuple[int, ...]]:
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


@pytest.mark.parametrize("arch", PLUGIN_ARCHS)
def test_namespace_and_dataclass_paths_build_the_same_model(arch, data_dir):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser, [str(data_dir), "--arch", arch, "--source-lang", "src", "--target-lang", "tgt"]
    )
    cfg = convert_namespace_to_omegaconf(args)  # before build_model(args) can touch args
    task = tasks.setup_task(args)
    with torch.device("meta"):
        from_namespace = _shapes(task.build_model(args))
        from_dataclass = _shapes(task.build_model(cfg.model))
    assert from_namespace == from_dataclass, f"{arch}: the two configuration paths build different models"
    n = sum(torch.Size(s).numel() for s in from_namespace.values())
    assert n > 0
