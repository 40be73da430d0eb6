"""The other building blocks of the notes, from tensors: layer norm (and RMSNorm), positional
encodings, the token embedding, the MLP (GELU, ReLU² or SwiGLU) and cross-entropy. The norms, the
MLP and cross-entropy each have a `fused` switch to the equivalent PyTorch kernel."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from src.model.checks import POSITIONAL, choice


class LayerNorm(nn.Module):
    """y = (x - mean) / sqrt(var + eps) * gain + bias over the last dimension; gain and bias optional.
    The variance is the biased one (divide by d, not d - 1), as in the paper and torch.nn.LayerNorm."""

    def __init__(self, d: int, eps: float = 1e-5, gain: bool = True, bias: bool = True, fused: bool = False):
        super().__init__()
        self.d, self.eps, self.fused = d, eps, fused
        self.gain = nn.Parameter(torch.ones(d)) if gain else None
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        if self.fused:
            return F.layer_norm(x, (self.d,), self.gain, self.bias, self.eps)
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased variance
        y = (x - mean) / torch.sqrt(var + self.eps)
        if self.gain is not None:
            y = y * self.gain
        if self.bias is not None:
            y = y + self.bias
        return y


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * gain (Zhang & Sennrich 2019): LayerNorm without the mean, rescaling
    each vector to root-mean-square 1, as today's models do. The gain is optional."""

    def __init__(self, d: int, eps: float = 1e-5, gain: bool = True, fused: bool = False):
        super().__init__()
        self.d, self.eps, self.fused = d, eps, fused
        self.gain = nn.Parameter(torch.ones(d)) if gain else None

    def forward(self, x: Tensor) -> Tensor:
        if self.fused:
            return F.rms_norm(x, (self.d,), self.gain, self.eps)
        y = x / torch.sqrt((x**2).mean(dim=-1, keepdim=True) + self.eps)
        return y * self.gain if self.gain is not None else y


NORMS = ("layer", "rms")


def norm_layer(kind: str, d: int, gain: bool = True, bias: bool = False, fused: bool = False) -> nn.Module:
    """`model.norm`: "layer" (LayerNorm, gain and optional bias) or "rms" (RMSNorm, no bias)."""
    if kind == "rms":
        return RMSNorm(d, gain=gain, fused=fused)
    return LayerNorm(d, gain=gain, bias=bias, fused=fused)


def sinusoidal_encoding(max_len: int, d: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d)), (max_len, d):
    each pair of columns a clock of its own period, so every position gets a code nothing has to learn."""
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    two_i = torch.arange(0, d, 2, dtype=torch.float64)  # 2i = 0, 2, 4, ...
    angle = pos / 10000 ** (two_i / d)  # (max_len, ceil(d/2))
    pe = torch.zeros(max_len, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d // 2])
    return pe.float()


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal code of each position. A buffer, not a parameter: it never trains."""

    def __init__(self, max_len: int, d: int):
        super().__init__()
        self.register_buffer("pe", sinusoidal_encoding(max_len, d), persistent=False)

    def forward(self, start: int, T: int) -> Tensor:
        """The codes of positions start..start+T-1: (T, d)."""
        return self.pe[start : start + T]


class LearnedPositionalEmbedding(nn.Module):
    """The alternative GPT-2 uses: one learned vector per position."""

    def __init__(self, max_len: int, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, d) * 0.02)

    def forward(self, start: int, T: int) -> Tensor:
        return self.weight[start : start + T]


def positional_encoding(kind: str, max_len: int, d: int) -> nn.Module | None:
    """The code added to X: sinusoidal or learned; None for rope, which rotates Q and K instead."""
    choice("model.positional", kind, POSITIONAL)
    if kind == "rope":
        return None
    return LearnedPositionalEmbedding(max_len, d) if kind == "learned" else SinusoidalPositionalEncoding(max_len, d)


class TokenAndPositionEmbedding(nn.Module):
    """X = E[token] * scale + PE[position]   -> (B, T, d);  X = E[token] with rotary positions.

    E: the learned (vocab_size, d) matrix, a row per character. Beside the sinusoidal code (entries ~1) the
    token rows are scaled by sqrt(d), as in "Attention is all you need", so the position signal does not
    drown them at the start; learned positions start as small. `scale_tokens=False`: the notes' E[token] + PE.
    """

    def __init__(
        self, vocab_size: int, d: int, max_len: int, positional: str = "sinusoidal", scale_tokens: bool = True
    ):
        super().__init__()
        self.E = nn.Parameter(torch.randn(vocab_size, d) * 0.02)
        self.position = positional_encoding(positional, max_len, d)
        self.scale = math.sqrt(d) if positional == "sinusoidal" and scale_tokens else 1.0

    def forward(self, idx: Tensor, start: int = 0) -> Tensor:
        """idx: (B, T) token ids at positions start..start+T-1 -> X: (B, T, d)."""
        tokens = F.embedding(idx, self.E) * self.scale  # row idx of E, times sqrt(d) or 1: (B, T, d)
        if self.position is None:  # rope: positions are rotations inside attention
            return tokens
        return tokens + self.position(start, idx.shape[1])  # (T, d) broadcasts over B


