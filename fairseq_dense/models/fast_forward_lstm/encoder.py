"""Interleaved bidirectional two-column encoder of Deep-Att / Deep-ED."""

from typing import Dict

import torch
import torch.nn as nn
from torch import Tensor

from fairseq_dense.modules.encoder_decoder import RecurrentEncoder
from fairseq_dense.modules.fast_forward_lstm import FastForwardLSTM
from fairseq_dense.modules.low_precision import outside_low_precision


class FastForwardLSTMEncoder(RecurrentEncoder):
    """Encoder of Zhou et al. (2016), https://arxiv.org/abs/1606.04199, Sec. 3.2.

    One or two columns of :class:`FastForwardLSTM` with no links between them;
    inside a column the layer directions alternate (interleaved bidirectional),
    and the first layers of the two columns run in opposite directions. The
    interface (PI) is built here:

    * ``deep_att``: ``e_t = fc([f^1_t; h^1_t; f^2_t; h^2_t])`` per source position
      (the last layers of columns 1 and 2; without FF connections only the ``h``);
    * ``deep_ed``: one vector ``[h^1_last; max_t h^2_t; f^1_last; max_t f^2_t]``.
      "Last" is the last step the last layer of column 1 processes (the sentence
      end for a forward layer, its start for a backward one), i.e. its final state.

    Args:
        num_layers: depth of each column.
        interleave: alternate directions (False: every layer runs forward, both columns).
        fc_dim: ``deep_att`` projection size.
        dropout: dropout on ``h`` between layers.
        init_std: Gaussian std of non-recurrent weights.
    """

    def __init__(
        self,
        dictionary,
        embed_dim: int,
        hidden_size: int,
        num_layers: int,
        num_columns: int = 2,
        interleave: bool = True,
        fast_forward: bool = True,
        interface: str = "deep_att",
        fc_dim: int = 512,
        dropout: float = 0.1,
        init_std: float = 0.07,
        max_positions: int = 1024,
    ):
        super().__init__(dictionary, embed_dim, max_positions, lambda w: nn.init.normal_(w, 0.0, init_std))
        self.interface = interface
        self.fast_forward = fast_forward
        self.columns = nn.ModuleList(
            FastForwardLSTM(
                embed_dim,
                hidden_size,
                num_layers,
                fast_forward=fast_forward,
                first_reverse=interleave and c == 1,
                interleave=interleave,
                dropout=dropout,
                init_std=init_std,
            )
            for c in range(num_columns)
        )
        per_column = (5 if fast_forward else 1) * hidden_size  # [f; h] or h
        if interface == "deep_att":
            self.fc = nn.Linear(num_columns * per_column, fc_dim)
            nn.init.normal_(self.fc.weight, 0.0, init_std)
            nn.init.zeros_(self.fc.bias)
            self.output_dim = fc_dim
        else:
            self.fc = None
            self.output_dim = num_columns * per_column

    def encode(self, src_tokens: Tensor, src_lengths: Tensor) -> Dict[str, Tensor]:
        """``encoder_out``: ``deep_att``: ``(src_len, batch, fc_dim)`` keys/values; ``deep_ed``:
        ``(batch, output_dim)``."""
        lengths = src_lengths.to(src_tokens.device)
        x = self.embed_tokens(src_tokens).transpose(0, 1)  # B x T x C -> T x B x C
        # the fast-forward path and all that reads it in float32 (see fairseq_dense.modules.fast_forward_lstm)
        full_range, x = outside_low_precision(x, self.columns[0].layers[0].ff.weight, self.fast_forward)
        with full_range:
            # per column (f, h): T x B x 4H (T x B x 0 without FF), T x B x H
            outs = [column(x, lengths, last_f=self.fast_forward)[:2] for column in self.columns]
            if self.interface == "deep_ed":
                return {"encoder_out": self._fixed_vector(outs, lengths)}
            parts = [torch.cat([f, h], dim=-1) if self.fast_forward else h for f, h in outs]
            return {"encoder_out": self.fc(torch.cat(parts, dim=-1))}  # T x B x fc_dim

    def _fixed_vector(self, outs, lengths: Tensor) -> Tensor:
        """Deep-ED: ``[h^1_last; max_t h^2; f^1_last; max_t f^2]`` (``(B, output_dim)``)."""
        f1, h1 = outs[0]
        last_layer = self.columns[0].layers[-1]
        # the final step of the last layer of column 1 in its own direction
        pos = torch.zeros_like(lengths) if last_layer.reverse else lengths - 1
        batch = torch.arange(h1.size(1), device=h1.device)
        h_parts, f_parts = [h1[pos, batch]], [f1[pos, batch]]
        if len(outs) > 1:
            f2, h2 = outs[1]
            pad = torch.arange(h2.size(0), device=h2.device).unsqueeze(1) >= lengths.unsqueeze(0)  # T x B
            h_parts.append(h2.masked_fill(pad.unsqueeze(-1), float("-inf")).amax(dim=0))
            f_parts.append(f2.masked_fill(pad.unsqueeze(-1), float("-inf")).amax(dim=0))
        return torch.cat(h_parts + f_parts if self.fast_forward else h_parts, dim=-1)
