"""Skip beam-search reorders that cannot change a tensor.

Beam search keeps ``beam`` copies of every sentence's encoder output and of the
decoder caches derived from it (projected attention keys, values), and after every
step reorders all cached tensors along the batch by ``new_order``. For these
*per-sentence* tensors the reorder moves rows between identical copies: hypothesis
``i`` takes the row of hypothesis ``new_order[i]``, a beam of the same sentence.
The ``index_select`` then costs a full copy of every encoder-sized tensor per step
and changes nothing.

A ``row_groups`` tensor ``(batch,)`` records which rows are known to be equal:
rows with the same id are bitwise identical. A reorder that maps every row to a row
of its own group (``groups[new_order] == groups``) leaves the tensors as they are;
any other reorder (a finished sentence leaving the batch, a generator that permutes
sentences) does the ``index_select`` and carries the ids along. The skip is exact:
it only drops copies between bitwise-equal rows.

Ids come from two places:

- :func:`reorder_encoder_out` starts from "every row its own group" and derives the
  ids through the reorders themselves: the generator's first reorder expands each
  sentence to its beams, so afterwards the copies share their sentence's id;
- :func:`reorder_cache` compares consecutive rows of a decoder cache's per-sentence
  tensors at its first reorder, after that expansion (one comparison per batch,
  cheaper than one reorder), and keeps the ids in the cache.
"""
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

#: key of the group ids in encoder outputs and decoder caches
ROW_GROUPS = "row_groups"
#: key of each row's sentence in decoder caches that keep tensors once per sentence
SENTENCE = "sentence"

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: Tensor) -> Tensor:
    """The tensor's bit patterns (floats compared bitwise: ``-0.0 != 0.0``, NaN equals itself)."""
    if t.is_floating_point() or t.is_complex():
        return t.contiguous().view(_BITS[t.element_size()])
    return t


def row_groups(tensors: Iterable[Tuple[Tensor, int]]) -> Tensor:
    """Group ids of runs of consecutive rows that are bitwise equal in every tensor.

    Args:
        tensors: ``(tensor, batch_dim)`` pairs with the same batch size.

    Returns:
        ``(batch,)`` int64 ids, non-decreasing; two rows share an id only if they
        are equal, bit for bit, in all the tensors.
    """
    same: Optional[Tensor] = None
    for t, dim in tensors:
        b = _bits(t).movedim(dim, 0)
        if b.size(0) == 0:
            return torch.zeros(0, dtype=torch.long, device=t.device)
        eq = b[1:] == b[:-1]
        if eq.dim() > 1:
            eq = eq.flatten(1).all(dim=1)
        same = eq if same is None else same & eq
    if same is None:
        raise ValueError("row_groups needs at least one tensor")
    return torch.cat([same.new_zeros(1, dtype=torch.long), (~same).long().cumsum(0)])


def keeps_rows(groups: Optional[Tensor], new_order: Tensor) -> Tuple[bool, Optional[Tensor]]:
    """``(True, groups)`` if ``new_order`` maps every row to an equal one, else
    ``(False, groups[new_order])`` (``None`` when no ids are known)."""
    if groups is None:
        return False, None
    new_groups = groups.index_select(0, new_order.to(groups.device))
    if new_groups.size(0) == groups.size(0) and torch.equal(new_groups, groups):
        return True, groups
    return False, new_groups


def group_rows(groups: Optional[Tensor], batch: int, device=None) -> Tuple[Tensor, Tensor]:
    """``(first, inverse)``: one row per group (the first) and each row's group number, so that
    ``x.index_select(0, first).index_select(0, inverse)`` equals ``x`` for group-equal rows.

    Args:
        groups: ``(batch,)`` row-group ids, or None (every row its own group).
        batch: number of rows.
    """
    if groups is None or groups.numel() == 0:
        rows = torch.arange(batch, device=device)
        return rows, rows
    uniq, inverse = torch.unique(groups, return_inverse=True)
    rows = torch.arange(groups.numel(), device=groups.device)
    first = torch.full_like(uniq, groups.numel()).scatter_reduce_(0, inverse, rows, reduce="amin")
    return first, inverse


def per_group(fn: Callable[[Tensor], Tensor], x: Tensor, groups: Optional[Tensor]) -> Tensor:
    """``fn(x)`` computed on one row per group of equal rows and copied to the others.

    Beam search starts every sentence as ``beam`` identical rows; a per-sentence
    precomputation (e.g. projecting the encoder output) then needs to run once per
    sentence, not once per hypothesis.

    Args:
        fn: maps ``(n, ...)`` to ``(n, ...)``, each row on its own.
        x: ``(batch, ...)``.
        groups: ``(batch,)`` row-group ids (rows sharing an id are bitwise equal),
            or None: every row is computed.

    Returns:
        ``fn(x)``, its rows bitwise equal within a group.
    """
    first, inverse = group_rows(groups, x.size(0), x.device)
    if first.numel() == x.size(0):
        return fn(x)
    return fn(x.index_select(0, first)).index_select(0, inverse)


