import pytest
import torch
from torch import nn

from fdahpc.params import FlatParams


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def test_parameters_are_views_of_one_buffer():
    model = _net()
    before = [p.detach().clone() for p in model.parameters()]
    flat = FlatParams(model)
    assert flat.dim == 3 * 4 + 4 + 4 * 2 + 2
    assert torch.equal(flat.w, torch.cat([b.flatten() for b in before]))
    flat.w.zero_()
    assert all(torch.count_nonzero(p) == 0 for p in model.parameters())
    assert flat.is_flat()


def test_optimizer_steps_write_into_the_buffer():
    model = _net()
    flat = FlatParams(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    w0 = flat.w.clone()
    model(torch.randn(5, 3)).sum().backward()
    opt.step()
    assert flat.is_flat()
    assert not torch.equal(w0, flat.w)
    assert torch.equal(flat.w[:12].view(4, 3), model[0].weight.detach())


def test_frozen_parameters_stay_out():
    model = _net()
    model[0].bias.requires_grad_(False)
    assert FlatParams(model).dim == 12 + 8 + 2
    with pytest.raises(ValueError, match="no trainable"):
        FlatParams(nn.ReLU())
