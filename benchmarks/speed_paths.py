"""A speed path on and off in one process: the before/after that decides whether it stays.

    python -m benchmarks.speed_paths reorder-skip densenmt gru_attention dense_lstm fast_forward_lstm
    python -m benchmarks.speed_paths int16-dropout weighted_transformer
    python -m benchmarks.speed_paths sigmoid-tanh dense_lstm gru_attention fast_forward_lstm
    python -m benchmarks.speed_paths fused-adam weighted_transformer densenmt gru_attention dense_lstm fast_forward_lstm

Each family's ``<family>_small`` on the quick-start's data (``--work-dir``), one thread, thread CPU
time, the sides alternating per item and their order reversed every other round
(:func:`benchmarks.measure.timed_rounds`); prints the median over ``--rounds`` of the ratio off
seconds / on seconds (the gain) and the rounds. The paths (docs/benchmarks.md, "Speed tricks"):

- ``reorder-skip`` (kept): beam 5 on 128 test sentences in batches of 64 forced to 12 tokens
  (untrained model), ``model.set_beam_size(5)`` (per-sentence memory left in place) against
  ``set_beam_size(1)`` (beam size unknown: every reorder ``index_select``\\ s).
- ``int16-dropout`` (measured, not kept: it gained less than 10%): training steps on the first 4
  batches of a shuffled epoch with every dropout of the model drawing its mask from 16 random bits
  an element (``torch.int64.random_`` viewed as ``int16``, keep probability ``1 - p`` to
  ``2**-16``) instead of ``F.dropout``'s ``bernoulli_``; the counterpart the quick-start pairs
  with the family is timed in the same rounds (the ratio of each side to it is printed too).
- ``sigmoid-tanh`` (measured, not kept: it gained less than 10%): beam 5 as ``reorder-skip`` with
  every in-place ``tanh_`` (the decoders' additive attention scores) as ``2 sigmoid(2x) - 1``.
- ``fused-adam`` (an optimizer, not a speed path: where it is at least as fast, the recipes use it):
  training steps as ``int16-dropout`` times them with ``--optimizer fused_adam`` against fairseq's
  ``adam``, and the kernel launches of one step of each (``op_counts``, a synthetic batch).
"""

import argparse
import types

import torch

from benchmarks import cpu_speed, measure, op_counts, synthetic


def int16_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Inverted dropout with a mask from 16 random bits an element (``P(keep) = 1 - p`` to ``2**-16``)."""
    n = x.numel()
    bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_(-(2**63), None)
    keep = bits.view(torch.int16)[:n].view(x.shape) >= -32768 + round(p * 65536)
    return torch.where(keep, x * (1.0 / (1.0 - p)), 0.0)


def use_int16_dropout(model: torch.nn.Module) -> None:
    """Every ``FairseqDropout`` of ``model`` and the Weighted Transformer's branch dropout draw int16 masks."""
    from fairseq.modules import FairseqDropout

    from fairseq_dense.modules.branched_attention import BranchedAttention

    def dropout(self, x, inplace: bool = False):
        return int16_dropout(x, self.p) if self.p > 0 and (self.training or self.apply_during_inference) else x

    def drop_branches(self, hbar):
        return self.dropout_module(hbar)

    for m in model.modules():
        if isinstance(m, FairseqDropout):
            m.forward = types.MethodType(dropout, m)
        if isinstance(m, BranchedAttention):
            m._drop_branches = types.MethodType(drop_branches, m)


def _beam_setup(family: str, data_bin: str):
    """``(model, generator, batches)``: ``<family>_small`` untrained, beam 5 forced to 12 tokens, 128 test
    sentences in batches of 64."""
    torch.manual_seed(1)
    model, task = cpu_speed.decode_models(data_bin, ["--arch", f"{family}_small"])
    batches = measure.spread_batches(task.dataset("test"), 128, 64, "cpu")
    return model, measure.generator(model, task, 5, 12), batches


def _beam_gain(batches: list, rounds: int, run) -> dict:
    """``run(side, sample, i)`` for the sides ``on`` and ``off``, warmed up, in alternating rounds."""
    with torch.inference_mode():
        run("on", batches[0], 0), run("off", batches[0], 0)  # warm-up
        res = measure.timed_rounds({"on": "on", "off": "off"}, batches, rounds, run, "cpu")
    return {"gain": measure.median_ratio(res["rounds"], "off", "on"), "rounds": res["rounds"]}


