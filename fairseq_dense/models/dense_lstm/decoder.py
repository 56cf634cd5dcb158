"""Dense (or plain) stacked LSTM decoder with (dense) Bahdanau attention."""
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.models import FairseqIncrementalDecoder
from torch import Tensor

from fairseq_dense.modules import beam_rows
from fairseq_dense.modules.bahdanau_attention import BahdanauAttention, additive_scores
from fairseq_dense.modules.dense_lstm_layer import lstm_cell, shift_in_time

_STATE_KEY = "dense_lstm_state"


class DenseLSTMDecoder(FairseqIncrementalDecoder):
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
    ``c_t`` is known. Initial states are zero.

    Incremental state (key ``dense_lstm_state``), all batch-first: ``hidden`` and
    ``cell`` ``(batch, layers, hidden)``; ``prev_out`` ``(batch, embed + layers *
    hidden)`` the previous step's ``o^{L_d}``; ``proj_keys`` ``(batch, src_len,
    sum of attention dims)`` and ``values`` ``(batch, src_len, branches, dim)``
    (encoder-only, computed once per sentence, with their ``row_groups``: beam
    reorders within a sentence skip them).

    Args:
        dictionary: target dictionary.
        embed_dim: target embedding size ``E``.
        hidden_size: size ``H`` of every layer state.
        num_layers: ``L_d``.
        encoder_layer_dims: sizes of encoder layers ``h^1..h^{L_e}``.
        dense: dense connections (DC).
        dense_attention: one attention per encoder layer (DA).
        attention_layer: ``l'`` (1-based).
        attention_dim: scoring-MLP size; None: the size of the attended keys.
        out_embed_dim: readout size.
        dropout: dropout on the embedding and layer outputs.
        softmax_dropout: dropout on the readout before the softmax.
        share_input_output_embed: tie embedding and softmax weights.
        max_positions: longest target accepted.
    """

    def __init__(self, dictionary, embed_dim: int, hidden_size: int, num_layers: int,
                 encoder_layer_dims: List[int], dense: bool = False, dense_attention: bool = False,
                 attention_layer: int = 1, attention_dim: Optional[int] = None, out_embed_dim: int = 512,
                 dropout: float = 0.0, softmax_dropout: float = 0.0,
                 share_input_output_embed: bool = False, max_positions: int = 1024):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.embed_dim = embed_dim
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.dense = dense
        self.dense_attention = dense_attention
        self.attention_layer = attention_layer
        self.max_target_positions = max_positions
        if dense_attention:
            if len(set(encoder_layer_dims)) != 1:
                raise ValueError("dense attention needs equal encoder layer sizes")
            memory_dims = list(encoder_layer_dims)
        elif dense:
            memory_dims = [sum(encoder_layer_dims)]
        else:
            memory_dims = [encoder_layer_dims[-1]]
        self.context_dim = sum(memory_dims)
        self.attention_dims = [attention_dim or k for k in memory_dims]
        self.attentions = nn.ModuleList(
            BahdanauAttention(hidden_size, k, a) for k, a in zip(memory_dims, self.attention_dims)
        )
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, padding_idx=self.padding_idx)
        nn.init.uniform_(self.embed_tokens.weight, -0.1, 0.1)
        nn.init.zeros_(self.embed_tokens.weight[self.padding_idx])
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(nn.LSTM(self._layer_input_dim(j), hidden_size) for j in range(num_layers))
        if dense:
            readout_in = embed_dim + num_layers * hidden_size + self.context_dim
        else:
            readout_in = embed_dim + hidden_size + self.context_dim
        self.readout = nn.Linear(readout_in, out_embed_dim)
        self.softmax_dropout = nn.Dropout(softmax_dropout)
        self.output_projection = nn.Linear(out_embed_dim, len(dictionary))
        if share_input_output_embed:
            self.output_projection.weight = self.embed_tokens.weight

    def _layer_input_dim(self, j: int) -> int:
        """Input size of 0-based layer ``j``: ``[o_t^{j}; o_{t-1}^{j}; c_t]`` or ``[h_t^{j}; c_t]``."""
        if self.dense:
            return 2 * (self.embed_dim + j * self.hidden_size) + self.context_dim
        return (self.embed_dim if j == 0 else self.hidden_size) + self.context_dim

    def _memories(self, encoder_out: Dict[str, List[Tensor]]) -> Tensor:
        """The attended encoder states, ``(src_len, batch, context_dim)``."""
        if self.dense or self.dense_attention:
            return encoder_out["encoder_layers"][0]
        return encoder_out["encoder_out"][0]

    def _attend(self, query: Tensor, keys: Tensor, values: Tensor, w_query: Tensor, w_v: Tensor,
                padding_mask: Tensor) -> Tuple[Tensor, Tensor]:
        """All attention branches for one step, batched (Bahdanau's MLP per branch).

        Args:
            query: ``(batch, hidden)`` = ``r_{t-1}^{l'}``.
            keys: ``(batch, src_len, n, A)`` projected keys (doubled, see
                :func:`~fairseq_dense.modules.bahdanau_attention.additive_scores`).
            values: ``(batch, src_len, n, d)``.
            w_query: ``(n * A, hidden)`` the branches' query projections stacked, doubled.
            w_v: ``(n, A)`` the branches' score vectors.
            padding_mask: ``(batch, src_len)``.

        Returns:
            ``(context, attn)``: ``(batch, n * d)`` = ``[c_t^1; ...; c_t^n]`` and the
            mean attention ``(batch, src_len)``.
        """
        q = F.linear(query, w_query).view(query.size(0), 1, *w_v.shape)  # B x 1 x n x A
        scores = additive_scores(q + keys, w_v)  # B x T x n, overwriting the fresh sum
        scores = scores.masked_fill(padding_mask.unsqueeze(-1), float("-inf"))
        attn = torch.softmax(scores.float(), dim=1).type_as(scores)
        context = torch.einsum("btn,btnd->bnd", attn, values)  # B x n x d
        return context.reshape(query.size(0), -1), attn.mean(-1)

    def forward(self, prev_output_tokens: Tensor, encoder_out: Optional[Dict[str, List[Tensor]]] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                **unused) -> Tuple[Tensor, Dict[str, List[Optional[Tensor]]]]:
        """Decode.

        Args:
            prev_output_tokens: ``(batch, tgt_len)`` shifted targets.
            encoder_out: output of :class:`DenseLSTMEncoder`.
            incremental_state: beam-search cache; when given only the last token
                of ``prev_output_tokens`` is fed.

        Returns:
            ``(logits, extra)``: ``(batch, tgt_len, vocab)`` and
            ``{"attn": [(batch, tgt_len, src_len)]}``.
        """
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        return self.output_layer(x), extra

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None, **unused):
        if incremental_state is not None:
            return self._extract_step(prev_output_tokens[:, -1], encoder_out, incremental_state)
        bsz = prev_output_tokens.size(0)
        n_att = len(self.attentions)
        padding_mask = encoder_out["encoder_padding_mask"][0]
        memory = self._memories(encoder_out)  # T x B x C
        values = memory.transpose(0, 1).reshape(bsz, memory.size(0), n_att, -1)  # B x T x n x d
        hidden = memory.new_zeros(bsz, self.num_layers, self.hidden_size)
        cell = torch.zeros_like(hidden)
        prev_out = memory.new_zeros(bsz, self.embed_dim + self.num_layers * self.hidden_size)
        proj_keys = self._project_keys(memory)
        keys = proj_keys.view(bsz, proj_keys.size(1), n_att, -1)  # B x T x n x A
        w_query, w_v = self._scoring_weights()
        h, c = list(hidden.unbind(1)), list(cell.unbind(1))
        emb, lp, dense = self.embed_dim, self.attention_layer, self.dense

        y = self.dropout(self.embed_tokens(prev_output_tokens)).transpose(0, 1)  # B x S x E -> S x B x E
        # layer 1's input parts that do not depend on c_t, for all steps at once
        first = self.layers[0]
        known = torch.cat([y, shift_in_time(y, prev_out[:, :emb])], -1) if dense else y
        k0 = known.size(-1)
        gates_known = F.linear(known, first.weight_ih_l0[:, :k0], first.bias_ih_l0 + first.bias_hh_l0)
        w_ctx = first.weight_ih_l0[:, k0:]  # sliced once: a slice per step costs a weight-sized backward each
        prev_step_o = prev_out[:, : emb + lp * self.hidden_size]  # o_{t-1}^{l'}
        step_outs: List[List[Tensor]] = [[] for _ in range(lp)]
        contexts, attns = [], []
        # unbind rather than y[t]: one gradient stack per tensor, not a zero-filled copy per step
        for y_t, gates_known_t in zip(y.unbind(0), gates_known.unbind(0)):
            ctx, attn = self._attend(h[lp - 1], keys, values, w_query, w_v, padding_mask)
            outs = [y_t]  # h_t^0, h_t^1, ... (after dropout)
            for j in range(lp):
                lstm = self.layers[j]
                if j == 0:
                    gates = gates_known_t + F.linear(ctx, w_ctx)
                else:
                    if dense:
                        inp = torch.cat(outs + [prev_step_o[:, : emb + j * self.hidden_size], ctx], -1)
                    else:
                        inp = torch.cat([outs[-1], ctx], -1)
                    gates = F.linear(inp, lstm.weight_ih_l0, lstm.bias_ih_l0 + lstm.bias_hh_l0)
                h[j], c[j] = lstm_cell(gates + F.linear(h[j], lstm.weight_hh_l0), c[j])
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
        # layers above l': one fused call each, now that every c_t is known
        for j in range(lp, self.num_layers):
            if dense:  # [o_t^{j}; o_{t-1}^{j}; c_t], o^{j} = [h^0; ...; h^{j}]
                inp = torch.cat(feats + shifted + [ctx_all], -1)
            else:
                inp = torch.cat([feats[-1], ctx_all], -1)
            out, _ = self.layers[j](inp, (h[j].unsqueeze(0).contiguous(), c[j].unsqueeze(0).contiguous()))
            feats.append(self.dropout(out))
            if dense and j + 1 < self.num_layers:
                shifted.append(shift_in_time(feats[-1], firsts[j + 1]))
        if dense:
            readout_in = torch.cat(feats + [ctx_all], -1)  # [o_t^{L_d}; c_t]
        else:
            readout_in = torch.cat([y, ctx_all, feats[-1]], -1)  # [y_{t-1}; c_t; r_t^{L_d}]
        m = self.softmax_dropout(torch.tanh(self.readout(readout_in))).transpose(0, 1)  # S x B -> B x S
        return m, {"attn": [torch.stack(attns, dim=1)]}

    def _scoring_weights(self) -> Tuple[Tensor, Tensor]:
        """Every branch's query projection stacked and doubled (the keys are doubled too,
        :func:`additive_scores`), ``(n * A, hidden)``, and their score vectors, ``(n, A)``."""
        w_query = 2 * torch.cat([a.query_proj.weight for a in self.attentions], 0)
        return w_query, torch.cat([a.v.weight for a in self.attentions], 0)

    def _project_keys(self, memory: Tensor) -> Tensor:
        """``(src_len, batch, context_dim)`` -> ``(batch, src_len, sum of attention dims)``, every
        branch's keys doubled (:meth:`BahdanauAttention.project_keys`)."""
        keys_per_branch = memory.split(self.context_dim // len(self.attentions), dim=-1)
        return torch.cat([a.project_keys(k) for a, k in zip(self.attentions, keys_per_branch)], -1)

    def _context_columns(self, width: int, readout: bool = False) -> slice:
        """Where ``c_t`` sits in a layer's input (last) or in the readout's."""
        if readout and not self.dense:
            return slice(self.embed_dim, self.embed_dim + self.context_dim)  # [y; c; r^{L_d}]
        return slice(width - self.context_dim, width)

    def _context_consumers(self) -> Tensor:
        """Every matrix that multiplies ``c_t``, stacked: ``(4H * layers + readout, context_dim)``."""
        parts = [lstm.weight_ih_l0[:, self._context_columns(lstm.weight_ih_l0.size(1))] for lstm in self.layers]
        parts.append(self.readout.weight[:, self._context_columns(self.readout.weight.size(1), readout=True)])
        return torch.cat(parts, 0)

    def _extract_step(self, tokens: Tensor, encoder_out: Dict[str, List[Tensor]],
                      incremental_state: Dict[str, Dict[str, Optional[Tensor]]]):
        """One decoding step: the equations of :meth:`extract_features` for one position, with
        every product ``W c_t`` taken as ``sum_i a_ti (W h_i)`` from a per-sentence projection of
        the attended states (``c_t`` itself is never formed)."""
        bsz = tokens.size(0)
        n_att, hid, emb, lp = len(self.attentions), self.hidden_size, self.embed_dim, self.attention_layer
        padding_mask = encoder_out["encoder_padding_mask"][0]
        cached = self.get_incremental_state(incremental_state, _STATE_KEY)
        if cached is not None:
            hidden, cell, prev_out = cached["hidden"], cached["cell"], cached["prev_out"]
            proj_keys, proj_values, sentence = cached["proj_keys"], cached["proj_values"], cached[beam_rows.SENTENCE]
        else:
            memory = self._memories(encoder_out)  # T x B x C
            groups = beam_rows.encoder_row_groups(encoder_out)
            hidden = memory.new_zeros(bsz, self.num_layers, hid)
            cell = torch.zeros_like(hidden)
            prev_out = memory.new_zeros(bsz, emb + self.num_layers * hid)
            proj_keys = beam_rows.per_group(lambda m: self._project_keys(m.transpose(0, 1)),
                                            memory.transpose(0, 1), groups)
            first, sentence = beam_rows.group_rows(groups, bsz, memory.device)
            # P[s, t, i] = W_i h^i_t for every branch i (W_i: the consumers' columns of branch i),
            # once per sentence: (S, T, n, d) x (n, d, W) -> (S, T * n, W), matching a's (t, i) order
            mem = memory.transpose(0, 1).index_select(0, first)  # S x T x C
            n_sent, src_len = mem.shape[:2]
            w = self._context_consumers().view(-1, n_att, self.context_dim // n_att)  # W x n x d
            per_branch = mem.reshape(n_sent * src_len, n_att, -1).transpose(0, 1)  # n x S*T x d
            proj = torch.bmm(per_branch, w.permute(1, 2, 0))  # n x S*T x W
            proj_values = proj.transpose(0, 1).reshape(n_sent, src_len * n_att, -1)
        keys = proj_keys.view(bsz, proj_keys.size(1), n_att, -1)  # B x T x n x A
        w_query, w_v = self._scoring_weights()
        h, c = list(hidden.unbind(1)), list(cell.unbind(1))

        # attention with r_{t-1}^{l'}; all context products at once
        q = F.linear(h[lp - 1], w_query).view(bsz, 1, *w_v.shape)  # B x 1 x n x A
        scores = additive_scores(q + keys, w_v)  # B x T x n
        scores = scores.masked_fill(padding_mask.unsqueeze(-1), float("-inf"))
        attn = torch.softmax(scores.float(), dim=1).type_as(scores)
        ctx_products = beam_rows.weighted_rows(attn.reshape(bsz, -1), proj_values, sentence)  # B x W
        ctx_gates = ctx_products.split([4 * hid] * self.num_layers + [self.readout.out_features], -1)

        y = self.dropout(self.embed_tokens(tokens))  # B x E
        outs = [y]  # h_t^0, h_t^1, ... (after dropout)
        for j, lstm in enumerate(self.layers):
            if self.dense:
                inp = torch.cat(outs + [prev_out[:, : emb + j * hid]], -1)  # [o_t^{j}; o_{t-1}^{j}]
            else:
                inp = outs[-1]
            # W [inp; c_t] + b + W_hh h: two accumulating products onto W c_t + b
            gates = torch.addmm(ctx_gates[j] + (lstm.bias_ih_l0 + lstm.bias_hh_l0), inp,
                                lstm.weight_ih_l0[:, : inp.size(1)].t())
            gates = torch.addmm(gates, h[j], lstm.weight_hh_l0.t())
            h[j], c[j] = lstm_cell(gates, c[j])
            outs.append(self.dropout(h[j]))
        o = torch.cat(outs, -1)  # o_t^{L_d}
        w_out = self.readout.weight
        if self.dense:  # [o_t^{L_d}; c_t]
            readout = F.linear(o, w_out[:, : o.size(1)], self.readout.bias)
        else:  # [y_{t-1}; c_t; r_t^{L_d}]: the columns on either side of c's, no weight copy
            readout = F.linear(y, w_out[:, :emb], self.readout.bias) + F.linear(
                outs[-1], w_out[:, emb + self.context_dim:])
        m = self.softmax_dropout(torch.tanh(readout + ctx_gates[-1]))
        self.set_incremental_state(incremental_state, _STATE_KEY, {
            **(cached or {}),  # keeps the row groups of the per-sentence tensors
            "hidden": torch.stack(h, 1),
            "cell": torch.stack(c, 1),
            "prev_out": o,
            "proj_keys": proj_keys,
            "proj_values": proj_values,
            beam_rows.SENTENCE: sentence,
        })
        return m.unsqueeze(1), {"attn": [attn.mean(-1).unsqueeze(1)]}

    def output_layer(self, features: Tensor) -> Tensor:
        return self.output_projection(features)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor) -> None:
        """Reorder the cache along its batch dimension (beam search): the projected keys only
        when the reorder moves rows between sentences; the per-sentence ``proj_values`` never
        (rows follow ``sentence``), only dropping the sentences that left the batch."""
        cached = self.get_incremental_state(incremental_state, _STATE_KEY)
        if cached is None:
            return
        reordered = beam_rows.reorder_cache(cached, new_order, static=("proj_keys",), per_sentence=("proj_values",))
        self.set_incremental_state(incremental_state, _STATE_KEY, reordered)

    def max_positions(self) -> int:
        return self.max_target_positions
