"""Deep-Att at the paper's size, float32 on the CPU: the largest |activation| of each module over 12 training
steps of the GPU figures' harness (Adam, lr 1e-3, 1,024-token synthetic batches). From the repository root:
    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/results/2026-11-27-h200/deep_att_growth.py
"""

import tempfile
import time

import torch

from benchmarks import counterparts, proxies, synthetic

torch.set_num_threads(1)
pair = counterparts.PAPER_PAIRS["deep_att"]
tmp = tempfile.mkdtemp()
V = 32000
d = synthetic.write_dicts(tmp, V)
side = synthetic.build(d, pair["ours"], amp=False, device="cpu")
task, model, crit, opt, cfg = side
batches = [synthetic.make_batch(synthetic.batch_lengths(1024, 128, quantile=q), V) for q in (0.2, 0.4, 0.6, 0.8)]
mx = {}


def hook(name):
    def f(m, i, o):
        t = o[0] if isinstance(o, tuple) else o
        if torch.is_tensor(t) and t.numel():
            mx[name] = max(mx.get(name, 0), float(t.detach().abs().float().max()))

    return f


for n, m in model.named_modules():
    if n and n.count(".") <= 3:
        m.register_forward_hook(hook(n))
for i in range(12):
    mx.clear()
    t0 = time.time()
    loss = proxies.train_step(side, batches[i % 4], autocast=False, update=i + 1)
    fin = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    top = sorted(mx.items(), key=lambda kv: -kv[1])[:5]
    print(
        i, "loss %.3f" % loss, "finite", fin, "%.0fs" % (time.time() - t0), [(k, round(v)) for k, v in top], flush=True
    )
