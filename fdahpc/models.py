"""The models of the papers fdahpc reproduces, built by name for any image shape.

- ``lenet5``: LeNet-5 as in the FDA paper (Keras style, ~62 K parameters on MNIST).
- ``lenet5bn``: the same with BatchNorm after each convolution (44 more parameters, 44
  running statistics): a model with BatchNorm, as the FedQS paper's ResNet-18, that
  still trains 100 simulated clients on 2 cores.
- ``mlr``: multinomial logistic regression, the FedAdp paper's convex model.
- ``cnn``: the FedAdp paper's small CNN (two 5x5 convolutions, max-pooling, FC 512).
- ``vgg16star``: VGG16 without its 512-channel blocks, FC 512-512 (FDA paper, MNIST).
- ``resnet18``: ResNet-18 for 32x32 inputs (FedQS paper, CIFAR-10).
- ``gpt``, ``lstm``: character models of a text (``--dataset shakespeare``), built by
  :func:`build_text_model`: a small decoder-only transformer, and LEAF's Shakespeare LSTM
  (the FedQS paper's text model).
- ``module.path:function``: a user's own network (:func:`build_own_model`).

Initialization follows the papers: the Keras-built models of the FDA paper
(``lenet5``, ``vgg16star``) and the FedAdp models use Keras' default, Glorot-uniform
weights and zero biases; ``resnet18`` uses He (Kaiming) normal convolutions, the usual
choice for residual networks. All initialization draws from torch's global generator,
so the same ``torch.manual_seed`` gives the same model on every rank.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from .choices import unknown
from .options import TextModelOptions
from .user import call, one_line

__all__ = ["MODELS", "TEXT_MODELS", "MaxPool2", "TextModelOptions", "build_model", "build_own_model", "build_text_model",
           "count_params", "flat_outputs"]

MODELS: tuple[str, ...] = ("lenet5", "lenet5bn", "mlr", "cnn", "vgg16star", "resnet18", "gpt", "lstm")
TEXT_MODELS: tuple[str, ...] = ("gpt", "lstm")  # x: (B, T) character codes


def count_params(model: nn.Module) -> int:
    """Trainable parameters: what fdahpc communicates (BatchNorm buffers are not counted)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _glorot_(model: nn.Module) -> nn.Module:
    """Keras' default initialization, which the FDA paper's LeNet-5 and VGG16* were trained with."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return model


def _quarters(x: torch.Tensor) -> list[torch.Tensor]:
    """The four strided views of ``x`` that hold each 2x2 window's corners, in row-major order
    (an odd last row or column dropped, as ``nn.MaxPool2d(2)`` drops it)."""
    h, w = x.shape[-2] // 2 * 2, x.shape[-1] // 2 * 2
    return [x[..., i:h:2, j:w:2] for i in (0, 1) for j in (0, 1)]


def _window_maxima(x: torch.Tensor) -> torch.Tensor:
    """Each 2x2 window's maximum: two rounds of elementwise maxima over the quarters."""
    a, b, c, d = _quarters(x)
    return torch.maximum(torch.maximum(a, b), torch.maximum(c, d))


