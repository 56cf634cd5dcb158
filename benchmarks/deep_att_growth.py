"""Deep-Att at the paper's size, float32 on the CPU: the largest |activation| of each module over 12 training
steps of the GPU figures' harness (Adam, lr 1e-3, 1,024-token synthetic batches). From the repository root:

    OMP_NUM_THREADS=1 python -m benchmarks.deep_att_growth
"""

import tempfile
import time

import torch

from benchmarks import counterparts, measure, synthetic

VOCAB = 32000


def main() -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        side = synthetic.build(synthetic.write_dicts(tmp, VOCAB), counterparts.PAPER_PAIRS["deep_att"]["ours"])
    model = side[1]
    lengths = [synthetic.batch_lengths(1024, 128, quantile=q) for q in (0.2, 0.4, 0.6, 0.8)]
    batches = [synthetic.make_batch(n, VOCAB) for n in lengths]
    largest = {}

    def hook(name):
        def record(module, inputs, output):
            t = output[0] if isinstance(output, tuple) else output
            if torch.is_tensor(t) and t.numel():
                largest[name] = max(largest.get(name, 0), float(t.detach().abs().float().max()))

        return record

    for name, module in model.named_modules():
        if name and name.count(".") <= 3:
            module.register_forward_hook(hook(name))
    for i in range(12):
        largest.clear()
        t0 = time.time()
        loss = float(measure.train_step(side, batches[i % 4], i + 1))
        finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
        top = sorted(largest.items(), key=lambda kv: -kv[1])[:5]
        print(i, f"loss {loss:.3f}", "finite", finite, f"{time.time() - t0:.0f}s", [(k, round(v)) for k, v in top])


if __name__ == "__main__":
    main()
