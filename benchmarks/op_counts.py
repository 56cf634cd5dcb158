"""Counting a training step on the CPU in terms that carry over to a GPU (the method: docs/benchmarks.md,
"Speed proxies"): :class:`StepCounter`, kernel launches and matmul-class FLOPs by dtype; :class:`SavedBytes`,
the activation bytes saved for backward; :class:`SyncCounter`, the host syncs a step would make on a GPU.
"""

import collections
import contextlib
import gc
import math
import os
import re
import traceback
from typing import Dict, Optional, Tuple

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from fairseq_dense.modules.low_precision import cpu_lstm_kernel, onednn_lstm_runs  # noqa: F401  (used here and by callers)

aten = torch.ops.aten

#: recurrent modules CUDA runs as one cuDNN call (per call) or one fused cell (per step)
RNN_UNITS = (nn.LSTM, nn.GRU, nn.RNN)
CELL_UNITS = (nn.LSTMCell, nn.GRUCell, nn.RNNCell)

#: (forward, backward) CUDA kernels of a fused unit's call: a cuDNN RNN per layer and direction (the input GEMM
#: batched over all steps and the recurrence; the recurrence's backward, the input GEMM's data and weight
#: gradients), a fused cell (``_thnn_fused_lstm_cell``: two GEMMs and the pointwise kernel; the pointwise backward
#: with the bias gradients, both GEMMs' data and weight gradients), CUDA's fused attention (the CPU may run its
#: unfused math form). Autocast's casts of a unit's weights count on top, as the CPU's autocast makes them.
UNIT_LAUNCHES = {"rnn_per_layer_direction": (2, 3), "cell": (3, 5), "attention": (1, 2)}

#: operator names that run no kernel on a GPU although they are not views (the profiler's markers
#: around a ``torch.optim`` step included)
NO_KERNEL = set(
    "empty empty_like empty_strided new_empty new_empty_strided _unsafe_view lift_fresh detach alias resize_ set_ "
    "is_same_size _has_compatible_shallow_copy_type record_stream _record_function_enter_new "
    "_record_function_exit".split()
)

#: names that look like matmul-class work; such a call with no FLOP formula is reported
MATMUL_LIKE = re.compile(r"mm|conv|linear|matmul|rnn|attention|einsum|(?<!_fused_)lstm|(?<!_fused_)gru")


def _mm(a, b) -> int:
    return 2 * math.prod(a.shape[:-1]) * a.shape[-1] * b.shape[-1]


def _sdpa(q, k, v) -> int:
    # QK^T and PV: 2 x batch x heads x L x S x (E + Ev)
    return 2 * math.prod(q.shape[:-1]) * k.shape[-2] * (q.shape[-1] + v.shape[-1])


def _conv_tbc(x, w, out) -> int:
    # input (T, B, C_in), weight (K, C_in, C_out), output (T', B, C_out)
    return 2 * out.shape[0] * out.shape[1] * w.shape[0] * w.shape[1] * w.shape[2]


def _rnn_layer(x, w_ih, w_hh) -> int:
    # input (T, B, I), W_ih (G*H, I), W_hh (G*H, H): every step multiplies [x_t; h_{t-1}]
    return 2 * math.prod(x.shape[:-1]) * w_ih.shape[0] * (w_ih.shape[1] + w_hh.shape[1])


def _cudnn_rnn(x, weights, stride) -> int:
    # weights: [W_ih, W_hh(, b_ih, b_hh)] per layer and direction; x (T, B, I) or packed (tokens, I)
    return sum(_rnn_layer(x, weights[i], weights[i + 1]) for i in range(0, len(weights), stride))


def _registry(name):
    from torch.utils.flop_counter import flop_registry

    f = flop_registry[getattr(aten, name)]
    return lambda args, kwargs, out: f(*args, **kwargs, out_val=out)