def _first_maxima(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Each window's first maximum in row-major order, as a flat index into its (H, W) plane:
    the index torch's kernel records (it moves on only to a strictly larger value)."""
    w = x.shape[-1]
    h2, w2 = y.shape[-2:]
    index = (torch.arange(h2).mul_(2 * w).unsqueeze(1) + torch.arange(w2).mul_(2)).expand(y.shape).contiguous()
    taken = None
    for corner, offset in zip(_quarters(x), (0, 1, w, w + 1)):
        hit = corner == y
        if taken is None:
            taken = hit
            continue
        hit &= ~taken
        taken |= hit
        index.add_(hit, alpha=offset)
    return index


class _MaxPool2Function(torch.autograd.Function):
    """The 2x2 maximum by elementwise maxima; the gradient by torch's own scatter, to the
    window's first maximum (to the kernel's choice where a window holds a NaN)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y = _window_maxima(x)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        x, y = ctx.saved_tensors
        index = nn.functional.max_pool2d(x, 2, return_indices=True)[1] if y.isnan().any() else _first_maxima(x, y)
        return torch.ops.aten.max_pool2d_with_indices_backward(grad, x, [2, 2], [2, 2], [0, 0], [1, 1], False, index)


class MaxPool2(nn.MaxPool2d):
    """``nn.MaxPool2d(2)``, faster on the CPU, with the same values and gradients.

    torch's CPU max-pool kernel is slow at these sizes: in a profile of a LeNet-5-BN run
    (batch 50, one thread) its forward took 14 s against 8 s for the convolutions' forward
    (``benchmarks/maxpool.py`` prints the ratios on the machine at hand). Here a 2x2
    window's maximum is two rounds of elementwise maxima over the input's four strided
    quarters: the kernel's values (the maximum is exact; a window with a NaN gives NaN in
    both). Where autograd records, the
    backward sends each window's gradient to its first maximum in row-major order, the
    element torch's kernel picks (``_first_maxima``), through torch's own scatter; a window
    holding a NaN takes the kernel's index. ``tests/test_models.py`` ties both to
    ``nn.MaxPool2d(2)``, bit for bit. Off the CPU the kernel runs.
    """

    def __init__(self) -> None:
        super().__init__(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or x.dim() not in (3, 4):
            return super().forward(x)
        if torch.is_grad_enabled() and x.requires_grad:
            return _MaxPool2Function.apply(x)
        return _window_maxima(x)


def _lenet5(c: int, s: int, k: int, batch_norm: bool = False) -> nn.Module:
    """conv 6@5x5 'same' -> pool -> conv 16@5x5 -> pool -> FC 120 -> 84 -> k.

    ReLU and max-pooling (not the 1998 tanh and subsampling): they train fast with
    Adam at lr 1e-3, the paper's optimizer. On 1x28x28 with 10 classes: 61,706 parameters.
    ``batch_norm``: BatchNorm between each convolution and its ReLU (61,750 parameters).
    """
    side = (s // 2 - 4) // 2

    def norm(channels: int) -> list[nn.Module]:
        return [nn.BatchNorm2d(channels)] if batch_norm else []

    return nn.Sequential(
        nn.Conv2d(c, 6, 5, padding=2), *norm(6), nn.ReLU(), MaxPool2(),
        nn.Conv2d(6, 16, 5), *norm(16), nn.ReLU(), MaxPool2(),
        nn.Flatten(),
        nn.Linear(16 * side * side, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, k),
    )


def _mlr(c: int, s: int, k: int) -> nn.Module:
    """Softmax regression: the cross-entropy loss applies the softmax, so the model is one linear map."""
    return nn.Sequential(nn.Flatten(), nn.Linear(c * s * s, k))


def _cnn(c: int, s: int, k: int) -> nn.Module:
    """The FedAvg/FedAdp CNN: conv 32@5x5 -> pool -> conv 64@5x5 -> pool -> FC 512 -> k."""
    side = s // 4
    return nn.Sequential(
        nn.Conv2d(c, 32, 5, padding=2), nn.ReLU(), MaxPool2(),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), MaxPool2(),
        nn.Flatten(),
        nn.Linear(64 * side * side, 512), nn.ReLU(),
        nn.Linear(512, k),
    )


# VGG16's first three blocks (convolutions per block, channels); the two 512 blocks are dropped.
_VGG16STAR_BLOCKS = ((2, 64), (2, 128), (3, 256))


def _vgg16star(c: int, s: int, k: int) -> nn.Module:
    """VGG16 blocks 1-3 (seven 3x3 convolutions, 64-64-128-128-256-256-256), FC 512-512.

    After three poolings a 28x28 image is 3x3; an adaptive average pool to 2x2 fixes the
    classifier's input at 1024 features for every image size, which puts the model at
    2,526,922 parameters on MNIST (the paper reports ~2.6 M without giving the layout;
    flattening the 3x3 map instead would give 3.18 M). No BatchNorm and no dropout.
    """
    layers: list[nn.Module] = []
    for convs, width in _VGG16STAR_BLOCKS:
        for _ in range(convs):
            layers += [nn.Conv2d(c, width, 3, padding=1), nn.ReLU()]
            c = width
        layers.append(MaxPool2())
    layers += [
        nn.AdaptiveAvgPool2d(2), nn.Flatten(),
        nn.Linear(c * 4, 512), nn.ReLU(),
        nn.Linear(512, 512), nn.ReLU(),
        nn.Linear(512, k),
    ]
    return nn.Sequential(*layers)


class _BasicBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm and an identity (or 1x1 projection) shortcut."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + self.shortcut(x))


def _resnet18(c: int, s: int, k: int) -> nn.Module:
    """ResNet-18 for small images: 3x3 stem, no max-pool, stages 64-128-256-512 of two blocks.

    11,173,962 parameters for 3x32x32 and 10 classes.

    Note for the strategies: BatchNorm's running mean and variance are *buffers*, not
    trainable parameters, so they are neither in ``count_params`` nor in the flat buffer
    that the synchronous strategies average: each rank keeps its own running statistics
    while training. Evaluation averages them over the ranks along with the parameters
    (:class:`fdahpc.evaluate.Evaluator`), and the semi-asynchronous mode ships them with
    every model (``FlatParams(..., buffers=True)``).
    """
    layers: list[nn.Module] = [nn.Conv2d(c, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    c_in = 64
    for i, width in enumerate((64, 128, 256, 512)):
        stride = 1 if i == 0 else 2
        layers += [_BasicBlock(c_in, width, stride), _BasicBlock(width, width, 1)]
        c_in = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, k)]
    model = nn.Sequential(*layers)
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return model


# name -> (builder, smallest image side it accepts, Glorot init?)
_BUILDERS: dict[str, tuple[Callable[[int, int, int], nn.Module], int, bool]] = {
    "lenet5": (_lenet5, 12, True),
    "lenet5bn": (lambda c, s, k: _lenet5(c, s, k, batch_norm=True), 12, True),
    "mlr": (_mlr, 1, True),
    "cnn": (_cnn, 4, True),
    "vgg16star": (_vgg16star, 8, True),
    "resnet18": (_resnet18, 8, False),
}


def build_model(name: str, in_channels: int, image_size: int, num_classes: int) -> nn.Module:
    """Build model ``name`` for square images of ``in_channels`` x ``image_size`` x ``image_size``."""
    if name in TEXT_MODELS:
        raise ValueError(f"model {name!r}: a character model; build it with build_text_model (--dataset shakespeare)")
    if name not in _BUILDERS:
        raise unknown("model", name, MODELS)
    builder, min_size, glorot = _BUILDERS[name]
    if not isinstance(in_channels, int) or in_channels < 1:
        raise ValueError(f"in_channels {in_channels!r}: must be an integer >= 1 (1 for MNIST, 3 for CIFAR)")
    if not isinstance(image_size, int) or image_size < min_size:
        raise ValueError(f"image_size {image_size!r}: model {name} needs an integer >= {min_size}")
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes {num_classes!r}: must be an integer >= 2")
    model = builder(in_channels, image_size, num_classes)
    return _glorot_(model) if glorot else model


# ---------------------------------------------------------------------------- character models
def flat_outputs(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A sequence model's (B, T, V) logits and (B, T) targets as B·T predictions; other
    outputs unchanged. Loss and accuracy are then means over every predicted character."""
    if logits.dim() == 3:
        return logits.flatten(0, 1), y.flatten()
    return logits, y


