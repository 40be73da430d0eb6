"""The GPT users train by default: N pre-LN residual blocks of attention + MLP.

X_0 = E[tokens] + PE
X_l = X_{l-1} + Attention(LN(X_{l-1}));   X_l = X_l + MLP(LN(X_l))      for l = 1..N
logits = LN(X_N) W_vocab        (W_vocab = E^T when the weights are tied)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from src.model.attention import MultiHeadAttention
from src.model.checks import dropout, heads_divide, positional, positive_int
from src.model.kv_cache import KVCache
from src.model.language_model import CausalLanguageModel
from src.model.layers import MLP, LayerNorm, TokenAndPositionEmbedding


@dataclass
class GPTConfig:
    vocab_size: int
    context_window: int = 64
    embedding_dim: int = 120
    num_heads: int = 4
    num_layers: int = 4
    mlp_ratio: int = 4
    dropout: float = 0.0
    positional: str = "sinusoidal"  # or "learned"
    bias: bool = False  # biases in the projections and layer norms
    tie_weights: bool = True  # the LM head reuses the embedding matrix E
    fused: bool = False  # PyTorch's fused kernels instead of the plain tensor math

    def __post_init__(self) -> None:
        positive_int("vocab_size", self.vocab_size)
        for name in ("context_window", "num_layers", "mlp_ratio"):
            positive_int(f"model.{name}", getattr(self, name))
        heads_divide(self.embedding_dim, self.num_heads)
        dropout(self.dropout)
        positional(self.positional)


class Block(nn.Module):
    """Pre-LN residual block: normalise, transform, add back to the residual stream."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        d = cfg.embedding_dim
        out_std = 0.02 / math.sqrt(2 * cfg.num_layers)  # 2N residual branches add up
        self.ln_1 = LayerNorm(d, bias=cfg.bias, fused=cfg.fused)
        self.attention = MultiHeadAttention(d, cfg.num_heads, cfg.dropout, cfg.bias, fused=cfg.fused, out_std=out_std)
        self.residual_dropout = nn.Dropout(cfg.dropout)
        self.ln_2 = LayerNorm(d, bias=cfg.bias, fused=cfg.fused)
        self.mlp = MLP(d, cfg.mlp_ratio, cfg.dropout, cfg.bias, cfg.fused, out_std)

    def forward(
        self, X: Tensor, cache: KVCache | None = None, layer: int = 0, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """X: (B, T, d) -> (B, T, d), attention weights (B, h, T, T_k) or None."""
        attended, weights = self.attention(self.ln_1(X), cache, layer, need_weights)
        X = X + self.residual_dropout(attended)
        X = X + self.mlp(self.ln_2(X))
        return X, weights


class GPT(CausalLanguageModel):
    """Decoder-only transformer over characters."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.num_layers = cfg.num_layers
        d = cfg.embedding_dim
        self.embedding = TokenAndPositionEmbedding(cfg.vocab_size, d, cfg.context_window, cfg.positional)
        self.dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.ln_f = LayerNorm(d, bias=cfg.bias, fused=cfg.fused)
        self.W_vocab = None if cfg.tie_weights else nn.Parameter(torch.randn(d, cfg.vocab_size) * 0.02)

    def hidden_states(
        self, idx: Tensor, cache: KVCache | None = None, need_weights: bool = False
    ) -> tuple[Tensor, list[Tensor | None]]:
        start = self.check_length(idx, cache)
        X = self.dropout(self.embedding(idx, start))  # (B, T, d)
        all_weights = []
        for layer, block in enumerate(self.blocks):
            X, weights = block(X, cache, layer, need_weights)
            all_weights.append(weights)
        if cache is not None:
            cache.advance(idx.shape[1])
        return self.ln_f(X), all_weights

    def logits(self, H: Tensor) -> Tensor:
        W_vocab = self.embedding.E.t() if self.W_vocab is None else self.W_vocab  # (d, vocab)
        return H @ W_vocab
