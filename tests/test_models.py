"""Model zoo: parameter counts against the papers, shapes, determinism, argument checks."""

import pytest
import torch
from torch import nn

from fdahpc.models import MODELS, TEXT_MODELS, build_model, count_params

MNIST = (1, 28)
CIFAR = (3, 32)


@pytest.mark.parametrize(
    "name, shape, low, high",
    [
        ("lenet5", MNIST, 60_000, 65_000),  # FDA paper: ~62 K
        ("vgg16star", MNIST, 2_400_000, 2_800_000),  # FDA paper: ~2.6 M
        ("resnet18", CIFAR, 11_000_000, 11_400_000),  # ~11.2 M
    ],
)
def test_param_counts_match_the_papers(name, shape, low, high):
    n = count_params(build_model(name, *shape, num_classes=10))
    assert low <= n <= high, n


def test_small_models_have_exact_closed_form_counts():
    assert count_params(build_model("mlr", 1, 28, 10)) == 28 * 28 * 10 + 10
    assert count_params(build_model("lenet5", 1, 28, 10)) == 61_706
    assert count_params(build_model("lenet5bn", 1, 28, 10)) == 61_706 + 2 * (6 + 16)  # BatchNorm's γ and β


def test_lenet5bn_normalizes_with_running_statistics_as_buffers():
    model = build_model("lenet5bn", 1, 28, 10)
    running = {name: b.numel() for name, b in model.named_buffers() if "running" in name}
    assert sum(running.values()) == 2 * (6 + 16)
    model.train()
    model(torch.randn(16, 1, 28, 28) * 3 + 1)
    assert not torch.equal(model[1].running_mean, torch.zeros(6))  # training updates them

@pytest.mark.parametrize("name", [m for m in MODELS if m not in TEXT_MODELS])  # text models: tests/test_text.py
@pytest.mark.parametrize("shape", [MNIST, CIFAR])
def test_forward_shape(name, shape):
    torch.manual_seed(0)
    model = build_model(name, *shape, num_classes=7).eval()
    with torch.no_grad():
        y = model(torch.randn(2, shape[0], shape[1], shape[1]))
    assert y.shape == (2, 7)
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("name", ["lenet5", "mlr", "cnn"])
def test_same_seed_same_init_other_seed_differs(name):
    def flat(seed):
        torch.manual_seed(seed)
        model = build_model(name, 1, 28, 10)
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    assert torch.equal(flat(3), flat(3))
    assert not torch.equal(flat(3), flat(4))


def test_glorot_init_zero_biases_and_glorot_bound():
    model = build_model("lenet5", 1, 28, 10)
    fc = [m for m in model.modules() if isinstance(m, nn.Linear)][0]
    bound = (6.0 / (fc.in_features + fc.out_features)) ** 0.5
    assert fc.bias.abs().max() == 0
    assert fc.weight.abs().max() <= bound
    assert fc.weight.abs().max() > 0.9 * bound  # spans the Glorot range, not torch's narrower default


def test_resnet_bn_running_stats_are_buffers_not_params():
    model = build_model("resnet18", 3, 32, 10)
    buffers = sum(b.numel() for name, b in model.named_buffers() if "running" in name)
    assert buffers > 0
    assert count_params(model) == sum(p.numel() for p in model.parameters())


def test_count_params_skips_frozen():
    model = build_model("mlr", 1, 28, 10)
    model[1].bias.requires_grad_(False)
    assert count_params(model) == 28 * 28 * 10


def test_unknown_name_lists_the_choices():
    with pytest.raises(ValueError, match=r"model 'lenet': unknown; did you mean lenet5\? choose one of lenet5, lenet5bn, "
                                         r"mlr, cnn, vgg16star, resnet18"):
        build_model("lenet", 1, 28, 10)


