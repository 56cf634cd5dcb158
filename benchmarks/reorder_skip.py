"""Beam 5 with the reorder skip of per-sentence memory on and off, in one process.

``python -m benchmarks.reorder_skip [--work-dir quickstart-work] [--rounds 7] FAMILY ...``: each
family's ``<family>_small`` (untrained) on the quick-start's test split, 128 sentences in batches
of 64 forced to 12 tokens, one thread; ``model.set_beam_size(5)`` (skip on) alternating with
``set_beam_size(1)`` (beam size unknown: every reorder index_selects). Prints the ratio of
sentences/s, on / off (median of the rounds) and the rounds.
"""

import argparse

import torch

from benchmarks import cpu_speed, measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="+", help="registered families (each times its <family>_small)")
    parser.add_argument(
        "--work-dir", default="quickstart-work", help="the quick-start's work folder (its prepared data)"
    )
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds; the ratio is their median")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data_bin = cpu_speed.quickstart_data(args.work_dir)
    for family in args.families:
        torch.manual_seed(1)
        model, task = cpu_speed._decode_models(data_bin, ["--arch", f"{family}_small"])
        gen = measure._generator(model, task, 5, 12)
        dataset = task.dataset("test")
        every = max(1, len(dataset) // 128)
        batches = measure._batches(dataset, list(range(len(dataset)))[::every][:128], 64, "cpu")

        def run(beam, sample, i):
            model.set_beam_size(beam)
            return gen.generate([model], sample)

        with torch.inference_mode():
            run(5, batches[0], 0), run(1, batches[0], 0)  # warm-up
            res = measure._timed_rounds({"ours": 5, "baseline": 1}, batches, args.rounds, run, "cpu")
        print(family, res["cpu_ratio"], res["rounds"])


if __name__ == "__main__":
    main()
