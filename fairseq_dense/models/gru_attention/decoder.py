"""GRU decoder with Bahdanau attention and a tanh readout layer."""

from typing import Optional

import torch
import torch.nn as nn
from fairseq.modules import FairseqDropout

from fairseq_dense.modules.bahdanau_attention import BahdanauAttention
from fairseq_dense.modules.encoder_decoder import IncrementalDecoder, embedding


class GRUAttentionDecoder(IncrementalDecoder):
    """Attentional GRU decoder (Yin & Hu report, Eq. 1-2; Bahdanau et al. 2014).

    ``s_t = GRU([c_{t-1}; y_{t-1}], s_{t-1})``; ``c_t`` attends with ``s_t`` over all
    source annotations; ``m_t = tanh(W1 [c_t; s_t] + b1)``; dropout on ``m_t``; then
    ``p_t = softmax(W2 m_t + b2)``. ``s_0 = tanh(W_init bwd_1)`` with ``bwd_1`` the
    backward encoder state at the first word (Bahdanau's choice); ``c_0 = 0``.

    The GRU is ``nn.GRUCell`` (PyTorch's gates, reset gate on ``W_hn s + b_hn``; one fused
    kernel on CUDA); only it and the attention run step by step, the readout/softmax
    once over the whole sequence after the loop. An incremental step is one
    iteration of that loop. Incremental state (key ``gru_state``): ``hidden``
    ``(batch, hidden)`` = ``s_{t-1}``, ``context`` ``(batch, enc_dim)`` = ``c_{t-1}``
    and ``proj_keys`` ``(batch, src_len, attn_dim)``, the keys' projection computed
    once per sentence.
    """

    STATE_KEY = "gru_state"
    MEMORY = ("proj_keys",)

    def __init__(
        self,
        dictionary,
        embed_dim: int,
        hidden_size: int,
        encoder_dim: int,
        encoder_hidden_size: int,
        attention_dim: int,
        readout_dim: int,
        dropout: float = 0.5,
        embed_dropout: float = 0.0,
        share_input_output_embed: bool = False,
        max_positions: int = 1024,
        embed_tokens: Optional[nn.Embedding] = None,
    ):
        super().__init__(dictionary, max_positions)
        self.encoder_dim = encoder_dim
        self.embed_tokens = embedding(
            dictionary, embed_dim, lambda w: nn.init.normal_(w, 0, embed_dim**-0.5), embed_tokens
        )
        self.embed_dropout = FairseqDropout(embed_dropout, module_name=self.__class__.__name__)
        self.init_proj = nn.Linear(encoder_hidden_size, hidden_size)
        self.cell = nn.GRUCell(encoder_dim + embed_dim, hidden_size)  # input [c_{t-1}; y_{t-1}]
        self.attention = BahdanauAttention(hidden_size, encoder_dim, attention_dim)
        self.readout = nn.Linear(encoder_dim + hidden_size, readout_dim)
        self.dropout = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.output_projection = nn.Linear(readout_dim, len(dictionary))
        if share_input_output_embed:
            self.output_projection.weight = self.embed_tokens.weight

    def upgrade_state_dict_named(self, state_dict, name):
        """Checkpoints of the split GRU (``input_proj_y``, ``input_proj_c``, ``hidden_proj``) load into ``cell``."""
        p = f"{name}."
        if p + "input_proj_y.weight" in state_dict:
            w_c, w_y = (state_dict.pop(f"{p}input_proj_{k}.weight") for k in "cy")
            state_dict[p + "cell.weight_ih"] = torch.cat([w_c, w_y], dim=1)
            state_dict[p + "cell.bias_ih"] = state_dict.pop(p + "input_proj_y.bias")
            for k in ("weight", "bias"):
                state_dict[f"{p}cell.{k}_hh"] = state_dict.pop(f"{p}hidden_proj.{k}")
        return state_dict

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None, **unused):
        padding_mask = encoder_out["encoder_padding_mask"][0]
        values = encoder_out["encoder_out"][0].transpose(0, 1)  # T x B x E -> B x T x E
        cached = self.get_cache(incremental_state)
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
        if cached is None:
            hidden = torch.tanh(self.init_proj(encoder_out["encoder_final"][0]))  # s_0
            context = values.new_zeros(values.size(0), self.encoder_dim)  # c_0 = 0
            proj_keys = self.attention.project_keys(encoder_out["encoder_out"][0])
        else:
            hidden, context, proj_keys = cached["hidden"], cached["context"], cached["proj_keys"]

        y = self.embed_dropout(self.embed_tokens(prev_output_tokens))
        states, contexts, attns = [], [], []
        for y_t in y.unbind(1):  # unbind, not y[:, t]: O(T) gradient traffic, not O(T^2)
            hidden = self.cell(torch.cat([context, y_t], dim=-1), hidden)
            context, attn = self.attention(hidden, proj_keys, values, padding_mask)
            states.append(hidden)
            contexts.append(context)
            attns.append(attn)
        if incremental_state is not None:
            self.set_cache(incremental_state, {"hidden": hidden, "context": context, "proj_keys": proj_keys})
        s = torch.stack(states, dim=1)  # B x S x H
        c = torch.stack(contexts, dim=1)  # B x S x E
        m = self.dropout(torch.tanh(self.readout(torch.cat([c, s], dim=-1))))
        return m, {"attn": [torch.stack(attns, dim=1)]}
