"""Why does the Weighted Transformer lose to the Transformer it modifies? The ablation.

The quick-start recipe (bundled Tatoeba De-En, 4,000 joint BPE merges; Adam (0.9, 0.98),
inverse-sqrt schedule with 100 warm-up updates, label smoothing 0.1, clip-norm 1.0, 2,048
tokens per batch) for 1,500 updates, each variant at its own peak learning rate (the
same sweep for every variant: 500 updates at each of 1e-3, 3e-3, 6e-3, doubled past 6e-3
while the largest rate tried is the best, up to 2.4e-2; lowest validation loss wins),
then two seeds at the chosen rate. Reported: validation loss at 500 / 1000 / 1500
updates, test BLEU (beam 5), training tokens/s.

    python examples/weighted_transformer/ablation.py prepare
    python examples/weighted_transformer/ablation.py run [VARIANT ...]   # resumable
    python examples/weighted_transformer/ablation.py at VARIANT LR       # two seeds at a rate the sweep did not choose
    python examples/weighted_transformer/ablation.py report [--write]    # the table (--write: into the docs)
    DEVICE=cuda python examples/weighted_transformer/ablation.py run     # on a GPU

Work files go to ``wt-ablation-work/`` (ignored by git); the logs the table is made of are
copied to ``examples/weighted_transformer/ablation-logs/``.
"""

import argparse
import logging
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import recipes  # noqa: E402
from recipes import ROOT, USER_DIR, markdown, write_between  # noqa: E402

from fairseq_dense.cli.quickstart_steps import run_command  # noqa: E402
from fairseq_dense.logs import records  # noqa: E402

WORK = os.environ.get("WT_ABLATION_WORK", os.path.join(ROOT, "wt-ablation-work"))
LOGS = os.path.join(HERE, "ablation-logs")
RATES = (1e-3, 3e-3, 6e-3)
MAX_RATE = 2.4e-2  # the sweep doubles past the grid while the largest rate tried is the best
SWEEP_UPDATES, UPDATES, SEEDS = 500, 1500, (1, 2)

# the quick-start's size: 2+2 layers, d_model 128, d_ff 512, 4 heads, separate embedding
# tables (2,529,280 parameters for the Transformer); both architectures drop attention
# probabilities at 0.1, the Weighted Transformer's default (fairseq's transformer: 0)
SHAPE = (
    "--encoder-layers 2 --decoder-layers 2 --encoder-embed-dim 128 --decoder-embed-dim 128 --encoder-ffn-embed-dim 512 "
    "--decoder-ffn-embed-dim 512 --encoder-attention-heads 4 --decoder-attention-heads 4 --dropout 0.1 "
    "--attention-dropout 0.1 --activation-dropout 0.0"
).split()
DEEP = ["--encoder-layers", "4", "--decoder-layers", "4"]
WIDE = (
    "--encoder-embed-dim 256 --decoder-embed-dim 256 --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 "
    "--encoder-attention-heads 8 --decoder-attention-heads 8"
).split()
# the Weighted Transformer as first built (the rows named wt*): kappa/alpha learned (the
# paper), branch matrices Xavier for their own shape, residual dropout on the heads; a
# variant's own options come after these
WT = [
    *("--arch", "weighted_transformer", *SHAPE, "--learned-branch-weights"),
    *("--branch-init", "xavier", "--branch-residual-dropout", "heads"),
]
# variants trained with the grouped schedule: the branch weights get their own warm-up (a
# tenth of the main one) and scale (sqrt(2) times the main one), and are frozen for the
# last 10% of the updates (the paper's shape); the main group peaks at the swept rate
GROUPED = {"wt_grouped_schedule"}

M1 = ["--encoder-branches", "1", "--decoder-branches", "1"]
# the branches drawn and dropped as the Transformer's (at M = 1 the Transformer itself)
LIKE = ["--branch-init", "transformer", "--branch-residual-dropout", "outputs"]
FIXED = ["--fixed-kappa", "--fixed-alpha"]  # Table 3: both fixed to 1

