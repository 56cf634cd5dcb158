"""A speed path on and off in one process: the before/after that decides whether it stays.

    python -m benchmarks.speed_paths reorder-skip densenmt gru_attention dense_lstm fast_forward_lstm
    python -m benchmarks.speed_paths float32-fast-forward fast_forward_lstm
    python -m benchmarks.speed_paths fused-adam weighted_transformer densenmt gru_attention dense_lstm fast_forward_lstm

Each family's ``<family>_small`` on the quick-start's data (``--work-dir``), one thread, thread CPU
time, the sides alternating per item and their order reversed every other round
(:func:`benchmarks.measure.timed_rounds`); prints the median over ``--rounds`` of the ratio off
seconds / on seconds (the gain) and the rounds. The paths (docs/benchmarks.md, "Speed tricks"):

- ``reorder-skip`` (kept): beam 5 on 128 test sentences in batches of 64 forced to 12 tokens
  (untrained model), ``model.set_beam_size(5)`` (per-sentence memory left in place) against
  ``set_beam_size(1)`` (beam size unknown: every reorder ``index_select``\\ s).
- ``float32-fast-forward`` (kept, not a speed path: what Deep-Att's float32 fast-forward stack costs under
  autocast, issue 60): training steps with the region on and off, in float32 and under bfloat16 autocast.
- ``fused-adam`` (an optimizer, not a speed path: where it is at least as fast, the recipes use it):
  training steps on the first 4 batches of a shuffled epoch with ``--optimizer fused_adam`` against
  fairseq's ``adam``, and the kernel launches of one step of each (``op_counts``, a synthetic batch).

The paths measured and not kept (int16 dropout masks, ``tanh`` as ``2 sigmoid(2x) - 1``) were timed by
this script as of ``e686f8d``; their figures are in docs/benchmarks.md.
"""

import argparse

import torch

from benchmarks import cpu_speed, measure, op_counts, synthetic


def gain(res: dict) -> float:
    """Median over the rounds of :func:`measure.timed_rounds` of off seconds / on seconds (thread CPU time)."""
    return measure.median_ratio(res["rounds"], "off", "on")


def reorder_skip(family: str, data_bin: str, rounds: int) -> dict:
    torch.manual_seed(1)
    model, task = cpu_speed.decode_models(data_bin, ["--arch", f"{family}_small"])
    batches = measure.spread_batches(task.dataset("test"), 128, 64, "cpu")
    gen = measure.generator(model, task, 5, 12)

    def run(side, sample, i):
        model.set_beam_size(5 if side == "on" else 1)
        return gen.generate([model], sample)

    with torch.inference_mode():
        run("on", batches[0], 0), run("off", batches[0], 0)  # warm-up
        res = measure.timed_rounds({"on": "on", "off": "off"}, batches, rounds, run, "cpu")
    return {"gain": gain(res), "rounds": res["rounds"]}


def float32_fast_forward(family: str, data_bin: str, rounds: int) -> dict:
    """Training steps (``measure.train_step``) of ``<family>_small`` on 4 synthetic 2,048-token batches, in
    float32 and under bfloat16 autocast, with Deep-Att's float32 region of the fast-forward stack (on: the
    default, issue 60) and without it (off: all in autocast's dtype); a gain below 1: the region costs time."""
    from fairseq_dense.models.fast_forward_lstm import decoder, encoder
    from fairseq_dense.modules import low_precision

    side = synthetic.build(data_bin, ["--arch", f"{family}_small"])
    vocab = len(side[0].target_dictionary)
    lengths = [synthetic.batch_lengths(cpu_speed.MAX_TOKENS, 128, quantile=q) for q in (0.2, 0.4, 0.6, 0.8)]
    samples = [synthetic.make_batch(n, vocab, seed=i) for i, n in enumerate(lengths)]
    plain = low_precision.outside_low_precision
    out = {}
    for name, dtype in (("float32", None), ("bfloat16", torch.bfloat16)):

        def run(on, sample, i):
            for module in (encoder, decoder):
                module.outside_low_precision = plain if on else (lambda x, like, enabled=True: plain(x, like, False))
            try:
                measure.train_step(side, sample, i + 1, dtype=dtype)
            finally:
                encoder.outside_low_precision = decoder.outside_low_precision = plain

        run(True, samples[0], 0), run(False, samples[0], 0)  # warm-up
        res = measure.timed_rounds({"on": True, "off": False}, samples, rounds, run, "cpu")
        out[f"{name} gain"], out[f"{name} rounds"] = gain(res), res["rounds"]
    return out


def fused_adam(family: str, data_bin: str, rounds: int) -> dict:
    ours = ["--arch", f"{family}_small"]
    sides = {"on": ours + ["--optimizer", "fused_adam"], "off": ours}
    sides = {name: synthetic.build(data_bin, args, max_tokens=cpu_speed.MAX_TOKENS) for name, args in sides.items()}
    res = measure.train_speed(sides, batches=4, rounds=rounds)
    sample = synthetic.make_batch(synthetic.batch_lengths(cpu_speed.MAX_TOKENS), len(sides["on"][0].target_dictionary))
    launches = {}
    for name, side in sides.items():
        with op_counts.counting(side[1]) as counter:
            measure.train_step(side, sample, 9, counter=counter)
        launches[name] = dict(counter.launches)
    return {
        "gain": gain(res),
        **{f"optimizer launches {n}": launches[n]["optimizer"] for n in sides},
        **{f"step launches {n}": sum(launches[n].values()) for n in sides},
        "rounds": res["rounds"],
    }


PATHS = {"fused-adam": fused_adam, "reorder-skip": reorder_skip, "float32-fast-forward": float32_fast_forward}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", choices=sorted(PATHS), help="the speed path to time on and off")
    parser.add_argument("families", nargs="+", help="registered families (each times its <family>_small)")
    parser.add_argument("--work-dir", default="quickstart-work", help="the quick-start's work folder (its data)")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds; each ratio is their median")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data_bin = cpu_speed.quickstart_data(args.work_dir)
    for family in args.families:
        res = PATHS[args.path](family, data_bin, args.rounds)
        figures = ", ".join(f"{k} {v:.3f}" for k, v in res.items() if not k.endswith("rounds"))
        print(f"{args.path} {family}: {figures} (thread CPU time, median of {args.rounds} rounds)")
        for k in (k for k in res if k.endswith("rounds")):
            print(f"  {k}:", [{side: round(v, 3) for side, v in r.items()} for r in res[k]])


if __name__ == "__main__":
    main()
