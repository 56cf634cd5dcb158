"""End to end through the real fairseq CLI with the attentional GRU baseline.

One tiny copy-like corpus is preprocessed and one ``gru_attention_tiny`` model is
trained once per module; the tests then generate with beam search, resume
training, and load the checkpoint through fairseq's hub interface.
"""

import os
import re

import pytest
import sacrebleu

import fairseq_dense
from tests import helpers

pytestmark = pytest.mark.slow

PACKAGE_DIR = os.path.dirname(os.path.abspath(fairseq_dense.__file__))
TRAIN_UPDATES = 300
#: The tiny model reaches BLEU > 80 on this task in 300 updates; a model that had
#: not learned the mapping (e.g. one emitting the source letters) scores 0.
BLEU_THRESHOLD = 40.0


def train_args(bin_dir, save_dir, user_dir, max_update):
    return [
        bin_dir,
        "--user-dir",
        user_dir,
        "--arch",
        "gru_attention_tiny",
        "--cpu",
        "--seed",
        "1",
        "--optimizer",
        "adam",
        "--lr",
        "0.005",
        "--clip-norm",
        "1.0",
        "--criterion",
        "label_smoothed_cross_entropy_with_stats",
        "--label-smoothing",
        "0.1",
        "--max-tokens",
        "1000",
        "--max-update",
        str(max_update),
        "--save-dir",
        save_dir,
        "--no-epoch-checkpoints",
        "--log-format",
        "simple",
        "--log-interval",
        "50",
        "--num-workers",
        "0",
    ]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("gru_cli")
    raw = helpers.write_copy_corpus(root / "raw", n_train=2000)
    bin_dir = helpers.preprocess(raw, root / "bin")
    save_dir = root / "ckpt"
    proc = helpers.run_cli("fairseq-train", *train_args(bin_dir, save_dir, helpers.USER_DIR, TRAIN_UPDATES))
    return {"root": root, "raw": raw, "bin": bin_dir, "save_dir": save_dir, "train_log": proc.stdout + proc.stderr}


def test_train_logs_token_error_rate(trained):
    assert (trained["save_dir"] / "checkpoint_last.pt").exists()
    ters = [float(m) for m in re.findall(r"ter[= ]([0-9.]+)", trained["train_log"])]
    assert ters, "criterion did not log token error rate"
    assert ters[-1] < ters[0]


def test_generate_beam5_learns_copy_task(trained):
    proc = helpers.run_cli(
        "fairseq-generate",
        trained["bin"],
        "--user-dir",
        helpers.USER_DIR,
        "--path",
        trained["save_dir"] / "checkpoint_last.pt",
        "--gen-subset",
        "test",
        "--beam",
        "5",
        "--batch-size",
        "32",
        "--required-batch-size-multiple",
        "1",
        "--cpu",
        "--print-alignment",
    )
    hyps = helpers.hypotheses_from_generate(proc.stdout)
    refs = helpers.references_from_generate(proc.stdout)
    assert len(hyps) == 100
    assert any(line.startswith("A-") for line in proc.stdout.splitlines()), "no alignments printed"
    bleu = sacrebleu.corpus_bleu([hyps[i] for i in sorted(hyps)], [[refs[i] for i in sorted(hyps)]])
    assert bleu.score > BLEU_THRESHOLD, f"BLEU {bleu.score:.1f} <= {BLEU_THRESHOLD}"


def test_resume_with_installed_package_as_user_dir(trained):
    """Resume from checkpoint_last.pt, with --user-dir at the installed package (pip users)."""
    proc = helpers.run_cli(
        "fairseq-train", *train_args(trained["bin"], trained["save_dir"], PACKAGE_DIR, TRAIN_UPDATES + 20)
    )
    log = proc.stdout + proc.stderr
    loaded = rf"Loaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ {TRAIN_UPDATES} updates\)"
    assert re.search(loaded, log), log[-2000:]
    assert f"num_updates {TRAIN_UPDATES + 20}" in log
    gen = helpers.run_cli(
        "fairseq-generate",
        trained["bin"],
        "--user-dir",
        PACKAGE_DIR,
        "--path",
        trained["save_dir"] / "checkpoint_last.pt",
        "--gen-subset",
        "valid",
        "--beam",
        "5",
        "--batch-size",
        "32",
        "--required-batch-size-multiple",
        "1",
        "--cpu",
    )
    assert len(helpers.hypotheses_from_generate(gen.stdout)) == 100


def test_hub_interface_translates(trained):
    from fairseq.hub_utils import GeneratorHubInterface

    from fairseq_dense.models.gru_attention import GRUAttentionModel

    hub = GRUAttentionModel.from_pretrained(
        str(trained["save_dir"]),
        checkpoint_file="checkpoint_last.pt",
        data_name_or_path=str(trained["bin"]),
        user_dir=str(helpers.USER_DIR),
        cpu=True,
    )
    assert isinstance(hub, GeneratorHubInterface)
    src_lines = (trained["raw"] / "test.src").read_text().splitlines()[:20]
    ref_lines = (trained["raw"] / "test.tgt").read_text().splitlines()[:20]
    out = hub.translate(src_lines, beam=5)
    assert len(out) == 20
    correct = sum(o == r for o, r in zip(out, ref_lines))
    assert correct >= 10, list(zip(out, ref_lines))
