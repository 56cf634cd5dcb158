"""The five Multi30k pairs: each plugin family beside the model its paper claims to beat.

One entry per pair: the plugin side and the baseline side are ``fairseq-train``
options (architecture and sizes only); everything else (data, optimiser, schedule, loss,
batch size, stopping) is common and lives in ``run.py``. ``variants`` are runs that answer
a question the pair raises, named ``<side>.<label>``, each with its own options and sweep
rates; they appear in the table and the plot but not in the README's front table. A
variant gets a verdict against each side it names under ``against`` (``report.verdict_table``).
Sizes are CPU-sized, about 5-10M parameters with the 8k joint BPE vocabulary (7,964 types).
"""

import re
import shlex

# the two sides of every pair: the plugin family and the model its paper claims to beat
SIDES = ("model", "baseline")

# learning rates tried by the sweep, per pair (both sides get the same candidates)
RNN_RATES = (1e-3, 2e-3, 4e-3)
TRANSFORMER_RATES = (5e-4, 1e-3, 2e-3)
# the shapes both sides of a pair share (the Deep-Att and Weighted Transformer pairs, below)
DEEP_ATT = "--arch fast_forward_lstm_small --encoder-layers 4 --decoder-layers 4 --encoder-hidden-size 192 "
DEEP_ATT += "--decoder-hidden-size 192 --encoder-fc-dim 192 --attention-dim 192 --dropout 0.2"
TRANSFORMER_SHAPE = "--encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 256 --decoder-embed-dim 256 "
TRANSFORMER_SHAPE += "--encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 --encoder-attention-heads 4 "
TRANSFORMER_SHAPE += "--decoder-attention-heads 4 --share-all-embeddings --dropout 0.3 --attention-dropout 0.1 "
TRANSFORMER_SHAPE += "--activation-dropout 0.0"

PAIRS = {
    # the report's design (bi-GRU encoder, GRU decoder fed [c_{t-1}; y_{t-1}], MLP
    # attention, tanh readout) scaled to 192 units, against fairseq's LSTM with attention
    # (bidirectional encoder, input feeding) of the same widths
    "gru": {
        "claim": "the report's design is a sound baseline (BLEU on par)",
        "rates": RNN_RATES,
        "warmup": 200,
        "model": "--arch gru_attention_iwslt_de_en --encoder-embed-dim 192 --encoder-hidden-size 192 "
        "--decoder-embed-dim 192 --decoder-hidden-size 192 --attention-dim 192 --readout-dim 192 --dropout 0.3",
        "baseline": "--arch lstm --encoder-embed-dim 192 --encoder-hidden-size 192 --encoder-layers 1 "
        "--encoder-bidirectional --decoder-embed-dim 192 --decoder-hidden-size 192 --decoder-layers 1 "
        "--decoder-out-embed-dim 192 --dropout 0.3",
    },
    # DenseNMT-4L-2 (dense encoder and decoder, hidden 128, DenseAtt-2) against fairseq's
    # ConvS2S configured as the paper's residual BASE-4L (4+4 layers of width 256, kernel 3)
    "densenmt": {
        "claim": "better BLEU at the same size; fewer epochs to converge",
        "rates": RNN_RATES,
        "warmup": 200,
        "model": "--arch densenmt_4l_2 --dropout 0.2",
        "baseline": "--arch fconv --encoder-embed-dim 256 --decoder-embed-dim 256 --decoder-out-embed-dim 256 "
        "--encoder-layers '[(256, 3)] * 4' --decoder-layers '[(256, 3)] * 4' --dropout 0.2",
    },
    # DenseRNN (dense connections + dense attention, hidden 128) at about half the parameters
    # of a stacked LSTM of the same depth (the plugin's non-dense baseline, 4+4 layers, hidden
    # 384; both with embeddings 128 and a tied softmax)
    "dense_lstm": {
        "claim": "similar BLEU with half the parameters and about half the training time",
        # both sides chose the top of RNN_RATES (4e-3): the grid goes one rate further
        "rates": (*RNN_RATES, 8e-3),
        "warmup": 200,
        "model": "--arch dense_lstm_small --encoder-layers 4 --decoder-layers 4 --encoder-hidden-size 128 "
        "--decoder-hidden-size 128",
        "baseline": "--arch dense_lstm_baseline_small",  # hidden 384
    },
    # Deep-Att with fast-forward connections at 4+4 layers, against the same model without them
    # (the fast-forward inputs widen each layer's input: 10.2M against 7.3M parameters)
    "deep_att": {
        "claim": "fast-forward connections make the deeper model train better",
        "rates": RNN_RATES,
        "warmup": 200,
        "model": DEEP_ATT,
        "baseline": DEEP_ATT + " --no-fast-forward",
        "variants": {
            # at the paper's initialisation (N(0, 0.07)) the plain stack never leaves the
            # unigram distribution; with std 0.2 its signal keeps its scale through the four
            # layers at initialisation. Trained at the rate both sides' sweeps chose.
            "baseline.init0.2": {"options": DEEP_ATT + " --no-fast-forward --init-std 0.2", "rates": (2e-3,)},
            # the same initialisation for the fast-forward model: the two sides compared at one init
            "model.init0.2": {"options": DEEP_ATT + " --init-std 0.2", "rates": (2e-3,)},
        },
    },
    # the calibration Transformer (3+3 layers, d 256, ffn 1024, 4 heads, shared embeddings)
    # and the Weighted Transformer of the same shape (4 branches; 2M more weights per block);
    # attention dropout set for both (the Weighted Transformer's default is --dropout,
    # fairseq's transformer's is 0)
    "weighted_transformer": {
        "claim": "better BLEU and 15-40% fewer updates",
        "rates": TRANSFORMER_RATES,
        "warmup": 400,
        # the paper's form: kappa/alpha learned (the run in the table; the package's default now fixes them)
        "model": f"--arch weighted_transformer --learned-branch-weights {TRANSFORMER_SHAPE} "
        "--task translation_weighted",
        "baseline": f"--arch transformer {TRANSFORMER_SHAPE}",
        "variants": {
            # the family's default (kappa = alpha = 1 fixed, the paper's Table 3 form); everything
            # else as the model side, its own sweep
            "model.fixed": {
                "options": f"--arch weighted_transformer --fixed-kappa --fixed-alpha {TRANSFORMER_SHAPE} "
                "--task translation_weighted",
                "rates": TRANSFORMER_RATES,
                "against": ("baseline", "model"),
            },
        },
    },
}


def split_run(name: str):
    """``(side, seed)`` of a run folder's name: ``model.fixed.seed3`` -> ``("model.fixed", 3)``."""
    m = re.fullmatch(r"(.+)\.seed([0-9]+)", name)
    return (m.group(1), int(m.group(2))) if m else (name, 1)


def options(pair: str, side: str):
    """The ``fairseq-train`` options of a run of a side or of a variant (``baseline.gpu-0.3h``, an earlier
    run of the baseline: the baseline's)."""
    variant = PAIRS[pair].get("variants", {}).get(split_run(side)[0])
    return shlex.split(variant["options"] if variant else PAIRS[pair][side.split(".")[0]])


def arch(pair: str, side: str) -> str:
    return options(pair, side)[options(pair, side).index("--arch") + 1]


def rates(pair: str, side: str):
    """The peak rates a side's sweep tries, in order."""
    return sorted(PAIRS[pair].get("variants", {}).get(split_run(side)[0], PAIRS[pair])["rates"])
