"""The five Multi30k pairs: each plugin family beside the model its paper claims to beat.

One entry per pair: the plugin side and the baseline side are lists of
``fairseq-train`` options (architecture and sizes only); everything else (data,
optimiser, schedule, loss, batch size, stopping) is common and lives in ``run.py``.
Sizes are CPU-sized, about 5-10M parameters with the 8k joint BPE vocabulary (7,964
types): one converged pair takes about two hours on two cores, a core each.
"""

# learning rates tried by the sweep, per pair (both sides get the same candidates)
RNN_RATES = (1e-3, 2e-3, 4e-3)
TRANSFORMER_RATES = (5e-4, 1e-3, 2e-3)

PAIRS = {
    # the report's design (bi-GRU encoder, GRU decoder fed [c_{t-1}; y_{t-1}], MLP
    # attention, tanh readout) scaled to 192 units, against fairseq's LSTM with attention
    # (bidirectional encoder, input feeding) of the same widths
    "gru": {
        "claim": "the report's design is a sound baseline (BLEU on par)",
        "rates": RNN_RATES,
        "warmup": 200,
        "model": [
            "--arch", "gru_attention_iwslt_de_en",
            "--encoder-embed-dim", "192", "--encoder-hidden-size", "192",
            "--decoder-embed-dim", "192", "--decoder-hidden-size", "192",
            "--attention-dim", "192", "--readout-dim", "192", "--dropout", "0.3",
        ],
        "baseline": [
            "--arch", "lstm",
            "--encoder-embed-dim", "192", "--encoder-hidden-size", "192", "--encoder-layers", "1",
            "--encoder-bidirectional",
            "--decoder-embed-dim", "192", "--decoder-hidden-size", "192", "--decoder-layers", "1",
            "--decoder-out-embed-dim", "192", "--dropout", "0.3",
        ],
    },
}