VARIANTS = {
    "transformer": ["--arch", "transformer", *SHAPE],
    "wt": WT,  # M = 4 (one head per branch), decoder self-attention plain, encoder-decoder branched
    "wt_m1": [*WT, *M1],
    "wt_transformer_init": [*WT, "--branch-init", "transformer"],  # branch matrices drawn as the Transformer's
    # residual dropout on each branch's output (the Transformer's placement), not on the heads
    "wt_output_dropout": [*WT, "--branch-residual-dropout", "outputs"],
    "wt_transformer_like": [*WT, *LIKE],
    "wt_m1_transformer_like": [*WT, *M1, *LIKE],
    # today's defaults with the decoder's branches in its self-attention (not the encoder-decoder attention)
    "wt_transformer_like_plain_cross_attn": [*WT, *LIKE, "--decoder-plain-cross-attn"],
    # its M = 1 control: the Transformer with the decoder's FFN before its encoder-decoder attention
    "wt_m1_transformer_like_plain_cross_attn": [*WT, *M1, *LIKE, "--decoder-plain-cross-attn"],
    "wt_fixed_weights": [*WT, *FIXED],
    # today's defaults with both fixed to 1: does learning kappa / alpha cost with them too?
    "wt_transformer_like_fixed_weights": [*WT, *LIKE, *FIXED],
    "wt_branched_self_attn": [*WT, "--decoder-branched-self-attn"],
    "wt_plain_cross_attn": [*WT, "--decoder-plain-cross-attn"],
    "wt_grouped_schedule": WT,
    "transformer_4l": ["--arch", "transformer", *SHAPE, *DEEP],
    "wt_4l": [*WT, *DEEP],
    "transformer_d256": ["--arch", "transformer", *SHAPE, *WIDE],
    "wt_d256": [*WT, *WIDE, "--encoder-branches", "4", "--decoder-branches", "4"],  # 2 heads per branch
}


def data_bin() -> str:
    return os.path.join(WORK, "data", "bin")


def command(variant: str, lr: float, seed: int, updates: int, save: str):
    if variant in GROUPED:  # lr_g(u) = scale_g * min(u^-0.5, u W_g^-1.5): peak scale_g / sqrt(W_g)
        scale = lr * 100**0.5
        sched = ["--lr-scheduler", "grouped", "--group-lr-scale", f"default={scale:g},branch={scale * 2**0.5:g}"]
        sched += ["--group-warmup-updates", "default=100,branch=10", "--group-freeze-last", f"branch={updates // 10}"]
    else:
        sched = "--lr-scheduler inverse_sqrt --warmup-updates 100 --warmup-init-lr 1e-4".split()
    return [
        *("fairseq-train", data_bin(), "--user-dir", USER_DIR, *VARIANTS[variant]),
        *("--task", "translation_weighted", "-s", "de", "-t", "en", *recipes.device_args()),
        *("--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", f"{lr:g}", *sched, "--clip-norm", "1.0"),
        *"--criterion label_smoothed_cross_entropy_with_stats --label-smoothing 0.1 --max-tokens 2048".split(),
        *("--max-update", str(updates), "--validate-interval-updates", "500", "--save-interval-updates", "500"),
        *("--keep-interval-updates", "1", "--no-epoch-checkpoints", "--seed", str(seed), "--save-dir", save),
        *"--log-format json --log-interval 50".split(),
    ]


def valid_losses(log: str):
    """``{updates: validation loss}`` of a log (none where it is missing)."""
    return {int(r["num_updates"]): r["loss"] for r in records(log, "valid")}


