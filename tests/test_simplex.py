"""Euclidean projection onto the probability simplex and its post-step application."""

import itertools
from types import SimpleNamespace

import pytest
import torch

from fairseq_dense.modules.simplex import (
    is_on_simplex,
    project_onto_simplex,
    project_parameters_after_step,
    uniform_simplex,
)


def brute_force(v):
    """Closest simplex point by enumerating supports (exact for small M)."""
    v = v.double()
    best, best_d = None, float("inf")
    for r in range(1, len(v) + 1):
        for support in itertools.combinations(range(len(v)), r):
            idx = list(support)
            theta = (v[idx].sum() - 1) / r
            w = torch.zeros_like(v)
            w[idx] = v[idx] - theta
            if (w >= -1e-12).all():
                d = float(((w - v) ** 2).sum())
                if d < best_d:
                    best, best_d = w.clamp_min(0), d
    return best


CASES = {
    "on_simplex": [0.2, 0.3, 0.5],
    "all_negative": [-3.0, -1.0, -2.0, -1.5],
    "ties": [0.7, 0.7, 0.7, 0.1],
    "one_hot": [0.0, 1.0, 0.0],
    "big_one": [5.0, 0.1, -0.2],
    "uniform_shift": [10.0, 10.0, 10.0, 10.0],
    "single": [0.3],
    "mixed": [0.9, -0.4, 0.35, 0.36, 0.0],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_projection_matches_brute_force(name):
    v = torch.tensor(CASES[name], dtype=torch.float64)
    w = project_onto_simplex(v)
    torch.testing.assert_close(w, brute_force(v), atol=1e-12, rtol=0)
    assert is_on_simplex(w, atol=1e-12)


def test_projection_is_identity_on_the_simplex_and_idempotent():
    g = torch.Generator().manual_seed(0)
    pts = torch.stack([uniform_simplex(6, g) for _ in range(20)])
    torch.testing.assert_close(project_onto_simplex(pts), pts, atol=1e-6, rtol=0)
    v = torch.randn(20, 6, generator=g) * 3
    once = project_onto_simplex(v)
    torch.testing.assert_close(project_onto_simplex(once), once, atol=1e-6, rtol=0)


def test_batched_rows_and_low_precision():
    g = torch.Generator().manual_seed(1)
    v = torch.randn(4, 3, 5, generator=g, dtype=torch.float64)
    w = project_onto_simplex(v)
    for row, out in zip(v.reshape(-1, 5), w.reshape(-1, 5)):
        torch.testing.assert_close(out, brute_force(row), atol=1e-12, rtol=0)
    half = project_onto_simplex(v.to(torch.bfloat16))
    assert half.dtype == torch.bfloat16 and is_on_simplex(half, atol=2e-2)


def _param(values, dtype=torch.float32, on_simplex=True):
    p = torch.nn.Parameter(torch.tensor(values, dtype=dtype))
    p.on_simplex = on_simplex
    return p


def test_after_step_fp32_and_frozen_group():
    model = torch.nn.Module()
    model.a = _param([0.9, 0.4, -0.1])
    model.b = _param([2.0, 2.0, 2.0])
    model.c = _param([5.0, 1.0], on_simplex=False)
    opt = SimpleNamespace(param_groups=[{"params": [model.a, model.c], "lr": 0.1}, {"params": [model.b], "lr": 0.0}])
    assert project_parameters_after_step(model, opt) == 1
    torch.testing.assert_close(model.a.data, brute_force(torch.tensor([0.9, 0.4, -0.1])).float())
    assert torch.equal(model.b.data, torch.tensor([2.0, 2.0, 2.0]))  # lr 0: untouched
    assert torch.equal(model.c.data, torch.tensor([5.0, 1.0]))


@pytest.mark.parametrize("flat", [False, True])
def test_after_step_reaches_fp32_master_weights(flat):
    """FP16Optimizer layout: the master copy is projected and copied to the half weight."""
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(torch.ones(2, 2, dtype=torch.float16))
    model.k = _param([0.9, 0.4, -0.1], dtype=torch.float16)
    fp16 = [model.w, model.k]
    if flat:
        buf = torch.nn.Parameter(torch.cat([p.detach().float().reshape(-1) for p in fp16]))
        buf.data[4:] = torch.tensor([0.9, 0.4, -0.1])  # master differs from the fp16 copy
        fp32, groups = {0: buf}, [{"params": [buf], "lr": 1.0}]
    else:
        masters = [torch.nn.Parameter(p.detach().float()) for p in fp16]
        masters[1].data = torch.tensor([0.9, 0.4, -0.1])
        fp32, groups = masters, [{"params": masters, "lr": 1.0}]
    opt = SimpleNamespace(fp16_params=fp16, fp32_params=fp32, param_groups=groups)
    project_parameters_after_step(model, opt)
    master = fp32[0].data[4:] if flat else fp32[1].data
    assert is_on_simplex(master, atol=1e-6)
    torch.testing.assert_close(master, brute_force(torch.tensor([0.9, 0.4, -0.1])).float())
    assert torch.equal(model.k.data, master.half())
    assert torch.equal(model.w.data, torch.ones(2, 2, dtype=torch.float16))