def gelu(x: Tensor) -> Tensor:
    """GELU(x) = x * Phi(x), Phi the standard normal CDF = 0.5 * (1 + erf(x / sqrt 2))."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def relu2(x: Tensor) -> Tensor:
    """ReLU²(x) = max(0, x)^2 (So et al. 2021, "Primer"; the modded-nanogpt speedruns use it)."""
    return torch.clamp(x, min=0.0) ** 2


def silu(x: Tensor) -> Tensor:
    """SiLU(x) = x * sigmoid(x) = x / (1 + exp(-x)), the gate of SwiGLU."""
    return x / (1.0 + torch.exp(-x))


# Each activation: the formula above, and PyTorch's kernel for it (fused=True).
ACTIVATION = {"gelu": (gelu, F.gelu), "relu2": (relu2, lambda h: F.relu(h).square()), "swiglu": (silu, F.silu)}
ACTIVATIONS = tuple(ACTIVATION)


def linear(x: Tensor, W: Tensor, b: Tensor | None = None, fused: bool = False) -> Tensor:
    """x W + b (no b: x W); fused: F.linear, the same numbers in one kernel."""
    if fused:
        return F.linear(x, W.t(), b)
    return x @ W if b is None else x @ W + b


def mlp_hidden(d: int, ratio: int, activation: str) -> int:
    """Hidden width: ratio * d; SwiGLU has three matrices, so 2/3 of it keeps the parameters equal."""
    return 2 * ratio * d // 3 if activation == "swiglu" else ratio * d


class MLP(nn.Module):
    """The position-wise feed-forward net: expand by `ratio`, activate, project back.

    gelu, relu2:  MLP(x) = act(x W_1 + b_1) W_2 + b_2
    swiglu:       MLP(x) = (SiLU(x W_1) * (x W_3)) W_2     (Shazeer 2020: a gate times a value, elementwise)
    """

    def __init__(
        self,
        d: int,
        ratio: int = 4,
        dropout: float = 0.0,
        bias: bool = False,
        fused: bool = False,
        out_std: float = 0.02,
        activation: str = "gelu",
    ):
        super().__init__()
        hidden = mlp_hidden(d, ratio, activation)
        self.activation = activation
        self.W_1 = nn.Parameter(torch.randn(d, hidden) * 0.02)
        self.W_2 = nn.Parameter(torch.randn(hidden, d) * out_std)
        self.b_1 = nn.Parameter(torch.zeros(hidden)) if bias else None
        self.b_2 = nn.Parameter(torch.zeros(d)) if bias else None
        self.W_3 = nn.Parameter(torch.randn(d, hidden) * 0.02) if activation == "swiglu" else None
        self.b_3 = nn.Parameter(torch.zeros(hidden)) if bias and activation == "swiglu" else None
        self.dropout = nn.Dropout(dropout)
        self.fused = fused

    def forward(self, x: Tensor) -> Tensor:
        """x: (B, T, d) -> (B, T, d)."""
        act = ACTIVATION[self.activation][self.fused]  # the formula, or its kernel when fused
        h = act(linear(x, self.W_1, self.b_1, self.fused))  # (B, T, hidden)
        if self.activation == "swiglu":
            h = h * linear(x, self.W_3, self.b_3, self.fused)  # the gate times the value, elementwise
        return self.dropout(linear(h, self.W_2, self.b_2, self.fused))  # (B, T, d)


def softcap(z: Tensor, cap: float | None) -> Tensor:
    """Logit soft-capping (Gemma 2): c * tanh(z / c), close to z while |z| << c, never beyond +-c; None: z."""
    return z if cap is None else cap * torch.tanh(z / cap)


def cross_entropy(logits: Tensor, targets: Tensor, fused: bool = False, reduction: str = "mean") -> Tensor:
    """-log softmax(logits)[target] per position, averaged unless reduction="none". logits: (N, V), targets:
    (N,). log softmax = z - max - log sum exp(z - max), which never takes the log of an underflowed 0."""
    if fused:
        return F.cross_entropy(logits, targets, reduction=reduction)
    shifted = logits - logits.amax(dim=-1, keepdim=True)  # (N, V)
    log_probs = shifted - shifted.exp().sum(dim=-1, keepdim=True).log()  # (N, V)
    losses = -log_probs.gather(1, targets.unsqueeze(1)).squeeze(1)  # (N,)
    return losses.mean() if reduction == "mean" else losses
