"""Every registered family at the tests' size: the one place of its tiny shape, its variants and ``build``.

``tests/models/test_contract.py`` checks the decoding contract, finite gradients and the attention of
every variant of every family (:data:`VARIANTS`); the family files test what is the family's own,
through :func:`build` and :func:`variant`.
"""

import itertools

import torch

import fairseq_dense  # noqa: F401
from fairseq_dense.baselines import flags
from fairseq_dense.models.dense_lstm import DenseLSTMConfig, DenseLSTMModel
from fairseq_dense.models.densenmt import DenseNMTConfig, DenseNMTModel
from fairseq_dense.models.fast_forward_lstm import FastForwardLSTMConfig, FastForwardLSTMModel
from fairseq_dense.models.gru_attention import GRUAttentionConfig, GRUAttentionModel
from tests import helpers

CLASSES = {
    "dense_lstm": (DenseLSTMModel, DenseLSTMConfig),
    "densenmt": (DenseNMTModel, DenseNMTConfig),
    "fast_forward_lstm": (FastForwardLSTMModel, FastForwardLSTMConfig),
    "gru_attention": (GRUAttentionModel, GRUAttentionConfig),
}
#: each family's tiny shape (config fields; the Weighted Transformer's become its command-line options)
TINY = {
    "dense_lstm": dict(
        encoder_embed_dim=8,
        encoder_hidden_size=10,
        encoder_layers=3,
        decoder_embed_dim=8,
        decoder_hidden_size=12,
        decoder_layers=3,
        decoder_out_embed_dim=8,
        attention_dim=6,
        dropout=0.0,
        softmax_dropout=0.0,
    ),
    "densenmt": dict(
        encoder_embed_dim=8,
        decoder_embed_dim=8,
        decoder_out_embed_dim=8,
        encoder_hidden_size=6,
        decoder_hidden_size=5,
        attention_dim=4,
        encoder_layers=2,
        decoder_layers=2,
        dropout=0.0,
    ),
    "fast_forward_lstm": dict(
        encoder_embed_dim=8,
        encoder_hidden_size=6,
        encoder_layers=3,
        decoder_embed_dim=8,
        decoder_hidden_size=7,
        decoder_layers=3,
        encoder_fc_dim=9,
        attention_dim=5,
        dropout=0.0,
        init_std=0.3,
    ),
    "gru_attention": dict(
        encoder_embed_dim=8,
        encoder_hidden_size=8,
        decoder_embed_dim=8,
        decoder_hidden_size=12,
        attention_dim=10,
        readout_dim=8,
        dropout=0.0,
    ),
    "weighted_transformer": dict(
        encoder_layers=2,
        decoder_layers=2,
        encoder_embed_dim=16,
        decoder_embed_dim=16,
        encoder_ffn_embed_dim=32,
        decoder_ffn_embed_dim=32,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
    ),
}

# DenseNMT: attention mode x summary layers x decoder connections (encoder dense unless noted)
_DENSENMT = [
    dict(attention=att, decoder_connections=dec, **summ)
    for att, dec, summ in itertools.product(
        ("multistep", "dense1", "dense2"),
        ("dense", "residual"),
        ({}, dict(sumlen=3, encoder_layers=4, decoder_layers=5)),
    )
] + [
    dict(encoder_connections="residual", decoder_connections="residual", attention="multistep"),  # BASE
    dict(encoder_connections="residual", attention="dense2"),
    dict(
        encoder_connections="residual",
        decoder_connections="residual",
        attention="multistep",
        attention_length_scale=True,
    ),
    dict(attention="dense2", sumlen=3, encoder_layers=4, attention_length_scale=True),
    dict(factorized_embed_dim=4, encoder_kernel_size=4, decoder_kernel_size=2, sumlen=2),
    dict(
        encoder_hidden_sizes=[3, 5, 7],
        encoder_kernel_sizes=[3, 1, 5],
        encoder_layers=3,
        decoder_hidden_sizes=[4, 6],
        decoder_kernel_sizes=[1, 3],
    ),
]
#: each family's variants: a name and the options it changes
VARIANTS = {
    "dense_lstm": {
        name: dict(dense_connections=dc, dense_attention=da, attention_layer=layer)
        for name, (dc, da, layer) in {
            "baseline": (False, False, 1),
            "dc": (True, False, 1),
            "dcda": (True, True, 1),
            "da": (False, True, 1),
            "dcda_l2": (True, True, 2),
        }.items()
    },
    "densenmt": {",".join(f"{k}={v[k]}" for k in sorted(v)) or "default": v for v in _DENSENMT},
    "fast_forward_lstm": {
        "att": dict(interface="deep_att"),
        "ed": dict(interface="deep_ed"),
        "att-1col": dict(interface="deep_att", encoder_columns=1),
        "ed-1col": dict(interface="deep_ed", encoder_columns=1),
        "att-noff": dict(interface="deep_att", no_fast_forward=True),
        "ed-noff-uni": dict(interface="deep_ed", no_fast_forward=True, no_interleave=True),
        "att-1x1": dict(interface="deep_att", encoder_layers=1, decoder_layers=1),
        # the top h (7) mapped to the embedding size (8), one table for source, target and softmax
        "att-shared-projected": dict(interface="deep_att", decoder_out_embed_dim=8, share_all_embeddings=True),
    },
    "gru_attention": {"default": {}},
    # plain cross-attention keeps its own reorder test (test_weighted_transformer.py): its cache's contract differs
    "weighted_transformer": {
        "default": {},
        "branched_self_attn": dict(decoder_branched_self_attn=True),
        "pre_norm": dict(encoder_normalize_before=True, decoder_normalize_before=True),
        "two_heads_per_branch": dict(encoder_branches=2, decoder_branches=2),
    },
}
#: the dropout each family's gradient check trains with
DROPOUT = {
    "dense_lstm": dict(dropout=0.3, softmax_dropout=0.3),
    "densenmt": dict(dropout=0.2),
    "fast_forward_lstm": dict(dropout=0.3),
    "gru_attention": dict(dropout=0.3),
    "weighted_transformer": dict(dropout=0.2, attention_dropout=0.1),
}