@pytest.mark.parametrize(
    "kwargs, word",
    [
        (dict(in_channels=0, image_size=28, num_classes=10), "in_channels"),
        (dict(in_channels=1, image_size=8, num_classes=10), "image_size"),
        (dict(in_channels=1, image_size=28, num_classes=1), "num_classes"),
    ],
)
def test_bad_shapes_name_the_argument(kwargs, word):
    with pytest.raises(ValueError, match=word):
        build_model("lenet5", **kwargs)


@pytest.mark.parametrize("shape", [(50, 6, 28, 28), (7, 16, 10, 10), (3, 2, 7, 9), (4, 5, 6)])
def test_fast_max_pool_is_torch_max_pool(shape):
    """MaxPool2 (elementwise maxima of the strided quarters; the gradient to each window's
    first maximum) gives nn.MaxPool2d(2)'s values and gradients bit for bit, on ties (a flat
    background after a ReLU), NaNs, odd sides (the last row and column dropped), 3-D input."""
    from fdahpc.models import MaxPool2

    g = torch.Generator().manual_seed(sum(shape))
    x = torch.relu(torch.randn(shape, generator=g))
    x[..., :3, :] = 0.25  # ties inside windows that are not all zero
    x[..., -1, -1] = float("nan")
    x.view(-1)[5] = float("nan")
    fast, ref = MaxPool2(), nn.MaxPool2d(2)
    with torch.no_grad():
        y = fast(x)
        assert torch.equal(y.isnan(), ref(x).isnan()) and y.isnan().any()
        assert torch.equal(y.nan_to_num(), ref(x).nan_to_num())
        if x.dim() == 4:
            y_last = fast(x.contiguous(memory_format=torch.channels_last))
            assert torch.equal(y_last.nan_to_num(), y.nan_to_num())
    up = torch.randn(y.shape, generator=g)
    for inputs in (x.nan_to_num(), x):  # a window with a NaN sends its gradient where the kernel does
        xf, xr = inputs.clone().requires_grad_(True), inputs.clone().requires_grad_(True)
        yf = fast(xf)
        assert yf.grad_fn is not None and type(yf.grad_fn).__name__ != "MaxPool2DWithIndicesBackward0"
        yf.backward(up)
        ref(xr).backward(up)
        assert torch.equal(xf.grad, xr.grad) and xf.grad.count_nonzero() == up.numel()  # one maximum per window


def test_models_pool_with_the_fast_max_pool():
    from fdahpc.models import MaxPool2

    for name in ("lenet5", "lenet5bn", "cnn", "vgg16star"):
        pools = [m for m in build_model(name, 1, 28, 10).modules() if isinstance(m, nn.MaxPool2d)]
        assert pools and all(type(m) is MaxPool2 for m in pools), name


def test_score_counts_the_same_at_every_batch_size():
    """score()'s default batch (small on the CPU, for speed) scores each sample as one
    batch of the whole set does: the same correct count, the loss sum to float rounding;
    a set that is not a multiple of the batch loses no sample."""
    from fdahpc.evaluate import CPU_SCORE_BATCH, score, score_batch

    torch.manual_seed(0)
    model = build_model("lenet5bn", 1, 28, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.rand(3 * CPU_SCORE_BATCH + 7, 1, 28, 28), torch.randint(0, 10, (3 * CPU_SCORE_BATCH + 7,))
    for i in range(0, len(y), 50):  # trained a little, so BatchNorm's statistics are not the identity
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[i : i + 50]), y[i : i + 50]).backward()
        opt.step()
    assert score_batch("cpu") == CPU_SCORE_BATCH and score_batch("cuda") > CPU_SCORE_BATCH
    whole, default = score(model, x, y, batch_size=len(y)), score(model, x, y)
    assert default.count == whole.count == len(y)
    assert default.correct == whole.correct and 0 < whole.correct < len(y)
    assert default.loss_sum == pytest.approx(whole.loss_sum, rel=1e-6)
    assert model.training  # score() leaves the mode as it found it