#: operator name -> (FLOPs of a call from (args, kwargs, out), index of the operand whose dtype counts)
FLOPS = {
    **dict.fromkeys(("mm", "bmm"), (lambda a, k, o: _mm(a[0], a[1]), 0)),
    **dict.fromkeys(
        ("addmm", "addmm_", "_addmm_activation", "baddbmm", "baddbmm_", "addbmm", "addbmm_"),
        (lambda a, k, o: _mm(a[1], a[2]), 1),
    ),
    "mv": (lambda a, k, o: 2 * a[0].numel(), 0),
    **dict.fromkeys(("addmv", "addmv_"), (lambda a, k, o: 2 * a[1].numel(), 1)),
    "linear": (lambda a, k, o: 2 * a[0].numel() * a[1].shape[0], 0),
    "convolution": (_registry("convolution"), 0),
    "_convolution": (_registry("_convolution"), 0),
    "convolution_backward": (_registry("convolution_backward"), 0),
    "conv_tbc": (lambda a, k, o: _conv_tbc(a[0], a[1], o), 0),
    "conv_tbc_backward": (lambda a, k, o: 2 * _conv_tbc(a[1], a[2], a[0]), 0),
    "mkldnn_rnn_layer": (lambda a, k, o: _rnn_layer(a[0], a[1], a[2]), 0),
    "mkldnn_rnn_layer_backward": (lambda a, k, o: 2 * _rnn_layer(a[0], a[1], a[2]), 0),
    "_cudnn_rnn": (lambda a, k, o: _cudnn_rnn(a[0], a[1], a[2]), 0),
    "_cudnn_rnn_backward": (lambda a, k, o: 2 * _cudnn_rnn(a[0], a[1], a[2]), 0),
    "_scaled_dot_product_flash_attention_for_cpu": (lambda a, k, o: _sdpa(a[0], a[1], a[2]), 0),
    "_scaled_dot_product_flash_attention_for_cpu_backward": (lambda a, k, o: 2 * _sdpa(a[1], a[2], a[3]), 1),
}
# CUDA's fused attention kernels, forward and backward (the backward's first operand is the output's gradient)
for _name in (f"_scaled_dot_product_{kind}_attention" for kind in ("flash", "efficient", "cudnn")):
    FLOPS[_name], FLOPS[f"{_name}_backward"] = (_registry(_name), 0), (_registry(f"{_name}_backward"), 1)


def _tensors(obj) -> list:
    return [t for t in tree_flatten(obj)[0] if torch.is_tensor(t)]


def _graph_inputs(obj) -> set:
    """The autograd nodes behind the tensors of ``obj``: where a unit's own nodes end."""
    return {t.grad_fn for t in _tensors(obj) if t.grad_fn is not None}


def rnn_launches(num_layers: int, bidirectional: bool):
    """``(forward, backward)`` CUDA kernels of one cuDNN RNN call (:data:`UNIT_LAUNCHES`)."""
    fwd, bwd = UNIT_LAUNCHES["rnn_per_layer_direction"]
    n = num_layers * (2 if bidirectional else 1)
    return fwd * n, bwd * n