def compact(per_item: Tensor, item_of_row: Tensor) -> Tuple[Tensor, Tensor]:
    """Drop the items (dim 0 of ``per_item``) that no row refers to any more, e.g. the
    sentences that left the beam search's batch; renumber ``item_of_row`` to match."""
    used = torch.unique(item_of_row)
    if used.numel() == per_item.size(0):
        return per_item, item_of_row
    return per_item.index_select(0, used), torch.searchsorted(used, item_of_row)


def weighted_rows(weights: Tensor, per_item: Tensor, item_of_row: Tensor) -> Tensor:
    """``out[r] = weights[r] @ per_item[item_of_row[r]]``: each row's weights applied to its
    item's matrix (e.g. attention weights to a per-sentence projection of the annotations).

    When the rows are the items' beams laid out item-major (``item_of_row`` =
    ``0,0,..,1,1,..``: fairseq's beam search), every item's matrix is read once for all
    its rows (one ``bmm`` of ``(items, beam, K) x (items, K, W)``); otherwise each row
    gets a copy of its item's matrix.

    Args:
        weights: ``(rows, K)``.
        per_item: ``(items, K, W)``.
        item_of_row: ``(rows,)`` int64.

    Returns:
        ``(rows, W)``.
    """
    rows, items = weights.size(0), per_item.size(0)
    if items and rows % items == 0:
        beam = rows // items
        expected = torch.arange(items, device=item_of_row.device).repeat_interleave(beam)
        if torch.equal(item_of_row, expected):
            return torch.bmm(weights.view(items, beam, -1), per_item).view(rows, -1)
    return torch.bmm(weights.unsqueeze(1), per_item.index_select(0, item_of_row)).squeeze(1)


def encoder_row_groups(encoder_out: Dict[str, List[Tensor]]) -> Optional[Tensor]:
    """The ``row_groups`` ids of an encoder output, or None when none are known."""
    known = encoder_out.get(ROW_GROUPS)
    return known[0] if known else None


def reorder_encoder_out(
    encoder_out: Dict[str, List[Tensor]],
    new_order: Tensor,
    reorder: Callable[[Dict[str, List[Tensor]], Tensor], Dict[str, List[Tensor]]],
) -> Dict[str, List[Tensor]]:
    """An encoder's ``reorder_encoder_out`` that skips reorders between equal rows.

    Args:
        encoder_out: the encoder's output; may carry ``row_groups: [ids]``.
        new_order: ``(new_batch,)`` row indices.
        reorder: the encoder's plain reorder (``index_select`` of every key); it
            need not know about ``row_groups``.
    """
    known = encoder_out.get(ROW_GROUPS)
    groups = known[0] if known else None
    if groups is None:
        # nothing known: every row is its own group (the ids then follow the reorders)
        batch = _batch_size(encoder_out)
        groups = None if batch is None else torch.arange(batch, device=new_order.device)
    keep, new_groups = keeps_rows(groups, new_order)
    if keep:
        return encoder_out
    out = reorder(encoder_out, new_order)
    if new_groups is not None:
        out = dict(out)
        out[ROW_GROUPS] = [new_groups]
    return out


def _batch_size(encoder_out: Dict[str, List[Tensor]]) -> Optional[int]:
    mask = encoder_out.get("encoder_padding_mask")
    if mask and mask[0] is not None:
        return mask[0].size(0)
    lengths = encoder_out.get("src_lengths")
    if lengths and lengths[0] is not None:
        return lengths[0].size(0)
    return None


def reorder_cache(cache: Dict[str, Optional[Tensor]], new_order: Tensor,
                  static: Sequence[str] = (), per_sentence: Sequence[str] = ()) -> Dict[str, Optional[Tensor]]:
    """Reorder a decoder cache along dim 0; the ``static`` keys (per-sentence tensors)
    only when the reorder moves rows between groups of bitwise-equal rows.

    The groups are found from the static tensors themselves at the first reorder and
    kept under ``row_groups``; a decoder that rebuilds its cache every step carries
    that key over (``{**cached, ...}``) so that the comparison runs once per batch.

    The ``per_sentence`` keys hold one entry per sentence, not per row (rows find theirs
    through ``cache[SENTENCE]``, which is reordered like any row tensor): they are never
    copied between rows, only cut down to the sentences still in the batch (:func:`compact`).
    """
    groups = cache.get(ROW_GROUPS)
    if groups is None:
        present = [(cache[k], 0) for k in static if cache.get(k) is not None]
        groups = row_groups(present) if present else None
    keep, new_groups = keeps_rows(groups, new_order)
    out: Dict[str, Optional[Tensor]] = {}
    for key, value in cache.items():
        if key != ROW_GROUPS and key not in per_sentence:
            out[key] = value if value is None or (keep and key in static) else value.index_select(0, new_order)
    if new_groups is not None:
        out[ROW_GROUPS] = new_groups
    sentence = out.get(SENTENCE)
    for key in per_sentence:
        if cache.get(key) is not None:
            out[key], out[SENTENCE] = compact(cache[key], sentence)
    return out
