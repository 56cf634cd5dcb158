"""Dense (or plain) stacked LSTM decoder with (dense) Bahdanau attention."""

from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.modules import FairseqDropout
from torch import Tensor

from fairseq_dense.modules.bahdanau_attention import BahdanauAttention
from fairseq_dense.modules.dense_lstm_layer import shift_in_time
from fairseq_dense.modules.encoder_decoder import IncrementalDecoder, embedding
from fairseq_dense.modules.lstm_cell import cast_once, lstm_cell


class DenseLSTMDecoder(IncrementalDecoder):
    """Stacked LSTM decoder of DenseRNN (Eq. 3, 4, 6-8).

    Densely Connected Recurrent Neural Network for Sequence-to-Sequence Learning
    (``papers/densernn-densely-connected-rnn.txt``). At step ``t`` the attention is
    queried with ``r_{t-1}^{l'}``, the previous state of layer ``l'``
    (``attention_layer``); its context ``c_t`` is an input of every decoder layer
    at step ``t`` and of the readout ``tanh(W [y_{t-1}; c_t; r_t^{L_d}])`` before
    the softmax (Eq. 3). With dense connections layer ``l`` reads
    ``[o_t^{l-1}; o_{t-1}^{l-1}; c_t]`` with ``o^l = [h^0; ...; h^l]`` (``h^0`` the
    target embedding) and the readout reads ``[o_t^{L_d}; c_t]``.

    Attention memory: the top encoder layer (plain), ``o^{L_e} = [h^1..h^{L_e}]``
    as one memory (dense connections only), or one attention per encoder layer
    with the contexts concatenated (dense attention, Eq. 7-8). The branches are
    scored in one batched expression per step; ``extra["attn"]`` is their mean.

    Layers ``<= l'`` run step by step (``c_t`` needs ``r_{t-1}^{l'}``); layers above
    ``l'`` run as one fused ``nn.LSTM`` call over the whole sequence once every
    ``c_t`` is known. Initial states are zero. An incremental step runs the same
    code on a sequence of length 1 (where each layer above ``l'`` takes one cell
    update, as the layers below do).

    Incremental state (key ``dense_lstm_state``), all batch-first: ``hidden`` and
    ``cell`` ``(batch, layers, hidden)``; ``prev_out`` ``(batch, embed + layers *
    hidden)`` the previous step's ``o^{L_d}``; ``proj_keys`` ``(batch, src_len,
    sum of attention dims)`` (encoder-only, computed once per sentence).

    Args:
        num_layers: ``L_d``.
        encoder_hidden_size, encoder_layers: size and number ``L_e`` of the encoder layers ``h^1..h^{L_e}``.
        dense: dense connections (DC).
        dense_attention: one attention per encoder layer (DA).
        attention_layer: ``l'`` (1-based).
        attention_dim: scoring-MLP size; None: the size of the attended keys.
        out_embed_dim: readout size.
        softmax_dropout: dropout on the readout before the softmax.
        embed_tokens: the encoder's embedding table (``--share-all-embeddings``); None: a new one.
    """

    STATE_KEY = "dense_lstm_state"
    MEMORY = ("proj_keys",)

    def __init__(
        self,
        dictionary,
        embed_dim: int,
        hidden_size: int,
        num_layers: int,
        encoder_hidden_size: int,
        encoder_layers: int,
        dense: bool = False,
        dense_attention: bool = False,
        attention_layer: int = 1,
        attention_dim: Optional[int] = None,
        out_embed_dim: int = 512,
        dropout: float = 0.0,
        softmax_dropout: float = 0.0,
        share_input_output_embed: bool = False,
        max_positions: int = 1024,
        embed_tokens: Optional[nn.Embedding] = None,
    ):
        super().__init__(dictionary, max_positions)
        self.embed_dim = embed_dim
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.dense = dense
        self.dense_attention = dense_attention
        self.attention_layer = attention_layer
        if dense_attention:
            memory_dims = [encoder_hidden_size] * encoder_layers
        else:  # o^{L_e} = [h^1..h^{L_e}] (dense connections) or h^{L_e}
            memory_dims = [encoder_hidden_size * (encoder_layers if dense else 1)]
        self.context_dim = sum(memory_dims)
        self.attention_dims = [attention_dim or k for k in memory_dims]
        self.attentions = nn.ModuleList(
            BahdanauAttention(hidden_size, k, a) for k, a in zip(memory_dims, self.attention_dims)
        )
        self.embed_tokens = embedding(dictionary, embed_dim, lambda w: nn.init.uniform_(w, -0.1, 0.1), embed_tokens)
        self.dropout = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.layers = nn.ModuleList(nn.LSTM(self._layer_input_dim(j), hidden_size) for j in range(num_layers))
        if dense:
            readout_in = embed_dim + num_layers * hidden_size + self.context_dim
        else:
            readout_in = embed_dim + hidden_size + self.context_dim
        self.readout = nn.Linear(readout_in, out_embed_dim)
        self.softmax_dropout = FairseqDropout(softmax_dropout, module_name=self.__class__.__name__)
        self.output_projection = nn.Linear(out_embed_dim, len(dictionary))
        if share_input_output_embed:
            self.output_projection.weight = self.embed_tokens.weight

    def _layer_input_dim(self, j: int) -> int:
        """Input size of 0-based layer ``j``: ``[o_t^{j}; o_{t-1}^{j}; c_t]`` or ``[h_t^{j}; c_t]``."""
        if self.dense:
            return 2 * (self.embed_dim + j * self.hidden_size) + self.context_dim
        return (self.embed_dim if j == 0 else self.hidden_size) + self.context_dim

    def _attend(
        self, query: Tensor, keys: Tensor, values: Tensor, w_query: Tensor, w_v: Tensor, padding_mask: Tensor
    ) -> Tuple[Tensor, Tensor]:
        """All ``n`` attention branches for one step, batched (Bahdanau's MLP per branch): ``(batch, hidden)``
        ``query`` = ``r_{t-1}^{l'}``, ``(batch, src_len, n, A)`` projected ``keys`` ``W_k h_i + b``, ``(batch,
        src_len, n, d)`` ``values``, the branches' stacked ``(n * A, hidden)`` query projections ``w_query`` and
        ``(n, A)`` score vectors ``w_v``. Returns ``(batch, n * d)`` ``[c_t^1; ...; c_t^n]`` and the mean
        attention ``(batch, src_len)``."""
        q = F.linear(query, w_query).view(query.size(0), 1, *w_v.shape)  # B x 1 x n x A
        # v^T tanh(W_q s + W_k h + b): B x T x n; tanh in place: the largest tensor of the step
        scores = (torch.tanh_(q + keys) * w_v).sum(-1)
        scores = scores.masked_fill(padding_mask.unsqueeze(-1), float("-inf"))
        attn = torch.softmax(scores.float(), dim=1).type_as(scores)
        context = torch.einsum("btn,btnd->bnd", attn, values)  # B x n x d
        return context.reshape(query.size(0), -1), attn.mean(-1)

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None, **unused):
        bsz = prev_output_tokens.size(0)
        n_att = len(self.attentions)
        padding_mask = encoder_out["encoder_padding_mask"][0]
        # the attended encoder states: T x B x context_dim
        memory = encoder_out["encoder_layers" if self.dense or self.dense_attention else "encoder_out"][0]
        values = memory.transpose(0, 1).reshape(bsz, memory.size(0), n_att, -1)  # B x T x n x d
        cached = self.get_cache(incremental_state)
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
        if cached is None:
            hidden = memory.new_zeros(bsz, self.num_layers, self.hidden_size)
            cell = torch.zeros_like(hidden)
            prev_out = memory.new_zeros(bsz, self.embed_dim + self.num_layers * self.hidden_size)
            proj_keys = self._project_keys(memory)
        else:
            hidden, cell, prev_out = cached["hidden"], cached["cell"], cached["prev_out"]
            proj_keys = cached["proj_keys"]
        keys = proj_keys.view(bsz, proj_keys.size(1), n_att, -1)  # B x T x n x A
        # the step loop's weights, each cast once under autocast (a view or a sum of weights
        # would otherwise be re-cast, and kept for backward, at every step)
        w_query = cast_once(torch.cat([a.query_proj.weight for a in self.attentions], 0))
        w_v = torch.cat([a.v.weight for a in self.attentions], 0)
        h, c = list(hidden.unbind(1)), list(cell.unbind(1))
        emb, lp, dense = self.embed_dim, self.attention_layer, self.dense

        y = self.dropout(self.embed_tokens(prev_output_tokens)).transpose(0, 1)  # B x S x E -> S x B x E
        # layer 1's input parts that do not depend on c_t, for all steps at once
        first = self.layers[0]
        known = torch.cat([y, shift_in_time(y, prev_out[:, :emb])], -1) if dense else y
        k0 = known.size(-1)
        gates_known = F.linear(known, first.weight_ih_l0[:, :k0], first.bias_ih_l0 + first.bias_hh_l0)
        # sliced once: a slice per step costs a weight-sized backward each
        w_ctx = cast_once(first.weight_ih_l0[:, k0:])
        w_hh0 = cast_once(first.weight_hh_l0).t()
        cells = {j: self._cell_weights(j) for j in range(1, lp)}  # the stepped layers above the first
        prev_step_o = prev_out[:, : emb + lp * self.hidden_size]  # o_{t-1}^{l'}
        step_outs: List[List[Tensor]] = [[] for _ in range(lp)]
        contexts, attns = [], []
        # unbind rather than y[t]: one gradient stack per tensor, not a zero-filled copy per step
        for y_t, gates_known_t in zip(y.unbind(0), gates_known.unbind(0)):
            ctx, attn = self._attend(h[lp - 1], keys, values, w_query, w_v, padding_mask)
            outs = [y_t]  # h_t^0, h_t^1, ... (after dropout)
            for j in range(lp):
                if j == 0:
                    gates = gates_known_t + F.linear(ctx, w_ctx)
                    h[j], c[j] = lstm_cell(torch.addmm(gates, h[j], w_hh0), c[j])
                else:
                    if dense:
                        inp = torch.cat(outs + [prev_step_o[:, : emb + j * self.hidden_size], ctx], -1)
                    else:
                        inp = torch.cat([outs[-1], ctx], -1)
                    h[j], c[j] = torch.lstm_cell(inp, (h[j], c[j]), *cells[j])
                outs.append(self.dropout(h[j]))
                step_outs[j].append(outs[-1])
            prev_step_o = torch.cat(outs, -1)
            contexts.append(ctx)
            attns.append(attn)
        ctx_all = torch.stack(contexts, 0)  # S x B x C
        feats = [y] + [torch.stack(o, 0) for o in step_outs]  # each S x B x dim
        # o_{t-1}: every part of o shifted once and kept, so that layer j's input is one
        # concatenation of parts (not o, its shifted copy and then both again)
        widths = [emb] + [self.hidden_size] * self.num_layers
        firsts = prev_out.split(widths, -1)
        shifted = [shift_in_time(f, first) for f, first in zip(feats, firsts)] if dense else []
        # layers above l': one fused call each over the whole sequence, now that every c_t is
        # known; a single step (incremental decoding) is one cell update, as for the layers below
        for j in range(lp, self.num_layers):
            if dense:  # [o_t^{j}; o_{t-1}^{j}; c_t], o^{j} = [h^0; ...; h^{j}]
                inp = torch.cat(feats + shifted + [ctx_all], -1)
            else:
                inp = torch.cat([feats[-1], ctx_all], -1)
            if inp.size(0) == 1:
                h[j], c[j] = torch.lstm_cell(inp[0], (h[j], c[j]), *self._cell_weights(j))
                out = h[j].unsqueeze(0)
            else:
                out, (h_j, c_j) = self.layers[j](inp, (h[j].unsqueeze(0).contiguous(), c[j].unsqueeze(0).contiguous()))
                h[j], c[j] = h_j[0], c_j[0]
            feats.append(self.dropout(out))
            if dense and j + 1 < self.num_layers:
                shifted.append(shift_in_time(feats[-1], firsts[j + 1]))
        if incremental_state is not None:
            self.set_cache(
                incremental_state,
                {
                    "hidden": torch.stack(h, 1),
                    "cell": torch.stack(c, 1),
                    "prev_out": torch.cat([f[-1] for f in feats], -1),  # o_t^{L_d} of the last step
                    "proj_keys": proj_keys,
                },
            )
        if dense:
            readout_in = torch.cat(feats + [ctx_all], -1)  # [o_t^{L_d}; c_t]
        else:
            readout_in = torch.cat([y, ctx_all, feats[-1]], -1)  # [y_{t-1}; c_t; r_t^{L_d}]
        m = self.softmax_dropout(torch.tanh(self.readout(readout_in))).transpose(0, 1)  # S x B -> B x S
        return m, {"attn": [torch.stack(attns, dim=1)]}

    def _cell_weights(self, j: int) -> Tuple[Tensor, ...]:
        """``(W_ih, W_hh, b_ih, b_hh)`` of 0-based layer ``j`` for ``torch.lstm_cell`` (PyTorch's own cell with
        the layer's parameters; its CUDA kernel needs both biases), each cast once under autocast."""
        lstm = self.layers[j]
        return tuple(cast_once(w) for w in (lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0))

    def _project_keys(self, memory: Tensor) -> Tensor:
        """``(src_len, batch, context_dim)`` -> ``(batch, src_len, sum of attention dims)``, every
        branch's keys (:meth:`BahdanauAttention.project_keys`)."""
        keys_per_branch = memory.split(self.context_dim // len(self.attentions), dim=-1)
        return torch.cat([a.project_keys(k) for a, k in zip(self.attentions, keys_per_branch)], -1)
