"""``take_time``: row permutations along time, forward and backward against ``gather``."""
import torch

from fairseq_dense.modules.time_index import reverse_index, take_time


def _gather(x, index):
    return x.gather(0, index.unsqueeze(-1).expand(-1, -1, x.size(-1)))


def _check(x, index, inverse=None):
    g = torch.randn_like(x)
    x1 = x.clone().requires_grad_(True)
    x2 = x.clone().requires_grad_(True)
    out = take_time(x1, index, inverse)
    ref = _gather(x2, index)
    assert torch.equal(out, ref)
    (out * g).sum().backward()
    (ref * g).sum().backward()
    assert torch.equal(x1.grad, x2.grad)


def test_reversal_inside_lengths_matches_gather_forward_and_backward():
    lengths = torch.tensor([5, 2, 1, 4])
    index = reverse_index(lengths, 5)
    _check(torch.randn(5, 4, 3), index, inverse=index)
    _check(torch.randn(5, 4, 3), index)  # inverse computed


def test_any_per_sequence_permutation_matches_gather():
    torch.manual_seed(0)
    index = torch.stack([torch.randperm(6) for _ in range(3)], dim=1)  # T x B
    _check(torch.randn(6, 3, 2), index)
    # a non-contiguous input (transposed view)
    _check(torch.randn(3, 6, 2).transpose(0, 1), index)


def test_second_derivative_flows():
    index = reverse_index(torch.tensor([3, 2]), 3)
    x = torch.randn(3, 2, 2, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: take_time(t, index, index), (x,))
    assert torch.autograd.gradgradcheck(lambda t: take_time(t, index, index) ** 2, (x,))