def continue_sweep_run(variant: str, lr: float, seed: int, updates: int, save: str) -> str:
    """Start a full run from the sweep run of the same rate and seed, when there is one.

    The inverse-sqrt schedule does not depend on ``--max-update`` and fairseq seeds each
    update with ``seed + updates``, so training on from the sweep's last checkpoint (update
    SWEEP_UPDATES, the iterator mid-epoch) is the run a fresh start would make; it saves
    SWEEP_UPDATES updates per variant. Not for the grouped schedule, whose freeze depends
    on the total. Returns the sweep log's lines, the start of the full run's log.
    """
    sweep = os.path.join(WORK, f"{variant}/lr{lr:g}-seed{seed}-{SWEEP_UPDATES}", "checkpoint_last.pt")
    sweep_log = os.path.join(LOGS, variant, f"lr{lr:g}-seed{seed}-{SWEEP_UPDATES}.log")
    if variant in GROUPED or updates <= SWEEP_UPDATES or not os.path.isfile(sweep):
        return ""
    if os.path.isfile(os.path.join(save, "checkpoint_last.pt")):  # a cut full run resumes from its own
        return ""
    os.makedirs(save, exist_ok=True)
    shutil.copyfile(sweep, os.path.join(save, "checkpoint_last.pt"))
    with open(sweep_log) as f:
        return f"# continued from {sweep} (update {SWEEP_UPDATES}); its log:\n" + f.read()


def train(variant: str, lr: float, seed: int, updates: int) -> str:
    name = f"{variant}/lr{lr:g}-seed{seed}-{updates}"
    log = os.path.join(LOGS, name + ".log")
    if updates in valid_losses(log):
        return log
    os.makedirs(os.path.dirname(log), exist_ok=True)
    save = os.path.join(WORK, name)
    head = continue_sweep_run(variant, lr, seed, updates, save)
    with open(log + ".tmp", "a") as f:  # a cut run resumes from its checkpoint: keep its log
        f.write(head)
    run_command(command(variant, lr, seed, updates, save), log + ".tmp", append=True)
    recipes.copy_log(log + ".tmp", log, WORK, "wt-ablation-work")
    os.remove(log + ".tmp")
    return log


def bleu(variant: str, lr: float, seed: int) -> None:
    """Score the full run's last checkpoint on the test split into its ``.bleu`` file, once."""
    path = os.path.join(LOGS, variant, f"lr{lr:g}-seed{seed}-{UPDATES}.bleu")
    if not os.path.isfile(path):
        ckpt = os.path.join(WORK, variant, f"lr{lr:g}-seed{seed}-{UPDATES}", "checkpoint_last.pt")
        out = recipes.generate(data_bin(), ckpt, ["--gen-subset", "test"])[1]
        with open(path, "w") as f:
            f.write([x for x in out.splitlines() if "BLEU4 =" in x][-1] + "\n")


def bleu_of(path: str) -> str:
    """The BLEU4 figure of a ``.bleu`` file (fairseq-generate's last line), "-" where there is none."""
    return re.search(r"BLEU4 = ([\d.]+)", open(path).read()).group(1) if os.path.isfile(path) else "-"


def sweep(loss_at):
    """``({rate: best validation loss after SWEEP_UPDATES} in the order tried, whether the sweep is finished)``.

    The rates of RATES, then twice the largest while the largest tried is the best (its
    optimum may lie above the grid), up to MAX_RATE. ``loss_at(lr)`` gives one rate's loss
    (training it if need be), or None where it is not there yet: the sweep stops there.
    """
    losses, todo = {}, list(RATES)
    while todo:
        lr = todo.pop(0)
        if (loss := loss_at(lr)) is None:
            return losses, False
        losses[lr] = loss
        if not todo and min(losses, key=losses.get) == lr and 2 * lr <= MAX_RATE:
            todo.append(2 * lr)
    return losses, True


def sweep_log_loss(variant: str, lr: float):
    """The best validation loss of the committed sweep run at ``lr``, or None."""
    return min(valid_losses(os.path.join(LOGS, variant, f"lr{lr:g}-seed1-{SWEEP_UPDATES}.log")).values(), default=None)


