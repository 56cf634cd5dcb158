"""fairseq's beam search with the incremental cache finds what it finds without it, for
every ``*_tiny`` architecture."""

import pytest
import torch

from tests import helpers
from tests import reliability_helpers as rh

ARCHS = rh.tiny_archs()


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