class StepCounter(TorchDispatchMode):
    """Counts kernel launches per phase and matmul-class FLOPs per dtype while active (``with``; ``with
    counter.phase(name):`` around a step's parts).

    Args:
        model: its ``nn.LSTM``/``nn.GRU``/``nn.RNN`` calls and cells count as fused units (hooks, removed by
            :meth:`close` or at the end of ``with``).
        saved: a :class:`SavedBytes` watching the same step: an attention unit then saves what CUDA's fused
            attention saves (query, key, value, output, a float32 log-sum-exp per row), not the CPU math form's.
    """

    def __init__(self, model: nn.Module, saved=None):
        super().__init__()
        self.saved = saved
        self.last_op = "?"  # the latest ATen call: the one whose autograd node saves what it saves next
        if saved is not None:
            saved.counter = self
        # launches and operator calls by name, matmul-class FLOPs by "op dtype", fused units by kind
        self.launches, self.ops, self.flops, self.units = (collections.Counter() for _ in range(4))
        self.unrecognised: Dict[str, int] = collections.Counter()
        self._phase, self._depth, self._attention_depth, self._boundary = "other", 0, 0, []
        self._nodes = set()  # autograd nodes of fused units: their backward launches are the convention's
        self._flop_nodes = set()  # ... of attention units: their FLOPs are counted analytically
        self._unit_grads = set()  # storages of gradients computed inside units (by data pointer)
        self._pending_backward, self._pending_flops = 0, collections.Counter()
        self._hooks = []
        for m in model.modules():
            if isinstance(m, RNN_UNITS + CELL_UNITS):
                self._hooks += [m.register_forward_pre_hook(self._enter), m.register_forward_hook(self._leave)]

    def close(self) -> None:
        """Remove the module hooks and drop the references to the autograd graph."""
        for h in self._hooks:
            h.remove()
        self._hooks, self._nodes, self._flop_nodes, self._unit_grads = [], set(), set(), set()

    @contextlib.contextmanager
    def phase(self, name: str):
        """Attribute the launches inside to ``name`` (units' backward kernels go to ``backward``)."""
        previous, self._phase = self._phase, name
        if name == "backward":
            self.launches["backward"] += self._pending_backward
            self.flops.update(self._pending_flops)
            self._pending_backward, self._pending_flops = 0, collections.Counter()
        try:
            yield
        finally:
            self._phase = previous

    def __enter__(self):
        # F.scaled_dot_product_attention is looked up at each call (by fairseq's attention through
        # F.multi_head_attention_forward too): routed through _attention while counting
        self._sdpa = F.scaled_dot_product_attention
        F.scaled_dot_product_attention = lambda *args, **kwargs: self._attention(self._sdpa, args, kwargs)
        # the functional LSTM (a layer with weights of its own, as Deep-Att's) is the same fused
        # unit as an nn.LSTM call (which goes through _VF.lstm, not this name): counted alike
        self._lstm = torch.lstm
        torch.lstm = lambda *args, **kwargs: self._functional_rnn(self._lstm, args, kwargs)
        return super().__enter__()

    def __exit__(self, *exc):
        F.scaled_dot_product_attention = self._sdpa
        torch.lstm = self._lstm
        self.close()
        return super().__exit__(*exc)

    def _functional_rnn(self, func, args, kwargs):
        """``torch.lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, ...)`` (packed:
        ``batch_sizes`` second) as one fused unit."""
        boundary = _graph_inputs((args, kwargs))
        self._depth += 1
        try:
            out = func(*args, **kwargs)
        finally:
            self._depth -= 1
        first = 2 if torch.is_tensor(args[1]) else 1  # packed: (data, batch_sizes, hx, params, ...)
        self._close_unit(boundary, out, rnn_launches(args[first + 3], args[first + 6]), "lstm")
        return out

    def _enter(self, module, args):
        self._depth += 1
        self._boundary.append(_graph_inputs(args))

    def _leave(self, module, args, output):
        self._depth -= 1
        launches = rnn_launches(module.num_layers, module.bidirectional) if isinstance(module, RNN_UNITS) else None
        self._close_unit(self._boundary.pop(), output, launches or UNIT_LAUNCHES["cell"], type(module).__name__)

    def _close_unit(self, boundary, output, launches, name: str, nodes=None) -> bool:
        """Take the autograd nodes a unit's call created (their backward is the unit's) and count
        its launches; returns whether a backward will run through it."""
        stack = [t.grad_fn for t in _tensors(output) if t.grad_fn is not None]
        while stack:
            node = stack.pop()
            if node is None or node in self._nodes or node in boundary or type(node).__name__ == "AccumulateGrad":
                continue
            self._nodes.add(node)
            if nodes is not None:
                nodes.add(node)
            stack.extend(n for n, _ in node.next_functions)
        self.launches[self._phase] += launches[0]
        backward = any(t.requires_grad for t in _tensors(output))
        if backward:
            self._pending_backward += launches[1]
        self.units[name] += 1
        return backward

    def _attention(self, func, args, kwargs):
        q, k, v = (kwargs.get(n, a) for n, a in zip(("query", "key", "value"), list(args) + [None] * 3))
        boundary = _graph_inputs((args, kwargs))
        self._depth += 1
        self._attention_depth += 1
        if self.saved is not None:
            self.saved.paused += 1
        try:
            out = func(*args, **kwargs)
        finally:
            self._depth -= 1
            self._attention_depth -= 1
            if self.saved is not None:
                self.saved.paused -= 1
        dtype = q.dtype
        if torch.is_autocast_enabled(q.device.type):  # sdpa is on autocast's lower-precision list (CPU, CUDA)
            dtype = torch.get_autocast_dtype(q.device.type)
        self.last_op = "scaled_dot_product_attention"
        if self.saved is not None and torch.is_grad_enabled() and out.requires_grad:
            for t in (q, k, v, out):  # the fused kernel keeps its inputs in the dtype it computes in
                self.saved.add(t, dtype)
            self.saved.add_bytes(4 * math.prod(q.shape[:-1]), "scaled_dot_product_attention float32")  # row log-sum-exp
        key = f"scaled_dot_product_attention {str(dtype).replace('torch.', '')}"
        self.flops[key] += _sdpa(q, k, v)
        if self._close_unit(boundary, out, UNIT_LAUNCHES["attention"], "attention", self._flop_nodes):
            self._pending_flops[key] += 2 * _sdpa(q, k, v)
        return out

    def saving_site(self) -> Tuple[str, bool]:
        """The ATen call whose autograd node saves what is saved next, and whether it runs inside a fused
        RNN unit (whose CPU kernel's workspace is not cuDNN's reserve space)."""
        return self.last_op, bool(self._depth and not self._attention_depth)

    def _in_unit(self, name: str, node, args, out, in_attention: bool) -> bool:
        if in_attention:
            return True  # attention: everything, the CPU's upcasts included
        if node is not None and node in self._nodes:
            self._unit_grads.update(t.data_ptr() for t in _tensors(out))
            return type(node).__name__ != "ToCopyBackward0"  # autocast's casts: counted as the CPU makes them
        if node is None and self._phase == "backward" and name in ("add", "add_"):
            # the engine summing gradients that unit nodes produced (a weight used at every time step)
            inputs = [t.data_ptr() for t in _tensors(args)]
            if inputs and all(p in self._unit_grads for p in inputs):
                self._unit_grads.update(t.data_ptr() for t in _tensors(out))
                return True
        if name == "_to_copy":  # autocast's casts of an RNN's weights: counted as the CPU makes them
            return False
        return bool(self._depth)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        self.last_op = name
        node = torch._C._current_autograd_node()
        in_attention = bool(self._attention_depth) or (node is not None and node in self._flop_nodes)
        if in_attention:
            pass  # attention's FLOPs are counted analytically
        elif name in FLOPS:
            formula, operand = FLOPS[name]
            dtype = args[operand].dtype
            self.flops[f"{name} {str(dtype).replace('torch.', '')}"] += formula(args, kwargs, out)
        elif MATMUL_LIKE.search(name) and not func.is_view:
            self.unrecognised[name] += 1
        if not func.is_view and name not in NO_KERNEL and not self._in_unit(name, node, args, out, in_attention):
            self.launches[self._phase] += 1
            self.ops[name] += 1
        return out

    def low_precision_share(self) -> Optional[float]:
        """Share of the matmul-class FLOPs run in bfloat16/float16 (None: no such FLOPs)."""
        total = sum(self.flops.values())
        low = sum(v for k, v in self.flops.items() if k.endswith(("bfloat16", "float16")))
        return low / total if total else None