def run(variant: str, lr=None) -> None:
    """The two seeds' full runs of ``variant`` at ``lr`` (None: the rate its sweep chooses), and their scores."""
    if lr is None:
        swept = sweep(lambda lr: min(valid_losses(train(variant, lr, 1, SWEEP_UPDATES)).values()))[0]
        lr = min(swept, key=swept.get)
    for seed in SEEDS:
        train(variant, lr, seed, UPDATES)
        bleu(variant, lr, seed)


def report() -> str:
    rows = []
    for variant in VARIANTS:
        losses_by_rate, finished = sweep(lambda lr: sweep_log_loss(variant, lr))
        if not losses_by_rate:
            continue
        swept = ", ".join(f"{k:g} -> {v:.3f}" for k, v in losses_by_rate.items())
        if not finished:
            rows.append(f"| {variant} | {swept} (under way) | - | - | - | - |")
            continue
        lr = min(losses_by_rate, key=losses_by_rate.get)
        rows.append(f"| {variant} | {swept} | {lr:g} | {full_runs(variant, lr)} |")
        for other in sorted(extra_rates(variant) - {lr}):
            rows.append(
                f"| {variant} at {other:g} (not the sweep's choice) | - | {other:g} | {full_runs(variant, other)} |"
            )
    head = "variant | sweep (lr -> valid loss @500) | lr | valid loss @500 / 1000 / 1500 (seed 1; seed 2) | "
    return markdown(head + "test BLEU (seed 1; seed 2) | tokens/s", rows)


def full_runs(variant: str, lr: float) -> str:
    """The table cells of the two seeds' full runs at ``lr``: curves | BLEU | tokens/s."""
    curves, bleus, wps = [], [], []
    for seed in SEEDS:
        log = os.path.join(LOGS, variant, f"lr{lr:g}-seed{seed}-{UPDATES}.log")
        losses = valid_losses(log)
        curves.append(" / ".join(f"{losses[u]:.3f}" if u in losses else "-" for u in (500, 1000, 1500)))
        bleus.append(bleu_of(log[: -len(".log")] + ".bleu"))
        wps += [r["wps"] for r in records(log, "train")]
    speed = f"{sum(wps) / len(wps):,.0f}" if wps else "-"
    return f"{'; '.join(curves)} | {'; '.join(bleus)} | {speed}"


def extra_rates(variant: str) -> set:
    """Rates with a full run of ``variant`` in the logs (the sweep's choice, and any ``at`` run)."""
    folder = os.path.join(LOGS, variant)
    names = os.listdir(folder) if os.path.isdir(folder) else []
    return {float(m.group(1)) for m in (re.match(rf"lr([\d.e-]+)-seed1-{UPDATES}\.log$", n) for n in names) if m}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("prepare")
    r = sub.add_parser("run")
    r.add_argument("variants", nargs="*", choices=sorted(VARIANTS))
    at = sub.add_parser("at", help="the full runs (two seeds) of one variant at a rate of your choosing")
    at.add_argument("variant", choices=sorted(VARIANTS))
    at.add_argument("lr", type=float)
    rep = sub.add_parser("report")
    rep.add_argument("--write", action="store_true", help="also put the table into the docs and RESULTS.md")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # each command as it starts (run_command)
    if args.cmd == "prepare":  # the bundled Tatoeba De-En, 4,000 joint BPE merges
        from fairseq_dense.data.prepare import main as prepare

        prepare(["--corpus", "tatoeba-deu-eng", "--dest", os.path.join(WORK, "data")])
    elif args.cmd in ("run", "at"):
        recipes.need(data_bin())
        for variant in [args.variant] if args.cmd == "at" else args.variants or VARIANTS:
            run(variant, getattr(args, "lr", None))
    else:
        table = report()
        if args.write:  # between the ablation markers of the docs page and of the family's RESULTS.md
            for path in (os.path.join(ROOT, "docs", "weighted_transformer.md"), os.path.join(HERE, "RESULTS.md")):
                write_between(path, "wt-ablation", table)
        print(table)


if __name__ == "__main__":
    main()
