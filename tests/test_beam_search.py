"""fairseq's beam search with the incremental cache finds what it finds without it, for
every ``*_tiny`` architecture."""

import pytest
import torch
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.sequence_generator import SequenceGenerator

from fairseq_dense.modules import encoder_decoder
from tests import helpers
from tests import reliability_helpers as rh

ARCHS = rh.tiny_archs()
#: the decoders whose cache holds per-sentence encoder memory (``IncrementalDecoder.MEMORY``)
MEMORY_ARCHS = [(a,) for a in ARCHS if issubclass(ARCH_MODEL_REGISTRY[a], encoder_decoder.EncoderDecoderModel)] + [
    ("fast_forward_lstm_tiny", "--interface", "deep_ed")
]


@pytest.mark.parametrize("arch", ARCHS)
def test_beam_search_with_cache_equals_beam_search_without(arch):
    """The cached path (reorders of the cache, finished sentences leaving the batch) finds
    the hypotheses that re-running the full decoder at every step finds.

    An untrained tiny model never ends a sentence early, so the end-of-sentence logit is
    raised by a few small offsets: some sentences then finish before others and leave the
    batch.
    """
    d = helpers.dummy_dictionary(12)
    sample = helpers.make_sample(d, src_lengths=(5, 7, 3, 6, 4, 2, 7), tgt_lengths=(4, 6, 5, 3, 4, 2, 6))
    for eos_offset in (0.05, 0.1, 0.15, 0.2):
        torch.manual_seed(0)
        model = rh.build_tiny_model(arch, d).eval()
        out_proj = getattr(model.decoder, "output_projection", None)
        if getattr(out_proj, "bias", None) is not None:
            with torch.no_grad():
                out_proj.bias[d.eos()] += eos_offset
        cached = helpers.beam_search(model, d, sample)
        uncached = helpers.beam_search(model, d, sample, cached=False)
        helpers.assert_same_hypotheses(cached, uncached, atol=1e-4)


@pytest.mark.parametrize("arch", MEMORY_ARCHS, ids=" ".join)
def test_beam_search_skipping_memory_reorders_changes_nothing(arch, monkeypatch):
    """Beam 5 finds bit-identical tokens and scores whether the encoder output and the decoder's
    per-sentence memory stay in place while each hypothesis stays inside its sentence's beam,
    or are reordered at every step (beam size unknown). Raising the end-of-sentence logit by a
    few offsets makes sentences finish at different steps: both paths run, the plain one when
    the batch shrinks."""
    d = helpers.dummy_dictionary(12)
    sample = helpers.make_sample(d, src_lengths=(5, 7, 3, 6, 4, 2, 7), tgt_lengths=(4, 6, 5, 3, 4, 2, 6))
    torch.manual_seed(0)
    model = rh.build_tiny_model(arch[0], d, *arch[1:]).eval()
    decoder = model.decoder
    assert decoder.MEMORY
    checks = []
    within_beams = encoder_decoder.within_beams
    monkeypatch.setattr(encoder_decoder, "within_beams", lambda *a: checks.append(within_beams(*a)) or checks[-1])
    output_layer = decoder.output_layer
    seen = set()
    for eos_offset in (0.05, 0.1, 0.13, 0.2, 0.3, 0.5):

        def raised_eos(x, offset=eos_offset):
            logits = output_layer(x)
            logits[..., d.eos()] += offset
            return logits

        decoder.output_layer = raised_eos
        gen = SequenceGenerator([model], d, beam_size=5, max_len_a=0, max_len_b=8, min_len=1)
        assert model.encoder.beam_size == decoder.beam_size == 5
        with torch.no_grad():
            checks.clear()
            skipped = gen.generate([model], sample)
            seen.update(checks)
            model.set_beam_size(1)  # unknown: every reorder index_selects
            checks.clear()
            plain = gen.generate([model], sample)
            assert checks and True not in checks
        helpers.assert_same_hypotheses(skipped, plain, atol=0)
    assert seen == {True, False}