#: options each family's build_model refuses, and the flag its one-line error names
BAD_OPTIONS = {
    "dense_lstm": [
        (dict(attention_layer=4), "--attention-layer"),
        (dict(attention_layer=0), "--attention-layer"),
        (dict(encoder_hidden_size=9), "--encoder-hidden-size"),
        (dict(decoder_layers=0), "--decoder-layers"),
        (dict(attention_dim=0), "--attention-dim"),
        (dict(softmax_dropout=1.0), "--softmax-dropout"),
        (dict(share_decoder_input_output_embed=True, decoder_out_embed_dim=6), "--share-decoder-input-output-embed"),
    ],
    "densenmt": [
        (dict(sumlen=1), "--sumlen"),
        (dict(sumlen=3, encoder_connections="residual", decoder_connections="residual"), "--sumlen"),
        (dict(encoder_hidden_sizes=[4, 4, 4]), "--encoder-hidden-sizes"),
        (dict(decoder_kernel_sizes=[3]), "--decoder-kernel-sizes"),
        (dict(encoder_connections="residual", encoder_hidden_sizes=[4, 6]), "--encoder-hidden-sizes"),
        (dict(dropout=1.0), "--dropout"),
        (dict(factorized_embed_dim=0), "--factorized-embed-dim"),
        (dict(decoder_layers=0), "--decoder-layers"),
        (dict(attention_dim=0), "--attention-dim"),
    ],
    "fast_forward_lstm": [
        (dict(encoder_layers=0), "--encoder-layers"),
        (dict(decoder_hidden_size=0), "--decoder-hidden-size"),
        (dict(encoder_columns=3), "--encoder-columns"),
        (dict(encoder_fc_dim=0), "--encoder-fc-dim"),
        (dict(attention_dim=0), "--attention-dim"),
        (dict(dropout=1.0), "--dropout"),
        (dict(init_std=0.0), "--init-std"),
        (dict(decoder_out_embed_dim=0), "--decoder-out-embed-dim"),
        (dict(share_decoder_input_output_embed=True), "--decoder-hidden-size"),
    ],
    "gru_attention": [
        (dict(share_decoder_input_output_embed=True, readout_dim=6), "--share-decoder-input-output-embed"),
        (dict(attention_dim=0), "--attention-dim"),
        (dict(dropout=1.0), "--dropout"),
    ],
}


def build(family: str, vocab: int = 16, randomize_recurrent: bool = True, **overrides):
    """``(model, dictionary)``: ``family`` at its :data:`TINY` shape with ``overrides``, drawn after
    ``torch.manual_seed(0)`` (the Weighted Transformer with learned branch weights, as its tests
    build it; Deep-Att's recurrent matrices, which start at zero, randomised unless told not to)."""
    if family == "weighted_transformer":
        from tests.models.test_weighted_transformer import build as build_wt

        return build_wt(*flags(**overrides), vocab=vocab)
    model, d = helpers.build_tiny(*CLASSES[family], TINY[family], vocab, **overrides)
    if family == "fast_forward_lstm" and randomize_recurrent:
        with torch.no_grad():
            for p in model.recurrent_parameters():
                p.normal_(0.0, 0.3)
    return model, d


def variant(family: str, name: str, **overrides):
    """:func:`build` of one of the family's :data:`VARIANTS`."""
    return build(family, **{**VARIANTS[family][name], **overrides})