class _Packed:
    """A saved tensor as autograd keeps it while :class:`SavedBytes` watches: freed with its node."""

    __slots__ = ("tensor", "key", "owner")

    def __init__(self, tensor, key, owner):
        self.tensor, self.key, self.owner = tensor, key, owner

    def __del__(self):
        self.owner._release(self.key)


class SavedBytes(torch.autograd.graph.saved_tensors_hooks):
    """Bytes of the distinct storages autograd holds for backward when ``with`` ends, but ``model``'s parameters
    (their autocast copies count): a storage counts once however many saved tensors view it, while one is alive
    (a graph branch dropped during the forward pass frees its saved tensors).

    After ``with``: ``bytes``, ``tensors`` (storages), ``by_op`` (bytes by the ATen call that saved them, with a
    :class:`StepCounter` watching the same step) and ``in_rnn_units`` (bytes saved inside fused RNN units: the
    CPU kernel's workspace, not cuDNN's reserve space).
    """

    def __init__(self, model: nn.Module):
        super().__init__(self._pack, self._unpack)
        self._params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self._live: Dict = {}  # key -> [saved tensors alive, bytes, op label, inside an RNN unit]
        self.bytes = self.tensors = self.in_rnn_units = 0
        self.by_op: Dict[str, int] = collections.Counter()
        self.paused = 0
        self.counter = None  # a StepCounter watching the same step sets itself here

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
        super().__enter__()
        return self

    def __exit__(self, *exc):
        super().__exit__(*exc)
        gc.collect()  # graph branches in reference cycles: freed now, not whenever the collector runs
        live = list(self._live.values())
        self.bytes, self.tensors = sum(e[1] for e in live), len(live)
        self.in_rnn_units = sum(e[1] for e in live if e[3])
        self.by_op = collections.Counter()
        for e in live:
            self.by_op[e[2]] += e[1]
        return False


