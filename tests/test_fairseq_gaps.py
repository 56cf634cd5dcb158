"""fairseq's own gaps, pinned down on fairseq's built-in models (docs/features.md, "fairseq's own gaps").

Each test states what a user expects and is a strict ``xfail`` for the fairseq
behaviour that prevents it: the suite stays green while fairseq behaves as
documented, and the test turns into a failure (XPASS) the day a fairseq update
fixes the gap, so that docs/features.md can be updated. Unit-level: fairseq's own
``lstm`` (tiny), its generator and option parsers, no command-line process. The
plugin does not patch fairseq for any of them.
"""

import pytest
import torch
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.ngram_repeat_block import NGramRepeatBlock
from fairseq.tasks.translation import TranslationTask

import fairseq_dense  # noqa: F401
from tests import helpers

LSTM = ["--encoder-embed-dim", "8", "--decoder-embed-dim", "8", "--encoder-hidden-size", "8",
        "--decoder-hidden-size", "8", "--decoder-out-embed-dim", "8", "--encoder-layers", "1",
        "--decoder-layers", "1"]  # fmt: skip


@pytest.fixture(scope="module")
def lstm():
    """fairseq's built-in ``lstm`` (tiny, random weights) and its ``translation`` task."""
    d = helpers.dummy_dictionary(12)
    args = options.parse_args_and_arch(options.get_training_parser(), ["/nonexistent", "--arch", "lstm", *LSTM])
    task = TranslationTask(convert_namespace_to_omegaconf(args).task, d, d)
    torch.manual_seed(0)
    return task, task.build_model(args).eval()


def _generation_args(*flags):
    return options.parse_args_and_arch(options.get_generation_parser(), ["/nonexistent", *flags])


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="fairseq: --match-source-len yields source length + 1 tokens")  # fmt: skip
def test_match_source_len_gives_the_source_length(lstm):
    task, model = lstm
    d = task.target_dictionary
    sample = helpers.make_sample(d, src_lengths=(7, 5, 3), tgt_lengths=(4, 4, 4))  # lstm wants sorted lengths
    generator = task.build_generator([model], _generation_args("--match-source-len", "--beam", "2"))
    hyps = task.inference_step(generator, [model], sample)
    lengths = [len(h[0]["tokens"]) for h in hyps]  # both counts include the final EOS
    assert all(h[0]["tokens"][-1] == d.eos() for h in hyps)
    assert lengths == sample["net_input"]["src_lengths"].tolist(), lengths


@pytest.mark.xfail(strict=True, raises=ValueError,
                   reason="fairseq: 'Provided Search parameters are mutually exclusive.'")  # fmt: skip
def test_diverse_beam_groups_with_diversity_rate(lstm):
    task, model = lstm
    args = _generation_args("--diverse-beam-groups", "2", "--diversity-rate", "0.5", "--beam", "4")
    assert task.build_generator([model], args) is not None


def test_diverse_beam_groups_and_diversity_rate_each_alone(lstm):
    """The working alternative: one of the two diversity options at a time."""
    task, model = lstm
    sample = helpers.make_sample(task.target_dictionary, src_lengths=(7, 5, 3), tgt_lengths=(4, 4, 4))
    for flags in (["--diverse-beam-groups", "2", "--beam", "4"], ["--diversity-rate", "0.5", "--beam", "4"]):
        hyps = task.inference_step(task.build_generator([model], _generation_args(*flags)), [model], sample)
        assert [len(h) for h in hyps] == [4, 4, 4], flags


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="fairseq-generate: '--sampling requires --nbest to be equal to --beam'")  # fmt: skip
def test_sampling_with_nbest_below_beam(tmp_path):
    from fairseq_cli import generate

    args = _generation_args("--path", str(tmp_path / "missing.pt"), "--sampling", "--beam", "5", "--nbest", "1")
    # fixed, fairseq-generate gets past its option checks and fails on the missing data/checkpoint
    with pytest.raises(OSError):
        generate.main(args)


@pytest.mark.xfail(strict=True, raises=KeyError, reason="fairseq-validate without --task: KeyError: None")
def test_validate_without_task():
    parser = options.get_validation_parser()
    args = options.parse_args_and_arch(parser, ["/nonexistent", "--path", "checkpoint.pt"])
    assert args.task is not None


def test_validate_with_task():
    """The working alternative: name the task (e.g. ``--task translation``)."""
    parser = options.get_validation_parser()
    args = options.parse_args_and_arch(parser, ["/nonexistent", "--path", "checkpoint.pt", "--task", "translation"])
    assert args.task == "translation"


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="fairseq's CPU n-gram blocker reads the padded end of the token buffer")  # fmt: skip
def test_no_repeat_ngram_blocker_on_cpu():
    """Generated so far (step 3): ``2 5 6 5``; with n = 2 the bigram ``5 6`` must not repeat: ban 6."""
    pad = 1
    tokens = torch.tensor([[2, 5, 6, 5, pad, pad]])  # the generator's buffer: max length, padded
    lprobs = torch.zeros(1, 12)
    NGramRepeatBlock(2, use_extension=False)(tokens, lprobs, 1, 1, 3)
    assert lprobs[0, 6] == float("-inf")
    assert torch.isfinite(lprobs[0, [i for i in range(12) if i != 6]]).all()
