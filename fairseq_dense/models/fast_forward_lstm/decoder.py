"""Single-column forward decoder with fast-forward connections (Deep-Att / Deep-ED)."""

from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.modules import FairseqDropout
from torch import Tensor

from fairseq_dense.modules.bahdanau_attention import BahdanauAttention
from fairseq_dense.modules.encoder_decoder import IncrementalDecoder, embedding
from fairseq_dense.modules.fast_forward_lstm import FastForwardLSTM, FastForwardLSTMLayer
from fairseq_dense.modules.low_precision import outside_low_precision
from fairseq_dense.modules.lstm_cell import cast_once, lstm_cell


class FastForwardLSTMDecoder(IncrementalDecoder):
    """Decoder of Zhou et al. (2016), https://arxiv.org/abs/1606.04199, Sec. 3.2 (PD).

    One column, all layers forward, FF connections between layers. The first
    layer reads ``x_t = [y_{t-1}; c_t]``:

    * ``deep_att``: ``c_t = Attention(h^1_{t-1}, e)`` (Bahdanau, queried by the first
      decoder layer's previous output; ``h^1_0 = 0``). Only layer 1 is stepped
      together with the attention; layers 2..n_d run over the whole sequence.
    * ``deep_ed``: ``c_t = e`` for every step, so layer 1 needs no step loop either: it is
      one fused LSTM call whose input gates are ``W_y y_t + b + W_c e`` (the paper's
      ``W_f^1 [y; c]``), ``W_c e`` computed once per sentence (:meth:`_first_with_context`).

    The last layer's ``h`` (after dropout) feeds the softmax.

    Incremental state (key ``ff_lstm_state``), all batch-first: ``h`` and ``c``
    ``(batch, n_d, H)``; ``deep_att``: ``proj_keys`` ``(batch, src_len, attention_dim)``;
    ``deep_ed``: ``context_gates`` ``(batch, 4H)`` = ``W_c e`` (both encoder-only, computed
    once per sentence). An incremental step runs the code of the full pass on a sequence of
    length 1.

    Args:
        num_layers: depth ``n_d``.
        encoder_dim: size of ``e`` (per position for ``deep_att``).
        attention_dim: Bahdanau MLP size (``deep_att``).
        dropout: dropout on ``h`` between layers and before the softmax.
        init_std: Gaussian std of non-recurrent weights.
        out_embed_dim: softmax input size; when it differs from ``hidden_size`` a linear
            map (fairseq lstm's ``additional_fc``) takes the top ``h`` to it. None: ``hidden_size``.
        embed_tokens: the encoder's embedding table (``--share-all-embeddings``); None: a new one.
    """

    STATE_KEY = "ff_lstm_state"
    MEMORY = ("proj_keys", "context_gates")

    def __init__(
        self,
        dictionary,
        embed_dim: int,
        hidden_size: int,
        num_layers: int,
        encoder_dim: int,
        interface: str = "deep_att",
        attention_dim: int = 512,
        fast_forward: bool = True,
        dropout: float = 0.1,
        init_std: float = 0.07,
        max_positions: int = 1024,
        out_embed_dim: Optional[int] = None,
        share_input_output_embed: bool = False,
        embed_tokens: Optional[nn.Embedding] = None,
    ):
        super().__init__(dictionary, max_positions)
        self.hidden_size = hidden_size
        self.embed_tokens = embedding(dictionary, embed_dim, lambda w: nn.init.normal_(w, 0.0, init_std), embed_tokens)
        # layer 1: W_f^1 [y; c] = [first.ff.weight, context_proj.weight] (Deep-Att steps the c part)
        self.first = FastForwardLSTMLayer(embed_dim, hidden_size, init_std=init_std)
        self.context_proj = nn.Linear(encoder_dim, 4 * hidden_size, bias=False)
        nn.init.normal_(self.context_proj.weight, 0.0, init_std)
        self.rest = FastForwardLSTM(
            FastForwardLSTM.connection_dim(hidden_size, fast_forward),
            hidden_size,
            num_layers - 1,
            fast_forward=fast_forward,
            interleave=False,
            dropout=dropout,
            init_std=init_std,
        )
        self.attention = BahdanauAttention(hidden_size, encoder_dim, attention_dim) if interface == "deep_att" else None
        if self.attention is not None:
            for p in self.attention.parameters():
                nn.init.normal_(p, 0.0, init_std)
        self.dropout = FairseqDropout(dropout, module_name=self.__class__.__name__)
        out_dim = out_embed_dim or hidden_size
        self.additional_fc = nn.Linear(hidden_size, out_dim) if out_dim != hidden_size else None
        self.output_projection = nn.Linear(out_dim, len(dictionary))
        for m in (self.additional_fc, self.output_projection):
            if m is not None:
                nn.init.normal_(m.weight, 0.0, init_std)
                nn.init.zeros_(m.bias)
        if share_input_output_embed:
            self.output_projection.weight = self.embed_tokens.weight

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None, **unused):
        enc = encoder_out["encoder_out"][0]  # deep_att: T x B x E; deep_ed: B x E
        cached = self.get_cache(incremental_state)
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
        states = None if cached is None else list(zip(cached["h"].unbind(1), cached["c"].unbind(1)))  # (h, c) a layer
        y = self.embed_tokens(prev_output_tokens).transpose(0, 1)  # B x S x C -> S x B x C
        # the fast-forward path and all that reads it in float32 (see fairseq_dense.modules.fast_forward_lstm)
        full_range, y = outside_low_precision(y, self.first.ff.weight, self.rest.fast_forward)
        with full_range:
            proj_keys = context_gates = attn = None
            first_state = None if states is None else states[0]
            if self.attention is None:  # W_c e once per sentence (cached for the decoding steps)
                context_gates = cached["context_gates"] if cached is not None else self.context_proj(enc)
                f1, h1, first_final = self._first_with_context(y, context_gates, first_state)
            else:
                proj_keys = cached["proj_keys"] if cached is not None else self.attention.project_keys(enc)
                f1_y = self.first.ff(y)  # S x B x 4H, all steps at once
                f1, h1, first_final, attn = self._attend_and_recur(f1_y, enc, proj_keys, encoder_out, first_state)
            h, finals = h1, []
            if len(self.rest.layers):
                _, h, finals = self.rest(
                    self.rest.connect(f1, h1), states=None if states is None else states[1:], last_f=False
                )
        if incremental_state is not None:
            finals = [first_final] + finals
            cache = {
                "h": torch.stack([s[0] for s in finals], dim=1),  # B x n_d x H
                "c": torch.stack([s[1] for s in finals], dim=1),
                "proj_keys": proj_keys,  # the one of these the interface uses
                "context_gates": context_gates,
            }
            self.set_cache(incremental_state, cache)
        features = self.dropout(h.transpose(0, 1))  # S x B x H -> B x S x H
        if self.rest.fast_forward:  # h in [-1, 1]: the softmax side in the model's precision (float16 with --fp16)
            features = features.to((self.additional_fc or self.output_projection).weight.dtype)
        if self.additional_fc is not None:
            features = self.additional_fc(features)  # B x S x H -> B x S x out_embed_dim
        return features, {"attn": [attn]}

    def _first_with_context(self, y: Tensor, g: Tensor, state: Optional[Tuple[Tensor, Tensor]]):
        """Layer 1 of Deep-ED over all steps in one fused LSTM call: ``f^1_t = W_y y_t + b^1 + W_c e``.

        ``g = W_c e`` (once per sentence) enters the fused call as ``B`` extra input columns:
        the one-hot sentence index, whose input weights are ``g^T``, so that
        ``[W_y, g^T] [y_t; onehot(b)] = W_y y_t + g_b``. That costs ``B`` columns per token
        instead of ``E`` (``10H`` with two encoder columns): fewer while a batch holds fewer
        sentences than ``E``. ``y``: ``(S, B, C)`` target embeddings; ``state``: initial ``(h, c)`` or None
        (zeros). Returns ``(f1, h1, final)``: the ``half(f^1)`` the next layer reads ``(S, B, 2H)`` (``(S, B,
        0)`` when none does), ``h^1`` ``(S, B, H)`` and the final ``(h, c)``.
        """
        steps, bsz = y.shape[:2]
        x = torch.cat([y, torch.eye(bsz, dtype=y.dtype, device=y.device).expand(steps, -1, -1)], -1)
        _, h1, final = self.first(x, state=state, f_size=0, extra_weight=g.t())
        n = 2 * self.hidden_size if len(self.rest.layers) and self.rest.fast_forward else 0
        f1 = F.linear(y, self.first.ff.weight[:n], self.first.ff.bias[:n]) + g[:, :n]
        return f1, h1, final

    def _attend_and_recur(
        self, f1_y: Tensor, enc: Tensor, proj_keys: Tensor, encoder_out, state: Optional[Tuple[Tensor, Tensor]]
    ):
        """Layer 1 of Deep-Att, step by step: ``c_t`` from ``h^1_{t-1}``, then ``f^1_t = W_y y + W_c c_t``."""
        values = enc.transpose(0, 1)  # B x T x E
        padding_mask = encoder_out["encoder_padding_mask"][0]
        state = self.first.initial_state(f1_y, state)
        w_hh_t = cast_once(self.first.weight_hh).t()  # cast once, not once per step under autocast
        fs, hs, attns = [], [], []
        for f1_y_t in f1_y.unbind(0):  # unbind, not f1_y[t]: O(T) gradient traffic, not O(T^2)
            context, a = self.attention(state[0], proj_keys, values, padding_mask)
            f_t = f1_y_t + self.context_proj(context)
            state = lstm_cell(torch.addmm(f_t, state[0], w_hh_t), state[1])  # one step of layer 1
            fs.append(f_t)
            hs.append(state[0])
            attns.append(a)
        return torch.stack(fs), torch.stack(hs), state, torch.stack(attns, dim=1)  # attn: B x S x T