#: Tensor methods that copy to the host without a scalar read (a ``.to`` counts when it names ``"cpu"``:
#: ``.to(x.device)`` stays on ``x``'s device)
HOST_COPIES = ("cpu", "tolist", "numpy", "to")
_TORCH_DIR = os.path.dirname(torch.__file__)


class SyncCounter(TorchDispatchMode):
    """Counts, while active, the calls that wait for a GPU: scalar reads of a tensor (``item()``,
    ``float()``, ``int()``, ``bool()``, indexing with one: ATen's ``_local_scalar_dense``) and copies to
    the host (:data:`HOST_COPIES`), on any device (on the CPU none of them waits).

    ``syncs`` maps ``"<kind> <file>:<line>"`` (the innermost caller outside torch) to its count.
    """

    def __init__(self):
        super().__init__()
        self.syncs: Dict[str, int] = collections.Counter()

    def _count(self, kind: str) -> None:
        site = next(
            (f for f in reversed(traceback.extract_stack()[:-2]) if not f.filename.startswith(_TORCH_DIR)), None
        )
        self.syncs[f"{kind} {os.path.relpath(site.filename) if site else '?'}:{site.lineno if site else 0}"] += 1

    def _wrap(self, name: str):
        method = getattr(torch.Tensor, name)

        def counted(tensor, *args, **kwargs):
            device = kwargs.get("device", args[0] if args else None)
            if name != "to" or (isinstance(device, str) and torch.device(device).type == "cpu"):
                self._count(name)
            return method(tensor, *args, **kwargs)

        return counted

    def __enter__(self):
        for name in HOST_COPIES:  # methods of torch._C.TensorBase, shadowed on torch.Tensor while counting
            setattr(torch.Tensor, name, self._wrap(name))
        return super().__enter__()

    def __exit__(self, *exc):
        for name in HOST_COPIES:
            delattr(torch.Tensor, name)
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ == "_local_scalar_dense":
            self._count("item")
        return func(*args, **(kwargs or {}))
