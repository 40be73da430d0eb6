"""The other building blocks of the notes, from tensors: layer norm, positional encodings, the
token embedding, the MLP and cross-entropy. Layer norm, the MLP and cross-entropy each have a
`fused` switch to the equivalent PyTorch kernel."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from src.model.checks import positional


class LayerNorm(nn.Module):
    """y = (x - mean) / sqrt(var + eps) * gain + bias, over the last dimension.

    The variance is the biased one (divide by d, not d - 1), as in the original paper and
    torch.nn.LayerNorm. Gain and bias are optional learnable vectors.
    """

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


def sinusoidal_encoding(max_len: int, d: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

    Returns (max_len, d). Each pair of columns is a clock of a different period, so every
    position gets a unique, smoothly varying code that nothing has to learn.
    """
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

    def __init__(self, max_len: int, d: int, std: float = 0.02):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, d) * std)

    def forward(self, start: int, T: int) -> Tensor:
        return self.weight[start : start + T]


def positional_encoding(kind: str, max_len: int, d: int) -> nn.Module:
    positional(kind)  # sinusoidal or learned; anything else is refused naming model.positional
    return LearnedPositionalEmbedding(max_len, d) if kind == "learned" else SinusoidalPositionalEncoding(max_len, d)


class TokenAndPositionEmbedding(nn.Module):
    """X = E[token] * scale + PE[position]   -> (B, T, d).

    E is the learned (vocab_size, d) embedding matrix, one row per character. With the fixed
    sinusoidal code (entries of size ~1) the token rows are scaled by sqrt(d), as in "Attention
    is all you need", so the token signal is not drowned by the position signal at the start
    of training; learned positions start as small as the tokens and need no scale.
    `scale_tokens=False` is the notes' X = E[token] + PE, with no scale at all.
    """

    def __init__(
        self,
        vocab_size: int,
        d: int,
        max_len: int,
        positional: str = "sinusoidal",
        std: float = 0.02,
        scale_tokens: bool = True,
    ):
        super().__init__()
        self.E = nn.Parameter(torch.randn(vocab_size, d) * std)
        self.position = positional_encoding(positional, max_len, d)
        self.scale = math.sqrt(d) if positional == "sinusoidal" and scale_tokens else 1.0

    def forward(self, idx: Tensor, start: int = 0) -> Tensor:
        """idx: (B, T) token ids at positions start..start+T-1 -> X: (B, T, d)."""
        tokens = F.embedding(idx, self.E)  # row idx of E: (B, T, d)
        if self.scale != 1.0:
            tokens = tokens * self.scale
        return tokens + self.position(start, idx.shape[1])  # (T, d) broadcasts over B


def gelu(x: Tensor) -> Tensor:
    """GELU(x) = x * Phi(x), Phi the standard normal CDF = 0.5 * (1 + erf(x / sqrt 2))."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


class MLP(nn.Module):
    """The position-wise feed-forward net: expand by `ratio`, GELU, project back."""

    def __init__(
        self,
        d: int,
        ratio: int = 4,
        dropout: float = 0.0,
        bias: bool = False,
        fused: bool = False,
        out_std: float = 0.02,
    ):
        super().__init__()
        hidden = ratio * d
        self.W_1 = nn.Parameter(torch.randn(d, hidden) * 0.02)
        self.W_2 = nn.Parameter(torch.randn(hidden, d) * out_std)
        self.b_1 = nn.Parameter(torch.zeros(hidden)) if bias else None
        self.b_2 = nn.Parameter(torch.zeros(d)) if bias else None
        self.dropout = nn.Dropout(dropout)
        self.fused = fused

    def forward(self, x: Tensor) -> Tensor:
        """x: (B, T, d) -> (B, T, d)."""
        if self.fused:
            h = F.gelu(F.linear(x, self.W_1.t(), self.b_1))  # (B, T, hidden)
            return self.dropout(F.linear(h, self.W_2.t(), self.b_2))
        h = x @ self.W_1  # (B, T, hidden)
        if self.b_1 is not None:
            h = h + self.b_1
        h = gelu(h)
        out = h @ self.W_2  # (B, T, d)
        if self.b_2 is not None:
            out = out + self.b_2
        return self.dropout(out)


def cross_entropy(logits: Tensor, targets: Tensor, fused: bool = False, reduction: str = "mean") -> Tensor:
    """-log softmax(logits)[target] per position, averaged unless reduction="none".

    logits: (N, V), targets: (N,). log softmax is computed as z - max - log sum exp(z - max),
    which never takes the log of an underflowed 0.
    """
    if fused:
        return F.cross_entropy(logits, targets, reduction=reduction)
    shifted = logits - logits.amax(dim=-1, keepdim=True)  # (N, V)
    log_probs = shifted - shifted.exp().sum(dim=-1, keepdim=True).log()  # (N, V)
    losses = -log_probs.gather(1, targets.unsqueeze(1)).squeeze(1)  # (N,)
    return losses.mean() if reduction == "mean" else losses
