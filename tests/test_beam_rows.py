"""Beam reorders between a sentence's identical copies are skipped, and exactly so.

Unit checks of :mod:`fairseq_dense.modules.beam_rows`, then, for every ``*_tiny``
architecture, fairseq's beam search with the skip against the same search with
every reorder done: identical hypotheses and scores, and the skip did happen.
"""
import pytest
import torch

from fairseq_dense.modules import beam_rows
from tests import helpers
from tests import reliability_helpers as rh

ARCHS = rh.tiny_archs()


def test_row_groups_marks_runs_of_bitwise_equal_rows():
    a = torch.tensor([[1.0, 2.0], [1.0, 2.0], [3.0, 4.0], [1.0, 2.0], [1.0, 2.0]])
    assert beam_rows.row_groups([(a, 0)]).tolist() == [0, 0, 1, 2, 2]
    # every tensor must agree; batch along dim 1 too
    b = torch.tensor([[5, 5, 5, 6, 7]]).t()
    assert beam_rows.row_groups([(a, 0), (b.t(), 1)]).tolist() == [0, 0, 1, 2, 3]


def test_row_groups_compares_bits_not_values():
    z = torch.tensor([[0.0], [-0.0], [float("nan")], [float("nan")]])
    assert beam_rows.row_groups([(z, 0)]).tolist() == [0, 1, 2, 2]
    assert beam_rows.row_groups([(torch.ones(1, 3), 0)]).tolist() == [0]
    assert beam_rows.row_groups([(torch.ones(0, 3), 0)]).numel() == 0


def test_reorder_cache_keeps_static_tensors_only_within_groups():
    keys = torch.arange(4.0).repeat_interleave(2).view(8, 1)  # 4 sentences x 2 beams
    hidden = torch.randn(8, 3)
    cache = {"keys": keys, "hidden": hidden, beam_rows.ROW_GROUPS: beam_rows.row_groups([(keys, 0)])}
    within = torch.tensor([1, 1, 2, 3, 4, 4, 7, 6])
    out = beam_rows.reorder_cache(cache, within, static=("keys",))
    assert out["keys"] is keys  # no copy
    assert torch.equal(out["keys"], keys.index_select(0, within))
    assert torch.equal(out["hidden"], hidden.index_select(0, within))
    across = torch.tensor([2, 3, 0, 1, 4, 5, 6, 7])  # sentences swapped
    out = beam_rows.reorder_cache(cache, across, static=("keys",))
    assert torch.equal(out["keys"], keys.index_select(0, across))
    assert out[beam_rows.ROW_GROUPS].tolist() == [1, 1, 0, 0, 2, 2, 3, 3]
    # without known ids, the first reorder finds them from the static tensors
    found = beam_rows.reorder_cache({"keys": keys, "hidden": hidden}, within, static=("keys",))
    assert found["keys"] is keys and found[beam_rows.ROW_GROUPS].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    shrink = torch.tensor([0, 1, 6, 7])  # finished sentences leave the batch
    out = beam_rows.reorder_cache(cache, shrink, static=("keys",))
    assert torch.equal(out["keys"], keys.index_select(0, shrink))
    assert out[beam_rows.ROW_GROUPS].tolist() == [0, 0, 3, 3]


def test_reorder_encoder_out_learns_groups_from_the_beam_expansion():
    calls = []

    def plain(enc, order):
        calls.append(order)
        return {"encoder_out": [enc["encoder_out"][0].index_select(1, order)],
                "encoder_padding_mask": [enc["encoder_padding_mask"][0].index_select(0, order)]}

    enc = {"encoder_out": [torch.randn(4, 3, 2)], "encoder_padding_mask": [torch.zeros(3, 4, dtype=torch.bool)]}
    expanded = beam_rows.reorder_encoder_out(enc, torch.arange(3).repeat_interleave(2), plain)
    assert expanded[beam_rows.ROW_GROUPS][0].tolist() == [0, 0, 1, 1, 2, 2]
    same = beam_rows.reorder_encoder_out(expanded, torch.tensor([1, 0, 2, 2, 5, 4]), plain)
    assert same is expanded and len(calls) == 1
    moved = beam_rows.reorder_encoder_out(expanded, torch.tensor([0, 1, 4, 5]), plain)
    assert len(calls) == 2 and moved[beam_rows.ROW_GROUPS][0].tolist() == [0, 0, 2, 2]
    assert torch.equal(moved["encoder_out"][0], expanded["encoder_out"][0][:, [0, 1, 4, 5]])


def test_per_group_computes_each_group_once_and_copies_it():
    x = torch.randn(3, 2, 4).repeat_interleave(2, dim=0)[[0, 1, 2, 3, 5, 4]]  # 3 sentences x 2 beams
    groups = torch.tensor([7, 7, 2, 2, 9, 9])
    w = torch.randn(5, 4)
    seen = []

    def project(v):
        seen.append(v.size(0))
        return v @ w.t()

    out = beam_rows.per_group(project, x, groups)
    assert seen == [3]  # one row per sentence
    torch.testing.assert_close(out, x @ w.t())
    assert torch.equal(out[0], out[1]) and torch.equal(out[4], out[5])
    # unknown or all-distinct groups: every row computed
    seen.clear()
    beam_rows.per_group(project, x, None)
    beam_rows.per_group(project, x, torch.arange(6))
    assert seen == [6, 6]