class _Block(nn.Module):
    """Pre-LN transformer block: x + attention(LN(x)), then x + MLP(LN(x)), MLP 4x wide, GELU."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, w = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        # is_causal: position i attends to positions <= i only, so no later character leaks in.
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, w))
        return x + self.mlp(self.ln2(x))


class CharGPT(nn.Module):
    """Decoder-only character transformer: token + learned position embeddings, pre-LN
    blocks, a final LayerNorm, and an output layer tied to the token embedding (fewer
    parameters to communicate; the usual choice for small language models).

    Initialization as GPT-2: weights N(0, 0.02), the residual projections N(0, 0.02/√(2L))
    so the residual stream's variance does not grow with depth; biases zero.
    Input (B, T) codes with T <= context; output (B, T, V) logits of each next character.
    """

    def __init__(self, vocab: int, context: int, layers: int, heads: int, width: int) -> None:
        super().__init__()
        self.context = context
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(_Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tok.weight
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "mlp.2.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        if t > self.context:
            raise ValueError(f"input of {t} characters: the model's context is {self.context}")
        h = self.tok(x) + self.pos(torch.arange(t, device=x.device))
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln(h))


class CharLSTM(nn.Module):
    """LEAF's Shakespeare model, as the FedQS paper names it: an 8-dimensional character
    embedding, two LSTM layers of 256 units, and a linear layer on the last step's output
    predicting the character after the sequence. Input (B, T) codes, output (B, V).
    Torch's default initialization (uniform ±1/√256 for the LSTM)."""

    def __init__(self, vocab: int, embed: int = 8, hidden: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.lstm(self.embed(x))
        return self.out(h[:, -1])


def build_text_model(name: str, vocab: int, options: TextModelOptions = TextModelOptions()) -> nn.Module:
    """Character model ``name`` (one of `TEXT_MODELS`) over a ``vocab``-character alphabet."""
    if name not in TEXT_MODELS:
        raise ValueError(f"model {name!r}: not a character model; choose one of {', '.join(TEXT_MODELS)}")
    if not isinstance(vocab, int) or vocab < 2:
        raise ValueError(f"vocab {vocab!r}: must be an integer >= 2")
    if name == "lstm":
        return CharLSTM(vocab)
    o = options
    return CharGPT(vocab, o.context, o.gpt_layers, o.gpt_heads, o.gpt_width)


# ---------------------------------------------------------------------------- a user's own
#: How many samples the output check feeds a user's model.
OWN_CHECK_BATCH = 2


def build_own_model(ref: str, sample_shape: tuple[int, ...], sample_dtype: torch.dtype, num_classes: int) -> nn.Module:
    """``--model module.path:function``: the ``nn.Module`` the function returns, checked.

    The function is offered ``num_classes`` (the dataset's) and ``input_shape`` (one
    sample's shape, e.g. ``(1, 28, 28)``) and gets those it names (:mod:`fdahpc.user`). It
    draws its initial weights from torch's global generator, seeded by the caller, so every
    rank builds the same model. The check: float32 parameters (the flat buffer every
    strategy communicates is float32), and on a batch of :data:`OWN_CHECK_BATCH` zero
    samples of the dataset's shape and dtype, in eval mode without gradients (so
    BatchNorm statistics do not move; lazy layers take their size from it, as they would
    from a first training batch), logits of shape (batch, num_classes). Zeros, not real
    samples: every rank has them (the semi-asynchronous server holds no training rows, the
    hosts no test rows), so every rank reaches the same verdict.
    """
    model = call("--model", ref, {"num_classes": num_classes, "input_shape": tuple(sample_shape)})
    if not isinstance(model, nn.Module):
        raise ValueError(f"--model {ref}: returned a {type(model).__name__}, not a torch.nn.Module; return the network "
                         "(e.g. nn.Sequential(...))")
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if t.is_floating_point() and t.dtype != torch.float32:
            raise ValueError(f"--model {ref}: {name} is {t.dtype}; fdahpc communicates float32, return model.float()")
    batch = torch.zeros((OWN_CHECK_BATCH, *sample_shape), dtype=sample_dtype)
    shown = f"{OWN_CHECK_BATCH} samples of shape {tuple(sample_shape)} ({str(sample_dtype).replace('torch.', '')})"
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(batch)
    except Exception as exc:
        raise ValueError(f"--model {ref}: on a batch of {shown} it raised {one_line(exc)}; "
                         "make it take the dataset's samples") from None
    finally:
        model.train(training)
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"--model {ref}: on a batch of {shown} it returned a {type(out).__name__}; return the "
                         "logits tensor from forward")
    if tuple(out.shape) != (OWN_CHECK_BATCH, num_classes):
        raise ValueError(f"--model {ref}: on a batch of {shown} it returned shape {tuple(out.shape)}, but the dataset "
                         f"has {num_classes} classes; return logits of shape ({OWN_CHECK_BATCH}, {num_classes}) (its "
                         f"last layer: {num_classes} outputs)")
    if count_params(model) == 0:  # after the forward pass, which sizes lazy layers
        raise ValueError(f"--model {ref}: the network has no trainable parameters; give it at least one layer "
                         "with weights")
    return model
