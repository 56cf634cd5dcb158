"""A Weighted Transformer's saved options decide its branch weights, whatever today's presets say.

The paper's configurations (``weighted_transformer``, ``_a``, ``_b``, ``_c``, ``_n4``,
``_n8``) learn kappa and alpha unless fixed; between issue 28 and issue 41 every preset
fixed them by default, and before issue 28 every preset learned them. A checkpoint or a
hub export keeps the options it was trained with, so each of the three generations
must load and decode as it was trained: through fairseq's own checkpoint loader
(``fairseq-generate --path``) and through the hub's ``config.json`` path.
"""

import pytest
import torch
from fairseq import checkpoint_utils, options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from omegaconf import OmegaConf

import fairseq_dense  # noqa: F401
from fairseq_dense.hub.export import model_options
from fairseq_dense.hub.loading import build_model
from tests import helpers

SIZE = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16"]
SIZE += ["--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32"]
SIZE += ["--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--dropout", "0"]


def _fixed_by_issue_28(args):
    """What a configuration saved between issues 28 and 41 holds: the flag's old default False."""
    args.learned_branch_weights = False
    args.fixed_kappa = args.fixed_alpha = None


def _learned_before_issue_28(args):
    """What a configuration saved before issue 28 holds: explicit False, no learned_branch_weights."""
    del args.learned_branch_weights
    args.fixed_kappa = args.fixed_alpha = False


def _today(args):
    """A configuration saved today, from the preset alone."""


GENERATIONS = {"issue28_fixed": (_fixed_by_issue_28, False), "pre28_learned": (_learned_before_issue_28, True)}
GENERATIONS["today_paper_preset"] = (_today, True)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A data folder with the two dictionaries the task reads."""
    path = tmp_path_factory.mktemp("data")
    for lang in ("src", "tgt"):
        helpers.dummy_dictionary(12).save(str(path / f"dict.{lang}.txt"))
    return path


def saved_cfg(data_dir, arch, saved_as):
    """The configuration a training of ``arch`` would have saved in the given generation."""
    parser = options.get_training_parser()
    argv = [str(data_dir), "--arch", arch, "--task", "translation_weighted", "-s", "src", "-t", "tgt", *SIZE]
    args = options.parse_args_and_arch(parser, argv)
    saved_as(args)
    return convert_namespace_to_omegaconf(args)


def learned(model) -> bool:
    """Whether every branched block learns both kappa and alpha (False: every block fixes both)."""
    kinds = {(b.kappa is not None, b.alpha is not None) for _, b in model.branch_blocks()}
    assert kinds in ({(True, True)}, {(False, False)}), kinds
    return kinds == {(True, True)}


def scores(model, d):
    """The model's eval-mode output scores on a fixed sample."""
    sample = helpers.make_sample(d)
    model.eval()
    with torch.no_grad():
        return model(**sample["net_input"])[0]


@pytest.mark.parametrize("generation", list(GENERATIONS))
@pytest.mark.parametrize("arch", ["weighted_transformer_a", "weighted_transformer_c"])
def test_a_checkpoint_loads_and_decodes_as_it_was_trained(arch, generation, data_dir, tmp_path):
    saved_as, was_learned = GENERATIONS[generation]
    cfg = saved_cfg(data_dir, arch, saved_as)
    torch.manual_seed(0)
    trained = tasks.setup_task(cfg.task).build_model(cfg.model)
    assert learned(trained) == was_learned
    path = tmp_path / "checkpoint_last.pt"
    # as fairseq's trainer saves it: the configuration as plain containers
    plain = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    history = [{"criterion_name": "X", "optimizer_name": "X", "lr_scheduler_state": {"best": 1.0}, "num_updates": 1}]
    state = {"args": None, "cfg": plain, "model": trained.state_dict(), "optimizer_history": history}
    checkpoint_utils.torch_persistent_save(
        {**state, "extra_state": {"epoch": 1}, "last_optimizer_state": {}}, str(path)
    )
    (loaded,), _ = checkpoint_utils.load_model_ensemble([str(path)])  # strict: same parameters
    assert learned(loaded) == was_learned
    d = helpers.dummy_dictionary(12)
    torch.testing.assert_close(scores(loaded, d), scores(trained, d))


@pytest.mark.parametrize("generation", list(GENERATIONS))
def test_a_hub_export_builds_the_branch_weights_it_was_trained_with(generation, data_dir):
    saved_as, was_learned = GENERATIONS[generation]
    arch = "weighted_transformer_b"
    cfg = saved_cfg(data_dir, arch, saved_as)
    saved = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)["model"]  # as in a checkpoint
    model_cfg = {k: v for k, v in (saved if isinstance(saved, dict) else vars(saved)).items() if not k.startswith("_")}
    config = {"arch": arch, "task": {"_name": "translation_weighted", "source_lang": "src", "target_lang": "tgt"}}
    config["model"] = model_options(model_cfg, arch)  # what an export writes to config.json
    d = helpers.dummy_dictionary(12)
    _, _, model = build_model(config, (d, d))  # the hub loader's build, from config.json's values
    assert learned(model) == was_learned