def test_weighted_rows_reads_each_item_once_for_its_beams_or_copies_per_row():
    per_item = torch.randn(3, 4, 5)
    weights = torch.randn(6, 4)
    expected = lambda items: torch.stack([weights[r] @ per_item[i] for r, i in enumerate(items.tolist())])
    beams = torch.tensor([0, 0, 1, 1, 2, 2])  # item-major: one (3, 2, 4) x (3, 4, 5) bmm
    torch.testing.assert_close(beam_rows.weighted_rows(weights, per_item, beams), expected(beams))
    mixed = torch.tensor([2, 0, 0, 1, 2, 1])  # any other layout: per-row copies
    torch.testing.assert_close(beam_rows.weighted_rows(weights, per_item, mixed), expected(mixed))


def test_compact_drops_items_no_row_uses():
    per_item = torch.arange(4.0).view(4, 1)
    kept, rows = beam_rows.compact(per_item, torch.tensor([3, 3, 1, 1]))
    assert kept.flatten().tolist() == [1.0, 3.0] and rows.tolist() == [1, 1, 0, 0]
    same, rows = beam_rows.compact(per_item, torch.tensor([0, 1, 2, 3, 3]))
    assert same is per_item and rows.tolist() == [0, 1, 2, 3, 3]


def test_reorder_cache_keeps_per_sentence_tensors_and_drops_finished_sentences():
    per_sent_a, per_sent_b = torch.arange(3.0).view(3, 1), torch.arange(30.0, 33.0).view(3, 1)
    cache = {"hidden": torch.arange(6.0).view(6, 1), "a": per_sent_a, "b": per_sent_b,
             beam_rows.SENTENCE: torch.tensor([0, 0, 1, 1, 2, 2])}
    within = beam_rows.reorder_cache(cache, torch.tensor([1, 0, 2, 2, 5, 4]), per_sentence=("a", "b"))
    assert within["a"] is per_sent_a and within["b"] is per_sent_b  # never copied between rows
    assert within[beam_rows.SENTENCE].tolist() == [0, 0, 1, 1, 2, 2]
    # sentence 1 finished: its rows leave, both per-sentence tensors lose its entry
    out = beam_rows.reorder_cache(cache, torch.tensor([0, 1, 5, 4]), per_sentence=("a", "b"))
    assert out["a"].flatten().tolist() == [0.0, 2.0] and out["b"].flatten().tolist() == [30.0, 32.0]
    assert out[beam_rows.SENTENCE].tolist() == [0, 0, 1, 1]
    assert out["hidden"].flatten().tolist() == [0.0, 1.0, 5.0, 4.0]


@pytest.mark.parametrize("arch", ARCHS)
def test_beam_search_with_skipped_reorders_equals_full_reorders(arch, monkeypatch):
    torch.manual_seed(0)
    d = helpers.dummy_dictionary(12)
    model = rh.build_tiny_model(arch, d).eval()
    sample = helpers.make_sample(d, src_lengths=(5, 7, 3, 6, 4), tgt_lengths=(4, 6, 5, 3, 4))
    plain_keeps = beam_rows.keeps_rows
    skipped = []

    def counting(groups, new_order):
        keep, new_groups = plain_keeps(groups, new_order)
        skipped.append(keep)
        return keep, new_groups

    monkeypatch.setattr(beam_rows, "keeps_rows", counting)
    fast = helpers.beam_search(model, d, sample)
    assert any(skipped), "no reorder was skipped"

    def never(groups, new_order):
        return False, None if groups is None else groups.index_select(0, new_order)

    monkeypatch.setattr(beam_rows, "keeps_rows", never)
    full = helpers.beam_search(model, d, sample)
    helpers.assert_same_hypotheses(fast, full, atol=1e-6)


@pytest.mark.parametrize("arch", ARCHS)
def test_beam_search_with_cache_equals_beam_search_without(arch, monkeypatch):
    """The cached path (per-sentence projections, finished sentences dropped from them)
    finds the hypotheses that re-running the full decoder at every step finds.

    An untrained tiny model never ends a sentence early, so the end-of-sentence logit is
    raised by a few small offsets: some sentences then finish before others and leave the
    batch (and, for the families that keep per-sentence projections, those projections).
    """
    d = helpers.dummy_dictionary(12)
    sample = helpers.make_sample(d, src_lengths=(5, 7, 3, 6, 4, 2, 7), tgt_lengths=(4, 6, 5, 3, 4, 2, 6))
    plain_compact = beam_rows.compact
    dropped = []

    def counting(per_item, item_of_row):
        out = plain_compact(per_item, item_of_row)
        dropped.append(per_item.size(0) - out[0].size(0))
        return out

    monkeypatch.setattr(beam_rows, "compact", counting)
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
    if dropped:  # families with per-sentence projections
        assert max(dropped) > 0, f"{arch}: no finished sentence was dropped from the per-sentence cache"
