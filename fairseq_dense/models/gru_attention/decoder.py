"""GRU decoder with Bahdanau attention and a tanh readout layer."""
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.models import FairseqIncrementalDecoder
from torch import Tensor

from fairseq_dense.modules import beam_rows
from fairseq_dense.modules.bahdanau_attention import BahdanauAttention

_STATE_KEY = "gru_state"


class GRUAttentionDecoder(FairseqIncrementalDecoder):
    """Attentional GRU decoder (Yin & Zhang report, Eq. 1-2; Bahdanau et al. 2014).

    ``s_t = GRU([c_{t-1}; y_{t-1}], s_{t-1})``; ``c_t`` attends with ``s_t`` over all
    source annotations; ``m_t = tanh(W1 [c_t; s_t] + b1)``; dropout on ``m_t``; then
    ``p_t = softmax(W2 m_t + b2)``. ``s_0 = tanh(W_init bwd_1)`` with ``bwd_1`` the
    backward encoder state at the first word (Bahdanau's choice); ``c_0 = 0``.

    Only the recurrence runs step by step: the embedding part of the GRU input is
    projected for all steps in one matrix multiply, and the readout/softmax run
    once over the whole sequence after the loop.

    Incremental decoding never forms ``c_t``: its only consumers are linear (the
    GRU's input gates at ``t+1`` and the readout at ``t``), so the annotations are
    multiplied by those matrices once per sentence, ``P = h [W_c; W_1c]^T``, and a
    step takes ``a_t P`` (``src_len`` multiply-adds per output instead of ``enc_dim``;
    the same sums in another order). Incremental state (key ``gru_state``):
    ``hidden`` ``(batch, hidden)``, ``context_gates`` ``(batch, 3 * hidden)`` =
    ``W_c c_{t-1}``, the encoder-only ``proj_keys`` ``(batch, src_len, attn_dim)``
    (computed once per sentence, kept with its ``row_groups``: beam reorders within a
    sentence skip it), and ``P`` once per sentence, ``proj_values`` ``(sentences,
    src_len, 3 * hidden + readout_dim)``, with each row's ``sentence`` ``(batch,)``.
    """

    def __init__(self, dictionary, embed_dim: int, hidden_size: int, encoder_dim: int,
                 encoder_hidden_size: int, attention_dim: int, readout_dim: int,
                 dropout: float = 0.5, embed_dropout: float = 0.0,
                 share_input_output_embed: bool = False, max_positions: int = 1024):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.hidden_size = hidden_size
        self.encoder_dim = encoder_dim
        self.max_target_positions = max_positions
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, padding_idx=self.padding_idx)
        nn.init.normal_(self.embed_tokens.weight, 0, embed_dim ** -0.5)
        nn.init.zeros_(self.embed_tokens.weight[self.padding_idx])
        self.embed_dropout = nn.Dropout(embed_dropout)
        self.init_proj = nn.Linear(encoder_hidden_size, hidden_size)
        # GRU input [c_{t-1}; y_{t-1}]: W_ih is split so the y-part runs batched
        self.input_proj_y = nn.Linear(embed_dim, 3 * hidden_size, bias=True)
        self.input_proj_c = nn.Linear(encoder_dim, 3 * hidden_size, bias=False)
        self.hidden_proj = nn.Linear(hidden_size, 3 * hidden_size, bias=True)
        self.attention = BahdanauAttention(hidden_size, encoder_dim, attention_dim)
        self.readout = nn.Linear(encoder_dim + hidden_size, readout_dim)
        self.dropout = nn.Dropout(dropout)
        self.output_projection = nn.Linear(readout_dim, len(dictionary))
        if share_input_output_embed:
            self.output_projection.weight = self.embed_tokens.weight

    def _gru_step(self, gi: Tensor, hidden: Tensor) -> Tensor:
        """One GRU update from the input gates ``W_y y + b + W_c c`` (PyTorch's gate layout)."""
        gh = self.hidden_proj(hidden)
        i_r, i_z, i_n = gi.chunk(3, dim=-1)
        h_r, h_z, h_n = gh.chunk(3, dim=-1)
        r = torch.sigmoid(i_r + h_r)
        z = torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        return n + z * (hidden - n)

    def forward(self, prev_output_tokens: Tensor, encoder_out: Optional[Dict[str, List[Tensor]]] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                **unused) -> Tuple[Tensor, Dict[str, List[Optional[Tensor]]]]:
        """Decode.

        Args:
            prev_output_tokens: ``(batch, tgt_len)`` shifted targets.
            encoder_out: output of :class:`GRUAttentionEncoder`.
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
        enc = encoder_out["encoder_out"][0]  # T x B x E
        values = enc.transpose(0, 1)  # B x T x E
        padding_mask = encoder_out["encoder_padding_mask"][0]
        hidden = torch.tanh(self.init_proj(encoder_out["encoder_final"][0]))
        context = values.new_zeros(values.size(0), self.encoder_dim)
        proj_keys = self.attention.project_keys(enc)

        y = self.embed_dropout(self.embed_tokens(prev_output_tokens))
        gi_y = self.input_proj_y(y)  # B x S x 3H, all steps at once
        states, contexts, attns = [], [], []
        for gi_y_t in gi_y.unbind(1):  # unbind, not gi_y[:, t]: O(T) gradient traffic, not O(T^2)
            hidden = self._gru_step(gi_y_t + self.input_proj_c(context), hidden)
            context, attn = self.attention(hidden, proj_keys, values, padding_mask)
            states.append(hidden)
            contexts.append(context)
            attns.append(attn)
        s = torch.stack(states, dim=1)  # B x S x H
        c = torch.stack(contexts, dim=1)  # B x S x E
        m = self.dropout(torch.tanh(self.readout(torch.cat([c, s], dim=-1))))
        return m, {"attn": [torch.stack(attns, dim=1)]}

    def _context_consumers(self) -> Tensor:
        """``[W_c; W_1c]`` ``(3H + readout, enc_dim)``: every matrix that multiplies ``c_t``."""
        return torch.cat([self.input_proj_c.weight, self.readout.weight[:, : self.encoder_dim]], 0)

    def _extract_step(self, tokens: Tensor, encoder_out: Dict[str, List[Tensor]],
                      incremental_state: Dict[str, Dict[str, Optional[Tensor]]]):
        """One decoding step: the same equations as the loop of :meth:`extract_features`, with
        ``W_c c_t`` and ``W_1c c_t`` taken as ``a_t P`` from the per-sentence projection ``P``."""
        padding_mask = encoder_out["encoder_padding_mask"][0]
        cached = self.get_incremental_state(incremental_state, _STATE_KEY)
        if cached is not None:
            hidden, context_gates = cached["hidden"], cached["context_gates"]
            proj_keys, proj_values, sentence = cached["proj_keys"], cached["proj_values"], cached[beam_rows.SENTENCE]
        else:
            enc = encoder_out["encoder_out"][0]  # T x B x E
            groups = beam_rows.encoder_row_groups(encoder_out)
            hidden = torch.tanh(self.init_proj(encoder_out["encoder_final"][0]))
            context_gates = hidden.new_zeros(hidden.size(0), 3 * self.hidden_size)  # c_0 = 0
            proj_keys = beam_rows.per_group(self.attention.project_keys_batch_first, enc.transpose(0, 1), groups)
            first, sentence = beam_rows.group_rows(groups, hidden.size(0), hidden.device)
            # one P per sentence (not per beam), rows find theirs through `sentence`
            proj_values = F.linear(enc.transpose(0, 1).index_select(0, first), self._context_consumers())
        y = self.embed_dropout(self.embed_tokens(tokens))  # B x E
        hidden = self._gru_step(self.input_proj_y(y) + context_gates, hidden)
        attn = self.attention.weights(hidden, proj_keys, padding_mask)  # B x T
        projected = beam_rows.weighted_rows(attn, proj_values, sentence)  # B x (3H + readout)
        context_gates, readout_c = projected.split([3 * self.hidden_size, projected.size(1) - 3 * self.hidden_size], -1)
        readout_s = F.linear(hidden, self.readout.weight[:, self.encoder_dim:], self.readout.bias)
        m = self.dropout(torch.tanh(readout_c + readout_s))
        self.set_incremental_state(incremental_state, _STATE_KEY, {
            **(cached or {}),  # keeps the row groups of the per-sentence tensors
            "hidden": hidden, "context_gates": context_gates, "proj_keys": proj_keys,
            "proj_values": proj_values, beam_rows.SENTENCE: sentence,
        })
        return m.unsqueeze(1), {"attn": [attn.unsqueeze(1)]}

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
