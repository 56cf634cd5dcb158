"""Activation bytes autograd holds for backward: :class:`SavedBytes` (used by ``op_counts``/``proxies``)."""

import collections
import gc
from typing import Dict

import torch
from torch import nn


class _Packed:
    """A saved tensor as autograd keeps it while :class:`SavedBytes` watches: freed with its node."""

    __slots__ = ("tensor", "key", "owner")

    def __init__(self, tensor, key, owner):
        self.tensor, self.key, self.owner = tensor, key, owner

    def __del__(self):
        self.owner._release(self.key)


class SavedBytes:
    """Bytes of the distinct storages autograd holds for backward when ``with`` ends, parameters excluded.

    A storage counts once however many saved tensors view it, and only while a saved tensor of
    it is alive (a graph branch dropped during the forward pass frees its saved tensors).

    Args:
        model: its parameters' storages are not counted (their autocast copies are).

    After ``with``: ``bytes``, ``tensors`` (storages), ``by_op`` (bytes by the ATen call that
    saved them, with a :class:`StepCounter` watching the same step) and ``in_rnn_units`` (bytes
    saved inside fused RNN units: the CPU kernel's workspace, not cuDNN's reserve space).
    """

    def __init__(self, model: nn.Module):
        self._params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self._live: Dict = {}  # key -> [saved tensors alive, bytes, op label, inside an RNN unit]
        self.bytes = self.tensors = self.in_rnn_units = 0
        self.by_op: Dict[str, int] = collections.Counter()
        self.paused = 0
        self.counter = None  # an op_counts.StepCounter watching the same step sets itself here
        self._ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    @staticmethod
    def _unpack(packed):
        return packed.tensor if isinstance(packed, _Packed) else packed

    def _pack(self, t):
        if self.paused:
            return t
        key = self._count(t, None, keep=False)
        return _Packed(t, key, self) if key is not None else t

    def add(self, t, dtype=None) -> None:
        """Count ``t``'s storage (``dtype``: a copy of ``t`` in that dtype instead) unless it is a
        parameter's, as a fused kernel would save it: it stays counted, and ``t`` is kept alive
        (its address must not be taken by a later storage)."""
        self._count(t, dtype, keep=True)

    def _count(self, t, dtype, keep: bool):
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # tensors without a storage (e.g. opaque)
            return None
        key = storage.data_ptr() if dtype in (None, t.dtype) else (storage.data_ptr(), dtype)
        if storage.data_ptr() in self._params or not storage.nbytes():
            return None
        if key in self._live:
            self._live[key][0] += 1
            if keep and self._live[key][4] is None:
                self._live[key][4] = t
            return key
        nbytes = storage.nbytes() if key == storage.data_ptr() else t.numel() * dtype.itemsize
        op, in_unit = self.counter.saving_site() if self.counter is not None else ("?", False)
        label = f"{op} {str(t.dtype if dtype is None else dtype).replace('torch.', '')}"
        self._live[key] = [1, nbytes, label, in_unit, t if keep else None]
        return key

    def add_bytes(self, nbytes: int, label: str) -> None:
        """Count ``nbytes`` more that a fused kernel would save (they stay counted)."""
        self._live[object()] = [1, nbytes, label, False, None]

    def _release(self, key) -> None:
        entry = self._live.get(key)
        if entry is not None:
            entry[0] -= 1
            if entry[0] <= 0:
                del self._live[key]

    def __enter__(self):
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)
        gc.collect()  # graph branches in reference cycles: freed now, not whenever the collector runs
        live = list(self._live.values())
        self.bytes = sum(e[1] for e in live)
        self.tensors = len(live)
        self.in_rnn_units = sum(e[1] for e in live if e[3])
        self.by_op = collections.Counter()
        for e in live:
            self.by_op[e[2]] += e[1]
        return False
