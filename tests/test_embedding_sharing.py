"""``--share-all-embeddings`` and ``--share-decoder-input-output-embed`` in every family.

The data recipes build a joined dictionary, so every family offers both of fairseq's
sharing options where the shapes allow them, and a one-line ``ValueError`` naming the
flags where they do not (the checks are ``option_checks.embedding_sharing``; the
Weighted Transformer inherits fairseq's transformer's). Each tiny architecture is
built with each option (the tied tables are one tensor, the parameter count drops by
one table per tie) and trained for a few updates through ``fairseq_cli.train``, after
which the saved tables are still equal.
"""

import pytest
import torch
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.models import ARCH_MODEL_REGISTRY

from tests import reliability_helpers as rh
from tests.helpers import DummyTask, dummy_dictionary

ARCHS = rh.tiny_archs()
SHARE_DECODER, SHARE_ALL = "--share-decoder-input-output-embed", "--share-all-embeddings"
#: the flag setting the softmax input size, which tying needs equal to --decoder-embed-dim
#: (the Weighted Transformer's is fairseq's --decoder-output-dim, left to fairseq)
SOFTMAX_INPUT = {
    "dense_lstm_tiny": "--decoder-out-embed-dim",
    "densenmt_tiny": "--decoder-out-embed-dim",
    "fast_forward_lstm_tiny": "--decoder-out-embed-dim",
    "gru_attention_tiny": "--readout-dim",
}


def build(arch: str, *flags: str, task=None):
    """``arch`` with its defaults and ``flags``, for a task with one 16-symbol dictionary."""
    parser = options.get_training_parser()
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, ["data", "--arch", arch, *flags]))
    return ARCH_MODEL_REGISTRY[arch].build_model(cfg.model, task or DummyTask(dummy_dictionary(12)))


def tied_to_decoder_table(model):
    """Names of the parameters that are the decoder's embedding table itself."""
    table = model.decoder.embed_tokens.weight
    return sorted(n for n, p in model.named_parameters(remove_duplicate=False) if p is table)


def count(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("arch", ARCHS)
def test_each_tie_is_one_tensor_and_one_table_fewer(arch):
    plain, tied, shared = build(arch), build(arch, SHARE_DECODER), build(arch, SHARE_ALL)
    table = plain.decoder.embed_tokens.weight
    # DenseNMT's untied softmax is weight-normalised (fconv's): its scale g, one per word, goes too
    scale = table.size(0) if arch.startswith("densenmt") else 0
    assert count(plain) - count(tied) == table.numel() + scale
    assert count(tied) - count(shared) == table.numel()
    assert len(tied_to_decoder_table(plain)) == 1
    assert len(tied_to_decoder_table(tied)) == 2  # the target embedding and the softmax
    assert "encoder.embed_tokens.weight" in tied_to_decoder_table(shared)
    assert len(tied_to_decoder_table(shared)) == 3


@pytest.mark.parametrize("arch", ARCHS)
def test_sharing_refused_in_one_line_where_shapes_forbid_it(arch):
    d = dummy_dictionary(12)
    cases = [
        ((SHARE_ALL,), DummyTask(d, dummy_dictionary(13)), "--share-all-embeddings requires a joined dictionary"),
        ((SHARE_ALL, "--encoder-embed-dim", "16"), None, "--share-all-embeddings requires --encoder-embed-dim"),
    ]
    if arch in SOFTMAX_INPUT:
        for share in (SHARE_DECODER, SHARE_ALL):
            cases.append(((share, SOFTMAX_INPUT[arch], "16"), None, f"{share} requires {SOFTMAX_INPUT[arch]} (16)"))
    for flags, task, message in cases:
        with pytest.raises(ValueError) as err:
            build(arch, *flags, task=task)
        assert message in str(err.value) and "\n" not in str(err.value), (flags, str(err.value))


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    return rh.tiny_corpus(tmp_path_factory.mktemp("sharing_data"), 16)  # joined dictionary


@pytest.mark.slow
@pytest.mark.parametrize("share", [SHARE_DECODER, SHARE_ALL])
@pytest.mark.parametrize("arch", ARCHS)
def test_shared_tables_train_and_stay_tied(arch, share, data_bin, tmp_path):
    losses = rh.train_inprocess(rh.base_train_args(
        data_bin, tmp_path, arch, 2, share, "--optimizer", "adam", "--lr", "0.005", "--batch-size", "8",
        "--disable-validation",
    ))  # fmt: skip
    assert sorted(losses) == [1, 2] and all(torch.isfinite(torch.tensor(v)) for v in losses.values()), losses
    state = rh.load_checkpoint(tmp_path / "checkpoint_last.pt")["model"]
    table = state["decoder.embed_tokens.weight"]
    equal = [k for k, v in state.items() if v.shape == table.shape and torch.equal(v, table)]
    assert len(equal) == (3 if share == SHARE_ALL else 2), equal
