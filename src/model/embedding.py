"""Token embedding plus positional encoding: the input X of the first attention layer."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from src.model.layers import positional_encoding


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
