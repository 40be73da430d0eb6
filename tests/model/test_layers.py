"""Layer norm, positional encodings, GELU and cross-entropy against torch and the formulas."""

import math

import pytest
import torch
import torch.nn.functional as F

from src.model.layers import (
    MLP,
    LayerNorm,
    SinusoidalPositionalEncoding,
    cross_entropy,
    gelu,
    positional_encoding,
    sinusoidal_encoding,
)
from tests.model.compare import assert_close


@pytest.mark.parametrize("gain,bias", [(True, True), (True, False), (False, False)])
def test_layer_norm_matches_torch(gain, bias):
    torch.manual_seed(0)
    ln = LayerNorm(10, gain=gain, bias=bias)
    with torch.no_grad():
        for p in ln.parameters():
            p.normal_()
    x = torch.randn(3, 5, 10) * 4 + 2
    expected = F.layer_norm(x, (10,), ln.gain, ln.bias, eps=1e-5)
    assert_close(ln(x), expected, atol=1e-5, rtol=1e-5)
    fused = LayerNorm(10, gain=gain, bias=bias, fused=True)
    fused.load_state_dict(ln.state_dict())
    assert_close(fused(x), expected, atol=1e-6, rtol=1e-5)


def test_layer_norm_uses_the_biased_variance():
    x = torch.tensor([[1.0, 3.0]])  # mean 2, biased variance 1
    y = LayerNorm(2, gain=False, bias=False)(x)
    assert_close(y, torch.tensor([[-1.0, 1.0]]) / math.sqrt(1 + 1e-5))


def test_layer_norm_adds_its_eps_inside_the_square_root():
    """Where the variance is near eps, where eps goes shows: 1e-3 / sqrt(1e-6 + 1e-5) = 0.3015, while
    1e-3 / (sqrt(1e-6) + 1e-5) = 0.990; and the eps is the layer's own."""
    x = torch.tensor([[-1e-3, 1e-3]])  # mean 0, biased variance 1e-6
    y = LayerNorm(2, gain=False, bias=False)(x)
    assert_close(y, x / math.sqrt(1e-6 + 1e-5), rtol=1e-5, atol=0)
    y = LayerNorm(2, eps=1.0, gain=False, bias=False)(torch.tensor([[1.0, 3.0]]))  # variance 1
    assert_close(y, torch.tensor([[-1.0, 1.0]]) / math.sqrt(1 + 1.0))


@pytest.mark.parametrize("d", [6, 5])
def test_sinusoidal_encoding_is_the_formula(d):
    """Column 2i is sin(pos / 10000^(2i/d)), column 2i+1 its cosine; an odd width ends on a sine. Computed in
    float64, returned in float32: at position 255 (a 256 window) float32 angles are off by ~1e-5."""
    pe = sinusoidal_encoding(256, d)
    column = [(math.sin if c % 2 == 0 else math.cos, c - c % 2) for c in range(d)]  # (sin or cos, 2i)
    expected = torch.tensor([[f(pos / 10000 ** (two_i / d)) for f, two_i in column] for pos in range(256)])
    assert_close(pe, expected, atol=1e-6, rtol=0)


def test_sinusoidal_encoding_is_a_buffer_not_a_parameter():
    module = SinusoidalPositionalEncoding(8, 4)
    assert list(module.parameters()) == []
    assert "pe" in dict(module.named_buffers())
    assert_close(module(2, 3), sinusoidal_encoding(8, 4)[2:5])
    assert len(list(positional_encoding("learned", 8, 4).parameters())) == 1
    with pytest.raises(ValueError, match="model.positional must be one of sinusoidal, learned"):
        positional_encoding("rotary", 8, 4)


def test_gelu_matches_torch():
    x = torch.linspace(-6, 6, 101)
    assert torch.allclose(gelu(x), F.gelu(x), atol=1e-6)


def test_mlp_fused_equals_plain():
    torch.manual_seed(0)
    plain, fused = MLP(8, bias=True), MLP(8, bias=True, fused=True)
    fused.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 8)
    assert torch.allclose(plain(x), fused(x), atol=1e-6)


def test_cross_entropy_matches_torch_and_is_stable():
    torch.manual_seed(0)
    logits, targets = torch.randn(20, 7) * 5, torch.randint(0, 7, (20,))
    expected = F.cross_entropy(logits, targets)
    assert_close(cross_entropy(logits, targets), expected, atol=1e-6, rtol=1e-5)
    assert_close(cross_entropy(logits, targets, fused=True), expected)
    huge = torch.tensor([[1000.0, -1000.0]])
    assert cross_entropy(huge, torch.tensor([1])).item() == pytest.approx(2000.0)
    assert cross_entropy(huge, torch.tensor([0])).item() == pytest.approx(0.0)


def test_cross_entropy_per_position_with_reduction_none():
    torch.manual_seed(0)
    logits, targets = torch.randn(20, 7) * 5, torch.randint(0, 7, (20,))
    expected = F.cross_entropy(logits, targets, reduction="none")  # (20,): one loss a position
    assert_close(cross_entropy(logits, targets, reduction="none"), expected, atol=1e-5, rtol=1e-5)