def reorder_skip(family: str, data_bin: str, rounds: int) -> dict:
    model, gen, batches = _beam_setup(family, data_bin)

    def run(side, sample, i):
        model.set_beam_size(5 if side == "on" else 1)
        return gen.generate([model], sample)

    return _beam_gain(batches, rounds, run)


def _trainables(data_bin: str, sides: dict) -> dict:
    """``{name: measure.build_trainable(...)}`` of ``sides`` (name -> arguments) on the quick-start's
    recipe, each built from the same seed."""
    built = {}
    for name, args in sides.items():
        torch.manual_seed(1)
        built[name] = measure.build_trainable(synthetic.train_args(data_bin, args, max_tokens=cpu_speed.MAX_TOKENS))
    return built


def int16_dropout_path(family: str, data_bin: str, rounds: int) -> dict:
    from fairseq_dense import baselines

    ours = ["--arch", f"{family}_small"]
    base = baselines.match_baseline(data_bin, family, ours)[0]["baseline_args"]
    sides = _trainables(data_bin, {"on": ours, "off": ours, "counterpart": base})
    use_int16_dropout(sides["on"][1])
    res = measure.train_speed(sides, batches=4, rounds=rounds)
    per_round = res["rounds"]
    return {
        "gain": measure.median_ratio(per_round, "off", "on"),
        "on vs counterpart": measure.median_ratio(per_round, "counterpart", "on"),
        "off vs counterpart": measure.median_ratio(per_round, "counterpart", "off"),
        "rounds": per_round,
    }


def sigmoid_tanh(family: str, data_bin: str, rounds: int) -> dict:
    """Beam 5 as ``reorder-skip`` with every in-place ``tanh_`` (the additive attention scores of the GRU,
    Deep-Att and DenseRNN decoders) computed as ``2 sigmoid(2x) - 1`` (the same function; PyTorch's CPU
    ``tanh`` costs several ``sigmoid``\\ s on AVX2 machines), against the plain model."""
    model, gen, batches = _beam_setup(family, data_bin)
    model.set_beam_size(5)
    plain = torch.tanh_

    def via_sigmoid(x):
        return x.mul_(2).sigmoid_().mul_(2).sub_(1)

    def run(side, sample, i):
        torch.tanh_ = via_sigmoid if side == "on" else plain
        try:
            return gen.generate([model], sample)
        finally:
            torch.tanh_ = plain

    return _beam_gain(batches, rounds, run)


def fused_adam(family: str, data_bin: str, rounds: int) -> dict:
    ours = ["--arch", f"{family}_small"]
    sides = _trainables(data_bin, {"on": ours + ["--optimizer", "fused_adam"], "off": ours})
    res = measure.train_speed(sides, batches=4, rounds=rounds)
    sample = synthetic.make_batch(synthetic.batch_lengths(cpu_speed.MAX_TOKENS), len(sides["on"][0].target_dictionary))
    launches = {}
    for name, side in sides.items():
        with op_counts.counting(side[1]) as counter:
            measure.train_step(side, sample, 9, counter=counter)
        launches[name] = dict(counter.launches)
    return {
        "gain": measure.median_ratio(res["rounds"], "off", "on"),
        **{f"optimizer launches {n}": launches[n]["optimizer"] for n in sides},
        **{f"step launches {n}": sum(launches[n].values()) for n in sides},
        "rounds": res["rounds"],
    }


PATHS = {
    "fused-adam": fused_adam,
    "reorder-skip": reorder_skip,
    "int16-dropout": int16_dropout_path,
    "sigmoid-tanh": sigmoid_tanh,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", choices=sorted(PATHS), help="the speed path to time on and off")
    parser.add_argument("families", nargs="+", help="registered families (each times its <family>_small)")
    parser.add_argument(
        "--work-dir", default="quickstart-work", help="the quick-start's work folder (its prepared data)"
    )
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds; each ratio is their median")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data_bin = cpu_speed.quickstart_data(args.work_dir)
    for family in args.families:
        res = PATHS[args.path](family, data_bin, args.rounds)
        figures = ", ".join(f"{k} {v:.3f}" for k, v in res.items() if k != "rounds")
        print(f"{args.path} {family}: {figures} (thread CPU time, median of {args.rounds} rounds)")
        print("  rounds:", [{k: round(v, 3) for k, v in r.items()} for r in res["rounds"]])


if __name__ == "__main__":
    main()
